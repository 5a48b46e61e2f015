"""The background questions, and the similarity threshold a version calibrated with them gets.

At publish each version searches the background questions (background-questions.txt: 99 everyday questions
written for no knowledge base) and stores the BACKGROUND_QUANTILE of their best cosine similarities as its
*background similarity*. A question's best evidence must then reach that plus BACKGROUND_MARGIN, never less than
the model's threshold (`calibrated_threshold`) nor more than BACKGROUND_CEILING above it (`version_threshold`),
for anything to be returned. A second signal is lexical: a question whose rare words one chunk holds is on topic
however its similarity reads.
Its *keyword share* is its best BM25 score over the sum of its words' idf (`keyword_share`); a version stores the
KEYWORD_QUANTILE of its background questions' shares as its *background keyword share*, and a question passes the
gate by either signal: its similarity at the similarity line, or its share at the keyword line (`keyword_threshold`).
An answer's chunks are then ranked, not cut by similarity (kbctl.query.stages).
A manifest's `spec.retrieval.similarityThreshold` keeps its own. A restricted version is calibrated per rule
(kbctl.store.access), a caller's line being that of what it may read (`joint_similarity`).

Why a quantile and a ceiling, and the figures: docs/eval.md (refusal on public data), docs/access.md.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from functools import cache
from importlib.resources import files

from kbctl.defaults import (
    BACKGROUND_CEILING,
    BACKGROUND_MARGIN,
    BACKGROUND_QUANTILE,
    KEYWORD_FLOOR,
    KEYWORD_MARGIN,
    KEYWORD_QUANTILE,
)
from kbctl.embedding.local import calibrated_threshold

__all__ = [
    "background_keyword",
    "background_questions",
    "background_similarity",
    "joint_similarity",
    "keyword_share",
    "keyword_threshold",
    "question_key",
    "version_threshold",
]


@cache
def background_questions() -> tuple[str, ...]:
    """The background questions, packaged with kbctl (background-questions.txt, one a line)."""
    text = files("kbctl.embedding").joinpath("background-questions.txt").read_text(encoding="utf-8")
    return tuple(line.strip() for line in text.splitlines() if line.strip())


def question_key(question: str) -> bytes:
    """The key a background question's vector is stored under, with its model (sha256 of its text)."""
    return hashlib.sha256(question.encode()).digest()


def _quantile(values: Sequence[float], quantile: float) -> float | None:
    """The nearest observed value at or above the quantile (None without any)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[math.ceil(quantile * (len(ordered) - 1))]


def background_similarity(bests: Sequence[float]) -> float | None:
    """A version's background similarity: the BACKGROUND_QUANTILE of its background questions' best similarities
    (the nearest observed value at or above it; None without any)."""
    return _quantile(bests, BACKGROUND_QUANTILE)


def keyword_share(best_score: float | None, idf_total: float) -> float:
    """A question's keyword share: the best BM25 score of its keyword search over the sum of its words' idf, about
    the idf-weighted share of the question one chunk holds (1: every word once in a chunk of the mean length; 0: no
    chunk holds any, or the question has no word full text reads)."""
    return round(best_score / idf_total, 4) if best_score and idf_total > 0 else 0.0


def background_keyword(shares: Sequence[float]) -> float | None:
    """A version's background keyword share: the KEYWORD_QUANTILE of its background questions' keyword shares
    (None without any)."""
    return _quantile(shares, KEYWORD_QUANTILE)


def keyword_threshold(background: float | None) -> float | None:
    """The keyword line of a version: its background keyword share plus KEYWORD_MARGIN, never below KEYWORD_FLOOR;
    None for a version published without one (the similarity line alone decides)."""
    return None if background is None else max(KEYWORD_FLOOR, round(background + KEYWORD_MARGIN, 4))


def joint_similarity(parts: Sequence[Sequence[float]]) -> float | None:
    """The background similarity of chunks held in parts, from each part's best similarity per background question
    (in one order of the questions; empty: a part without chunks): per question the best of the parts, then their
    quantile. None when no part has any."""
    held = [part for part in parts if len(part)]
    if not held:
        return None
    return background_similarity([max(bests) for bests in zip(*held, strict=True)])


def version_threshold(model_id: str, background: float | None) -> float:
    """The similarity threshold of a version whose spec sets none: its background similarity plus
    BACKGROUND_MARGIN, never below the model's own threshold (which alone applies to a version published before
    calibration, `background` None) and never more than BACKGROUND_CEILING above it."""
    floor = calibrated_threshold(model_id)
    if background is None:
        return floor
    return min(round(floor + BACKGROUND_CEILING, 4), max(floor, round(background + BACKGROUND_MARGIN, 4)))
