"""The background questions, and the two lines of the relevance gate a version calibrated with them gets.

At publish each version searches the background questions (background-questions.txt: 99 everyday questions written
for no knowledge base) and stores the BACKGROUND_QUANTILE of their best cosine similarities (its *background
similarity*) and the KEYWORD_QUANTILE of their keyword shares (best BM25 score over the sum of the words' idf,
`keyword_share`). A question passes the gate when its best evidence reaches the similarity line (that plus
BACKGROUND_MARGIN, within the model's threshold and BACKGROUND_CEILING above it: `version_threshold`) or its keyword
share the keyword line (`keyword_threshold`); its answer's chunks are those at `answer_floor`. A manifest's
`spec.retrieval.similarityThreshold` keeps its own. A restricted version is calibrated per rule (kbctl.store.access),
a caller's line being that of what it may read (`joint_similarity`), and has no keyword line.

Why quantiles, margins and a ceiling, and the figures: docs/eval.md (refusal on public data), docs/access.md.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from functools import cache
from importlib.resources import files

from kbctl.defaults import (
    ANSWER_FLOOR_MARGIN,
    BACKGROUND_CEILING,
    BACKGROUND_MARGIN,
    BACKGROUND_QUANTILE,
    KEYWORD_FLOOR,
    KEYWORD_MARGIN,
    KEYWORD_QUANTILE,
)
from kbctl.embedding.local import calibrated_threshold

__all__ = [
    "answer_floor",
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


def answer_floor(model_id: str) -> float:
    """What the chunks of an answer must score when no threshold is set: the model's threshold minus
    ANSWER_FLOOR_MARGIN (the gate, not this, decides whether anything is relevant)."""
    return round(calibrated_threshold(model_id) - ANSWER_FLOOR_MARGIN, 4)


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
