"""URL sources end to end: apply fetches them, refresh re-fetches and republishes only what changed."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.manifest import parse_manifests
from kbctl.sources.url import FetchPolicy
from tests.support.httpserver import HTTPTestServer, fetch_policy_for, serve
from tests.support.lines import Lines
from tests.support.manifests import knowledge_base, url_source

MODEL = "local/all-MiniLM-L6-v2"

ABOUT = """<html><head><title>About Northwind Advisory</title></head><body>
<nav><a href="/">Home</a> <a href="/about">About</a> <a href="/contact">Contact</a></nav>
<main><article>
<h1>About us</h1>
<p>Northwind Advisory is a consulting firm founded in 2009 in Rotterdam. It advises mid-sized logistics
companies on warehouse automation, route planning and the procurement of transport software.</p>
<h2>Our partners</h2>
<p>The firm has four partners and thirty-two consultants. Every engagement is led by a partner who
signs the engagement letter and stays the client's first contact until the final report.</p>
</article></main>
<footer>Copyright 2026 Northwind Advisory. Cookie settings. Privacy notice.</footer>
</body></html>"""

FAQ = """# Booking FAQ

## How do I book a session?
Choose a specialist on the booking page, then pick a free slot in their calendar.

## Can I move a booked session?
Sessions can be moved free of charge up to 48 hours before they start.
"""


@pytest.fixture
def site() -> Iterator[HTTPTestServer]:
    """A loopback web site with an HTML page (ETag) and a markdown page (Last-Modified)."""
    with serve() as srv:
        srv.route("/about", body=ABOUT, content_type="text/html; charset=utf-8", etag=True)
        srv.route("/faq.md", body=FAQ, content_type="text/markdown", last_modified="Mon, 02 Nov 2026 10:00:00 GMT")
        yield srv


@pytest.fixture
def web_store(store: KnowledgeBaseStore, site: HTTPTestServer) -> KnowledgeBaseStore:
    """The store, allowed to fetch from the test site only (the SSRF guard stays on for everything else)."""
    store.fetch_policy = fetch_policy_for(site)
    return store


def manifest(site: HTTPTestServer, *, faq_path: str = "/faq.md") -> str:
    """A KnowledgeBase with two URL sources on the test site and one inline source."""
    return f"""apiVersion: kbctl.dev/v1alpha1
kind: KnowledgeBase
metadata:
  name: site
spec:
  sources:
    - name: about
      url: {site.url("/about")}
    - name: faq
      url: {site.url(faq_path)}
    - name: note
      text: Office hours are 9:00 to 17:30 on working days.
"""


def test_apply_fetches_extracts_and_tags_url_sources(web_store: KnowledgeBaseStore, site: HTTPTestServer) -> None:
    """Apply fetches URL sources, extracts the main text (no nav/footer) with its title, and serves it."""
    lines = Lines()
    report = web_store.apply(parse_manifests(manifest(site), "kb.yaml"), reporter=lines)
    assert not report.failed, lines.lines
    assert lines.lines[0] == "KnowledgeBase/site created (version 1); waiting for the ingestion of 3 sources"
    hit = web_store.query("site", "how many partners does the firm have?").hits[0]
    assert hit.source == "about" and hit.title == "About us"  # trafilatura prefers the <h1> to <title>
    assert hit.origin == site.url("/about") and "four partners" in hit.text
    assert hit.heading_path == ["About us", "Our partners"]
    everything = " ".join(h.text for h in web_store.query("site", "cookie settings privacy", threshold=-1).hits)
    assert "Cookie settings" not in everything and "Contact" not in everything


HANDBOOK = """<html><head><title>Northwind Payroll Handbook</title></head><body><main><article>
<h2>Pay dates</h2>
<p>Salaries are paid on the twenty-fifth of every month, or on the last working day before it when the
twenty-fifth falls on a weekend or a public holiday.</p>
</article></main></body></html>"""


def test_a_page_title_heads_the_heading_path(web_store: KnowledgeBaseStore, site: HTTPTestServer) -> None:
    """A page's title is embedded and keyword-indexed like a heading: first in each chunk's heading path (unless
    the first heading already says it), so a word found only in the title finds the page."""
    site.route("/handbook", body=HANDBOOK, content_type="text/html; charset=utf-8")
    kb = knowledge_base("site", url_source("handbook", site.url("/handbook")), url_source("about", site.url("/about")))
    assert not web_store.apply(parse_manifests(kb, "kb.yaml")).failed
    [hit] = web_store.query("site", "payroll", mode="keyword").hits
    assert hit.source == "handbook" and hit.heading_path == ["Northwind Payroll Handbook", "Pay dates"]
    assert "Payroll" not in hit.text  # found by its title alone
    about = web_store.query("site", "how many partners does the firm have?").hits[0]
    assert about.heading_path == ["About us", "Our partners"]  # its title (trafilatura's: the h1) heads it already


def test_reapply_does_not_refetch_unchanged_url_sources(web_store: KnowledgeBaseStore, site: HTTPTestServer) -> None:
    """Apply re-fetches only URL sources that are new or whose spec changed."""
    web_store.apply(parse_manifests(manifest(site), "kb.yaml"))
    assert (site.hits["/about"], site.hits["/faq.md"]) == (1, 1)
    again = web_store.apply(parse_manifests(manifest(site), "kb.yaml"))
    assert again.results[0].action == "unchanged" and again.fetched == 0
    site.route("/faq2.md", body=FAQ, content_type="text/markdown")
    moved = web_store.apply(parse_manifests(manifest(site, faq_path="/faq2.md"), "kb.yaml"))
    assert (site.hits["/about"], site.hits["/faq.md"], site.hits["/faq2.md"]) == (1, 1, 1)
    assert moved.results[0].action == "configured" and moved.embedded == 0  # same text: vectors reused


def test_refresh_with_nothing_changed_costs_only_conditional_requests(
    web_store: KnowledgeBaseStore, site: HTTPTestServer
) -> None:
    """Refresh sends If-None-Match / If-Modified-Since; 304s publish nothing and embed nothing."""
    web_store.apply(parse_manifests(manifest(site), "kb.yaml"))
    lines = Lines()
    report = web_store.refresh(["site"], reporter=lines)
    assert lines.lines == [
        "KnowledgeBase/site source about unchanged",
        "KnowledgeBase/site source faq unchanged",
        "KnowledgeBase/site unchanged (version 1)",
    ]
    assert (report.fetched, report.embedded) == (2, 0)
    assert site.requests_for("/about")[-1].headers["if-none-match"]
    assert site.requests_for("/faq.md")[-1].headers["if-modified-since"] == "Mon, 02 Nov 2026 10:00:00 GMT"


def test_refresh_republishes_only_the_changed_page(web_store: KnowledgeBaseStore, site: HTTPTestServer) -> None:
    """A changed page is re-chunked and only its new chunks embedded; the result is a new version."""
    web_store.apply(parse_manifests(manifest(site), "kb.yaml"))
    changed = FAQ.replace("48 hours", "24 hours")
    site.route("/faq.md", body=changed, content_type="text/markdown", last_modified="Tue, 03 Nov 2026 10:00:00 GMT")
    lines = Lines()
    report = web_store.refresh(["site"], reporter=lines)
    assert lines.lines == [
        "KnowledgeBase/site source about unchanged",
        f"KnowledgeBase/site source faq ready: 2 chunks ({MODEL}), 1 new",
        "KnowledgeBase/site refreshed (version 2)",
    ]
    assert report.embedded == 1
    hit = web_store.query("site", "until when can I move a booked session?").hits[0]
    assert "24 hours" in hit.text


def test_same_text_new_etag_is_not_reembedded(web_store: KnowledgeBaseStore, site: HTTPTestServer) -> None:
    """A 200 whose extracted text hash is unchanged (only the markup or ETag changed) is not re-chunked."""
    web_store.apply(parse_manifests(manifest(site), "kb.yaml"))
    site.route("/about", body=ABOUT.replace("<html>", "<html lang='en'>"), content_type="text/html", etag=True)
    report = web_store.refresh(["site"], sources=["about"])
    [kb] = report.results
    assert kb.action == "unchanged" and report.embedded == 0
    assert [s.ingested for s in kb.sources] == [False, False, False]
    assert site.hits["/faq.md"] == 1  # --source limited the refresh to "about"


def test_failed_page_keeps_serving_last_good_content(
    web_store: KnowledgeBaseStore, site: HTTPTestServer, cli: CliRunner
) -> None:
    """A page that starts failing is reported, exits 1, and its last good content keeps serving as stale."""
    web_store.apply(parse_manifests(manifest(site), "kb.yaml"))
    site.route("/about", status=404, body="gone", content_type="text/plain")
    lines = Lines()
    report = web_store.refresh(["site"], reporter=lines)
    assert report.failed
    assert "KnowledgeBase/site source about failed: HTTP 404 Not Found" in lines.lines
    assert lines.lines[-1] == "KnowledgeBase/site unchanged (version 1)"
    assert "four partners" in web_store.query("site", "how many partners does the firm have?").hits[0].text
    detail = web_store.describe("site")
    about = next(s for s in detail.source_status if s.name == "about")
    assert (about.state, about.message, about.chunks) == ("stale", "HTTP 404 Not Found", 2)
    site.route("/about", body=ABOUT, content_type="text/html; charset=utf-8", etag=True)
    recovered = web_store.refresh(["site"])
    assert not recovered.failed and recovered.embedded == 0
    assert web_store.describe("site").source_status[0].state == "ready"


def test_source_that_never_succeeded_is_absent(web_store: KnowledgeBaseStore, site: HTTPTestServer) -> None:
    """A URL source that never fetched serves nothing and is marked failed; the others are published."""
    report = web_store.apply(parse_manifests(manifest(site, faq_path="/missing.md"), "kb.yaml"))
    assert report.failed
    states = {s.name: (s.state, s.chunks) for s in web_store.describe("site").source_status}
    assert states["faq"] == ("failed", 0) and states["about"][0] == "ready"
    assert all(h.source != "faq" for h in web_store.query("site", "book a session", threshold=-1).hits)


def test_refresh_cli(web_store: KnowledgeBaseStore, site: HTTPTestServer, cli: CliRunner) -> None:
    """`kbctl refresh kb NAME` prints the apply-style lines; unknown names and bad usage are clear errors."""
    web_store.apply(parse_manifests(manifest(site), "kb.yaml"))
    env = {"KBCTL_ALLOW_PRIVATE_NETWORKS": "1"}
    result = cli.invoke(app, ["refresh", "knowledgebase", "site"], env=env)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == "KnowledgeBase/site unchanged (version 1)"
    as_json = json.loads(cli.invoke(app, ["refresh", "kb", "--all", "-o", "json"], env=env).stdout)
    assert [r["action"] for r in as_json["results"]] == ["unchanged"]
    missing = cli.invoke(app, ["refresh", "kb", "nope"])
    assert (missing.exit_code, missing.stderr) == (1, 'Error: knowledgebase "nope" not found\n')
    bad_source = cli.invoke(app, ["refresh", "kb", "site", "--source", "nope"])
    assert bad_source.exit_code == 1 and "has no source 'nope'" in bad_source.stderr
    usage = cli.invoke(app, ["refresh", "kb"])
    assert usage.exit_code == 2


def test_guard_applies_to_apply_by_default(store: KnowledgeBaseStore, site: HTTPTestServer) -> None:
    """Without an allowance, a manifest URL pointing at loopback is refused and the server sees nothing."""
    store.fetch_policy = FetchPolicy()
    report = store.apply(parse_manifests(manifest(site), "kb.yaml"))
    about = next(s for s in report.results[0].sources if s.name == "about")
    assert about.state == "failed" and "loopback address" in (about.message or "")
    assert site.total_hits == 0


def test_apply_does_not_fail_for_a_stale_source_it_did_not_fetch(
    web_store: KnowledgeBaseStore, site: HTTPTestServer
) -> None:
    """Apply reports only what it tried: a stale URL source it did not re-fetch keeps its status, exit 0."""
    web_store.apply(parse_manifests(manifest(site), "kb.yaml"))
    site.route("/about", status=500, body="down", content_type="text/plain")
    assert web_store.refresh(["site"]).failed
    report = web_store.apply(parse_manifests(manifest(site), "kb.yaml"))
    assert not report.failed and report.fetched == 0
    about = web_store.describe("site").source_status[0]
    assert (about.name, about.state, about.message) == (
        "about",
        "stale",
        "HTTP 500 Internal Server Error (after 2 attempts)",
    )
