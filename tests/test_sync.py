"""Pull mode: a Sync names a git repository, ref and folder; `kbctl controller` applies the manifests there as one
apply set, serves a new commit on its next pass with no `kbctl apply` run, prunes a manifest deleted from the
folder, and keeps the last good version serving (with an event naming the file and line) after a bad commit."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.manifest import parse_manifests
from kbctl.sources.git import ALLOW_LOCAL_ENV
from tests.support.gitrepo import commit, git, pushed_working_copy, remote
from tests.support.manifests import knowledge_base, text_source


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working copy of manifests beside other files (a README, a Deployment), as a GitOps repository holds them;
    each commit is pushed to the bare repository the Syncs read (`remote(repo)`), as to a git host."""
    monkeypatch.setenv(ALLOW_LOCAL_ENV, "1")
    repo = pushed_working_copy(tmp_path)
    (repo / "kb").mkdir()
    (repo / "kb" / "policy.yaml").write_text(
        knowledge_base("policy", text_source("retention", "Invoices are kept for seven years."))
    )
    (repo / "kb" / "hours.yaml").write_text(knowledge_base("hours", text_source("open", "The office opens at 9.")))
    (repo / "kb" / "deploy.yaml").write_text("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: kbctl}\n")
    (repo / "README.md").write_text("# Knowledge\n")
    commit(repo, "first")
    return repo


def sync_manifest(repo: Path, path: str = "kb") -> str:
    return (
        f"apiVersion: kbctl.dev/v1alpha1\nkind: Sync\nmetadata: {{name: knowledge}}\n"
        f"spec:\n  url: {remote(repo)}\n  ref: main\n  path: {path}\n  interval: 1m\n"
    )


def due(store: KnowledgeBaseStore) -> None:
    """The interval has passed (the test does not wait a minute for it)."""
    store.db.connection.execute("UPDATE kb_syncs SET next_at = now()")


def answer(store: KnowledgeBaseStore) -> str:
    return store.query("policy", "how long are invoices kept?", threshold=-1).hits[0].text


def test_a_sync_serves_each_commit_prunes_and_survives_a_bad_one(
    store: KnowledgeBaseStore, cli: CliRunner, repo: Path, tmp_path: Path
) -> None:
    (tmp_path / "sync.yaml").write_text(sync_manifest(repo))
    recorded = cli.invoke(app, ["apply", "-f", str(tmp_path / "sync.yaml")])
    assert recorded.exit_code == 0, recorded.output
    assert "Sync/knowledge created" in recorded.stdout
    first = git(repo, "rev-parse", "HEAD")

    controller = store.controller()
    report = controller.run_once()
    assert sorted((r.name, r.action) for r in report.results) == [("hours", "created"), ("policy", "created")]
    [status] = store.syncs()
    assert (status.last_applied_revision, status.last_error) == (first, None)
    assert "seven years" in answer(store)
    assert controller.run_once().results == []  # not due again before its interval

    # A commit that edits one source: served on the next pass, with no `kbctl apply`.
    (repo / "kb" / "policy.yaml").write_text(
        knowledge_base("policy", text_source("retention", "Invoices are kept for ten years."))
    )
    second = commit(repo, "ten years")
    due(store)
    changed = {r.name: r.action for r in controller.run_once().results}
    assert changed == {"policy": "configured", "hours": "unchanged"}
    assert "ten years" in answer(store) and store.syncs()[0].last_applied_revision == second

    # A bad commit: nothing applied, the last good version serves, the event names the file, line and field.
    (repo / "kb" / "policy.yaml").write_text(
        knowledge_base("policy", text_source("retention", "Invoices are kept forever."), retrieval={"topK": 0})
    )
    bad = commit(repo, "bad")
    due(store)
    failing = controller.run_once()
    assert failing.results == [] and failing.failed_syncs == ["knowledge"] and failing.exit_code() == 1
    [status] = store.syncs()
    assert status.last_applied_revision == second and status.last_attempted_revision == bad
    assert status.last_error is not None and "kb/policy.yaml:" in status.last_error
    assert "spec.retrieval.topK: must be at least 1" in status.last_error
    event = store.events(["knowledge"])[-1]
    assert (event.kind, event.reason, event.type) == ("Sync", "SyncFailed", "Warning")
    listed = cli.invoke(app, ["get", "events", "knowledge"]).stdout.splitlines()[-1]
    assert listed.split()[1:4] == ["Warning", "SyncFailed", "sync/knowledge"]
    assert f"commit {bad[:12]}: kb/policy.yaml:" in event.message
    assert "ten years" in answer(store)

    # A commit that deletes a manifest prunes its knowledge base.
    (repo / "kb" / "policy.yaml").unlink()
    commit(repo, "drop policy")
    due(store)
    controller.run_once()
    assert [kb.name for kb in store.list()] == ["hours"]
    assert store.events(["policy"])[-1].reason == "Pruned"
    assert store.events(["knowledge"])[-1].reason == "SyncApplied"
    controller.deregister()


def test_a_folder_without_manifests_prunes_nothing(
    store: KnowledgeBaseStore, cli: CliRunner, repo: Path, tmp_path: Path
) -> None:
    store.apply(parse_manifests(knowledge_base("kept", text_source("a", "Kept.")), "kb.yaml"))
    (tmp_path / "sync.yaml").write_text(sync_manifest(repo, path="docs"))
    assert cli.invoke(app, ["apply", "-f", str(tmp_path / "sync.yaml")]).exit_code == 0
    (repo / "docs").mkdir()
    (repo / "docs" / "a.md").write_text("# A\n")
    commit(repo, "docs")
    assert store.controller().run_once().results == []
    [status] = store.syncs()
    assert status.last_error is not None and "no manifests found" in status.last_error
    assert [kb.name for kb in store.list()] == ["kept"]


def test_sync_manifests_are_checked_like_knowledge_bases(tmp_path: Path) -> None:
    (tmp_path / "sync.yaml").write_text(
        "apiVersion: kbctl.dev/v1alpha1\nkind: Sync\nmetadata: {name: k}\n"
        "spec:\n  url: --upload-pack=/tmp/x\n  path: ../outside\n  interval: 1s\n"
    )
    result = CliRunner().invoke(app, ["validate", "-f", str(tmp_path / "sync.yaml")])
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert any(":5: spec.url: must not start with '-'" in line for line in lines), lines
    assert any(":6: spec.path:" in line for line in lines) and any(":7: spec.interval:" in line for line in lines)


def test_get_syncs_shows_what_each_applied(
    store: KnowledgeBaseStore, cli: CliRunner, repo: Path, tmp_path: Path
) -> None:
    (tmp_path / "sync.yaml").write_text(sync_manifest(repo))
    cli.invoke(app, ["apply", "-f", str(tmp_path / "sync.yaml")])
    assert cli.invoke(app, ["get", "syncs", "--no-headers"]).stdout.split()[5] == "-"  # nothing applied yet
    store.controller().run_once()
    header, row = cli.invoke(app, ["get", "syncs"]).stdout.splitlines()
    assert header.split() == ["NAME", "URL", "REF", "PATH", "INTERVAL", "REVISION", "APPLIED", "ERROR"]
    assert row.split()[:6] == ["knowledge", str(remote(repo)), "main", "kb", "1m", git(repo, "rev-parse", "HEAD")[:12]]
    as_json = cli.invoke(app, ["get", "sync", "knowledge", "-o", "json"])
    assert as_json.exit_code == 0 and '"lastAppliedRevision"' in as_json.stdout
    again = cli.invoke(app, ["apply", "-f", str(tmp_path / "sync.yaml")])
    assert "Sync/knowledge unchanged" in again.stdout
    missing = cli.invoke(app, ["get", "syncs", "nope"])
    assert missing.exit_code == 1 and 'sync "nope" not found' in missing.stderr


def test_delete_sync_stops_it_and_keeps_what_it_applied(
    store: KnowledgeBaseStore, cli: CliRunner, repo: Path, tmp_path: Path
) -> None:
    (tmp_path / "sync.yaml").write_text(sync_manifest(repo))
    cli.invoke(app, ["apply", "-f", str(tmp_path / "sync.yaml")])
    store.controller().run_once()
    deleted = cli.invoke(app, ["delete", "sync", "knowledge"])
    assert (deleted.exit_code, deleted.stdout) == (0, "Sync/knowledge deleted\n")
    assert store.syncs() == [] and [kb.name for kb in store.list()] == ["hours", "policy"]
    assert cli.invoke(app, ["delete", "sync", "knowledge"]).exit_code == 1
    assert cli.invoke(app, ["delete", "sync", "knowledge", "--ignore-not-found"]).exit_code == 0


def test_a_missing_repository_is_reported_in_git_s_own_words(
    store: KnowledgeBaseStore, cli: CliRunner, repo: Path, tmp_path: Path
) -> None:
    """A Sync against a folder that is no repository reports git's first error line, not its last one (`and the
    repository exists.`)."""
    (tmp_path / "sync.yaml").write_text(sync_manifest(repo).replace(str(remote(repo)), str(tmp_path / "nowhere")))
    assert cli.invoke(app, ["apply", "-f", str(tmp_path / "sync.yaml")]).exit_code == 0
    assert store.controller().run_once().failed_syncs == ["knowledge"]
    [status] = store.syncs()
    assert status.last_error == (
        f"cannot fetch: git fetch failed: '{tmp_path / 'nowhere'}' does not appear to be a git repository"
    )
