"""Run an eval set against a knowledge base and report recall@k, MRR@10, nDCG@10, hit rate and no-answer accuracy,
and recall@k and nDCG@10 over distinct sources (published BEIR figures rank documents, not chunks).

`evaluate` runs an eval set (`kbctl.eval.evalset`) through any `store_query(question, mode)` callable and
scores each query with the metrics of `kbctl.eval.metrics`; `evaluate_store` does it through a store (any
`kbctl.eval.stores.QueryStore`, such as `kbctl.client.KnowledgeBaseStore`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from kbctl.errors import KbctlError, UsageError
from kbctl.eval.answers import AnswerReport, answer_shortfalls
from kbctl.eval.evalset import EvalQuery, EvalSet, HitLike
from kbctl.eval.gates import Shortfall, shortfall
from kbctl.eval.metrics import (
    MRR_DEPTH,
    NDCG_DEPTH,
    check_k,
    hit_at_k,
    ndcg_at_k,
    recall_at_k,
    reciprocal_rank,
)
from kbctl.eval.stores import QueryStore
from kbctl.inputs.access import Reader
from kbctl.query.options import QueryOptions

__all__ = [
    "EvalReport",
    "ModeReport",
    "QueryOutcome",
    "Shortfall",
    "StoreQuery",
    "distinct_sources",
    "evaluate",
    "evaluate_store",
    "score_query",
    "split_mode",
]

DOCUMENT_DEPTH = 3  # hits asked per metric rank: the top 10 chunks of a BEIR query hold ~8 distinct documents
MAX_TOP_K = 200  # the most hits a query returns (spec.retrieval.topK's maximum)

StoreQuery = Callable[[str, str | None], Sequence[HitLike]]
"""Ranked hits of a question in a mode (None: the knowledge base's default)."""


class QueryOutcome(BaseModel):
    """How one query fared in one mode. Ranking metrics are None for noAnswer queries, `correct` is
    None for the others."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    id: str
    question: str
    no_answer: bool
    retrieved: list[str] = Field(description="Sources of the hits, in rank order.")
    relevant_ranks: list[int] = Field(description="1-based ranks of the relevant hits.")
    missing_sources: list[str] = Field(description="Expected sources not among the top k hits.")
    recall: float | None
    reciprocal_rank: float | None
    ndcg: float | None
    hit: float | None
    document_recall: float | None = Field(
        default=None, description="recall@k over distinct sources: each source ranked by its best hit."
    )
    document_ndcg: float | None = Field(default=None, description="nDCG@10 over distinct sources.")
    correct: bool | None

    @property
    def missed(self) -> bool:
        """A noAnswer query that got hits, or an answerable one not fully recalled in the top k."""
        if self.no_answer:
            return not self.correct
        return (self.recall or 0.0) < 1.0


class ModeReport(BaseModel):
    """The metrics of one retrieval mode over the whole eval set (means over the answerable queries)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    mode: str | None = Field(description="The mode asked for; None means the knowledge base's default.")
    resolved_mode: str | None = Field(default=None, description="The mode the store says it used, when it says.")
    queries: int
    answerable: int
    no_answer_queries: int
    recall: float | None = Field(description="Mean recall@k.")
    mrr: float | None = Field(description="Mean reciprocal rank within the top 10.")
    ndcg: float | None = Field(description="Mean nDCG@10.")
    hit_rate: float | None = Field(description="Share of queries with a relevant hit in the top k.")
    document_recall: float | None = Field(
        default=None, description="Mean recall@k over distinct sources (a source ranks at its best hit)."
    )
    document_ndcg: float | None = Field(default=None, description="Mean nDCG@10 over distinct sources.")
    no_answer_accuracy: float | None = Field(description="Share of noAnswer queries that got no hit at all.")
    versions: list[int] = Field(
        default_factory=list,
        description="The versions of the knowledge base its queries read, as the store names them: one, unless a "
        "version was published (or rolled back to) while they ran.",
    )
    results: list[QueryOutcome]

    @property
    def label(self) -> str:
        """The mode for people: `hybrid`, or `default` / `hybrid (default)` when none was asked for."""
        if self.mode is not None:
            return self.mode
        return f"{self.resolved_mode} (default)" if self.resolved_mode else "default"

    @property
    def misses(self) -> list[QueryOutcome]:
        """The queries that did not fully succeed, in eval-set order."""
        return [r for r in self.results if r.missed]


class EvalReport(BaseModel):
    """The result of an eval set against one knowledge base, one entry per mode."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    knowledge_base: str | None
    k: int
    modes: list[ModeReport]
    reader_groups: list[str] | None = Field(
        default=None, description="The groups of the caller measured as (--as-group); None: a caller without any."
    )
    reader_claims: list[str] | None = Field(
        default=None, description="The claims of the caller measured as (--as-claim), `name=value`; None: none."
    )
    answers: list[AnswerReport] | None = None  # `--answers`: the generation half, one report per chat model

    def shortfalls(
        self,
        *,
        min_recall: float | None = None,
        min_ndcg: float | None = None,
        min_faithfulness: float | None = None,
        min_refusal: float | None = None,
    ) -> list[Shortfall]:
        """Every mode's recall@k below min_recall and nDCG@10 below min_ndcg (unmeasurable counts as below), then,
        when the answers were measured, every chat model's faithfulness and refusal rate below theirs."""
        found = []
        for m in self.modes:
            scope = f"in mode {m.mode}" if m.mode is not None else ""
            found += [
                shortfall(f"recall@{self.k}", "--min-recall", m.recall, min_recall, scope=scope),
                shortfall(f"nDCG@{NDCG_DEPTH}", "--min-ndcg", m.ndcg, min_ndcg, scope=scope),
            ]
        gates = [s for s in found if s is not None]
        if self.answers:
            gates += answer_shortfalls(self.answers, min_faithfulness=min_faithfulness, min_refusal=min_refusal)
        return gates


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def distinct_sources(hits: Sequence[HitLike]) -> list[HitLike]:
    """The best hit of each source, in rank order: the ranking of documents rather than chunks."""
    seen: set[str] = set()
    best = []
    for hit in hits:
        if hit.source not in seen:
            seen.add(hit.source)
            best.append(hit)
    return best


def score_query(query: EvalQuery, hits: Sequence[HitLike], k: int) -> QueryOutcome:
    """The outcome of one query from its ranked hits (those of its ignored sources left out), at the level of
    chunks and of distinct sources."""
    if query.ignored_sources:
        hits = [h for h in hits if h.source not in query.ignored_sources]
    retrieved = [h.source for h in hits]
    relevant = [rank for rank, h in enumerate(hits, start=1) if query.is_relevant(h)]
    common: dict[str, Any] = {"id": query.id, "question": query.question, "no_answer": query.no_answer}
    if query.no_answer:
        return QueryOutcome(
            **common,
            retrieved=retrieved,
            relevant_ranks=[],
            missing_sources=[],
            recall=None,
            reciprocal_rank=None,
            ndcg=None,
            hit=None,
            correct=not hits,
        )
    top = set(retrieved[:k])
    return QueryOutcome(
        **common,
        retrieved=retrieved,
        relevant_ranks=relevant,
        missing_sources=[s for s in query.expected_sources if s not in top],
        recall=recall_at_k(query, hits, k),
        reciprocal_rank=reciprocal_rank(query, hits),
        ndcg=ndcg_at_k(query, hits),
        hit=hit_at_k(query, hits, k),
        document_recall=recall_at_k(query, distinct_sources(hits), k),
        document_ndcg=ndcg_at_k(query, distinct_sources(hits)),
        correct=None,
    )


def evaluate(
    store_query: StoreQuery,
    evalset: EvalSet,
    *,
    k: int = 5,
    modes: Sequence[str | None] = (None,),
    knowledge_base: str | None = None,
) -> EvalReport:
    """Run every query of the eval set once per mode through `store_query(question, mode)` (which
    returns the ranked hits; at least max(k, 10) of them are needed for the @10 metrics) and score them."""
    check_k(k)
    if not modes:
        raise UsageError("modes must name at least one mode (None for the knowledge base's default)")
    reports = []
    for mode in dict.fromkeys(modes):
        results = [score_query(q, store_query(q.question, mode), k) for q in evalset.queries]
        ranked = [r for r in results if not r.no_answer]
        unanswerable = [r for r in results if r.no_answer]
        reports.append(
            ModeReport(
                mode=mode,
                queries=len(results),
                answerable=len(ranked),
                no_answer_queries=len(unanswerable),
                recall=_mean([r.recall or 0.0 for r in ranked]),
                mrr=_mean([r.reciprocal_rank or 0.0 for r in ranked]),
                ndcg=_mean([r.ndcg or 0.0 for r in ranked]),
                hit_rate=_mean([r.hit or 0.0 for r in ranked]),
                document_recall=_mean([r.document_recall or 0.0 for r in ranked]),
                document_ndcg=_mean([r.document_ndcg or 0.0 for r in ranked]),
                no_answer_accuracy=_mean([1.0 if r.correct else 0.0 for r in unanswerable]),
                results=results,
            )
        )
    return EvalReport(knowledge_base=knowledge_base or evalset.knowledge_base, k=k, modes=reports)


@dataclass
class _StoreQuery:
    """store.query as a `store_query` callable, noting the mode the store says it used."""

    store: QueryStore
    name: str
    options: QueryOptions  # top_k and the options every mode shares (threshold, max_tokens)
    resolved: dict[str | None, str]
    reader: Reader | None = None  # the caller whose documents are read (document-level access)
    versions: dict[str | None, set[int]] = field(default_factory=dict)  # per mode, the versions its queries read

    def __call__(self, question: str, mode: str | None) -> Sequence[HitLike]:
        base, rerank = split_mode(mode)
        options = QueryOptions.build(self.options, mode=base, rerank=rerank)
        result = self.store.query(self.name, question, options, reader=self.reader)
        if result.rerank is not None and result.rerank.error:
            raise KbctlError(f"mode {mode or 'default'}: {result.rerank.error}")
        self.resolved.setdefault(mode, result.mode + ("+rerank" if result.rerank is not None else ""))
        self.versions.setdefault(mode, set()).add(result.version)
        return result.hits


def split_mode(mode: str | None) -> tuple[str | None, bool | None]:
    """(retrieval mode, rerank) of an eval mode: `hybrid` is hybrid without a reranker, `hybrid+rerank`
    with the spec's reranker, None the spec's mode and reranker."""
    if mode is None:
        return None, None
    base, plus, suffix = mode.partition("+")
    if plus and suffix != "rerank":
        raise UsageError(f"mode must be hybrid, vector or keyword, optionally with +rerank, got {mode!r}")
    return base, bool(plus)


def evaluate_store(
    store: QueryStore,
    name: str,
    evalset: EvalSet,
    *,
    k: int = 5,
    modes: Sequence[str | None] = (None,),
    options: QueryOptions | None = None,
    reader: Reader | None = None,
) -> EvalReport:
    """Evaluate knowledge base `name` of a store, as `reader` when given (document-level access: a source it may
    not read counts as missed): each question is asked with top_k=max(k, 10) and the
    spec's threshold and token budget (or those of `options`, when set), in each mode (None: the spec's
    default mode and reranker; `hybrid` is measured without a reranker, `hybrid+rerank` with the spec's;
    a reranker that fails fails the evaluation rather than measure the fused order).

    Raises UsageError when `options` sets top_k, mode or rerank (`k` and `modes` say those), and
    KbctlError when the eval set expects a source the knowledge base does not have (a typo would
    otherwise just read as poor recall).
    """
    check_k(k)
    options = options if options is not None else QueryOptions()
    if options.top_k is not None or options.mode is not None or options.rerank is not None:
        raise UsageError("options must leave top_k, mode and rerank unset: k and modes set them")
    known = {s.name for s in store.describe(name).source_status}
    unknown: dict[str, str] = {}
    for query in evalset.queries:
        for source in query.expected_sources:
            if source not in known:
                unknown.setdefault(source, query.id)
    if unknown:
        listed = ", ".join(f"{s} (query {i})" for s, i in unknown.items())
        raise KbctlError(f"KnowledgeBase/{name} has no source {listed}; it has: {', '.join(sorted(known))}")
    # Deeper than the chunk metrics need, so that the distinct sources of the list still fill the top k.
    per_query = QueryOptions.build(options, top_k=min(MAX_TOP_K, DOCUMENT_DEPTH * max(k, MRR_DEPTH, NDCG_DEPTH)))
    store_query = _StoreQuery(store, name, per_query, {}, reader)
    report = evaluate(store_query, evalset, k=k, modes=modes, knowledge_base=name)
    for m in report.modes:
        m.resolved_mode = store_query.resolved.get(m.mode)
        m.versions = sorted(store_query.versions.get(m.mode, ()))
    if reader is not None:
        report.reader_groups = reader.group_list() or None
        report.reader_claims = reader.claim_terms() or None
    return report
