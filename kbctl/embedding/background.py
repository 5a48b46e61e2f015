"""The background questions, and the similarity threshold a version calibrated with them gets.

At publish each version searches the background questions (background-questions.txt: 99 everyday questions
written for no knowledge base) and stores the BACKGROUND_QUANTILE of their best cosine similarities as its
*background similarity*. A question's best evidence must then reach that plus BACKGROUND_MARGIN, never less than
the model's threshold (`calibrated_threshold`) nor more than BACKGROUND_CEILING above it (`version_threshold`),
for anything to be returned; the chunks of an answer are cut at the model's threshold (kbctl.query.retrieve).
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

from kbctl.defaults import BACKGROUND_CEILING, BACKGROUND_MARGIN, BACKGROUND_QUANTILE
from kbctl.embedding.local import calibrated_threshold

__all__ = ["background_questions", "background_similarity", "joint_similarity", "question_key", "version_threshold"]


@cache
def background_questions() -> tuple[str, ...]:
    """The background questions, packaged with kbctl (background-questions.txt, one a line)."""
    text = files("kbctl.embedding").joinpath("background-questions.txt").read_text(encoding="utf-8")
    return tuple(line.strip() for line in text.splitlines() if line.strip())


def question_key(question: str) -> bytes:
    """The key a background question's vector is stored under, with its model (sha256 of its text)."""
    return hashlib.sha256(question.encode()).digest()


def background_similarity(bests: Sequence[float]) -> float | None:
    """A version's background similarity: the BACKGROUND_QUANTILE of its background questions' best similarities
    (the nearest observed value at or above it; None without any)."""
    if not bests:
        return None
    ordered = sorted(bests)
    return ordered[math.ceil(BACKGROUND_QUANTILE * (len(ordered) - 1))]


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
