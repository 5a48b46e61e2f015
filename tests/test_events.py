"""Events: what happened to each knowledge base (publishes, failing sources, rollbacks, deletions, prunes), kept
in the store, counted when repeated, bounded, redacted, and shown by `get events` and `describe`."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.defaults import EVENT_MESSAGE_CHARS, EVENTS_PER_KNOWLEDGE_BASE
from kbctl.engine.prune import PruneScope
from kbctl.manifest import parse_manifests
from kbctl.manifest.selectors import parse_selector
from kbctl.store.events import NewEvent
from tests.support.httpserver import HTTPTestServer, fetch_policy_for, serve
from tests.support.manifests import knowledge_base, text_source, url_source

ENV = {"KBCTL_ALLOW_PRIVATE_NETWORKS": "1"}


@pytest.fixture
def site() -> Iterator[HTTPTestServer]:
    with serve() as srv:
        srv.route("/hours.md", body="# Hours\n\nOffice hours are 9:00 to 17:30.", content_type="text/markdown")
        yield srv


@pytest.fixture
def web_store(store: KnowledgeBaseStore, site: HTTPTestServer) -> KnowledgeBaseStore:
    store.fetch_policy = fetch_policy_for(site, retries=0)
    return store


def whats(store: KnowledgeBaseStore, name: str) -> list[tuple[str, str, int]]:
    return [(e.type, e.reason, e.count) for e in store.events([name])]


def test_a_publish_and_a_failing_source_leave_events_counted_when_repeated(
    web_store: KnowledgeBaseStore, site: HTTPTestServer
) -> None:
    store = web_store
    manifest = knowledge_base(
        "site", text_source("notes", "Parking is behind the building."), url_source("hours", site.url("/hours.md"))
    )
    store.apply(parse_manifests(manifest, "kb.yaml"))
    assert whats(store, "site") == [("Normal", "Published", 1)]
    [published] = store.events(["site"])
    assert published.message == "version 1 published (created): 2 chunks from 2 sources, 2 embedded, 0 reused"
    assert published.component == "apply"
    store.apply(parse_manifests(manifest, "kb.yaml"))
    assert whats(store, "site") == [("Normal", "Published", 1)]  # unchanged: nothing happened

    site.route("/hours.md", status=503, body="down")
    store.refresh(["site"])
    store.refresh(["site"])
    assert whats(store, "site") == [("Normal", "Published", 1), ("Warning", "SourceStale", 2)]
    stale = store.events(["site"])[-1]
    assert stale.message == "source hours: HTTP 503 Service Unavailable; its last good content still serves"
    assert stale.component == "refresh" and stale.last_seen >= stale.first_seen


def test_rollback_delete_and_prune_are_on_record_after_the_object_is_gone(store: KnowledgeBaseStore) -> None:
    for text in ("Version one of the rules.", "Version two of the rules."):
        store.apply(parse_manifests(knowledge_base("rules", text_source("a", text), labels={"set": "x"}), "kb.yaml"))
    store.rollback("rules")
    assert [e.reason for e in store.events(["rules"])] == ["Published", "Published", "RolledBack"]
    assert store.events(["rules"])[-1].message == "version 1 serves again (was version 2)"
    assert store.events(["rules"])[-1].component == "rollout"
    store.delete("rules")
    assert store.events(["rules"])[-1].reason == "Deleted"

    other = knowledge_base("other", text_source("b", "Other rules."), labels={"set": "x"})
    store.apply(parse_manifests(other, "kb.yaml"))
    store.apply([], prune=PruneScope(None, parse_selector("set=x")))
    assert (store.events(["other"])[-1].reason, store.events(["other"])[-1].component) == ("Pruned", "prune")
    assert {e.name for e in store.events()} == {"rules", "other"}  # both gone, both on record


def test_a_controllers_work_names_the_controller(store: KnowledgeBaseStore) -> None:
    store.apply(
        parse_manifests(knowledge_base("queued", text_source("a", "Queued for a controller.")), "kb.yaml"), wait=False
    )
    assert store.events(["queued"]) == []
    store.controller().run_once()
    [event] = store.events(["queued"])
    assert (event.reason, event.component) == ("Published", "controller")


def test_messages_are_redacted_and_bounded_and_each_knowledge_base_keeps_its_newest(store: KnowledgeBaseStore) -> None:
    secret = "https://docs.example.com/page?token=s3cr3t-value&x=1"
    long = "x" * (EVENT_MESSAGE_CHARS * 3)
    store.db.record_events([NewEvent("a", "Warning", "SourceFailed", f"source s: cannot fetch {secret}", "apply")])
    store.db.record_events([NewEvent("a", "Warning", "SourceFailed", long, "apply")])
    events = store.events(["a"])
    assert "s3cr3t-value" not in events[0].message and "token=***" in events[0].message
    assert len(events[1].message) == EVENT_MESSAGE_CHARS and events[1].message.endswith("…")
    store.db.record_events(
        [
            NewEvent("b", "Normal", "Published", f"version {n} published", "apply")
            for n in range(EVENTS_PER_KNOWLEDGE_BASE + 7)
        ],
    )
    kept = store.events(["b"])
    assert len(kept) == EVENTS_PER_KNOWLEDGE_BASE
    assert kept[-1].message == f"version {EVENTS_PER_KNOWLEDGE_BASE + 6} published"
    assert len(store.events(["a"])) == 2  # another knowledge base's events are not trimmed by b's
    assert len(store.events(["b"], limit=3)) == 3


def test_rolling_back_past_a_failing_source_is_ready_again(web_store: KnowledgeBaseStore, site: HTTPTestServer) -> None:
    """A source only the newer version had leaves no status behind: after `rollout undo` the knowledge base is
    Ready, not Stale for a source it no longer has."""
    store = web_store
    store.apply(parse_manifests(knowledge_base("kb", text_source("a", "First text.")), "kb.yaml"))
    changed = knowledge_base("kb", text_source("a", "Second text."), url_source("gone", site.url("/missing")))
    store.apply(parse_manifests(changed, "kb.yaml"))
    assert store.describe("kb").status == "Degraded"
    store.rollback("kb")
    detail = store.describe("kb")
    assert (detail.ready, detail.status, detail.sources, detail.ready_sources) == (True, "Ready", 1, 1)


def test_get_events_and_describe_show_them(store: KnowledgeBaseStore, cli: CliRunner) -> None:
    assert cli.invoke(app, ["get", "events"]).stderr == "No events found.\n"
    store.apply(parse_manifests(knowledge_base("notes", text_source("a", "Office hours are 9 to 5.")), "kb.yaml"))
    store.apply(parse_manifests(knowledge_base("other", text_source("b", "Parking is behind.")), "kb.yaml"))
    listed = cli.invoke(app, ["get", "events"])
    assert listed.exit_code == 0, listed.output
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert [r.split()[1:4] for r in rows] == [
        ["Normal", "Published", "knowledgebase/notes"],
        ["Normal", "Published", "knowledgebase/other"],
    ]
    one = cli.invoke(app, ["get", "ev", "other", "-o", "json"])
    assert [(e["name"], e["reason"]) for e in json.loads(one.stdout)["items"]] == [("other", "Published")]
    described = cli.invoke(app, ["describe", "kb", "notes"]).stdout
    assert described.split("Events:\n")[1].splitlines()[1].split()[1:4] == [
        "Normal",
        "Published",
        "knowledgebase/notes",
    ]
    bad = cli.invoke(app, ["get", "events", "-l", "team=a"])
    assert bad.exit_code == 2 and "not by label" in bad.output
