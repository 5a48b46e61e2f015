"""Habits kubectl users bring to kbctl: rollout status gives up on a rollout that makes no progress, undo takes
--to-revision, `get all` lists every kind, and a Sync can be described and explained."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.manifest import parse_manifests
from kbctl.sources.git import ALLOW_LOCAL_ENV
from tests.support.gitrepo import commit, git, pushed_working_copy, remote
from tests.support.manifests import docs_repository, knowledge_base, text_source


def _stale_handbook(cli: CliRunner, tmp_path: Path) -> None:
    """A knowledge base reconciled but not Ready: its only source's folder was deleted after a first apply."""
    repo = docs_repository(tmp_path, "handbook", {"parking.md": "# Parking\n\nStaff park on level two.\n"})
    assert cli.invoke(app, ["apply", "--wait", "-f", str(repo / "kb")]).exit_code == 0
    shutil.rmtree(repo / "docs")
    assert cli.invoke(app, ["apply", "--wait", "-f", str(repo / "kb")]).exit_code == 1


def test_rollout_status_gives_up_after_the_progress_deadline(
    store: KnowledgeBaseStore, cli: CliRunner, tmp_path: Path
) -> None:
    """Without --timeout, a knowledge base that stays not Ready (every source failing) ends the wait with exit 1
    once --progress-deadline has passed without progress, naming why."""
    _stale_handbook(cli, tmp_path)
    started = time.monotonic()
    result = cli.invoke(app, ["rollout", "status", "kb", "handbook", "--progress-deadline", "1s"])
    assert result.exit_code == 1, result.output
    assert time.monotonic() - started < 30
    assert result.stderr == (
        'Error: knowledgebase "handbook" exceeded its progress deadline (1s): no source could be read (see '
        "Degraded); version 1 still serves their last good content\n"
    )
    help_text = CliRunner().invoke(app, ["rollout", "status", "--help"]).output
    assert "--progress-deadline DURATION" in help_text and "[default: 10m]" in help_text


def test_undo_takes_kubectl_s_to_revision(store: KnowledgeBaseStore, cli: CliRunner) -> None:
    """`rollout undo --to-revision N` is `--to-version N`, as kubectl users type it."""
    for fact in ("seven", "ten"):
        text = knowledge_base("policies", text_source("retention", f"Invoices are kept for {fact} years."))
        assert not store.apply(parse_manifests(text, "kb.yaml")).failed
    result = cli.invoke(app, ["rollout", "undo", "kb", "policies", "--to-revision", "1"])
    assert (result.exit_code, result.stdout) == (0, "KnowledgeBase/policies rolled back to version 1\n")
    assert store.describe("policies").version == 1


def test_an_unknown_resource_type_lists_every_type(cli: CliRunner) -> None:
    """The error of a wrong RESOURCE names every type the command takes, `all` among them for get."""
    for args, known in (
        (["get", "pods"], "knowledgebase (kb), syncs (sync), events (ev), all"),
        (["describe", "pods", "x"], "knowledgebase (kb), syncs (sync)"),
        (["get", "pods/x"], "knowledgebase (kb), syncs (sync), events (ev), all"),
        (["delete", "pods", "x"], "knowledgebase (kb), syncs (sync)"),
    ):
        result = cli.invoke(app, args)
        assert result.exit_code == 2, args
        assert f"unknown resource type 'pods'; kbctl knows: {known}" in result.output, result.output


@pytest.fixture
def sync_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A bare repository with kb/policy.yaml and kb/hours.yaml committed on main; returns its path."""
    monkeypatch.setenv(ALLOW_LOCAL_ENV, "1")
    work = pushed_working_copy(tmp_path)
    (work / "kb").mkdir()
    (work / "kb" / "policy.yaml").write_text(
        knowledge_base("policy", text_source("retention", "Invoices are kept for seven years."))
    )
    (work / "kb" / "hours.yaml").write_text(knowledge_base("hours", text_source("open", "The office opens at 9.")))
    commit(work, "first")
    return remote(work)


def _sync(cli: CliRunner, store: KnowledgeBaseStore, bare: Path, tmp_path: Path) -> str:
    """Apply a Sync of the bare repository's kb/ folder, let a controller pass apply it; return the commit applied."""
    (tmp_path / "sync.yaml").write_text(
        "apiVersion: kbctl.dev/v1alpha1\nkind: Sync\nmetadata: {name: knowledge}\n"
        f"spec:\n  url: {bare}\n  ref: main\n  path: kb\n  interval: 1m\n"
    )
    assert cli.invoke(app, ["apply", "-f", str(tmp_path / "sync.yaml")]).exit_code == 0
    store.controller().run_once()
    return git(bare, "rev-parse", "main")


def test_get_all_lists_every_kind_a_section_each(
    store: KnowledgeBaseStore, cli: CliRunner, sync_repo: Path, tmp_path: Path
) -> None:
    """`kbctl get all` prints the knowledge bases, a blank line, then the Syncs, each named KIND/NAME as kubectl
    does; -o name prints every object's KIND/NAME."""
    store.apply(parse_manifests(knowledge_base("notes", text_source("a", "Notes are kept.")), "kb.yaml"))
    revision = _sync(cli, store, sync_repo, tmp_path)
    result = cli.invoke(app, ["get", "all"])
    assert result.exit_code == 0, result.output
    kbs, syncs = result.stdout.rstrip("\n").split("\n\n")
    header, *rows = kbs.splitlines()
    assert header.split() == ["NAME", "READY", "STATUS", "VERSION", "SOURCES", "CHUNKS", "AGE"]
    assert [r.split()[0] for r in rows] == ["knowledgebase/hours", "knowledgebase/notes", "knowledgebase/policy"]
    sync_header, sync_row = syncs.splitlines()
    assert sync_header.split()[:2] == ["NAME", "URL"]
    assert sync_row.split()[:6] == ["sync/knowledge", str(sync_repo), "main", "kb", "1m", revision[:12]]
    names = cli.invoke(app, ["get", "all", "-o", "name"])
    assert names.stdout.splitlines() == [
        "knowledgebase/hours",
        "knowledgebase/notes",
        "knowledgebase/policy",
        "sync/knowledge",
    ]


def test_get_all_of_an_empty_store(cli: CliRunner) -> None:
    """Nothing stored: kubectl's `No resources found.` on stderr, exit 0."""
    result = cli.invoke(app, ["get", "all"])
    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "No resources found.\n")


def test_describe_sync_shows_what_it_applied_and_its_events(
    store: KnowledgeBaseStore, cli: CliRunner, sync_repo: Path, tmp_path: Path
) -> None:
    """`describe sync NAME`: repository, ref, path, the commit last applied and when, the last error, the knowledge
    bases it applied and its events."""
    revision = _sync(cli, store, sync_repo, tmp_path)
    result = cli.invoke(app, ["describe", "sync", "knowledge"])
    assert result.exit_code == 0, result.output
    fields = dict(line.split(":", 1) for line in result.stdout.splitlines() if line[:1].isupper() and ":" in line)
    assert fields["Name"].strip() == "knowledge"
    assert fields["URL"].strip() == str(sync_repo)
    assert fields["Ref"].strip() == "main"
    assert fields["Path"].strip() == "kb"
    assert fields["Interval"].strip() == "1m"
    assert fields["Revision"].strip() == revision
    assert fields["Applied"].strip().endswith("ago")
    assert fields["Error"].strip() == "<none>"
    lines = result.stdout.splitlines()
    start = lines.index("Knowledge Bases:")
    assert [line.split()[0] for line in lines[start + 2 : start + 4]] == ["hours", "policy"]
    [event] = [line for line in lines if "SyncApplied" in line]
    assert "sync/knowledge" in event
    as_json = cli.invoke(app, ["describe", "sync", "knowledge", "-o", "json"])
    assert as_json.exit_code == 0 and '"lastAppliedRevision": "' + revision in as_json.stdout
    missing = cli.invoke(app, ["describe", "sync", "nope"])
    assert (missing.exit_code, missing.stderr) == (1, 'Error: sync "nope" not found\n')


def test_explain_sync_documents_its_fields(cli: CliRunner) -> None:
    """`explain sync` (and a dotted path below it) reads the Sync's schema, as `explain knowledgebase` does."""
    top = cli.invoke(app, ["explain", "sync"])
    assert top.exit_code == 0, top.output
    assert top.stdout.startswith("KIND:     Sync\nVERSION:  kbctl.dev/v1alpha1\n")
    assert "FIELDS:" in top.stdout and "A git folder of manifests" in top.stdout
    spec = cli.invoke(app, ["explain", "sync.spec"])
    assert spec.exit_code == 0, spec.output
    for field in ("url", "ref", "path", "interval", "prune", "suspend"):
        assert any(line.strip().startswith(f"{field}  <") for line in spec.stdout.splitlines()), (field, spec.stdout)
    interval = cli.invoke(app, ["explain", "sync.spec.interval"])
    assert 'FIELD: interval <string>  (default "5m")' in interval.stdout
    wrong = cli.invoke(app, ["explain", "pods"])
    assert wrong.exit_code == 2 and "kbctl knows: knowledgebase (kb), sync" in wrong.output
