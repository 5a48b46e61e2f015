"""Ownership: the knowledge bases a Sync applied are its own. A hand `apply`, `rollout undo` or `delete` of one is
refused (naming the Sync and how to suspend it, exit 1, nothing written) unless --force, which warns; and the Sync's
pass that reverts such a change leaves a DriftReverted event saying what it reverts."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.errors import ManagedError
from kbctl.manifest import parse_manifests
from kbctl.sources.git import ALLOW_LOCAL_ENV
from tests.support.gitrepo import commit, git, pushed_working_copy
from tests.support.manifests import knowledge_base, text_source

SEVEN = "Invoices are kept for seven years."
TEN = "Invoices are kept for ten years."


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository of two knowledge bases, pushed to the bare one the Sync reads."""
    monkeypatch.setenv(ALLOW_LOCAL_ENV, "1")
    repo = pushed_working_copy(tmp_path)
    (repo / "kb").mkdir()
    (repo / "kb" / "policy.yaml").write_text(knowledge_base("policy", text_source("retention", SEVEN)))
    (repo / "kb" / "hours.yaml").write_text(knowledge_base("hours", text_source("open", "The office opens at 9.")))
    commit(repo, "first")
    return repo


def sync_manifest(repo: Path, *, suspend: bool = False) -> str:
    return (
        "apiVersion: kbctl.dev/v1alpha1\nkind: Sync\nmetadata: {name: knowledge}\n"
        f"spec:\n  url: {repo.parent / 'remote.git'}\n  ref: main\n  path: kb\n  interval: 1m\n"
        f"  suspend: {'true' if suspend else 'false'}\n"
    )


@pytest.fixture
def synced(store: KnowledgeBaseStore, cli: CliRunner, repo: Path) -> Path:
    """The Sync recorded and its first pass done: policy and hours are its own."""
    (repo.parent / "sync.yaml").write_text(sync_manifest(repo))
    assert cli.invoke(app, ["apply", "-f", str(repo.parent / "sync.yaml")]).exit_code == 0
    controller = store.controller()
    assert sorted(r.name for r in controller.run_once().results) == ["hours", "policy"]
    controller.deregister()
    return repo


def next_pass(store: KnowledgeBaseStore) -> None:
    """The Sync's interval has passed and a controller runs it."""
    store.db.connection.execute("UPDATE kb_syncs SET next_at = now()")
    controller = store.controller()
    controller.run_once()
    controller.deregister()


def serving(store: KnowledgeBaseStore) -> str:
    return store.query("policy", "how long are invoices kept?", threshold=-1).hits[0].text


def state(store: KnowledgeBaseStore) -> tuple[object, ...]:
    """What a refused change must leave as it was: versions, generations, events."""
    rows = [(kb.name, kb.version, kb.generation) for kb in store.list()]
    return tuple(rows), len(store.events())


def reverted(store: KnowledgeBaseStore, name: str) -> list[str]:
    return [e.message for e in store.events([name]) if e.reason == "DriftReverted"]


def test_a_hand_apply_is_refused_forced_with_a_warning_and_reverted_with_an_event(
    store: KnowledgeBaseStore, cli: CliRunner, synced: Path, tmp_path: Path
) -> None:
    old = tmp_path / "old.yaml"
    old.write_text(knowledge_base("policy", text_source("retention", TEN), retrieval={"topK": 3}))
    before = state(store)

    refused = cli.invoke(app, ["apply", "-f", str(old)])
    assert refused.exit_code == 1 and refused.stdout == ""
    assert refused.stderr.startswith("Error: KnowledgeBase/policy is managed by Sync/knowledge, whose next pass ")
    assert "spec.suspend: true" in refused.stderr and "kbctl delete sync knowledge" in refused.stderr
    assert "--force to apply anyway" in refused.stderr
    assert state(store) == before and SEVEN in serving(store)

    # The Sync's own manifest, applied by hand, changes nothing: not refused.
    same = cli.invoke(app, ["apply", "-f", str(synced / "kb" / "policy.yaml"), "--wait"])
    assert same.exit_code == 0 and "KnowledgeBase/policy unchanged" in same.stdout and same.stderr == ""

    forced = cli.invoke(app, ["apply", "-f", str(old), "--force", "--wait"])
    assert forced.exit_code == 0, forced.output
    assert forced.stderr == (
        "warning: KnowledgeBase/policy is managed by Sync/knowledge, whose next pass applies its repository's "
        "manifest again (--force given: done anyway)\n"
    )
    assert "KnowledgeBase/policy configured (version 2)" in forced.stdout and TEN in serving(store)
    assert reverted(store, "policy") == []

    next_pass(store)
    assert SEVEN in serving(store)
    head = git(synced, "rev-parse", "HEAD")[:12]
    [message] = reverted(store, "policy")
    assert message == (
        "applied by hand since Sync/knowledge applied it (spec.retrieval.topK: 3 → 10, source retention changed); "
        f"Sync/knowledge applies commit {head} again"
    )
    assert reverted(store, "hours") == []
    next_pass(store)
    assert len(reverted(store, "policy")) == 1  # converged: nothing more to revert


def test_a_rollout_undo_is_refused_and_forced_one_is_reverted_with_an_event(
    store: KnowledgeBaseStore, cli: CliRunner, synced: Path
) -> None:
    (synced / "kb" / "policy.yaml").write_text(knowledge_base("policy", text_source("retention", TEN)))
    head = commit(synced, "ten years")[:12]
    next_pass(store)
    assert TEN in serving(store)
    before = state(store)

    refused = cli.invoke(app, ["rollout", "undo", "kb", "policy"])
    assert refused.exit_code == 1 and "Sync/knowledge" in refused.stderr and "--force to roll back" in refused.stderr
    assert state(store) == before and TEN in serving(store)

    forced = cli.invoke(app, ["rollout", "undo", "kb", "policy", "--force"])
    assert forced.exit_code == 0 and forced.stdout == "KnowledgeBase/policy rolled back to version 1\n"
    assert forced.stderr.startswith("warning: KnowledgeBase/policy is managed by Sync/knowledge")
    assert SEVEN in serving(store)

    next_pass(store)
    assert TEN in serving(store)
    assert reverted(store, "policy") == [
        "version 1 serves a manifest other than the one Sync/knowledge applied (rolled back by hand?: source "
        f"retention changed); Sync/knowledge applies commit {head} again"
    ]


def test_a_delete_is_refused_and_a_forced_one_is_created_again_with_an_event(
    store: KnowledgeBaseStore, cli: CliRunner, synced: Path
) -> None:
    before = state(store)
    refused = cli.invoke(app, ["delete", "kb", "hours", "policy"])
    assert refused.exit_code == 1 and refused.stdout == ""
    assert "KnowledgeBase/hours is managed by Sync/knowledge" in refused.stderr
    assert (
        "KnowledgeBase/policy is managed by Sync/knowledge" in refused.stderr and "--force to delete" in refused.stderr
    )
    assert state(store) == before

    forced = cli.invoke(app, ["delete", "kb", "policy", "--force"])
    assert forced.exit_code == 0 and forced.stdout.startswith("KnowledgeBase/policy deleted (")
    assert "whose next pass creates it again (--force given: done anyway)" in forced.stderr
    assert [kb.name for kb in store.list()] == ["hours"]

    next_pass(store)
    assert [kb.name for kb in store.list()] == ["hours", "policy"]
    head = git(synced, "rev-parse", "HEAD")[:12]
    assert reverted(store, "policy") == [f"deleted by hand; Sync/knowledge creates it again from commit {head}"]


def test_the_library_refuses_the_same_and_a_suspended_or_deleted_sync_manages_nothing(
    store: KnowledgeBaseStore, cli: CliRunner, synced: Path, tmp_path: Path
) -> None:
    """The facade's `force=` is the CLI's --force; a Sync suspended or deleted stops managing what it applied."""
    edited = parse_manifests(knowledge_base("policy", text_source("retention", TEN)), "kb.yaml")
    with pytest.raises(ManagedError, match="KnowledgeBase/policy is managed by Sync/knowledge"):
        store.apply(edited)
    with pytest.raises(ManagedError):
        store.rollback("policy")
    with pytest.raises(ManagedError):
        store.delete("hours")
    with pytest.raises(ManagedError):  # a new knowledge base into the Sync's apply set by hand: its prune's to own
        store.apply(
            parse_manifests(knowledge_base("extra", text_source("a", "A.")), "kb.yaml"), applyset="sync-knowledge"
        )
    assert [kb.name for kb in store.list()] == ["hours", "policy"]
    report = store.apply(edited, force=True)
    assert [r.action for r in report.results] == ["configured"] and report.warnings[0].startswith(
        "KnowledgeBase/policy is managed by Sync/knowledge"
    )
    assert "warnings" not in report.model_dump(), "warnings go to stderr, not into -o json"

    (tmp_path / "sync.yaml").write_text(sync_manifest(synced, suspend=True))
    assert cli.invoke(app, ["apply", "-f", str(tmp_path / "sync.yaml")]).exit_code == 0
    back = parse_manifests(knowledge_base("policy", text_source("retention", SEVEN)), "kb.yaml")
    assert store.apply(back).warnings == []
    assert cli.invoke(app, ["delete", "sync", "knowledge"]).exit_code == 0
    assert store.delete("hours").warnings == []
