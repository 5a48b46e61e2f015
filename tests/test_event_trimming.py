"""Events are trimmed per object, a kind and a name: a knowledge base and a Sync of the same name each keep their
newest EVENTS_PER_KNOWLEDGE_BASE, and neither's events push out the other's."""

from __future__ import annotations

from kbctl.client import KnowledgeBaseStore
from kbctl.defaults import DESCRIBE_EVENTS, EVENTS_PER_KNOWLEDGE_BASE
from kbctl.manifest import parse_manifests
from kbctl.store.events import NewEvent
from tests.support.manifests import knowledge_base, text_source

MANY = 60


def kb_event(n: int, name: str = "x") -> NewEvent:
    return NewEvent(name, "Normal", "Published", f"version {n} published", "apply")


def sync_event(n: int, name: str = "x") -> NewEvent:
    return NewEvent(name, "Normal", "SyncApplied", f"commit {n} applied", "controller", kind="Sync")


def kept(store: KnowledgeBaseStore, name: str) -> dict[str, list[str]]:
    """The messages kept of each kind of object named `name`, oldest first."""
    by_kind: dict[str, list[str]] = {"KnowledgeBase": [], "Sync": []}
    for event in store.events([name]):
        by_kind[event.kind].append(event.message)
    return by_kind


def test_a_knowledge_base_and_a_sync_of_one_name_keep_their_newest_each(store: KnowledgeBaseStore) -> None:
    """60 events of the knowledge base x and 60 of the Sync x, recorded together: 50 of each stay, the newest."""
    assert MANY > EVENTS_PER_KNOWLEDGE_BASE == 50
    store.db.record_events([e for n in range(MANY) for e in (kb_event(n), sync_event(n))])
    messages = kept(store, "x")
    dropped = MANY - EVENTS_PER_KNOWLEDGE_BASE
    assert messages["KnowledgeBase"] == [f"version {n} published" for n in range(dropped, MANY)]
    assert messages["Sync"] == [f"commit {n} applied" for n in range(dropped, MANY)]


def test_one_kinds_events_do_not_push_out_the_others(store: KnowledgeBaseStore) -> None:
    """Recorded one by one, as a controller does, a Sync's events never trim the knowledge base's of its name,
    nor the other way round."""
    for n in range(MANY):
        store.db.record_events([kb_event(n)])
    for n in range(MANY):
        store.db.record_events([sync_event(n)])
    store.db.record_events([kb_event(MANY)])
    messages = kept(store, "x")
    assert len(messages["KnowledgeBase"]) == len(messages["Sync"]) == EVENTS_PER_KNOWLEDGE_BASE
    assert messages["KnowledgeBase"][0] == f"version {MANY + 1 - EVENTS_PER_KNOWLEDGE_BASE} published"
    assert messages["KnowledgeBase"][-1] == f"version {MANY} published"
    assert messages["Sync"][0] == f"commit {MANY - EVENTS_PER_KNOWLEDGE_BASE} applied"


def test_events_of_a_name_are_read_by_kind(store: KnowledgeBaseStore) -> None:
    """list_events reads both kinds of a name, or one with `kind`, `limit` keeping that kind's newest."""
    store.db.record_events([kb_event(1), sync_event(1), kb_event(2), sync_event(2), kb_event(1, name="y")])
    both = store.db.list_events(["x"])
    kbs = store.db.list_events(["x"], kind="KnowledgeBase")
    syncs = store.db.list_events(["x"], kind="Sync", limit=1)
    every_kb = store.db.list_events(kind="KnowledgeBase")
    assert {(e.kind, e.message) for e in both} == {
        ("KnowledgeBase", "version 1 published"),
        ("KnowledgeBase", "version 2 published"),
        ("Sync", "commit 1 applied"),
        ("Sync", "commit 2 applied"),
    }
    assert [e.message for e in kbs] == ["version 1 published", "version 2 published"]
    assert [(e.kind, e.message) for e in syncs] == [("Sync", "commit 2 applied")]
    assert sorted(e.name for e in every_kb) == ["x", "x", "y"]


def test_describe_shows_only_the_knowledge_bases_events(store: KnowledgeBaseStore) -> None:
    """`describe kb x` lists the knowledge base's events, not those of a Sync that shares its name."""
    store.apply(parse_manifests(knowledge_base("x", text_source("a", "Office hours are 9 to 5.")), "kb.yaml"))
    store.db.record_events([sync_event(n) for n in range(DESCRIBE_EVENTS)])
    assert [(e.kind, e.reason) for e in store.describe("x").events] == [("KnowledgeBase", "Published")]
