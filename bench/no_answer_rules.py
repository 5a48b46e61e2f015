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
from kbctl.eval.evalset import load_evalset
from kbctl.manifest import load_manifests
from kbctl.query.options import QueryOptions
from kbctl.store.embedded import stop_server

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Asked:
    """One question's pool of similarities, best first, and whether it has an answer."""

    where: str
    no_answer: bool
    scores: list[float]


def pool_scores(store: KnowledgeBaseStore, kb: str, question: str, pool: int) -> list[float]:
    options = QueryOptions(mode="vector", top_k=pool, threshold=-1.0, max_tokens=10**9)
    return [h.score for h in store.query(kb, question, options=options).hits]


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
                for q in evalset.queries:
                    scores = pool_scores(store, evalset.knowledge_base or path.stem, q.question, pool)
                    asked.append(Asked("examples/eval", bool(q.no_answer), scores))
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
            return [Asked(home.name, False, pool_scores(store, NAME, q.question, pool)) for q in queries]
    finally:
        if not settings.database_url:
            stop_server(settings.pgdata)


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


if __name__ == "__main__":
    main()
