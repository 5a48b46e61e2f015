"""Status you can trust: conditions agree with each other and with get, describe, query and rollout history."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.engine.status import KnowledgeBaseDetail, KnowledgeBaseSummary
from kbctl.manifest import KnowledgeBase, parse_manifests
from tests.support.httpserver import HTTPTestServer, fetch_policy_for, serve
from tests.support.lines import Lines
from tests.support.manifests import knowledge_base, text_source, url_source

ENV = {"KBCTL_ALLOW_PRIVATE_NETWORKS": "1"}


def conditions(detail: KnowledgeBaseDetail) -> dict[str, tuple[str, str, str]]:
    """Condition type → (status, reason, message)."""
    return {c.type: (c.status, c.reason, c.message) for c in detail.conditions}


def inline_kb(name: str = "notes", **spec: Any) -> str:
    return knowledge_base(name, text_source("hours", "Office hours are 9:00 to 17:30 on working days."), **spec)


def url_kb(site: HTTPTestServer, *paths: str, name: str = "site") -> str:
    return knowledge_base(name, *(url_source(f"page{i}", site.url(p)) for i, p in enumerate(paths, start=1)))


@pytest.fixture
def site() -> Iterator[HTTPTestServer]:
    with serve() as srv:
        srv.route("/ok.md", body="# Booking\n\nChoose a free slot in the calendar.", content_type="text/markdown")
        yield srv


@pytest.fixture
def web_store(store: KnowledgeBaseStore, site: HTTPTestServer) -> KnowledgeBaseStore:
    store.fetch_policy = fetch_policy_for(site, retries=0)
    return store


def test_a_healthy_knowledge_base_has_agreeing_conditions(store: KnowledgeBaseStore, cli: CliRunner) -> None:
    """After a good apply: Ready/Reconciled, Progressing False, Degraded False, and get says the same."""
    store.apply(parse_manifests(inline_kb(), "kb.yaml"))
    detail = store.describe("notes")
    assert conditions(detail) == {
        "Ready": ("True", "Reconciled", "version 1 serves queries"),
        "Progressing": ("False", "Reconciled", ""),
        "Degraded": ("False", "AllSourcesReady", ""),
    }
    [row] = cli.invoke(app, ["get", "kb"]).stdout.splitlines()[1:]
    assert row.split()[:6] == ["notes", "True", "Ready", "1", "1/1", "1"]


def test_first_apply_that_fails_leaves_one_coherent_state(
    store: KnowledgeBaseStore, cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first apply that fails as a whole (no API key): not Ready, nothing progressing, sources unknown, and
    get, describe, query and rollout history all name the cause and the next step."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    text = inline_kb(embedding={"model": "openai/text-embedding-3-small"})
    [result] = store.apply(parse_manifests(text, "kb.yaml")).results
    assert result.action == "failed" and "OPENAI_API_KEY is not set" in (result.message or "")
    detail = store.describe("notes")
    assert detail.version is None and not detail.ready
    ready, progressing, degraded = (conditions(detail)[k] for k in ("Ready", "Progressing", "Degraded"))
    assert ready[:2] == ("False", "ReconcileFailed")
    assert "OPENAI_API_KEY is not set" in ready[2] and "no version serves queries" in ready[2]
    assert ready[2].endswith("fix the cause and apply again")
    assert progressing[:2] == ("False", "ReconcileFailed") and "OPENAI_API_KEY" in progressing[2]
    assert degraded == ("Unknown", "NotReconciled", "no source has been read yet")

    [row] = cli.invoke(app, ["get", "kb"]).stdout.splitlines()[1:]
    assert row.split()[:6] == ["notes", "False", "Failed", "-", "0/0", "0"]
    described = cli.invoke(app, ["describe", "kb", "notes"])
    assert described.exit_code == 0, described.output
    assert "Version:     <none> (no version published yet: see Conditions)" in described.stdout
    assert "None" not in described.stdout
    history = cli.invoke(app, ["rollout", "history", "kb", "notes"])
    assert history.exit_code == 0 and history.stdout == ""
    assert history.stderr.startswith("KnowledgeBase/notes has no published version yet: ")
    assert "OPENAI_API_KEY is not set" in history.stderr
    query = cli.invoke(app, ["query", "notes", "when is the office open?"])
    assert query.exit_code == 1
    assert "no published version" in query.stderr and "OPENAI_API_KEY is not set" in query.stderr
    assert "controller" not in query.stderr


def test_new_knowledge_base_whose_every_source_fails_publishes_nothing(
    web_store: KnowledgeBaseStore, site: HTTPTestServer
) -> None:
    """No version with no content becomes Ready: nothing is published and every failing source is named."""
    log = Lines()
    [result] = web_store.apply(parse_manifests(url_kb(site, "/gone", "/missing"), "kb.yaml"), reporter=log).results
    assert result.action == "failed" and result.version is None
    assert log.lines == [
        "KnowledgeBase/site created (version 1); waiting for the ingestion of 2 sources",
        "KnowledgeBase/site source page1 failed: HTTP 404 Not Found",
        "KnowledgeBase/site source page2 failed: HTTP 404 Not Found",
        "KnowledgeBase/site failed: no source could be read (page1: HTTP 404 Not Found; page2: HTTP 404 Not Found)",
    ]
    detail = web_store.describe("site")
    assert detail.version is None and not detail.ready
    assert web_store.history("site") == []
    ready = conditions(detail)["Ready"]
    assert ready[:2] == ("False", "NoContent") and "page1: HTTP 404 Not Found" in ready[2]
    assert conditions(detail)["Degraded"][:2] == ("True", "SourcesFailing")
    assert conditions(detail)["Progressing"][:2] == ("False", "NoContent")  # reconciled: nothing to retry
    assert [(s.name, s.state, s.chunks) for s in detail.source_status] == [
        ("page1", "failed", 0),
        ("page2", "failed", 0),
    ]
    assert detail.observed_generation == detail.generation


def test_a_change_that_leaves_no_content_keeps_the_serving_version(
    web_store: KnowledgeBaseStore, site: HTTPTestServer
) -> None:
    """When a new manifest's sources all fail, no empty version is published: version 1 keeps serving."""
    assert not web_store.apply(parse_manifests(url_kb(site, "/ok.md"), "kb.yaml")).failed
    [result] = web_store.apply(parse_manifests(url_kb(site, "/gone"), "kb.yaml")).results
    assert result.action == "failed"
    detail = web_store.describe("site")
    assert detail.version == 1 and [v.number for v in web_store.history("site")] == [1]
    ready = conditions(detail)["Ready"]
    assert ready[:2] == ("False", "NoContent") and "version 1 still serves queries" in ready[2]
    assert web_store.query("site", "how do I book?", threshold=-1).hits[0].source == "page1"


def test_stored_manifest_reads_back_through_the_models() -> None:
    """to_manifest fills in every default (model beside a profile too); from_manifest reads it back as applied."""
    [loaded] = parse_manifests(inline_kb(embedding={"profile": "small"}), "kb.yaml")
    stored = loaded.kb.to_manifest()
    assert stored["spec"]["embedding"] == {"model": "local/all-MiniLM-L6-v2", "profile": "small"}
    assert KnowledgeBase.from_manifest(stored) == loaded.kb


def test_a_page_that_cannot_be_ingested_keeps_where_it_came_from(
    web_store: KnowledgeBaseStore, site: HTTPTestServer
) -> None:
    """A page fetched fine whose content cannot be ingested (over a limit) is failed and still names its origin."""
    site.route("/long.md", body="# A\n\nFirst part.\n\n# B\n\nSecond part.\n", content_type="text/markdown")
    text = knowledge_base(
        "site",
        url_source("ok", site.url("/ok.md")),
        url_source("long", site.url("/long.md")),
        limits={"maxChunksPerSource": 1},
    )
    web_store.apply(parse_manifests(text, "kb.yaml"))
    status = {s.name: s for s in web_store.describe("site").source_status}
    assert status["long"].state == "failed" and "over spec.limits.maxChunksPerSource (1)" in (
        status["long"].message or ""
    )
    assert status["long"].origin == site.url("/long.md")


def test_get_lists_what_describe_shows_in_every_state(
    web_store: KnowledgeBaseStore, site: HTTPTestServer, tmp_path: Path
) -> None:
    """`get` counts in the store what `describe` reads through the models: both agree for a healthy knowledge
    base, one with a failed and a stale source, one whose every source failed (no version), one waiting for a
    controller (new, and a change over a serving version) and a folder of documents (one unit per file)."""
    store = web_store
    store.apply(parse_manifests(inline_kb(description="Office facts."), "kb.yaml"))
    site.route("/later.md", body="# Later\n\nThis page fails on the next refresh.", content_type="text/markdown")
    store.apply(parse_manifests(url_kb(site, "/ok.md", "/gone", "/later.md", name="mixed"), "kb.yaml"))
    site.route("/later.md", status=500, body="down")
    store.refresh(["mixed"])  # page3 is stale: its last good content still serves
    store.apply(parse_manifests(url_kb(site, "/gone", "/missing", name="unread"), "kb.yaml"))
    store.apply(parse_manifests(inline_kb("waiting", description="Not yet read."), "kb.yaml"), wait=False)
    store.apply(parse_manifests(inline_kb(description="Office facts, revised."), "kb.yaml"), wait=False)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nThe first document.\n")
    (docs / "b.md").write_text("# B\n\nThe second document.\n")
    store.apply(parse_manifests(knowledge_base("folder", {"name": "docs", "path": "docs/"}), str(tmp_path / "kb.yaml")))

    listed = store.list()
    described = [KnowledgeBaseSummary(**store.describe(s.name).model_dump()) for s in listed]
    assert [s.name for s in listed] == ["folder", "mixed", "notes", "unread", "waiting"]
    assert listed == described
    counts = {s.name: (s.version, s.ready_sources, s.sources, s.description) for s in listed}
    assert counts["folder"] == (1, 2, 2, "")
    assert counts["mixed"][:3] == (1, 1, 3)
    assert [s.state for s in store.describe("mixed").source_status] == ["ready", "failed", "stale"]
    assert counts["unread"][:3] == (None, 0, 2)
    assert counts["waiting"] == (None, 0, 0, "Not yet read.")
    assert counts["notes"] == (1, 1, 1, "Office facts.")  # the serving version's, until the change is reconciled
    words = {s.name: (s.ready, s.status) for s in listed}
    assert words == {
        "folder": (True, "Ready"),
        "mixed": (True, "Degraded"),
        "notes": (True, "Pending"),
        "unread": (False, "NoContent"),
        "waiting": (False, "Pending"),
    }


def test_a_knowledge_base_whose_every_source_fails_is_not_ready(
    web_store: KnowledgeBaseStore, site: HTTPTestServer, cli: CliRunner
) -> None:
    """Every source stale after a refresh: the last good content still serves, but get says READY False, Stale,
    and describe's conditions say why; one source back makes it Ready again."""
    site.route("/two.md", body="# Two\n\nThe second page.", content_type="text/markdown")
    assert not web_store.apply(parse_manifests(url_kb(site, "/ok.md", "/two.md"), "kb.yaml")).failed
    site.route("/ok.md", status=500, body="down")
    site.route("/two.md", status=404, body="gone")
    assert web_store.refresh(["site"]).failed
    detail = web_store.describe("site")
    assert detail.version == 1 and not detail.ready and detail.status == "Stale"
    ready = conditions(detail)["Ready"]
    assert ready[:2] == ("False", "SourcesFailing") and "version 1 still serves" in ready[2]
    assert conditions(detail)["Degraded"][:2] == ("True", "SourcesFailing")
    [row] = cli.invoke(app, ["get", "kb"], env=ENV).stdout.splitlines()[1:]
    assert row.split()[:5] == ["site", "False", "Stale", "1", "0/2"]
    assert web_store.query("site", "how do I book?", threshold=-1).hits  # stale content still answers

    site.route("/ok.md", body="# Booking\n\nChoose a free slot in the calendar.", content_type="text/markdown")
    web_store.refresh(["site"])
    detail = web_store.describe("site")
    assert (detail.ready, detail.status) == (True, "Degraded")


def test_an_unchanged_apply_only_moves_the_checked_time(store: KnowledgeBaseStore) -> None:
    """A re-apply with nothing changed leaves every source status as it was but for its checked time, the same for
    all (the rows written by one UPDATE keep what the upserts wrote); a source removed loses its row."""
    two = knowledge_base("notes", text_source("a", "Alpha is first."), text_source("b", "Beta is second."))
    store.apply(parse_manifests(two, "kb.yaml"))

    def rows() -> dict[str, tuple[Any, ...]]:
        found = store.db.connection.execute(
            "SELECT source_name, state, message, origin, etag, last_modified, fetched_at, checked_at"
            " FROM kb_source_status"
        ).fetchall()
        return {str(r[0]): tuple(r[1:]) for r in found}

    before = rows()
    store.apply(parse_manifests(two, "kb.yaml"))
    after = rows()
    assert set(after) == set(before) == {"a", "b"}
    assert all(after[n][:-1] == before[n][:-1] and after[n][-1] > before[n][-1] for n in after)
    assert after["a"][-1] == after["b"][-1]
    store.apply(parse_manifests(knowledge_base("notes", text_source("a", "Alpha is first, now.")), "kb.yaml"))
    assert set(rows()) == {"a"} and rows()["a"][0] == "ready"
