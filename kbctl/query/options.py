"""The options of one query, as one frozen object from the CLI (or a Python caller) down to the SQL.

Every field left unset (None) takes its value from the serving version's `spec.retrieval`, read through the
manifest model `kbctl.manifest.models.Retrieval` (kbctl.query.retrieve.plan_query). The defaults of that spec, of
the fields it leaves unset (candidates, fusion, efSearch, the model's calibrated threshold...) and every tuning
constant of a query are written in one place, `kbctl.defaults`, which the model reads too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, Literal, TypedDict, TypeGuard, Unpack, get_args

from kbctl.errors import UsageError
from kbctl.manifest import CONTEXT_TOKENS_MAX, TOP_K_MAX

__all__ = ["MODES", "Mode", "QueryOptions", "QueryOverrides"]

Mode = Literal["hybrid", "vector", "keyword"]
MODES: Final[tuple[Mode, ...]] = get_args(Mode)


def _is_mode(value: str) -> TypeGuard[Mode]:
    return value in MODES


def _check_mode(mode: str | None) -> Mode | None:
    if mode is None or _is_mode(mode):
        return mode
    raise UsageError(f"mode must be hybrid, vector or keyword, got {mode!r}")


def _check_int(name: str, value: int | None, most: int) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most):
        raise UsageError(f"{name} must be a whole number from 1 to {most:,}, got {value!r}")


class QueryOverrides(TypedDict, total=False):
    """The keyword overrides of one query (`KnowledgeBaseStore.query(..., top_k=3)`), declared once: None (or
    absent) keeps the field of the options given, else of the knowledge base's spec.retrieval."""

    top_k: int | None
    threshold: float | None
    max_tokens: int | None
    mode: str | None
    explain: bool | None
    rerank: bool | None


@dataclass(frozen=True)
class QueryOptions:
    """How to run one query; None means "as the knowledge base's spec.retrieval says".

    >>> QueryOptions(top_k=3, mode="vector")
    QueryOptions(top_k=3, threshold=None, max_tokens=None, mode='vector', explain=False, rerank=None)

    Raises UsageError (a ValueError) when a mode is not hybrid, vector or keyword, or a number is outside the
    bounds of its spec.retrieval field: top_k 1 - 200, max_tokens 1 - 1,000,000, threshold -1 - 1.
    """

    top_k: int | None = None
    """How many chunks to return at most (spec.retrieval.topK)."""
    threshold: float | None = None
    """Minimum cosine similarity (spec.retrieval.similarityThreshold)."""
    max_tokens: int | None = None
    """Token budget of the returned chunks (spec.retrieval.maxContextTokens)."""
    mode: Mode | None = None
    """hybrid, vector or keyword (spec.retrieval.mode)."""
    explain: bool = False
    """Record every stage of the query in `QueryResult.trace`."""
    rerank: bool | None = None
    """False skips the spec's reranker, True requires one, None uses it when the spec names one."""

    def __post_init__(self) -> None:
        _check_mode(self.mode)
        _check_int("top_k", self.top_k, TOP_K_MAX)
        _check_int("max_tokens", self.max_tokens, CONTEXT_TOKENS_MAX)
        if self.threshold is not None and (
            isinstance(self.threshold, bool)
            or not isinstance(self.threshold, int | float)
            or not math.isfinite(self.threshold)
            or not -1.0 <= self.threshold <= 1.0
        ):
            raise UsageError(f"threshold must be a number from -1 to 1, got {self.threshold!r}")

    @classmethod
    def build(cls, base: QueryOptions | None = None, **overrides: Unpack[QueryOverrides]) -> QueryOptions:
        """`base` (default: nothing set) with each override that is not None in place of its field.

        `mode` may be any string (a command-line value): it is checked here.
        """
        unknown = sorted(set(overrides) - set(QueryOverrides.__annotations__))
        if unknown:
            raise TypeError(f"unexpected keyword argument {unknown[0]!r}")
        top_k, threshold, max_tokens = overrides.get("top_k"), overrides.get("threshold"), overrides.get("max_tokens")
        mode, explain, rerank = overrides.get("mode"), overrides.get("explain"), overrides.get("rerank")
        start = base if base is not None else cls()
        checked = _check_mode(mode)
        if all(v is None for v in (top_k, threshold, max_tokens, checked, explain, rerank)):
            return start
        return cls(
            top_k=start.top_k if top_k is None else top_k,
            threshold=start.threshold if threshold is None else threshold,
            max_tokens=start.max_tokens if max_tokens is None else max_tokens,
            mode=start.mode if checked is None else checked,
            explain=start.explain if explain is None else explain,
            rerank=start.rerank if rerank is None else rerank,
        )
