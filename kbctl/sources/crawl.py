"""`crawl:` sources: a site's pages, from one start page, same-site links followed breadth-first.

Round by round (depth 0 is the start page, the pages of the site's sitemap and the pages the current version
serves), every page of the round is fetched by the URL fetcher (`kbctl.sources.url`: the network guard, size
and time caps, retries, concurrency per host), with its validators when it is served already, so an
unchanged page answers 304 and is not read again. The links of each HTML page fetched lead to the next round,
while they stay on the start page's scheme and host, match `include` / `exclude` (globs on the page's id:
its path without the leading /, and ?query), are allowed by robots.txt (user agent kbctl), are within
`maxDepth`, and until `maxPages` pages are fetched. A page that answers 404 or 410 is gone from the next
version; one that fails otherwise keeps serving what it served (stale). Each page is one document named by its
id; `index` is the root.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit
from urllib.robotparser import RobotFileParser

from kbctl.errors import SourceError
from kbctl.manifest import Source
from kbctl.sources import Document
from kbctl.sources.files import NOT_MODIFIED, DocumentsRead, ListedDocument, NotModified, selected
from kbctl.sources.url import FetchPolicy, FetchRequest, FetchResult, Validators, fetch_urls

__all__ = ["GONE", "crawl_site", "page_id", "page_url"]

GONE = re.compile(r"^HTTP (404|410)\b")  # a page that is no longer there
NOT_A_PAGE = re.compile(r"^unsupported content type ")  # a link to an image, an archive...: not a document
_LOC = re.compile(r"<loc>\s*([^<\s]+)\s*</loc>", re.IGNORECASE)
MAX_SITEMAP_URLS = 50_000


@dataclass(frozen=True)
class _Site:
    scheme: str
    netloc: str

    def owns(self, url: str) -> bool:
        parts = urlsplit(url)
        return parts.scheme == self.scheme and parts.netloc.lower() == self.netloc


def _normalized(url: str) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc.lower()
    for scheme, port in (("http", ":80"), ("https", ":443")):
        if parts.scheme == scheme and netloc.endswith(port):
            netloc = netloc[: -len(port)]
    return urlunsplit((parts.scheme.lower(), netloc, parts.path or "/", parts.query, ""))


def page_id(url: str) -> str:
    """A page's document id: its path without the leading / (`index` for the root), and its ?query."""
    parts = urlsplit(url)
    path = parts.path.lstrip("/") or "index"
    return f"{path}?{parts.query}" if parts.query else path


def page_url(site_url: str, doc_id: str) -> str:
    """The URL of a page of the site of `site_url` from its id (the inverse of `page_id`)."""
    parts = urlsplit(site_url)
    path, _, query = doc_id.partition("?")
    return urlunsplit((parts.scheme, parts.netloc, "/" if path == "index" else f"/{path}", query, ""))


def _text(url: str, policy: FetchPolicy) -> str | None:
    """The body of a small text file of the site (robots.txt, a sitemap), None when it cannot be fetched."""
    result = fetch_urls([FetchRequest(url, url, raw=True)], policy)[url]
    return result.body if isinstance(result, FetchResult) else None


def _robots(site_url: str, policy: FetchPolicy) -> tuple[RobotFileParser | None, list[str]]:
    body = _text(page_url(site_url, "robots.txt"), policy)
    if body is None:
        return None, []
    parser = RobotFileParser()
    parser.parse(body.splitlines())
    return parser, list(parser.site_maps() or [])


def _sitemap_pages(site: _Site, sitemaps: list[str], policy: FetchPolicy) -> list[str]:
    """The page URLs of the site's sitemaps; a sitemap index's entries (…xml) are read as sitemaps, 10 at most."""
    found: list[str] = []
    queue, read = list(sitemaps), 0
    while queue and read < 10:
        sitemap = queue.pop(0)
        if not site.owns(sitemap):
            continue
        read += 1
        body = _text(sitemap, policy)
        if body:
            for match in _LOC.finditer(body):
                loc = match.group(1)
                (queue if loc.lower().endswith((".xml", ".xml.gz")) else found).append(loc)
    return found[:MAX_SITEMAP_URLS]


def crawl_site(source: Source, policy: FetchPolicy, known: Mapping[str, Validators]) -> DocumentsRead:
    """The pages of a crawl source, each with its Document, NOT_MODIFIED (a 304 to the validators `known` holds
    for its id) or why it failed; pages gone (404, 410) are left out. SourceError when the start page fails."""
    assert source.crawl is not None
    start = _normalized(source.crawl.url)
    site = _Site(urlsplit(start).scheme, urlsplit(start).netloc)
    robots, sitemaps = _robots(start, policy)
    seeds = [start, *(page_url(start, d) for d in known)]
    if source.crawl.sitemap:
        seeds += _sitemap_pages(site, sitemaps or [page_url(start, "sitemap.xml")], policy)
    seen: set[str] = set()

    def admit(url: str) -> bool:
        """Whether `url` (normalized) is a page of the crawl not met before; it is met from now on."""
        if url in seen or not site.owns(url) or (url != start and not selected(source, page_id(url))):
            return False
        seen.add(url)
        return True

    frontier = [url for url in map(_normalized, seeds) if admit(url)]
    results: dict[str, tuple[ListedDocument, Document | SourceError | NotModified]] = {}
    fetched = 0
    for depth in range(source.crawl.max_depth + 1):
        if robots is not None:
            frontier = [u for u in frontier if robots.can_fetch(policy.user_agent.split("/")[0], u)]
        frontier = frontier[: source.crawl.max_pages - fetched]
        if not frontier:
            break
        requests = [FetchRequest(u, u, known.get(page_id(u)), links=True) for u in frontier]
        outcomes = fetch_urls(requests, policy)
        fetched += len(frontier)
        following: list[str] = []
        for url in frontier:
            outcome, doc_id = outcomes[url], page_id(url)
            if isinstance(outcome, SourceError):
                if url == start and not known:
                    raise SourceError(f"start page {url}: {outcome}")
                if not GONE.match(str(outcome)) and not NOT_A_PAGE.match(str(outcome)):
                    results[doc_id] = (ListedDocument(doc_id, None, "html", url), outcome)
                continue
            final = _normalized(outcome.final_url)
            if final != url:  # redirected: the page is known by where it is, read once (when first met)
                if not admit(final):
                    continue
                doc_id = page_id(final)
            entry = ListedDocument(doc_id, None, "html", outcome.final_url, validators=outcome.validators)
            if outcome.not_modified:
                results[doc_id] = (entry, NOT_MODIFIED)
            else:
                assert outcome.document is not None
                results[doc_id] = (entry, outcome.document)
            if depth < source.crawl.max_depth:
                following += [link for link in map(_normalized, outcome.links) if admit(link)]
        frontier = following
    return [results[k] for k in sorted(results)]
