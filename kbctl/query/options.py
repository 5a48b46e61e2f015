"""The options of one query, as one frozen object from the CLI (or a Python caller) down to the SQL.

Every field left unset (None) takes its value from the serving version's `spec.retrieval`; the defaults
of that spec live in `kbctl.manifest.models.Retrieval`, and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, TypeGuard, get_args

__all__ = ["MODES", "Mode", "QueryOptions"]

Mode = Literal["hybrid", "vector", "keyword"]
MODES: Final[tuple[Mode, ...]] = get_args(Mode)


def _is_mode(value: str) -> TypeGuard[Mode]:
    return value in MODES


def _check_mode(mode: str | None) -> Mode | None:
    if mode is None or _is_mode(mode):
        return mode
    raise ValueError(f"mode must be hybrid, vector or keyword, got {mode!r}")


@dataclass(frozen=True)
class QueryOptions:
    """How to run one query; None means "as the knowledge base's spec.retrieval says".

    >>> QueryOptions(top_k=3, mode="vector")
    QueryOptions(top_k=3, threshold=None, max_tokens=None, mode='vector', explain=False, rerank=None)

    Raises ValueError when a mode is not hybrid, vector or keyword, or top_k or max_tokens is below 1.
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
        if (self.top_k is not None and self.top_k < 1) or (self.max_tokens is not None and self.max_tokens < 1):
            raise ValueError("top_k and max_tokens must be at least 1")

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
