"""Scheduled refresh (`spec.refresh.interval`): a controller runs what is due, once, jittered, and says when."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.errors import ManifestError
from kbctl.manifest import parse_manifests
from kbctl.store.database import Database
from tests.support.httpserver import HTTPTestServer, fetch_policy_for, serve
from tests.support.manifests import knowledge_base, url_source


@pytest.fixture
def site() -> Iterator[HTTPTestServer]:
    with serve() as srv:
        srv.route("/hours.md", body="# Hours\n\nThe office opens at nine.", content_type="text/markdown")
        yield srv


def manifest(site: HTTPTestServer, interval: str | None = "1h") -> str:
    spec = {"refresh": {"interval": interval}} if interval else {}
    return knowledge_base("office", url_source("hours", site.url("/hours.md")), **spec)


def make_due(store: KnowledgeBaseStore) -> None:
    """What the passing of time does: the next run is now (the store's own row, moved back)."""
    store.db.connection.execute("UPDATE kb_refresh_schedule SET next_at = now() - interval '1 second'")


def test_a_controller_refreshes_what_is_due_and_only_that(
    store: KnowledgeBaseStore, site: HTTPTestServer, cli: CliRunner
) -> None:
    store.fetch_policy = fetch_policy_for(site)
    assert not store.apply(parse_manifests(manifest(site), "kb.yaml")).failed
    refresh = store.describe("office").refresh
    assert refresh is not None and refresh.interval == "1h" and refresh.last_at is None
    assert refresh.next_at is not None
    ahead = refresh.next_at - datetime.now(UTC)
    assert timedelta(minutes=53) < ahead < timedelta(minutes=67)  # 1 h, jittered by up to 10%

    controller = store.controller()
    hits = site.hits["/hours.md"]
    assert controller.run_once().results == [] and site.hits["/hours.md"] == hits  # nothing is due yet

    site.route("/hours.md", body="# Hours\n\nThe office opens at ten.", content_type="text/markdown")
    make_due(store)
    assert len(controller.run_once().results) == 1
    assert site.hits["/hours.md"] == hits + 1
    assert [(r.name, r.version) for r in controller.processed] == [("office", 2)]
    assert "ten" in store.query("office", "when does the office open?", threshold=-1).hits[0].text
    after = store.describe("office").refresh
    assert after is not None and after.last_at is not None and after.next_at is not None
    assert after.next_at - after.last_at > timedelta(minutes=53)
    assert controller.run_once().results == []  # the run moved on: not due again
    described = cli.invoke(app, ["describe", "kb", "office"]).stdout
    assert "Refresh:     every 1h by a controller; last " in described and ", next in " in described
    status = cli.invoke(app, ["get", "kb", "office", "-o", "jsonpath={.status.refresh.interval}"]).stdout
    assert status == "1h"


def test_two_controllers_never_start_the_same_run(
    store: KnowledgeBaseStore, site: HTTPTestServer, database_url: str
) -> None:
    store.fetch_policy = fetch_policy_for(site)
    store.apply(parse_manifests(manifest(site), "kb.yaml"))
    make_due(store)
    with Database(database_url) as other:
        first, second = store.db.claim_due_refresh(), other.claim_due_refresh()
    assert (first, second) == ("office", None)


def test_dropping_the_schedule_and_bad_intervals(store: KnowledgeBaseStore, site: HTTPTestServer) -> None:
    store.fetch_policy = fetch_policy_for(site)
    store.apply(parse_manifests(manifest(site), "kb.yaml"))
    [result] = store.apply(parse_manifests(manifest(site, interval=None), "kb.yaml")).results
    assert result.action == "configured" and all(s.embedded == 0 for s in result.sources)
    assert store.describe("office").refresh is None
    assert store.db.connection.execute("SELECT count(*) FROM kb_refresh_schedule").fetchone() == (0,)
    for bad in ("10s", "40d", "soon"):
        with pytest.raises(ManifestError, match=r"spec\.refresh\.interval"):
            parse_manifests(manifest(site, interval=bad), "kb.yaml")
