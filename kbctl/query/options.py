"""The options of one query, as one frozen object from the CLI (or a Python caller) down to the SQL.

Every field left unset (None) takes its value from the serving version's `spec.retrieval`; the defaults
of that spec live in `kbctl.manifest.models.Retrieval`, and nowhere else.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, Literal, TypeGuard, get_args

from kbctl.manifest import CONTEXT_TOKENS_MAX, TOP_K_MAX

__all__ = ["MODES", "Mode", "QueryOptions"]

Mode = Literal["hybrid", "vector", "keyword"]
MODES: Final[tuple[Mode, ...]] = get_args(Mode)


def _is_mode(value: str) -> TypeGuard[Mode]:
    return value in MODES


def _check_mode(mode: str | None) -> Mode | None:
    if mode is None or _is_mode(mode):
        return mode
    raise ValueError(f"mode must be hybrid, vector or keyword, got {mode!r}")


def _check_int(name: str, value: int | None, most: int) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most):
        raise ValueError(f"{name} must be a whole number from 1 to {most:,}, got {value!r}")


@dataclass(frozen=True)
class QueryOptions:
    """How to run one query; None means "as the knowledge base's spec.retrieval says".

    >>> QueryOptions(top_k=3, mode="vector")
    QueryOptions(top_k=3, threshold=None, max_tokens=None, mode='vector', explain=False, rerank=None)

    Raises ValueError when a mode is not hybrid, vector or keyword, or a number is outside the bounds of its
    spec.retrieval field: top_k 1 - 200, max_tokens 1 - 1,000,000, threshold -1 - 1.
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
            raise ValueError(f"threshold must be a number from -1 to 1, got {self.threshold!r}")

    @classmethod
    def build(
        cls,
        base: QueryOptions | None = None,
        *,
        top_k: int | None = None,
        threshold: float | None = None,
        max_tokens: int | None = None,
        mode: str | None = None,
        explain: bool | None = None,
        rerank: bool | None = None,
    ) -> QueryOptions:
        """`base` (default: nothing set) with each argument that is not None in place of its field.

        `mode` may be any string (a command-line value): it is checked here.
        """
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
