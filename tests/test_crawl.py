"""`crawl:` sources against a real site on 127.0.0.1 (links, a sitemap, robots.txt, a redirect and a loop),
applied to the real store with the real model: each page one document, 304s on refresh, pages gone removed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kbctl.client import KnowledgeBaseStore
from kbctl.manifest import parse_manifests
from kbctl.sources.crawl import page_id, page_url
from tests.support.httpserver import HTTPTestServer, fetch_policy_for, serve
from tests.support.lines import Lines


def page(title: str, text: str, *links: str) -> str:
    anchors = "".join(f'<li><a href="{link}">{link}</a></li>' for link in links)
    return (
        f"<html><head><title>{title}</title></head><body><main><article><h1>{title}</h1><p>{text}</p>"
        f"<ul>{anchors}</ul></article></main></body></html>"
    )


@pytest.fixture
def site() -> Iterator[HTTPTestServer]:
    with serve() as srv:
        srv.route(
            "/",
            body=page(
                "Help centre",
                "Welcome to the help centre of the booking service.",
                "/guide",
                "/faq",
                "/guide#top",
                "/moved",
                "/private/secret",
                "/logo.png",
                "https://other.example/x",
            ),
            etag=True,
        )
        srv.route(
            "/guide",
            body=page("Guide", "How to book a meeting room for up to twelve people.", "/guide/setup", "/"),
            etag=True,
        )
        srv.route(
            "/guide/setup",
            body=page("Setup", "Connect the room screen with the HDMI cable on the table.", "/guide"),
            etag=True,
        )
        srv.redirect("/moved", "/guide/setup", status=301)
        srv.route("/faq", body=page("FAQ", "Bookings can be cancelled up to two hours before they start."), etag=True)
        srv.route("/private/secret", body=page("Secret", "Do not index this."), etag=True)
        srv.route("/hidden-page", body=page("Hidden", "Only the sitemap lists the parking rules page."), etag=True)
        srv.route(
            "/robots.txt",
            body=f"User-agent: *\nDisallow: /private/\nSitemap: {srv.url('/sitemap.xml')}\n",
            content_type="text/plain",
        )
        srv.route("/logo.png", body=b"\x89PNG\r\n\x1a\n", content_type="image/png")
        srv.route(  # a sitemap index, as large sites have
            "/sitemap.xml",
            body=f"<sitemapindex><sitemap><loc>{srv.url('/pages.xml')}</loc></sitemap></sitemapindex>",
            content_type="application/xml",
        )
        srv.route(
            "/pages.xml",
            body=f"<urlset><url><loc>{srv.url('/hidden-page')}</loc></url></urlset>",
            content_type="application/xml",
        )
        yield srv


def manifest(site: HTTPTestServer, **crawl: object) -> list:  # type: ignore[type-arg]
    fields = "".join(f", {k}: {v}" for k, v in crawl.items())
    text = (
        "apiVersion: kbctl.dev/v1alpha1\nkind: KnowledgeBase\nmetadata: {name: help}\nspec:\n  sources:\n"
        f'    - name: site\n      crawl: {{url: "{site.url("/")}"{fields}}}\n'
    )
    return parse_manifests(text, "help.yaml")


def served(store: KnowledgeBaseStore) -> list[str]:
    return sorted(s.name for s in store.describe("help").source_status)


def test_a_site_is_crawled_page_by_page(store: KnowledgeBaseStore, site: HTTPTestServer) -> None:
    store.fetch_policy = fetch_policy_for(site)
    assert store.apply(manifest(site)).results[0].action == "created"
    # Same-site links, the sitemap's page and the redirect's target; not robots.txt's /private/, not other sites.
    assert served(store) == ["site/faq", "site/guide", "site/guide/setup", "site/hidden-page", "site/index"]
    hit = store.query("help", "how late can I cancel a booking?", top_k=1).hits[0]
    assert hit.source == "site/faq" and hit.origin == site.url("/faq")
    assert not site.requests_for("/private/secret")
    site.reset_counts()
    again = store.refresh(["help"]).results[0]
    assert again.action == "unchanged" and sum(s.embedded for s in again.sources) == 0
    conditional = [r for p in ("/", "/faq", "/guide") for r in site.requests_for(p)]
    assert conditional and all("if-none-match" in r.headers for r in conditional)


def test_refresh_adds_new_pages_and_removes_gone_ones(store: KnowledgeBaseStore, site: HTTPTestServer) -> None:
    store.fetch_policy = fetch_policy_for(site)
    store.apply(manifest(site))
    site.route(
        "/faq", body=page("FAQ", "Bookings can be cancelled up to one hour before they start.", "/new"), etag=True
    )
    site.route("/new", body=page("New", "Visitors sign in at the front desk."), etag=True)
    site.remove("/hidden-page")
    site.route("/pages.xml", body="<urlset></urlset>", content_type="application/xml")
    refreshed = store.refresh(["help"]).results[0]
    assert refreshed.action == "refreshed"
    assert served(store) == ["site/faq", "site/guide", "site/guide/setup", "site/index", "site/new"]
    embedded = {s.name for s in refreshed.sources if s.embedded}
    assert embedded == {"site/faq", "site/new"}


def test_limits_and_globs(store: KnowledgeBaseStore, site: HTTPTestServer) -> None:
    store.fetch_policy = fetch_policy_for(site)
    store.apply(manifest(site, maxPages=2, sitemap="false"))
    assert served(store) == ["site/guide", "site/index"]  # the start page, then the first link
    text = (
        "apiVersion: kbctl.dev/v1alpha1\nkind: KnowledgeBase\nmetadata: {name: help}\nspec:\n  sources:\n"
        f'    - name: site\n      crawl: {{url: "{site.url("/")}", maxDepth: 1, sitemap: false}}\n'
        '      exclude: ["guide*"]\n'
    )
    result = store.apply(parse_manifests(text, "help.yaml")).results[0]
    assert served(store) == ["site/faq", "site/index"], result


def test_page_ids_round_trip() -> None:
    assert page_id("https://help.example.com/") == "index"
    assert page_id("https://help.example.com/a/b?x=1") == "a/b?x=1"
    assert page_url("https://help.example.com/start", "a/b?x=1") == "https://help.example.com/a/b?x=1"
    assert page_url("https://help.example.com/start", "index") == "https://help.example.com/"


def test_a_page_that_starts_answering_404_is_named_everywhere(store: KnowledgeBaseStore, site: HTTPTestServer) -> None:
    """A dropped page is visible: the refresh log names it, the result lists it, `rollout history` says
    "removed", and an event records it (not "no content change" while the chunks go down)."""
    store.fetch_policy = fetch_policy_for(site)
    store.apply(manifest(site))
    site.route("/faq", status=404, body="gone")
    log = Lines()
    [refreshed] = store.refresh(["help"], reporter=log).results
    assert refreshed.action == "refreshed" and refreshed.removed == ["site/faq"]
    assert "KnowledgeBase/help no longer serves 1 document (gone at the source): site/faq" in log.lines
    [newest, *_] = store.history("help")
    assert newest.change_cause == "removed: site/faq"
    event = store.events(["help"])[-1]
    assert (event.reason, event.component) == ("DocumentsRemoved", "refresh")
    assert event.message == "version 2 no longer serves 1 document gone at the source: site/faq"
    assert "site/faq" not in served(store)
