"""Rules that decide "nothing relevant", side by side: the absolute similarity threshold against rules relative to
the other candidates, on examples/eval's no-answer questions and on the answerable questions of kept BEIR stores.

    python bench/no_answer_rules.py [--beir HOME ...] [--limit-queries 300] [--pool 50]

examples/kb is applied into a fresh embedded store with the default model. Each question of examples/eval, and the
first `--limit-queries` questions of each `--beir HOME` (a store kept by `bench/retrieval.py DIR --keep HOME`), is
asked in vector mode for its `--pool` nearest chunks, uncut. Each rule scores a question from those similarities;
it is set at the lowest value that keeps every no-answer question of examples/eval empty, and the script prints how
many answerable questions it would then leave empty, per set. The absolute rule is the best chunk's similarity (the
manifest's threshold); the relative ones are its z-score against the rest of the pool, its gap to the second, and its
margin over the mean of the next 9 or of the rest.

A second table weighs agreement between the two hybrid lists: each question is also asked in hybrid mode, uncut
(its fused list of `--pool`, with each chunk's rank in the vector and in the keyword list) and at the model's
threshold with the agreement rule switched off. A rule "within the first N of both lists" answers a question the
threshold left empty when a chunk ranks within the first N of both lists and scores at least the threshold minus
AGREEMENT_MARGIN (or at any similarity); kbctl's rule is N = 1 with the margin (kbctl.query.stages). The table
says how many no-answer questions of examples/eval each rule answers, and how many answerable questions per set
it leaves empty.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from retrieval import NAME  # bench/retrieval.py

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings
from kbctl.embedding.local import calibrated_threshold
from kbctl.eval.evalset import load_evalset
from kbctl.manifest import CONTEXT_TOKENS_MAX, load_manifests
from kbctl.query import stages
from kbctl.query.options import QueryOptions
from kbctl.store.embedded import stop_server

ROOT = Path(__file__).resolve().parent.parent
BIG = CONTEXT_TOKENS_MAX  # a token budget that cuts nothing


@dataclass(frozen=True)
class Asked:
    """One question's pool of similarities (vector mode), best first; its hybrid list, uncut, as (vector rank,
    keyword rank, similarity) of each chunk; whether the threshold without agreement leaves it an answer; whether
    it has an answer; and the threshold it was asked at."""

    where: str
    no_answer: bool
    scores: list[float]
    fused: list[tuple[int | None, int | None, float]]
    answered: bool
    threshold: float


def ask(
    store: KnowledgeBaseStore, where: str, kb: str, question: str, no_answer: bool, pool: int, threshold: float
) -> Asked:
    """One question asked in vector mode and in hybrid mode, uncut, and in hybrid mode at `threshold` (the model's)
    without the agreement rule."""
    vector = store.query(kb, question, options=QueryOptions(mode="vector", top_k=pool, threshold=-1.0, max_tokens=BIG))
    fused = store.query(kb, question, options=QueryOptions(mode="hybrid", top_k=pool, threshold=-1.0, max_tokens=BIG))
    margin, stages.AGREEMENT_MARGIN = stages.AGREEMENT_MARGIN, 0.0
    try:
        plain = store.query(kb, question, options=QueryOptions(mode="hybrid", threshold=threshold, max_tokens=BIG))
    finally:
        stages.AGREEMENT_MARGIN = margin
    ranked = [(h.vector_rank, h.keyword_rank, h.similarity) for h in fused.hits]
    return Asked(where, no_answer, [h.similarity for h in vector.hits], ranked, bool(plain.hits), threshold)


def z_score(s: list[float]) -> float:
    return (s[0] - statistics.mean(s[1:])) / max(statistics.pstdev(s[1:]), 1e-6)


RULES: dict[str, Callable[[list[float]], float]] = {
    "best similarity (absolute)": lambda s: s[0],
    "z-score against the rest": z_score,
    "gap to the second": lambda s: s[0] - s[1],
    "margin over the next 9": lambda s: s[0] - statistics.mean(s[1:10]),
    "margin over the rest": lambda s: s[0] - statistics.mean(s[1:]),
}


def examples(pool: int) -> list[Asked]:
    """examples/eval's questions against examples/kb, default model."""
    home = Path(tempfile.mkdtemp(prefix="kbctl-no-answer-"))
    settings = Settings(home=home)
    asked = []
    try:
        with KnowledgeBaseStore(settings=settings) as store:
            store.apply([m.kb for m in load_manifests([str(ROOT / "examples" / "kb")])])
            for path in sorted((ROOT / "examples" / "eval").glob("*.yaml")):
                evalset = load_evalset(str(path))
                kb = evalset.knowledge_base or path.stem
                threshold = calibrated_threshold(store.describe(kb).model)
                asked += [
                    ask(store, "examples/eval", kb, q.question, bool(q.no_answer), pool, threshold)
                    for q in evalset.queries
                ]
    finally:
        stop_server(settings.pgdata)
        shutil.rmtree(home, ignore_errors=True)
    return asked


def beir(home: Path, limit: int, pool: int) -> list[Asked]:
    """The first `limit` questions of a kept BEIR store (all answerable)."""
    settings = Settings.from_env(home=home)
    queries = load_evalset(str(home / "eval.jsonl")).queries[:limit]
    try:
        with KnowledgeBaseStore(settings=settings) as store:
            threshold = calibrated_threshold(store.describe(NAME).model)
            return [ask(store, home.name, NAME, q.question, False, pool, threshold) for q in queries]
    finally:
        if not settings.database_url:
            stop_server(settings.pgdata)


def agreeing(a: Asked, depth: int, floor: bool) -> bool:
    """Whether a chunk ranks within the first `depth` of both lists (at least the threshold minus AGREEMENT_MARGIN
    when `floor`)."""
    low = a.threshold - stages.AGREEMENT_MARGIN if floor else -1.0
    return any(v is not None and k is not None and max(v, k) <= depth and s >= low for v, k, s in a.fused)


def print_agreement(asked: list[Asked], sets: list[str]) -> None:
    refused = [a for a in asked if a.no_answer]
    print(f"\nAgreement of the hybrid lists: no-answer questions answered (of {len(refused)}), answerable left empty")
    print(f"| rule | no-answer answered | {' | '.join(sets)} |")
    print("|---|---:|" + "---:|" * len(sets))
    rules = [("the threshold alone", 0, True)]
    rules += [
        (f"within the first {n} of both{'' if floor else ', any similarity'}", n, floor)
        for floor in (True, False)
        for n in (1, 2, 3, 5, 10)
    ]
    for label, depth, floor in rules:
        answered = [a.answered or (depth > 0 and agreeing(a, depth, floor)) for a in asked]
        cells = []
        for where in sets:
            answerable = [ok for a, ok in zip(asked, answered, strict=True) if a.where == where and not a.no_answer]
            cells.append(f"{sum(not ok for ok in answerable)} of {len(answerable)}")
        through = sum(ok for a, ok in zip(asked, answered, strict=True) if a.no_answer)
        print(f"| {label} | {through} | {' | '.join(cells)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--beir", type=Path, action="append", default=[], metavar="HOME")
    parser.add_argument("--limit-queries", type=int, default=300, metavar="N")
    parser.add_argument("--pool", type=int, default=50, help="nearest chunks per question")
    args = parser.parse_args()
    asked = examples(args.pool)
    for home in args.beir:
        asked += beir(home, args.limit_queries, args.pool)
    refused = [a for a in asked if a.no_answer]
    sets = list(dict.fromkeys(a.where for a in asked))
    print(f"{len(refused)} no-answer questions in examples/eval; answerable questions left empty when all are refused:")
    print(f"| rule | set at | {' | '.join(sets)} |")
    print("|---|---:|" + "---:|" * len(sets))
    for rule, score in RULES.items():
        line = max(score(a.scores) for a in refused) + 1e-9  # the lowest value refusing every one of them
        cells = []
        for where in sets:
            answerable = [a for a in asked if a.where == where and not a.no_answer]
            cells.append(f"{sum(score(a.scores) < line for a in answerable)} of {len(answerable)}")
        print(f"| {rule} | {line:.3f} | {' | '.join(cells)} |")
    print_agreement(asked, sets)


if __name__ == "__main__":
    main()
