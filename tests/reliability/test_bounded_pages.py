"""Work on one page is bounded: HTML over the extraction limit, or extraction over its time budget, fails alone."""

from __future__ import annotations

import pytest

from kbctl.errors import SourceError
from kbctl.sources.url import FetchRequest, fetch_urls
from tests.support.httpserver import fetch_policy_for, serve

pytestmark = pytest.mark.reliability

PARAGRAPH = "<p>Invoices are kept for seven years after the end of the financial year of issue.</p>\n"


def page(paragraphs: int) -> str:
    body = f"<main><h1>Policy</h1>{PARAGRAPH * paragraphs}</main>"
    return f"<html><head><title>Policy</title></head><body>{body}</body></html>"


def test_html_over_the_extraction_limit_fails_alone() -> None:
    """A page larger than max_html_bytes is refused with its size and the limit; the other page is extracted."""
    with serve() as srv:
        srv.route("/big", body=page(2000))  # some 180 KB
        srv.route("/small", body=page(2))
        policy = fetch_policy_for(srv, max_html_bytes=64 * 1024)
        out = fetch_urls([FetchRequest("big", srv.url("/big")), FetchRequest("small", srv.url("/small"))], policy)
    assert isinstance(out["big"], SourceError)
    assert str(out["big"]) == "HTML page of 0.2 MiB is over the 0.0625 MiB limit of text extraction"
    assert not isinstance(out["small"], SourceError) and out["small"].document is not None


def test_extraction_over_its_time_budget_fails_the_page() -> None:
    """An extraction that runs past extract_timeout fails its page with a clear reason instead of running on."""
    with serve() as srv:
        srv.route("/slow", body=page(3000))  # some 280 KB of HTML: far more than a millisecond to extract
        out = fetch_urls([FetchRequest("slow", srv.url("/slow"))], fetch_policy_for(srv, extract_timeout=0.001))
    assert str(out["slow"]) == "extracting the text of the page took more than 0.001 s"
