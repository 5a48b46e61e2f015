"""What the two-signal relevance gate costs a query, side by side with the one it replaced, on a kept store.

    python bench/gate_cost.py HOME [--name NAME] [--rounds 3] [--limit-queries N] [--examples]

HOME is a store kept by `python bench/retrieval.py DIR --keep HOME` (its eval.jsonl the questions), or with
`--examples` a fresh store of examples/kb asked examples/eval's questions. Each question is asked at the defaults in
two arms, alternating question by question for `--rounds` rounds, in-process with the real model:
- gate: what kbctl ships, the version's similarity line or its keyword line decides, an answer's chunks not cut;
- before: the plan of the same query with the keyword line removed and the chunks cut at the model's threshold (the
  rule of the previous release).
Printed: p50 / p99 of the whole query (plan and run, in one read-only snapshot as `store.query` runs it) per arm,
their difference, and how many questions each answered and with how many chunks.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

from retrieval import NAME, examples_store, percentile  # bench/retrieval.py

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings
from kbctl.embedding.local import calibrated_threshold
from kbctl.eval.evalset import load_evalset
from kbctl.query.options import QueryOptions
from kbctl.query.plan import QueryPlan, plan_query
from kbctl.query.retrieve import run_query
from kbctl.store.embedded import stop_server

ROOT = Path(__file__).resolve().parent.parent


def before(plan: QueryPlan) -> QueryPlan:
    """The plan as the previous release made it: the similarity line alone, the chunks cut at the model's."""
    return replace(plan, keyword_gate=None, threshold=max(plan.threshold, calibrated_threshold(plan.model)))


def timed(store: KnowledgeBaseStore, name: str, question: str, old: bool) -> tuple[float, int]:
    start = time.perf_counter()
    with store.db.read_only():
        plan = plan_query(store.db, name, QueryOptions())
        result = run_query(store.db, before(plan) if old else plan, question, store.embedder)
    return time.perf_counter() - start, len(result.hits)


def measure(store: KnowledgeBaseStore, asked: list[tuple[str, str]], rounds: int) -> None:
    arms = {"gate": False, "before": True}
    seconds: dict[str, list[float]] = {arm: [] for arm in arms}
    hits: dict[str, list[int]] = {arm: [] for arm in arms}
    for name, question in asked[:20]:  # warm the caches both arms share
        timed(store, name, question, False)
    for _ in range(rounds):
        for name, question in asked:
            for arm, old in arms.items():
                took, found = timed(store, name, question, old)
                seconds[arm].append(took)
                hits[arm].append(found)
    print(f"{len(asked)} questions, {rounds} rounds, alternating")
    print("| arm | p50 ms | p99 ms | answered | chunks per answer |")
    print("|---|---:|---:|---:|---:|")
    for arm in arms:
        answered = [n for n in hits[arm] if n]
        print(
            f"| {arm} | {percentile(seconds[arm], 50) * 1000:.2f} | {percentile(seconds[arm], 99) * 1000:.2f} |"
            f" {len(answered) / len(hits[arm]):.2f} | {sum(answered) / max(1, len(answered)):.1f} |"
        )
    delta = (percentile(seconds["gate"], 50) - percentile(seconds["before"], 50)) * 1000
    print(f"p50 difference, gate - before: {delta:+.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("home", type=Path, nargs="?")
    parser.add_argument("--name", default=NAME)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--limit-queries", type=int, default=None, metavar="N")
    parser.add_argument("--examples", action="store_true", help="examples/kb and examples/eval in a fresh store")
    args = parser.parse_args()
    if args.examples:
        with examples_store() as store:
            asked = []
            for path in sorted((ROOT / "examples" / "eval").glob("*.yaml")):
                evalset = load_evalset(str(path))
                asked += [(evalset.knowledge_base or path.stem, q.question) for q in evalset.queries]
            measure(store, asked[: args.limit_queries], args.rounds)
        return
    if args.home is None:
        parser.error("HOME, or --examples")
    settings = Settings.from_env(home=args.home)
    questions = [q.question for q in load_evalset(str(args.home / "eval.jsonl")).queries[: args.limit_queries]]
    try:
        with KnowledgeBaseStore(settings=settings) as store:
            measure(store, [(args.name, q) for q in questions], args.rounds)
    finally:
        if not settings.database_url:
            stop_server(settings.pgdata)


if __name__ == "__main__":
    main()
