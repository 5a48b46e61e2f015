"""One bad document never blocks a knowledge base: text is made storable at the boundary, other sources publish."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kbctl.client import KnowledgeBaseStore
from kbctl.manifest import parse_manifests
from tests.support.httpserver import HTTPTestServer, fetch_policy_for, serve
from tests.support.manifests import knowledge_base, url_source

pytestmark = pytest.mark.reliability

GOOD = "# Booking\n\nChoose a specialist, then a free slot in their calendar.\n"
NUL_PAGE = b"Opening hours\x00 are 9:00 to 17:30 on working days.\n\nClosed on public\x00holidays.\n"


@pytest.fixture
def site() -> Iterator[HTTPTestServer]:
    with serve() as srv:
        srv.route("/good.md", body=GOOD, content_type="text/markdown", etag=True)
        srv.route("/hours.txt", body=NUL_PAGE, content_type="text/plain; charset=utf-8", etag=True)
        yield srv


def manifest(site: HTTPTestServer) -> str:
    return knowledge_base("site", url_source("good", site.url("/good.md")), url_source("hours", site.url("/hours.txt")))


def test_a_page_with_nul_bytes_publishes_with_the_others(store: KnowledgeBaseStore, site: HTTPTestServer) -> None:
    """NUL bytes in a fetched page are dropped at the boundary; apply and refresh publish every source."""
    store.fetch_policy = fetch_policy_for(site)
    report = store.apply(parse_manifests(manifest(site), "kb.yaml"))
    assert not report.failed, report
    assert [(s.name, s.state) for s in report.results[0].sources] == [("good", "ready"), ("hours", "ready")]
    hit = store.query("site", "when are the opening hours?", threshold=-1).hits[0]
    assert hit.source == "hours" and "\x00" not in hit.text and "Opening hours are 9:00" in hit.text

    # A refresh where the NUL page changed and the other page fails at the same time: both are handled.
    site.route("/hours.txt", body=NUL_PAGE.replace(b"17:30", b"18:00"), content_type="text/plain", etag=True)
    site.route("/good.md", status=503, body="down", content_type="text/plain")
    refreshed = store.refresh(["site"])
    [result] = refreshed.results
    assert result.action == "refreshed"
    assert {s.name: s.state for s in result.sources} == {"good": "stale", "hours": "ready"}
    assert "18:00" in store.query("site", "when are the opening hours?", threshold=-1).hits[0].text
    assert {s.name: s.state for s in store.describe("site").source_status} == {"good": "stale", "hours": "ready"}


def test_a_question_with_a_nul_byte_is_answered(store: KnowledgeBaseStore, site: HTTPTestServer) -> None:
    """A question holding a NUL or a lone surrogate (from an eval set, an agent) is answered, not a store error."""
    store.fetch_policy = fetch_policy_for(site)
    store.apply(parse_manifests(manifest(site), "kb.yaml"))
    hits = store.query("site", "opening\x00 hours\ud800?", threshold=-1).hits
    assert hits and hits[0].source == "hours"
