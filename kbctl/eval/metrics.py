"""Retrieval metrics, pure functions of a query and its ranked hits: recall@k, reciprocal rank, nDCG@k, hit@k."""

from __future__ import annotations

import math
from collections.abc import Sequence

from kbctl.defaults import MRR_DEPTH, NDCG_DEPTH
from kbctl.errors import UsageError
from kbctl.eval.evalset import EvalQuery, HitLike

__all__ = [
    "MRR_DEPTH",
    "NDCG_DEPTH",
    "check_k",
    "hit_at_k",
    "ideal_relevant",
    "ndcg_at_k",
    "recall_at_k",
    "reciprocal_rank",
]


def check_k(k: int) -> None:
    """Raise UsageError unless k is at least 1."""
    if k < 1:
        raise UsageError(f"k must be at least 1, got {k}")


def recall_at_k(query: EvalQuery, hits: Sequence[HitLike], k: int) -> float:
    """The fraction of the expected sources among the top k hits; without expected sources (only
    expected text), 1.0 when any of the top k hits is relevant, else 0.0."""
    check_k(k)
    top = hits[:k]
    if not query.expected_sources:
        return 1.0 if any(query.is_relevant(h) for h in top) else 0.0
    found = {h.source for h in top}
    return sum(s in found for s in query.expected_sources) / len(query.expected_sources)


def reciprocal_rank(query: EvalQuery, hits: Sequence[HitLike], k: int = MRR_DEPTH) -> float:
    """1/rank of the first relevant hit among the top k (MRR@k is its mean), 0.0 when there is none."""
    check_k(k)
    return next((1.0 / rank for rank, h in enumerate(hits[:k], start=1) if query.is_relevant(h)), 0.0)


def hit_at_k(query: EvalQuery, hits: Sequence[HitLike], k: int) -> float:
    """1.0 when any of the top k hits is relevant, else 0.0 (hit rate@k is its mean)."""
    check_k(k)
    return 1.0 if any(query.is_relevant(h) for h in hits[:k]) else 0.0


def ideal_relevant(query: EvalQuery, k: int = NDCG_DEPTH) -> int:
    """How many relevant hits a perfect ranking has: one per expected source (one in all for a query
    that expects only text), at most k."""
    return min(k, len(query.expected_sources) or 1)


def ndcg_at_k(query: EvalQuery, hits: Sequence[HitLike], k: int = NDCG_DEPTH) -> float:
    """Normalised discounted cumulative gain of the top k hits with binary relevance.

    A relevant hit gains 1/log2(rank + 1) when its source is not already counted above it (several
    chunks of one expected source count once), up to `ideal_relevant` gains; the ideal DCG puts that
    many gains at ranks 1, 2, ... So one expected source found at rank 2 scores 1/log2(3) ≈ 0.631, and
    the result is always within [0, 1].
    """
    check_k(k)
    ideal = ideal_relevant(query, k)
    seen: set[str] = set()
    dcg = 0.0
    for rank, hit in enumerate(hits[:k], start=1):
        if len(seen) == ideal:
            break
        if hit.source not in seen and query.is_relevant(hit):
            seen.add(hit.source)
            dcg += 1.0 / math.log2(rank + 1)
    idcg = sum(1.0 / math.log2(rank + 1) for rank in range(1, ideal + 1))
    return dcg / idcg
