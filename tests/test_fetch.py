"""Tests of kbctl.sources.url and kbctl.sources.extract against real HTTP servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import gzip
import socket
import time
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

import kbctl
from kbctl.errors import SourceError
from kbctl.sources.extract import extract_html
from kbctl.sources.url import ACCEPT, FetchPolicy, FetchRequest, FetchResult, Validators, fetch_urls
from tests.support.documents import make_docx, make_pdf
from tests.support.httpserver import HTTPTestServer, Reply, loopback_only, serve

KiB = 1024
MiB = 1024 * KiB

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Refund Policy | Acme Legal</title></head>
<body>
<div id="cookie-banner" class="cookie-consent">We use cookies to improve your experience.
  <button>Accept all cookies</button></div>
<header><nav><ul><li><a href="/">Home</a></li><li><a href="/about">About us</a></li>
  <li><a href="/contact">Contact sales</a></li></ul></nav></header>
<aside class="sidebar"><h3>Related</h3><ul><li><a href="/x">Sidebar link one</a></li></ul></aside>
<main><article>
<h1>Refund Policy</h1>
<p>Clients may request a refund of their retainer within thirty days of the engagement letter being signed.
The request must be made in writing to the managing partner.</p>
<h2>Eligibility</h2>
<p>Refunds are available only for work that has not yet started. Any hours already billed are deducted
from the refund, as described in <a href="/fees">the fee schedule</a>.</p>
<h3>Exceptions</h3>
<p>Court filing fees and expert witness costs paid to third parties are never refundable.</p>
<table><thead><tr><th>Service</th><th>Refundable</th></tr></thead>
<tbody><tr><td>Consultation</td><td>Yes</td></tr><tr><td>Filing fees</td><td>No</td></tr></tbody></table>
</article></main>
<footer><p>Copyright 2024 Acme Legal LLP. All rights reserved.</p><a href="/privacy">Privacy policy</a></footer>
<script>var tracking = "tracking-script-text";</script>
</body></html>"""

NAV_ONLY = """<html><head><title>Menu</title></head><body>
<header><div class="logo">Acme</div><nav><a href="/a">Home</a> | <a href="/b">About us</a></nav></header>
<div id="cookie-banner">We use cookies. Accept all cookies</div>
<footer><p>Copyright 2024 Foo Inc. All rights reserved.</p></footer>
<script>document.write("scripted text")</script></body></html>"""


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every connection a test makes must go to a loopback IP (the test's own servers)."""
    return loopback_only(monkeypatch)


@pytest.fixture
def srv() -> Iterator[HTTPTestServer]:
    """A fresh test server on 127.0.0.1."""
    with serve() as server:
        yield server


def policy_for(srv: HTTPTestServer, **overrides: Any) -> FetchPolicy:
    """A guarded policy that allows exactly this server, with a tiny backoff."""
    values: dict[str, Any] = {
        "allowed_addresses": frozenset({("127.0.0.1", srv.port)}),
        "backoff_base": 0.01,
        "connect_timeout": 2.0,
        "read_timeout": 2.0,
        "total_timeout": 10.0,
    }
    values.update(overrides)
    return FetchPolicy(**values)


def fetch_one(url: str, policy: FetchPolicy, validators: Validators | None = None) -> FetchResult | SourceError:
    """Fetch one URL and return its outcome."""
    return fetch_urls([FetchRequest("k", url, validators)], policy)["k"]


def ok(outcome: FetchResult | SourceError) -> FetchResult:
    """The outcome, which must be a success."""
    assert isinstance(outcome, FetchResult), f"expected a result, got: {outcome}"
    return outcome


def failure(outcome: FetchResult | SourceError) -> str:
    """The one-line reason of an outcome that must be a failure."""
    assert isinstance(outcome, SourceError), f"expected a SourceError, got: {outcome}"
    message = str(outcome)
    assert "\n" not in message
    return message


# ---------------------------------------------------------------------------------------------------------
# Content
# ---------------------------------------------------------------------------------------------------------


def test_html_page_becomes_markdown_main_text(srv: HTTPTestServer) -> None:
    """An HTML page yields its main text as markdown with headings and tables, without the boilerplate."""
    srv.route("/refunds", body=PAGE)
    result = ok(fetch_one(srv.url("/refunds"), policy_for(srv)))
    assert result.document is not None
    text = result.document.text
    lines = text.splitlines()
    assert "# Refund Policy" in lines
    assert "## Eligibility" in lines
    assert "### Exceptions" in lines
    assert "| Consultation | Yes |" in text
    assert "the fee schedule" in text and "/fees" not in text
    for boilerplate in ("cookies", "About us", "Sidebar link", "All rights reserved", "Privacy policy", "tracking"):
        assert boilerplate not in text
    assert result.document.title == "Refund Policy"
    assert result.document.origin == srv.url("/refunds") == result.final_url == result.url
    assert (result.status, result.not_modified, result.content_type) == (200, False, "text/html; charset=utf-8")


def test_headings_survive_without_a_main_container() -> None:
    """A page with no <main>/<article> still keeps its headings as markdown lines."""
    para = "Install the package with pip; it needs Python 3.11 or later and a C compiler for the speedups. "
    html = (
        "<html><head><title>Install - Docs</title></head><body><div class='sidenav'><ul><li><a href='/1'>Intro</a>"
        f"</li><li><a href='/2'>Usage</a></li></ul></div><div class='document'><h1>Installation</h1><p>{para * 3}</p>"
        f"<h2>From source</h2><p>Clone the repository and run the build. {para}</p></div></body></html>"
    )
    text, title = extract_html(html, "https://docs.example.test/install")
    assert "# Installation" in text.splitlines()
    assert "## From source" in text.splitlines()
    assert title == "Installation"


def test_markdown_and_plain_text_are_taken_as_they_are(srv: HTTPTestServer) -> None:
    """text/markdown, text/x-markdown and text/plain bodies are returned unchanged (markdown's # line is the title)."""
    markdown = "# Notes\n\nSome *markdown* with a [link](https://example.test).\n\n## Part two\n\n- item\n"
    plain = "Line one.\n   indented line two\n\nline {three} ${four}\n"
    srv.route("/n.md", body=markdown, content_type="text/markdown; charset=utf-8")
    srv.route("/x.md", body=markdown, content_type="text/x-markdown")
    srv.route("/p.txt", body=plain, content_type="text/plain")
    results = fetch_urls(
        [
            FetchRequest("md", srv.url("/n.md")),
            FetchRequest("xmd", srv.url("/x.md")),
            FetchRequest("txt", srv.url("/p.txt")),
        ],
        policy_for(srv),
    )
    for key in ("md", "xmd"):
        document = ok(results[key]).document
        assert document is not None and document.text == markdown and document.title == "Notes"
    document = ok(results["txt"]).document
    assert document is not None and document.text == plain and document.title is None


def test_page_text_is_data(srv: HTTPTestServer) -> None:
    """Template and shell syntax in a page comes back verbatim, never evaluated."""
    body = "Hello {name} {{ config.secret }} {0} %(x)s $(rm -rf /) `id` ${HOME}\n"
    srv.route("/t", body=body, content_type="text/plain")
    document = ok(fetch_one(srv.url("/t"), policy_for(srv))).document
    assert document is not None and document.text == body


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("text/html; charset=utf-8", ""),
        ("text/html", "   \n\t "),
        ("text/plain", "\n\n   \n"),
        ("text/html", NAV_ONLY),
        ("text/html", "<html><body><script>var a = 'only a script here';</script><style>p{}</style></body></html>"),
    ],
    ids=["empty", "whitespace-html", "whitespace-text", "nav-only", "scripts-only"],
)
def test_pages_without_text_fail(srv: HTTPTestServer, content_type: str, body: str) -> None:
    """Empty, blank and boilerplate-only pages fail with "no text extracted"."""
    srv.route("/p", body=body, content_type=content_type)
    assert failure(fetch_one(srv.url("/p"), policy_for(srv))) == "no text extracted"


@pytest.mark.parametrize(
    ("content_type", "message"),
    [
        ("application/pdf", "not a readable PDF ("),
        (
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
            "not a readable DOCX file (",
        ),
        (
            "application/msword",
            "unsupported content type 'application/msword' (of office files, only PDF and DOCX are read)",
        ),
        (
            "application/octet-stream",
            "unsupported content type 'application/octet-stream'"
            " (HTML, markdown, plain text, PDF and DOCX are fetched)",
        ),
        (
            "image/png; foo=bar",
            "unsupported content type 'image/png' (HTML, markdown, plain text, PDF and DOCX are fetched)",
        ),
    ],
)
def test_binary_content_types_are_unsupported_or_read(srv: HTTPTestServer, content_type: str, message: str) -> None:
    """Other binary types fail with a clear message, without retries; a damaged PDF or DOCX fails as such."""
    srv.route("/f", body=b"%PDF-1.7\x00\x01\x02" * 100, content_type=content_type)
    assert failure(fetch_one(srv.url("/f"), policy_for(srv))).startswith(message)
    assert srv.hits["/f"] == 1


def test_pdf_and_docx_pages_are_read(srv: HTTPTestServer) -> None:
    """A PDF answer is read page by page, a DOCX answer with its headings and tables, as path: files are."""
    srv.route(
        "/p.pdf",
        body=make_pdf(["Refunds", "Paid within 15 business days."], title="Refunds"),
        content_type="application/pdf",
    )
    docx_type = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    srv.route("/d.docx", body=make_docx([("h1", "Onboarding"), ("p", "Laptops on day one.")]), content_type=docx_type)
    pdf = fetch_one(srv.url("/p.pdf"), policy_for(srv))
    doc = fetch_one(srv.url("/d.docx"), policy_for(srv))
    assert not isinstance(pdf, SourceError) and pdf.document is not None
    assert pdf.document.text == "## Page 1\n\nRefunds\n\n## Page 2\n\nPaid within 15 business days."
    assert pdf.document.title == "Refunds" and pdf.document.markdown is True
    assert not isinstance(doc, SourceError) and doc.document is not None
    assert doc.document.text == "# Onboarding\n\nLaptops on day one."


def test_missing_content_type_is_sniffed(srv: HTTPTestServer) -> None:
    """Without a Content-Type, an HTML-looking body is extracted and anything else fails."""
    html = "<!doctype html><html><body><article><h1>Sniffed</h1><p>Body text.</p></article></body></html>"
    srv.route("/html", body=html, content_type=None)
    srv.route("/bin", body=b"\x89PNG\r\n\x1a\n\x00\x00binary", content_type=None)
    results = fetch_urls(
        [FetchRequest("html", srv.url("/html")), FetchRequest("bin", srv.url("/bin"))], policy_for(srv)
    )
    document = ok(results["html"]).document
    assert document is not None and "# Sniffed" in document.text
    assert failure(results["bin"]) == "no content type, and the body does not look like HTML"


# ---------------------------------------------------------------------------------------------------------
# Charsets
# ---------------------------------------------------------------------------------------------------------


def test_charsets_from_header_and_meta_are_honoured(srv: HTTPTestServer) -> None:
    """Latin-1/windows-1252 (header or <meta>), Shift_JIS and GB2312 bodies decode to the right characters."""
    french = "Le café coûte 3 € à Paris, déjà."
    japanese = "日本語のテキストです。東京は晴れ。"
    chinese = "这是中文文本。北京今天天气很好。"
    srv.route("/latin1", body=french.encode("cp1252"), content_type="text/plain; charset=ISO-8859-1")
    srv.route(
        "/cp1252-meta",
        body=(
            '<html><head><meta http-equiv="Content-Type" content="text/html; charset=windows-1252"></head>'
            f"<body><article><p>{french}</p></article></body></html>"
        ).encode("cp1252"),
        content_type="text/html",
    )
    srv.route("/sjis", body=japanese.encode("shift_jis"), content_type='text/plain; charset="Shift_JIS"')
    srv.route(
        "/gb-meta",
        body=(
            f'<html><head><meta charset="gb2312"></head><body><article><p>{chinese}</p></article></body></html>'
        ).encode("gb2312"),
        content_type="text/html",
    )
    paths = ["/latin1", "/cp1252-meta", "/sjis", "/gb-meta"]
    results = fetch_urls([FetchRequest(p, srv.url(p)) for p in paths], policy_for(srv))
    texts = {p: ok(results[p]).document.text for p in paths}  # type: ignore[union-attr]
    assert texts["/latin1"] == french
    assert texts["/cp1252-meta"] == french
    assert texts["/sjis"] == japanese
    assert texts["/gb-meta"] == chinese


def test_undeclared_non_utf8_text_does_not_crash(srv: HTTPTestServer) -> None:
    """A body that is not UTF-8 and declares no charset still decodes (best guess), never raising."""
    body = ("Prix: 12 € — café, crème brûlée, déjà vu. " * 20).encode("cp1252")
    srv.route("/guess", body=body, content_type="text/plain")
    document = ok(fetch_one(srv.url("/guess"), policy_for(srv))).document
    assert document is not None and "Prix: 12" in document.text


# ---------------------------------------------------------------------------------------------------------
# Caching validators
# ---------------------------------------------------------------------------------------------------------


def test_etag_gives_304_and_a_changed_page_is_fetched_again(srv: HTTPTestServer) -> None:
    """The ETag is sent back as If-None-Match; unchanged → 304 not_modified, changed → new text and ETag."""
    srv.route("/doc", body="version one of the doc", content_type="text/plain", etag=True)
    policy = policy_for(srv)
    first = ok(fetch_one(srv.url("/doc"), policy))
    assert first.validators.etag and first.validators.last_modified is None
    second = ok(fetch_one(srv.url("/doc"), policy, first.validators))
    assert second.not_modified and second.document is None and second.status == 304
    assert second.validators == first.validators
    assert srv.requests_for("/doc")[-1].headers["if-none-match"] == first.validators.etag
    srv.route("/doc", body="version two of the doc", content_type="text/plain", etag=True)
    third = ok(fetch_one(srv.url("/doc"), policy, first.validators))
    assert not third.not_modified and third.document is not None
    assert third.document.text == "version two of the doc"
    assert third.validators.etag not in (None, first.validators.etag)


def test_last_modified_gives_304(srv: HTTPTestServer) -> None:
    """Last-Modified is sent back as If-Modified-Since and an unchanged page answers 304."""
    stamp = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    srv.route("/doc", body="dated doc", content_type="text/plain", last_modified=stamp)
    policy = policy_for(srv)
    first = ok(fetch_one(srv.url("/doc"), policy))
    assert first.validators == Validators(etag=None, last_modified="Wed, 01 May 2024 12:00:00 GMT")
    second = ok(fetch_one(srv.url("/doc"), policy, first.validators))
    assert second.not_modified and second.document is None
    assert second.validators == first.validators
    assert srv.requests_for("/doc")[-1].headers["if-modified-since"] == "Wed, 01 May 2024 12:00:00 GMT"


# ---------------------------------------------------------------------------------------------------------
# Redirects, statuses, retries
# ---------------------------------------------------------------------------------------------------------


def test_redirect_chain_is_followed(srv: HTTPTestServer, _loopback_only: list[tuple[str, int]]) -> None:
    """301 → 302 → 307 (absolute and relative Locations) ends at the final URL, over one kept-alive connection."""
    srv.redirect("/a", srv.url("/b"), status=301)
    srv.redirect("/b", "c", status=302)
    srv.redirect("/c", "/final?x=1", status=307)
    srv.route("/final", body="arrived", content_type="text/plain")
    result = ok(fetch_one(srv.url("/a"), policy_for(srv)))
    assert result.url == srv.url("/a")
    assert result.final_url == srv.url("/final?x=1")
    assert result.document is not None and result.document.origin == result.final_url
    assert [srv.hits[p] for p in ("/a", "/b", "/c", "/final")] == [1, 1, 1, 1]
    assert _loopback_only == [("127.0.0.1", srv.port)]  # redirect bodies are drained, the connection reused


def test_too_many_redirects(srv: HTTPTestServer) -> None:
    """A redirect loop stops after max_redirects hops with a clear message."""
    for i in range(10):
        srv.redirect(f"/r{i}", f"/r{i + 1}")
    assert failure(fetch_one(srv.url("/r0"), policy_for(srv))) == "too many redirects (more than 5)"
    assert srv.total_hits == 6
    assert failure(fetch_one(srv.url("/r0"), policy_for(srv, max_redirects=1))) == "too many redirects (more than 1)"


def test_404_fails_at_once(srv: HTTPTestServer) -> None:
    """A 404 is not retried."""
    assert failure(fetch_one(srv.url("/missing"), policy_for(srv))) == "HTTP 404 Not Found"
    assert srv.hits["/missing"] == 1


def test_500_is_retried_then_fails_with_the_attempt_count(srv: HTTPTestServer) -> None:
    """A persistent 500 is tried 1 + retries times and the message says so."""
    srv.route("/err", status=500, body="boom", content_type="text/plain")
    message = failure(fetch_one(srv.url("/err"), policy_for(srv, retries=2)))
    assert message == "HTTP 500 Internal Server Error (after 3 attempts)"
    assert srv.hits["/err"] == 3


def test_503_then_200_succeeds(srv: HTTPTestServer) -> None:
    """A transient 503 is retried and the later success is returned."""
    srv.sequence("/flaky", [Reply(status=503), Reply(status=502), Reply(body="fine now", content_type="text/plain")])
    document = ok(fetch_one(srv.url("/flaky"), policy_for(srv))).document
    assert document is not None and document.text == "fine now"
    assert srv.hits["/flaky"] == 3


def test_429_retry_after_is_honoured(srv: HTTPTestServer) -> None:
    """429 with Retry-After: 1 waits about a second before the retry, which succeeds."""
    srv.sequence(
        "/limited",
        [Reply(status=429, headers={"Retry-After": "1"}), Reply(body="welcome back", content_type="text/plain")],
    )
    result = ok(fetch_one(srv.url("/limited"), policy_for(srv)))
    assert result.document is not None and result.document.text == "welcome back"
    assert srv.hits["/limited"] == 2
    first, second = srv.requests_for("/limited")
    assert 0.95 <= second.time - first.time < 2.0


def test_retry_after_ms_is_honoured(srv: HTTPTestServer) -> None:
    """retry-after-ms (read by kbctl._http like the API clients do) wins over Retry-After."""
    srv.sequence(
        "/limited",
        [
            Reply(status=429, headers={"Retry-After": "30", "retry-after-ms": "400"}),
            Reply(body="welcome back", content_type="text/plain"),
        ],
    )
    ok(fetch_one(srv.url("/limited"), policy_for(srv)))
    first, second = srv.requests_for("/limited")
    assert 0.38 <= second.time - first.time < 2.0


def test_retry_after_is_capped(srv: HTTPTestServer) -> None:
    """A Retry-After longer than max_retry_after is honoured only up to the cap."""
    srv.sequence(
        "/slowdown", [Reply(status=503, headers={"Retry-After": "120"}), Reply(body="ok", content_type="text/plain")]
    )
    started = time.monotonic()
    ok(fetch_one(srv.url("/slowdown"), policy_for(srv, max_retry_after=0.2)))
    assert 0.2 <= time.monotonic() - started < 10  # not the 120 s asked for


def test_read_timeout(srv: HTTPTestServer) -> None:
    """A server slower than read_timeout fails with a timeout message, retried like any timeout."""
    srv.route("/slow", body="late", content_type="text/plain", delay=3)
    started = time.monotonic()
    message = failure(fetch_one(srv.url("/slow"), policy_for(srv, read_timeout=0.4, retries=1)))
    assert message == "read timed out after 0.4 s (after 2 attempts)"
    assert time.monotonic() - started < 5.5  # two attempts of 0.4 s, not the 3 s the server takes for each
    assert srv.hits["/slow"] == 2


def test_total_timeout_covers_a_trickling_body(srv: HTTPTestServer) -> None:
    """A body that trickles in under the read timeout still stops at total_timeout."""
    srv.route("/trickle", body="x" * 2000, content_type="text/plain", chunk_size=100, chunk_delay=0.1)
    message = failure(fetch_one(srv.url("/trickle"), policy_for(srv, read_timeout=1, total_timeout=0.6)))
    assert message == "timed out after 0.6 s"


def test_connection_refused(srv: HTTPTestServer) -> None:
    """A closed port fails with "connection refused" after the retries."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    policy = FetchPolicy(allowed_addresses=frozenset({("127.0.0.1", port)}), backoff_base=0.01, retries=1)
    message = failure(fetch_one(f"http://127.0.0.1:{port}/", policy))
    assert message == f"cannot connect to 127.0.0.1:{port}: connection refused (after 2 attempts)"


def test_dns_failure(srv: HTTPTestServer) -> None:
    """A host name that does not resolve fails at once with "cannot resolve host"."""
    calls: list[str] = []

    def resolver(host: str, port: int) -> list[str]:
        calls.append(host)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    message = failure(fetch_one("http://nowhere.example.test/page", policy_for(srv, resolver=resolver)))
    assert message == "cannot resolve host 'nowhere.example.test'"
    assert calls == ["nowhere.example.test"]
    empty = policy_for(srv, resolver=lambda host, port: [])
    assert failure(fetch_one("http://empty.example.test/", empty)) == "cannot resolve host 'empty.example.test'"


# ---------------------------------------------------------------------------------------------------------
# Size caps and encodings
# ---------------------------------------------------------------------------------------------------------


def test_body_over_the_cap_is_refused_by_content_length(srv: HTTPTestServer) -> None:
    """A 1 MiB body with max_bytes=64 KiB is refused from its Content-Length."""
    srv.route("/big", body="a" * MiB, content_type="text/plain")
    assert failure(fetch_one(srv.url("/big"), policy_for(srv, max_bytes=64 * KiB))) == "response larger than 64 KiB"


def test_body_over_the_cap_is_refused_while_streaming(srv: HTTPTestServer) -> None:
    """Without a Content-Length, the cap is enforced on the bytes as they arrive."""
    srv.route("/big", body="a" * MiB, content_type="text/plain", content_length=False)
    assert failure(fetch_one(srv.url("/big"), policy_for(srv, max_bytes=64 * KiB))) == "response larger than 64 KiB"
    srv.route("/fits", body="b" * (64 * KiB), content_type="text/plain", content_length=False)
    document = ok(fetch_one(srv.url("/fits"), policy_for(srv, max_bytes=64 * KiB))).document
    assert document is not None and len(document.text) == 64 * KiB


def test_gzip_bomb_is_refused_by_the_decompressed_cap(srv: HTTPTestServer) -> None:
    """A small gzip body that inflates past max_bytes is refused (the cap is on decompressed bytes)."""
    bomb = gzip.compress(b"a" * (64 * MiB), compresslevel=9)
    assert len(bomb) < 128 * KiB
    srv.route("/bomb", body=bomb, content_type="text/plain", headers={"Content-Encoding": "gzip"})
    assert failure(fetch_one(srv.url("/bomb"), policy_for(srv, max_bytes=MiB))) == "response larger than 1 MiB"


def test_gzip_and_deflate_bodies_are_decoded(srv: HTTPTestServer) -> None:
    """gzip, zlib-wrapped deflate and raw deflate bodies decode to the original text."""
    text = "compressed words " * 200
    raw = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    srv.route("/gz", body=text, content_type="text/plain", gzip=True)
    srv.route(
        "/zd", body=zlib.compress(text.encode()), content_type="text/plain", headers={"Content-Encoding": "deflate"}
    )
    raw_deflate = raw.compress(text.encode()) + raw.flush()
    srv.route("/rd", body=raw_deflate, content_type="text/plain", headers={"Content-Encoding": "deflate"})
    srv.route("/br", body=b"\x00\x01", content_type="text/plain", headers={"Content-Encoding": "br"})
    results = fetch_urls([FetchRequest(p, srv.url(p)) for p in ("/gz", "/zd", "/rd", "/br")], policy_for(srv))
    for path in ("/gz", "/zd", "/rd"):
        document = ok(results[path]).document
        assert document is not None and document.text == text
    assert failure(results["/br"]) == "unsupported content encoding 'br'"
    assert srv.requests_for("/gz")[0].headers["accept-encoding"] == "gzip, deflate"


# ---------------------------------------------------------------------------------------------------------
# Concurrency, headers, API
# ---------------------------------------------------------------------------------------------------------


def test_per_host_concurrency_is_bounded(srv: HTTPTestServer) -> None:
    """Six slow URLs on one host with per_host=2 never have more than two requests in flight."""
    for i in range(6):
        srv.route(f"/p{i}", body=f"page {i}", content_type="text/plain", delay=0.3)
    started = time.monotonic()
    results = fetch_urls([FetchRequest(str(i), srv.url(f"/p{i}")) for i in range(6)], policy_for(srv, per_host=2))
    elapsed = time.monotonic() - started
    assert all(isinstance(r, FetchResult) for r in results.values())
    assert srv.max_in_flight == 2
    assert elapsed >= 0.85  # three rounds of two, never all six at once


def test_overall_concurrency_is_bounded(srv: HTTPTestServer) -> None:
    """Across two host names (same server) the overall limit holds: at most `concurrency` in flight."""
    for i in range(8):
        srv.route(f"/q{i}", body=f"page {i}", content_type="text/plain", delay=0.2)
    hosts = {"a.example.test": ["127.0.0.1"], "b.example.test": ["127.0.0.1"]}
    policy = policy_for(srv, concurrency=3, per_host=3, resolver=lambda host, port: hosts[host])
    requests = [FetchRequest(str(i), f"http://{'ab'[i % 2]}.example.test:{srv.port}/q{i}") for i in range(8)]
    results = fetch_urls(requests, policy)
    assert all(isinstance(r, FetchResult) for r in results.values())
    assert srv.max_in_flight == 3


def test_request_headers(srv: HTTPTestServer) -> None:
    """User-Agent is kbctl/<version>, Accept prefers HTML/markdown/text, and Host is the URL's host name."""
    srv.route("/h", body="headers", content_type="text/plain")
    policy = policy_for(srv, resolver=lambda host, port: ["127.0.0.1"])
    ok(fetch_one(f"http://docs.example.test:{srv.port}/h", policy))
    headers = srv.requests_for("/h")[0].headers
    assert headers["user-agent"] == f"kbctl/{kbctl.__version__}"
    assert headers["accept"] == ACCEPT == "text/html, text/markdown, text/plain;q=0.9, */*;q=0.1"
    assert headers["host"] == f"docs.example.test:{srv.port}"
    assert "if-none-match" not in headers and "if-modified-since" not in headers


def test_connections_go_to_the_checked_ip(srv: HTTPTestServer, _loopback_only: list[tuple[str, int]]) -> None:
    """The host name is resolved once and the socket is opened to the resulting IP, not to the name."""
    srv.route("/c", body="checked", content_type="text/plain")
    resolved: list[str] = []

    def resolver(host: str, port: int) -> list[str]:
        resolved.append(host)
        return ["127.0.0.1"]

    ok(fetch_one(f"http://site.example.test:{srv.port}/c", policy_for(srv, resolver=resolver)))
    assert resolved == ["site.example.test"]
    assert _loopback_only == [("127.0.0.1", srv.port)]


def test_failures_are_per_url(srv: HTTPTestServer) -> None:
    """One call returns each key's own outcome, in request order; a failure does not affect the others."""
    srv.route("/good", body="good", content_type="text/plain")
    requests = [
        FetchRequest("bad", srv.url("/nope")),
        FetchRequest("good", srv.url("/good")),
        FetchRequest("scheme", "gopher://example.test/"),
        FetchRequest("garbage", "http://exa mple.test:notaport/"),
    ]
    results = fetch_urls(requests, policy_for(srv))
    assert list(results) == ["bad", "good", "scheme", "garbage"]
    assert failure(results["bad"]) == "HTTP 404 Not Found"
    assert ok(results["good"]).document is not None
    assert failure(results["scheme"]) == "unsupported URL scheme 'gopher' (only http and https URLs are fetched)"
    assert failure(results["garbage"]).startswith("invalid URL 'http://exa mple.test:notaport/'")


def test_fetch_from_inside_an_event_loop(srv: HTTPTestServer) -> None:
    """fetch_urls also works when called from code already running an asyncio loop."""
    srv.route("/x", body="from a loop", content_type="text/plain")

    async def caller() -> FetchResult | SourceError:
        return fetch_one(srv.url("/x"), policy_for(srv))

    document = ok(asyncio.run(caller())).document
    assert document is not None and document.text == "from a loop"


def test_api_edges(monkeypatch: pytest.MonkeyPatch) -> None:
    """No requests → {}, duplicate keys and bad policies are ValueErrors, and from_env reads the variable."""
    assert fetch_urls([]) == {}
    with pytest.raises(ValueError, match="unique"):
        fetch_urls([FetchRequest("a", "http://x.test/"), FetchRequest("a", "http://y.test/")])
    with pytest.raises(ValueError, match="per_host"):
        FetchPolicy(per_host=0)
    for value, expected in (("1", True), ("true", True), ("TRUE", True), ("0", False), ("", False), ("yes", False)):
        monkeypatch.setenv("KBCTL_ALLOW_PRIVATE_NETWORKS", value)
        assert FetchPolicy.from_env().allow_private is expected
    monkeypatch.setenv("KBCTL_ALLOW_PRIVATE_NETWORKS", "1")
    assert FetchPolicy.from_env(allow_private=False, retries=0).allow_private is False
    monkeypatch.delenv("KBCTL_ALLOW_PRIVATE_NETWORKS")
    assert FetchPolicy.from_env().allow_private is False
    assert FetchPolicy().user_agent == f"kbctl/{kbctl.__version__}"
