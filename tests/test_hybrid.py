"""Hybrid retrieval: full text beside vectors, fused by reciprocal rank, and exact identifiers past the threshold."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.defaults import AGREEMENT_MARGIN, EXACT_TERMS_MARGIN, KEYWORD_WEIGHT, RRF_K
from kbctl.embedding.local import DEFAULT_THRESHOLD
from kbctl.manifest import load_manifests, parse_manifests
from kbctl.query import stages
from kbctl.query.retrieve import fuse, identifiers
from kbctl.store.rows import ChunkHit

RUNBOOK = """# Payment errors
## Card declined
When the bank declines a card, ask the client to contact their bank and try another card.

## Suspended merchant account
The gateway answers ERR_4092 when the merchant account is suspended. Escalate to the finance lead.

## Refund delays
Refunds reach the client's account within 5 to 10 business days.
"""


def manifest(language: str = "english") -> str:
    """A runbook KnowledgeBase whose sections become separate chunks."""
    body = "\n".join("        " + line for line in RUNBOOK.splitlines())
    return f"""apiVersion: kbctl.dev/v1alpha1
kind: KnowledgeBase
metadata: {{name: runbook}}
spec:
  sources:
    - name: payments
      text: |
{body}
  retrieval: {{similarityThreshold: 0.5, language: {language}}}
"""


@pytest.fixture
def runbook(store: KnowledgeBaseStore) -> KnowledgeBaseStore:
    """The store with the runbook applied."""
    store.apply(parse_manifests(manifest(), "kb.yaml"))
    return store


def test_identifiers_of_a_question() -> None:
    """Tokens with digits or underscores and acronyms count as exact identifiers; plain words do not."""
    assert identifiers("What does ERR_4092 mean for our SLA under ISO-27001, page 7?") == [
        "ERR_4092",
        "SLA",
        "ISO-27001",
    ]
    assert identifiers("how long are invoices kept?") == []
    # Acronyms joined by hyphens, slashes or dots are exact terms too; a capitalized word or a lone capital is not.
    assert identifiers("Does G-CSF act on TCR/CD cells in the U.S.? Ask Anna, or A-b.") == ["G-CSF", "TCR/CD", "U.S"]


def test_exact_identifier_is_found_even_below_the_threshold(runbook: KnowledgeBaseStore) -> None:
    """An error code finds its chunk although its similarity is under the threshold; without it, nothing passes."""
    hybrid = runbook.query("runbook", "ERR_4092 at checkout?", threshold=0.6)
    assert hybrid.mode == "hybrid" and hybrid.identifiers == ["ERR_4092"]
    [top] = hybrid.hits
    assert "merchant account is suspended" in top.text
    assert top.matched_identifiers == ["ERR_4092"] and top.keyword_rank == 1 and top.similarity < 0.6
    assert not top.all_words  # "checkout" is not in the chunk: the identifier alone let it pass
    control = runbook.query("runbook", "which code?", threshold=0.6)
    assert control.hits == [] and control.message.startswith("nothing relevant found")


def test_a_chunk_with_every_word_of_the_question_passes_the_threshold(runbook: KnowledgeBaseStore) -> None:
    """All of the question's words (stemmed, stop words dropped) in one chunk count as exact evidence, for a chunk
    scoring up to EXACT_TERMS_MARGIN below the threshold."""

    def above(question: str, by: float) -> float:  # `by` above the question's best similarity
        return round(runbook.query("runbook", question, threshold=-1.0).hits[0].similarity + by, 3)

    question = "Escalate a suspended merchant account?"
    threshold = above(question, 0.1)
    [top] = runbook.query("runbook", question, threshold=threshold).hits
    assert top.heading_path[-1] == "Suspended merchant account" and top.all_words and top.similarity < threshold
    assert top.matched_identifiers == []
    assert runbook.query("runbook", question, threshold=above(question, EXACT_TERMS_MARGIN + 0.05)).hits == []
    control = "Escalate a suspended merchant account to the auditors?"
    assert runbook.query("runbook", control, threshold=above(control, 0.1)).hits == []  # "auditors" is in no chunk
    one_word = runbook.query("runbook", "suspended?", threshold=above("suspended?", 0.1))
    assert one_word.hits == []  # a single word is too little evidence


def test_keyword_mode_needs_a_word_of_the_question(runbook: KnowledgeBaseStore) -> None:
    """Keyword mode returns only chunks sharing a word with the question, and says so when none does."""
    result = runbook.query("runbook", "card declined by the bank", mode="keyword")
    assert result.hits[0].heading_path == ["Payment errors", "Card declined"]
    assert all(h.keyword_rank is not None and h.vector_rank is None for h in result.hits)
    nothing = runbook.query("runbook", "photosynthesis chlorophyll", mode="keyword")
    assert nothing.hits == []
    assert (
        nothing.message == "nothing relevant found in KnowledgeBase/runbook: no chunk contains a word of the question"
    )


def test_hybrid_fuses_both_rankings(runbook: KnowledgeBaseStore, cli: CliRunner) -> None:
    """Hybrid candidates carry both ranks and a fused score, best first; --mode is on the CLI."""
    result = runbook.query("runbook", "how many business days until a refund arrives?", threshold=0.0)
    top = result.hits[0]
    assert top.heading_path == ["Payment errors", "Refund delays"]
    assert top.vector_rank == 1 and top.keyword_rank == 1
    assert top.fused_score == pytest.approx((1 + KEYWORD_WEIGHT) / (RRF_K + 1), abs=1e-6)
    fused = [h.fused_score for h in result.hits]
    assert fused == sorted(fused, reverse=True)
    out = cli.invoke(app, ["query", "runbook", "card declined", "--mode", "keyword"])
    assert out.exit_code == 0 and "Card declined" in out.stdout.splitlines()[0]
    bad = cli.invoke(app, ["query", "runbook", "card declined", "--mode", "fuzzy"])
    assert bad.exit_code == 2 and "Invalid value for '--mode'" in bad.output  # a usage error, like kubectl


def _hit(chunk_id: int, cosine: float, bm25: float | None = None) -> ChunkHit:
    return ChunkHit(chunk_id, "s", "inline", None, 0, 0, 1, [], "x", 1, cosine, None, bm25)


def test_fusion_convex_and_rrf() -> None:
    """Convex fusion sums each list's scores scaled to 0-1 (weighted); RRF sums weighted 1/(k + rank)."""
    by_vector = [_hit(1, 0.9), _hit(2, 0.8), _hit(3, 0.5)]
    by_keyword = [_hit(3, 0.5, 12.0), _hit(4, 0.1, 6.0), _hit(1, 0.9, 2.0)]
    convex = {h.chunk_id: r.fused_score for h, r in fuse(by_vector, by_keyword, 1.0, "convex")}
    assert convex == pytest.approx({1: 1.0, 2: 0.75, 3: 1.0, 4: 0.4})
    assert [h.chunk_id for h, _ in fuse(by_vector, by_keyword, 1.0, "convex")] == [1, 3, 2, 4]  # tie: cosine
    assert [h.chunk_id for h, _ in fuse(by_vector, by_keyword, 3.0, "convex")] == [3, 4, 1, 2]
    rrf = {h.chunk_id: r.fused_score for h, r in fuse(by_vector, by_keyword, 0.5, "rrf")}
    k = RRF_K
    assert rrf == pytest.approx(
        {1: 1 / (k + 1) + 0.5 / (k + 3), 2: 1 / (k + 2), 3: 1 / (k + 3) + 0.5 / (k + 1), 4: 0.5 / (k + 2)}
    )


def test_language_is_checked_and_simple_keeps_codes(store: KnowledgeBaseStore) -> None:
    """spec.retrieval.language must exist in PostgreSQL; 'simple' indexes words without stemming."""
    report = store.apply(parse_manifests(manifest("klingon"), "kb.yaml"))
    assert report.results[0].action == "failed"
    assert "spec.retrieval.language 'klingon' is not a text search configuration" in (report.results[0].message or "")
    store.apply(parse_manifests(manifest("simple"), "kb.yaml"))
    hits = store.query("runbook", "declines", mode="keyword").hits  # no stemming: "declines" is a word of its own
    assert [h.heading_path[-1] for h in hits] == ["Card declined"]


def test_near_duplicates_are_sent_once(store: KnowledgeBaseStore) -> None:
    """The same paragraph in two sources is returned once; the copy is counted as a duplicate."""
    text = """apiVersion: kbctl.dev/v1alpha1
kind: KnowledgeBase
metadata: {name: dup}
spec:
  sources:
    - {name: a, text: "Invoices are kept for ten years, then destroyed."}
    - {name: b, text: "Invoices are kept for ten years, then destroyed."}
    - {name: c, text: "Visitors sign in at the front desk."}
"""
    store.apply(parse_manifests(text, "kb.yaml"))
    result = store.query("dup", "how long are invoices kept?", threshold=0.3)
    assert [h.source for h in result.hits] in (["a"], ["b"]) and result.duplicates == 1
    assert {s.name: s.chunks for s in store.describe("dup").source_status} == {"a": 1, "b": 1, "c": 1}
    revisions = store.db.connection.execute("SELECT count(*) FROM kb_source_revisions").fetchone()
    assert revisions == (3,)  # one per source, none orphaned


def test_the_chunk_first_in_both_lists_passes_a_little_below_the_threshold(store: KnowledgeBaseStore) -> None:
    """In hybrid mode the chunk nearest by meaning and best by BM25 passes down to AGREEMENT_MARGIN below the
    threshold: this question of examples/eval scores its answer under the default model's 0.35, and vector mode,
    where no second list agrees, still answers nothing."""
    examples = Path(__file__).resolve().parent.parent / "examples" / "kb" / "client-service-policy.yaml"
    store.apply([m.kb for m in load_manifests([str(examples)])])
    question = "Can consultants fly business class when travelling for a client?"
    hybrid = store.query("client-service-policy", question, explain=True)
    assert hybrid.hits, "the answer passed by agreement"
    top = hybrid.hits[0]
    assert (top.source, top.vector_rank, top.keyword_rank) == ("invoicing-payment", 1, 1)
    assert DEFAULT_THRESHOLD - AGREEMENT_MARGIN <= top.similarity < DEFAULT_THRESHOLD
    assert hybrid.relevant_by == "similarity"  # by agreement: the gate's similarity with its exceptions
    with_threshold = store.query("client-service-policy", question, threshold=DEFAULT_THRESHOLD, explain=True)
    assert with_threshold.trace is not None
    assert with_threshold.trace[-1].entries[0].detail == "kept as 1 (first in both lists)"
    assert all(
        h.similarity >= DEFAULT_THRESHOLD or h.matched_identifiers or h.all_words for h in with_threshold.hits[1:]
    )
    assert store.query("client-service-policy", question, mode="vector").hits == []
    # More than the margin below the threshold, agreement is not enough.
    assert store.query("client-service-policy", question, threshold=top.similarity + AGREEMENT_MARGIN + 0.01).hits == []


def test_explain_traces_every_stage(runbook: KnowledgeBaseStore, cli: CliRunner) -> None:
    """--explain records each stage with timings, ranks, scores and the verdict on every candidate."""
    result = runbook.query("runbook", "ERR_4092?", threshold=0.6, explain=True)
    assert result.trace is not None
    assert [s.stage for s in result.trace] == ["embed question", "vector", "keyword", "fuse", "threshold", "select"]
    assert all(s.ms >= 0 for s in result.trace)
    threshold = {e.position: e.detail for e in result.trace[-2].entries}
    select = {e.position: e.detail for e in result.trace[-1].entries}
    assert select[1] == "kept as 1 (identifier ERR_4092; every word of the question)"
    assert threshold[0] == "cut: similarity below 0.6" and 0 not in select
    assert runbook.query("runbook", "ERR_4092?").trace is None
    out = cli.invoke(app, ["query", "runbook", "ERR_4092?", "--threshold", "0.6", "--explain"])
    assert (
        out.exit_code == 0
        and "\nselect (" in out.stdout
        and ("kept as 1 (identifier ERR_4092; every word of the question)" in out.stdout)
    )


FACILITIES = [
    ("Parking", "Staff park in the north lot; visitors use the marked bays by the entrance."),
    ("Kitchen", "The kitchen is cleaned every Friday; label your food with your name and the date."),
    ("Printers", "Print jobs are released at the printer with your badge."),
    ("Lost property", "Lost items are kept at reception for thirty days."),
    ("Fire drills", "Fire drills happen twice a year; leave by the nearest stairs, never the lift."),
    ("Meeting rooms", "Book meeting rooms in the calendar; cancel a booking you no longer need."),
    ("Bicycles", "Bicycles go in the basement rack; the door opens with your badge."),
    ("Plants", "The plants are watered by a contractor on Mondays."),
    ("Badge BX-7741", "A badge of series BX-7741 was recalled: swap it at the security desk."),
]


def _facilities(store: KnowledgeBaseStore) -> None:
    body = "\n".join(f"        ## {title}\n        {text}\n" for title, text in FACILITIES)
    text = (
        "apiVersion: kbctl.dev/v1alpha1\nkind: KnowledgeBase\nmetadata: {name: office}\nspec:\n  sources:\n"
        f"    - name: facilities\n      text: |\n        # Office facilities\n{body}"
        "  retrieval: {mode: vector}\n"
    )
    store.apply(parse_manifests(text, "kb.yaml"))


def test_vector_mode_reads_twice_top_k_when_they_decide_the_answer(
    store: KnowledgeBaseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An answer that fills topK with chunks at or above the threshold reads 2 x topK candidates; the hits are
    those of the whole pool read at once, and hybrid mode still reads the whole pool (the 9 chunks). An answer
    ended by the token budget is decided too."""
    _facilities(store)
    question = "where do visitors park their car?"
    lazy = store.query("office", question, top_k=2, threshold=-1.0)
    assert lazy.mode == "vector" and lazy.candidates == 4 and len(lazy.hits) == 2
    assert lazy.hits[0].heading_path[-1] == "Parking"
    monkeypatch.setattr(stages, "FIRST_READ", 1000)  # the whole pool at once
    whole = store.query("office", question, top_k=2, threshold=-1.0)
    assert whole.candidates == 9
    assert [(h.position, h.score) for h in whole.hits] == [(h.position, h.score) for h in lazy.hits]
    assert store.query("office", question, top_k=2, threshold=-1.0, mode="hybrid").candidates == 9
    monkeypatch.setattr(stages, "FIRST_READ", 2)
    budget = store.query("office", question, top_k=3, threshold=-1.0, max_tokens=30)  # ended by the budget
    assert budget.candidates == 6 and budget.over_budget > 0 and len(budget.hits) < 3


def test_vector_mode_reads_the_whole_pool_when_the_first_read_leaves_the_answer_short(
    store: KnowledgeBaseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A short answer (too few chunks above the threshold) reads the rest of the pool, so a chunk holding the
    question's identifier is still found below the threshold although it ranks after the first read."""
    _facilities(store)
    question = "who waters the plants, BX-7741?"
    ranks = store.query("office", question, top_k=10, threshold=-1.0)
    place = next(i for i, h in enumerate(ranks.hits) if "BX-7741" in h.text)
    monkeypatch.setattr(stages, "FIRST_READ", 1)  # a first read of topK (2) chunks
    assert place >= 2  # ranked after the first read
    strong, bx = ranks.hits[0].score, ranks.hits[place].score
    threshold = round(bx + EXACT_TERMS_MARGIN - 0.02, 3)  # the identifier's chunk may pass, the first chunk does
    assert strong >= threshold > ranks.hits[1].score
    result = store.query("office", question, top_k=2, threshold=threshold)
    assert result.candidates == 9 and result.below_threshold == 7
    first, hit = result.hits
    assert first.score == pytest.approx(strong)
    assert hit.matched_identifiers == ["BX-7741"] and hit.score < threshold
