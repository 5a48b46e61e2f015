"""Query a knowledge base: BM25 keyword and vector candidates fused, cut by threshold and budget.

Modes: `vector` (cosine similarity), `keyword` (Okapi BM25 over PostgreSQL full text: kbctl.store.bm25) and
`hybrid` (the default: both lists fused by `spec.retrieval.fusion`). The threshold applies to every candidate's
cosine, except exact terms of a short question and, in hybrid mode, the chunk first in both lists; a reranker, when
set, reorders what passes; then topK, near-duplicates and the token budget. A hit's `score` is what ordered it.

A query runs as named stages, each a function of kbctl.query.stages and a stage of the `--explain` trace:
embed_question, vector_candidates, keyword_candidates, fuse, apply_threshold, rerank_candidates and select_hits,
after `plan_query` (kbctl.query.plan) resolves the QueryOptions against the version's stored `spec.retrieval`
(defaults: kbctl.defaults); this module runs them in order and re-exports their names.
Design and figures: docs/architecture.md#retrieval ("Stages, scores and exact terms"), docs/eval.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kbctl.embedding import Embedder
from kbctl.embedding.background import keyword_share
from kbctl.errors import UsageError
from kbctl.inputs.access import Reader
from kbctl.query.options import QueryOptions
from kbctl.query.plan import QueryPlan, Visible, plan_query
from kbctl.query.results import QueryHit, QueryResult, RerankInfo, StageTiming, TraceEntry, TraceStage
from kbctl.query.stages import (
    apply_threshold,
    decided,
    embed_question,
    fuse,
    identifiers,
    keyword_candidates,
    rerank_candidates,
    select_hits,
    trace_entries,
    trace_entry,
    vector_candidates,
)
from kbctl.rerank import Reranker
from kbctl.sources import storable
from kbctl.store.database import Database

__all__ = [
    "QueryHit",  # the result models live in kbctl.query.results; these names stay importable from here
    "QueryPlan",  # the plan and the stages live in kbctl.query.plan and kbctl.query.stages; likewise
    "QueryResult",
    "RerankInfo",
    "TraceEntry",
    "TraceStage",
    "Visible",
    "apply_threshold",
    "clean_question",
    "decided",
    "embed_question",
    "fuse",
    "identifiers",
    "keyword_candidates",
    "plan_query",
    "query_knowledge_base",
    "rerank_candidates",
    "run_query",
    "select_hits",
    "vector_candidates",
]


# ---------------------------------------------------------------- helpers


class _Trace:
    """Times the stages of a query and, when explaining, keeps what each saw."""

    def __init__(self, explain: bool) -> None:
        self.explain = explain
        self.stages: list[TraceStage] = []
        self.timings: list[StageTiming] = []
        self._last = time.perf_counter()
        self._last_ns = time.time_ns()

    def stage(self, name: str, entries: Callable[[], list[TraceEntry]] | None = None, *, count: int = 0) -> None:
        """End stage `name`; `entries` (what it saw) is called only when explaining, and the time it takes counts
        toward no stage."""
        now, now_ns = time.perf_counter(), time.time_ns()
        if self.explain:
            seen = entries() if entries is not None else []
            self.stages.append(TraceStage(stage=name, ms=round((now - self._last) * 1000, 2), entries=seen))
        self.timings.append(StageTiming(stage=name, start_ns=self._last_ns, end_ns=now_ns, count=count))
        self._last, self._last_ns = (time.perf_counter(), time.time_ns()) if self.explain else (now, now_ns)


# ---------------------------------------------------------------- the whole query


def query_knowledge_base(
    db: Database,
    name: str,
    question: str,
    embedder_for: Callable[[str], Embedder],
    options: QueryOptions | None = None,
    *,
    reranker_for: Callable[[str], Reranker] | None = None,
    visible: Visible | None = None,
    reader: Reader | None = None,
) -> QueryResult:
    """Retrieve the chunks of the current version of `name` most relevant to `question`.

    Candidates are ranked as the mode says (see the module docstring) and kept while they pass the
    threshold rule; with a reranker (the spec's `retrieval.rerank`, unless `options.rerank` is False;
    True requires one) the best of them are reordered by its scores. They are then kept in order up to
    `top_k`, and while their tokens fit the budget (the first chunk that does not fit ends the list); a
    chunk whose vector is a near-duplicate (cosine >= 0.99) of one already kept is dropped, so one fact is
    not sent twice. With `options.explain`, `trace` records every stage's candidates, ranks, scores,
    verdicts and time. Unset options come from the version's `spec.retrieval`; the question is embedded
    with the model of the version, whatever the manifest says now. `visible`, when given, is asked whether
    the caller may see the knowledge base (a server's token scope); refused, it is not found. `reader` is the
    caller's groups and claims: a document behind an `access` rule it does not meet is never a candidate (None:
    a caller without any, who reads only unrestricted documents).
    """
    question = clean_question(question)
    # One read-only snapshot for the whole query: a version published, rolled back or pruned meanwhile
    # cannot change what it reads (the rows of the version it started with stay visible to it).
    with db.read_only():
        plan = plan_query(db, name, options or QueryOptions(), visible, reader)
        return run_query(db, plan, question, embedder_for, reranker_for)


def clean_question(question: str) -> str:
    """The question as a query can take it; UsageError when it is empty."""
    question = storable(question)  # a NUL or a lone surrogate cannot reach PostgreSQL's full-text search
    if not question.strip():
        raise UsageError("question must not be empty")
    return question


def run_query(
    db: Database,
    plan: QueryPlan,
    question: str,
    embedder_for: Callable[[str], Embedder],
    reranker_for: Callable[[str], Reranker] | None = None,
) -> QueryResult:
    """The stages of one planned query, in order, inside the caller's snapshot (`db.read_only()`); the
    question as `clean_question` returns it."""
    name = plan.name
    reranker = None
    if plan.rerank is not None:
        if reranker_for is None:
            raise UsageError("a reranker is configured but no reranker_for was given")
        reranker = reranker_for(plan.rerank.model)
    trace = _Trace(plan.explain)
    vector = embed_question(embedder_for(plan.model), question)
    trace.stage("embed question", count=1)
    by_vector = vector_candidates(db, plan, vector)
    trace.stage("vector", lambda: trace_entries(by_vector), count=len(by_vector))
    ranking = keyword_candidates(db, plan, question, vector, by_vector)
    by_keyword = ranking.hits
    trace.stage("keyword", lambda: trace_entries(by_keyword), count=len(by_keyword))
    # Alone, a list keeps its own order: the weight only matters beside the other list.
    fused = fuse(by_vector, by_keyword, plan.keyword_weight if plan.mode == "hybrid" else 1.0, plan.fusion)
    trace.stage(
        "fuse", lambda: [trace_entry(c, r, x.fused_score) for r, (c, x) in enumerate(fused, start=1)], count=len(fused)
    )
    terms = identifiers(question)
    share = keyword_share(ranking.best_score, ranking.idf_total) if plan.mode == "hybrid" else None
    passing, cuts, relevant_by = apply_threshold(db, plan, question, terms, fused, share)
    trace.stage("threshold", lambda: cuts, count=len(passing))
    info = None
    if reranker is not None and plan.rerank is not None:
        passing, info, entries = rerank_candidates(passing, question, reranker, plan.rerank)
        trace.stage("rerank", lambda: entries, count=len(passing))
    selection = select_hits(passing, plan.top_k, plan.max_tokens, plan.mode)
    trace.stage(
        "select", lambda: [trace_entry(c, r, c.score, v) for c, r, v in selection.verdicts], count=len(selection.hits)
    )
    best = max((c.score for c, _ in fused), default=None)
    result = QueryResult(
        knowledge_base=name,
        version=plan.version,
        model=plan.model,
        question=question,
        mode=plan.mode,
        identifiers=terms,
        top_k=plan.top_k,
        similarity_threshold=plan.threshold,
        relevance_threshold=plan.gate,
        keyword_share=share,
        keyword_threshold=plan.keyword_gate,
        relevant_by=relevant_by,
        max_context_tokens=plan.max_tokens,
        hits=selection.hits,
        candidates=len(fused),
        below_threshold=len(cuts),
        over_budget=selection.over_budget,
        tokens=selection.tokens,
        best_score=round(float(best), 4) if best is not None else None,
        duplicates=selection.duplicates,
        rerank=info,
        trace=trace.stages if plan.explain else None,
    )
    result._timings = trace.timings
    return result
