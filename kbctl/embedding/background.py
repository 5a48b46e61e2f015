"""The background questions, and the similarity threshold a version calibrated with them gets.

A model's threshold alone (`calibrated_threshold`) is one line for every knowledge base, and how high an unrelated
question scores depends on the knowledge base as much as on the model: on public data, MiniLM's 0.35 refused only
26-38% of questions from another domain (docs/eval.md). So each version is calibrated when it is published:
the background questions (background-questions.txt: 99 everyday questions written for no knowledge base, on
cooking, travel, code, cars, pets, history, money, health...) are each searched in it, and the BACKGROUND_QUANTILE
(0.9) of their best cosine similarities is stored with the version as its *background similarity*. A question's best
evidence must then reach that plus BACKGROUND_MARGIN (0.05), never less than the model's threshold and never more
than BACKGROUND_CEILING (0.25) above it (`version_threshold`), for anything to be returned; the chunks of an answer
are cut at the model's threshold (kbctl.query.retrieve).

The quantile makes the line robust to a knowledge base about one everyday topic: the questions are spread over about
25 topics, four a topic, so those of its own topic are the top 4%, above the 90th percentile. A knowledge base about
many everyday topics at once answers more than a tenth of them, which are then no background for it: the ceiling
stops its line (an almanac of everyday facts would get 0.86 with the default model, and gets 0.60). A manifest that
sets `spec.retrieval.similarityThreshold` keeps its own.

A version that restricts some sources (`access`) is calibrated per rule: the questions' best similarities among the
chunks behind no rule, and among each rule's, are kept apart (kbctl.store.access), and a caller's line is that of
what it may read (`joint_similarity` of its parts), so text it may not read moves no line it is shown or held to.
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
