"""Exact terms: which tokens of a question count as identifiers, and page text that holds them as written."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kbctl.client import KnowledgeBaseStore
from kbctl.defaults import EXACT_TERMS_MARGIN, EXACT_TERMS_MAX_WORDS
from kbctl.manifest import parse_manifests
from kbctl.query.retrieve import identifiers
from kbctl.sources.extract import extract_html, unescape_markdown
from tests.support.httpserver import HTTPTestServer, fetch_policy_for, serve
from tests.support.manifests import knowledge_base, text_source, url_source


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("how fast do you respond to a P1?", ["P1"]),
        ("is S3 or a 4K screen covered?", ["S3", "4K"]),
        ("we have 25 days and 2 weeks", []),  # a 2-digit number is no code
        ("what does ERR_4092 mean in v2.1 of the SLA?", ["ERR_4092", "v2.1", "SLA"]),
        ("G-CSF and TCR/CD in the U.S", ["G-CSF", "TCR/CD", "U.S"]),
        ("a b 1 x9y", ["x9y"]),
    ],
)
def test_identifiers_of_a_question(question: str, expected: list[str]) -> None:
    assert identifiers(question) == expected


PAGE = """<html><head><title>Remote access</title></head><body><main><article>
<h1>Remote access</h1>
<p>Connect with the profile VPN_7731 (or VPN_7732 abroad). A *priority* ticket goes to [desk] 4.</p>
<p>Scripts call <code>connect_vpn --profile VPN_7731</code> as written.</p>
</article></main></body></html>"""


def test_text_from_html_carries_no_markdown_escapes() -> None:
    text, _ = extract_html(PAGE, "https://intranet.example/vpn")
    assert "VPN_7731" in text and "VPN_7732" in text and "*priority*" in text and "[desk]" in text
    assert "\\" not in text
    assert "`connect_vpn --profile VPN_7731`" in text  # code as it was


def test_structure_and_code_keep_their_escapes() -> None:
    markdown = "\\# not a heading\nrow \\| cell and a\\_b\n`keep\\_this` but\\_not\n```\nx = a\\_b\n```\n1\\. item"
    assert unescape_markdown(markdown) == (
        "\\# not a heading\nrow \\| cell and a_b\n`keep\\_this` but_not\n```\nx = a\\_b\n```\n1\\. item"
    )


@pytest.fixture
def site() -> Iterator[HTTPTestServer]:
    with serve() as server:
        yield server


def test_an_exact_code_on_a_page_and_a_two_character_code_are_found(
    store: KnowledgeBaseStore, site: HTTPTestServer
) -> None:
    """Through a real URL source, the page's code is stored as written (no `VPN\\_7731`) and found by a question
    naming it; a 2-character code (P1) lets its chunk pass the similarity threshold as an exact identifier."""
    site.route("/vpn", body=PAGE, content_type="text/html; charset=utf-8")
    store.fetch_policy = fetch_policy_for(site)
    priorities = (
        "# Support priorities\n\nP1 incidents get a first response within 15 minutes, day and night. P2 incidents "
        "get one within four business hours. P3 requests are handled in the order they arrive."
    )
    kb = knowledge_base(
        "it",
        url_source("vpn", site.url("/vpn")),
        text_source("priorities", priorities),
        text_source("lunch", "The canteen serves lunch from noon to two; the menu changes every Monday."),
    )
    assert not store.apply(parse_manifests(kb, "kb.yaml")).failed
    vpn = store.query("it", "which profile is VPN_7731?").hits
    assert vpn and vpn[0].source == "vpn" and "VPN_7731" in vpn[0].text and "\\_" not in vpn[0].text
    assert "VPN_7731" in vpn[0].matched_identifiers
    question = "how fast do you respond to a P1?"
    score = next(h.similarity for h in store.query("it", question, threshold=-1.0).hits if h.source == "priorities")
    p1 = store.query("it", question, threshold=round(score + 0.15, 3)).hits
    assert [h.source for h in p1] == ["priorities"] and p1[0].matched_identifiers == ["P1"]
    # Further below the threshold than EXACT_TERMS_MARGIN, the identifier lets nothing through, and explain says why.
    far = store.query("it", question, threshold=round(score + EXACT_TERMS_MARGIN + 0.05, 3), explain=True)
    assert far.hits == []
    assert far.trace is not None
    [cut] = [e for s in far.trace if s.stage == "threshold" for e in s.entries if e.source == "priorities"]
    assert "(identifier P1 passes only down to" in cut.detail
    # Nor in a long question, where an identifier is more often there by chance.
    long = "I have been trying all morning to find out how fast you respond to a P1, can you tell me?"
    assert len(long.split()) > EXACT_TERMS_MAX_WORDS
    score = next(h.similarity for h in store.query("it", long, threshold=-1.0).hits if h.source == "priorities")
    # (0.15 below: beyond what agreement of the two lists lets through, within EXACT_TERMS_MARGIN)
    assert store.query("it", long, threshold=round(score + 0.15, 3)).hits == []
