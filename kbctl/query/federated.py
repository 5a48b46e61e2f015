"""One question over several knowledge bases: each queried alone (its own model, threshold and snapshot), their
rankings fused into one by reciprocal rank, with what each knowledge base gave.

Ranks are fused, not scores, since the knowledge bases' models (and so their score scales) may differ: a hit's
`score` and `fused_score` are its fused score across them, which never increases with rank, and its `similarity`
its cosine in its own knowledge base. topK and the token budget apply to the fused list, by default the largest of
the knowledge bases'.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pydantic import BaseModel

from kbctl.defaults import FEDERATED_RRF_K
from kbctl.errors import NotFoundError
from kbctl.query.options import QueryOptions
from kbctl.query.results import API_MODEL, QueryHit, QueryResult

__all__ = ["FEDERATED_RRF_K", "FederatedHit", "FederatedResult", "MemberOutcome", "query_many"]


class MemberOutcome(BaseModel):
    """What one knowledge base of a cross-knowledge-base query gave."""

    model_config = API_MODEL

    knowledge_base: str
    version: int | None
    hits: int
    best_score: float | None
    message: str


SourceOutcome = MemberOutcome
"""Deprecated: the former name of MemberOutcome (it describes a knowledge base's part of the query, not a source)."""


class FederatedHit(QueryHit):
    """A hit of a cross-knowledge-base query, naming the knowledge base (and version) it comes from."""

    knowledge_base: str
    version: int


class FederatedResult(BaseModel):
    """One ranking fused from the rankings of several knowledge bases."""

    model_config = API_MODEL

    question: str
    knowledge_bases: list[str]
    top_k: int
    max_context_tokens: int
    hits: list[FederatedHit]
    tokens: int
    results: list[MemberOutcome]

    @property
    def message(self) -> str:
        if self.hits:
            return f"{len(self.hits)} chunks from {len({h.knowledge_base for h in self.hits})} knowledge bases"
        return "nothing relevant found in " + (", ".join(self.knowledge_bases) or "any knowledge base in scope")


def query_many(
    question: str, names: Sequence[str], options: QueryOptions, query_one: Callable[[str], QueryResult]
) -> FederatedResult:
    """Query each of `names` with `query_one` and fuse the rankings. A knowledge base without a published
    version (NotFoundError) is said in `results`, not fatal to the others."""
    targets = list(dict.fromkeys(names))
    results: list[QueryResult] = []
    outcomes: list[MemberOutcome] = []
    for name in targets:
        try:
            result = query_one(name)
        except NotFoundError as exc:
            outcomes.append(MemberOutcome(knowledge_base=name, version=None, hits=0, best_score=None, message=str(exc)))
            continue
        results.append(result)
        outcomes.append(
            MemberOutcome(
                knowledge_base=name,
                version=result.version,
                hits=len(result.hits),
                best_score=result.best_score,
                message=result.message,
            )
        )
    return _fuse(question, targets, results, outcomes, options)


def _fuse(
    question: str,
    targets: list[str],
    results: list[QueryResult],
    outcomes: list[MemberOutcome],
    options: QueryOptions,
) -> FederatedResult:
    top_k = options.top_k or max((r.top_k for r in results), default=1)
    budget = options.max_tokens or max((r.max_context_tokens for r in results), default=1)
    scored = [
        (1.0 / (FEDERATED_RRF_K + hit.rank), hit.similarity, r.knowledge_base, r.version, hit)
        for r in results
        for hit in r.hits
    ]
    scored.sort(key=lambda item: (-item[0], -item[1], item[2]))
    hits: list[FederatedHit] = []
    tokens = 0
    for fused, _, name, version, hit in scored:
        if len(hits) == top_k or tokens + hit.tokens > budget:
            break  # the first hit that does not fit ends the list, as in one knowledge base
        data = hit.model_dump() | {"rank": len(hits) + 1, "score": round(fused, 6), "fused_score": round(fused, 6)}
        hits.append(FederatedHit(**data, knowledge_base=name, version=version))
        tokens += hit.tokens
    return FederatedResult(
        question=question,
        knowledge_bases=targets,
        top_k=top_k,
        max_context_tokens=budget,
        hits=hits,
        tokens=tokens,
        results=outcomes,
    )
