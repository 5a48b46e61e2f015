"""delete and rollout undo take the knowledge base's lock: they wait for a running apply, with a bound and a word."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.engine.events import Event, ReconcileStarted
from kbctl.errors import NotFoundError, StoreError
from kbctl.manifest import parse_manifests
from kbctl.store.database import Database
from tests.support.manifests import knowledge_base, text_source

pytestmark = pytest.mark.reliability


def manifest(text: str = "Office hours are 9:00 to 17:30 on working days.") -> str:
    return knowledge_base("notes", text_source("hours", text))


@contextmanager
def held(database_url: str, name: str) -> Iterator[None]:
    """The knowledge base's lock held by another connection, as a running apply holds it."""
    other = Database(database_url)
    try:
        with other.kb_lock(name):
            yield
    finally:
        other.close()


def test_delete_refuses_after_its_timeout_while_an_apply_holds_the_lock(
    store: KnowledgeBaseStore, database_url: str
) -> None:
    """With the lock held, delete says it waits, then gives up after its timeout and deletes nothing."""
    store.apply(parse_manifests(manifest(), "kb.yaml"))
    waited: list[bool] = []
    with (
        held(database_url, "notes"),
        pytest.raises(StoreError, match=r'^knowledgebase "notes" is busy: .*waited 0.3 s'),
    ):
        store.delete("notes", timeout=0.3, on_wait=lambda: waited.append(True))
    assert waited == [True]
    assert store.describe("notes").version == 1
    with held(database_url, "notes"), pytest.raises(StoreError, match="is busy"):
        store.rollback("notes", timeout=0.2)


def test_delete_during_an_apply_waits_for_it_and_the_apply_is_not_recreated(store: KnowledgeBaseStore) -> None:
    """A delete started while an apply runs waits for it, then deletes: the apply never recreates a half KB."""
    store.apply(parse_manifests(manifest(), "kb.yaml"))
    waiting = threading.Event()
    outcome: list[object] = []

    def delete() -> None:
        with KnowledgeBaseStore(settings=store.settings) as other:
            try:
                outcome.append(other.delete("notes", timeout=60, on_wait=waiting.set))
            except Exception as exc:  # reported below
                outcome.append(exc)

    class StartDeleteMidApply:
        def report(self, event: Event) -> None:
            if isinstance(event, ReconcileStarted):  # the apply holds the lock here
                threading.Thread(target=delete).start()
                assert waiting.wait(10), "delete did not wait for the running apply"

    report = store.apply(
        parse_manifests(manifest("Office hours are 8:00 to 16:00."), "kb.yaml"), reporter=StartDeleteMidApply()
    )
    assert not report.failed and report.results[0].version == 2
    for _ in range(100):
        if outcome:
            break
        threading.Event().wait(0.1)
    assert len(outcome) == 1 and not isinstance(outcome[0], Exception), outcome
    with pytest.raises(NotFoundError):
        store.describe("notes")
    counts = store.db.counts()
    assert all(counts[t] == 0 for t in ("knowledge_bases", "versions", "chunks")), counts


def test_cli_delete_says_it_waits_and_fails_clearly(
    store: KnowledgeBaseStore, cli: CliRunner, database_url: str
) -> None:
    """`kbctl delete` prints that it waits for the lock, then one clear error line when its timeout passes."""
    store.apply(parse_manifests(manifest(), "kb.yaml"))
    with held(database_url, "notes"):
        result = cli.invoke(app, ["delete", "kb", "notes", "--timeout", "0.2"])
    assert result.exit_code == 1
    assert result.stderr.splitlines()[0] == "waiting for another apply, delete or rollback of KnowledgeBase/notes"
    assert result.stderr.splitlines()[1].startswith('Error: knowledgebase "notes" is busy')
