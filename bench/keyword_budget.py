"""The keyword search's postings budget and page cost, side by side on a kept store: latency, and --quality.

    python bench/keyword_budget.py HOME NAME [--budgets 5000,2000] [--page-costs 4,1.1] [--rounds 2]
                                   [--limit-queries N] [--questions F] [--quality]

HOME is a store imported with `KBCTL_HOME=HOME kbctl import beir DIR --name NAME --eval-out HOME/eval.jsonl`. For
each pair of MATCH_POSTINGS (how many postings a question's words may select: kbctl.store.bm25) and the planner's
random page cost while the selected chunks are read through the index (INDEXED_PAGE_COST; PostgreSQL's default is
4), alternating for `--rounds` rounds, every question is asked in hybrid mode (topK 10, nothing cut): p50 / p99 of
`store.query(...)` with the real model's question embedding, and p50 of its keyword stage alone. `--quality` adds,
per budget, document nDCG@10 of keyword and hybrid mode over the eval set's judgements (the page cost changes the
plan, never the result). `--questions F` times the questions of another eval set.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from retrieval import percentile  # bench/retrieval.py

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings
from kbctl.eval.evalset import load_evalset
from kbctl.eval.run import evaluate_store
from kbctl.manifest import CONTEXT_TOKENS_MAX
from kbctl.query.options import QueryOptions
from kbctl.store import bm25
from kbctl.store.embedded import stop_server

HYBRID = QueryOptions(mode="hybrid", threshold=-1.0, top_k=10, max_tokens=CONTEXT_TOKENS_MAX)
UNCUT = QueryOptions(threshold=-1.0, max_tokens=CONTEXT_TOKENS_MAX)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("home", type=Path)
    parser.add_argument("name")
    parser.add_argument("--budgets", default="5000,2000", help="MATCH_POSTINGS values, comma-separated")
    parser.add_argument("--page-costs", default="4,1.1", help="random page costs, comma-separated")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--limit-queries", type=int, default=None, metavar="N")
    parser.add_argument("--questions", type=Path, default=None, help="an eval set whose questions to time instead")
    parser.add_argument("--quality", action="store_true", help="also measure nDCG@10 per budget")
    args = parser.parse_args()
    settings = Settings.from_env(home=args.home)
    evalset = load_evalset(str(args.home / "eval.jsonl"))
    timed = load_evalset(str(args.questions)) if args.questions is not None else evalset
    questions = [q.question for q in timed.queries[: args.limit_queries]]
    arms = [(int(b), c) for b in args.budgets.split(",") for c in args.page_costs.split(",")]
    totals: dict[tuple[int, str], list[float]] = {arm: [] for arm in arms}
    keyword: dict[tuple[int, str], list[float]] = {arm: [] for arm in arms}
    words = sum(len(q.split()) for q in questions) / max(1, len(questions))
    try:
        with KnowledgeBaseStore(settings=settings) as store:
            for question in questions[:20]:  # warm the caches the arms share
                store.query(args.name, question, HYBRID)
            for _ in range(args.rounds):
                for budget, cost in arms:
                    bm25.MATCH_POSTINGS, bm25.INDEXED_PAGE_COST = budget, cost  # type: ignore[misc]
                    for question in questions:
                        start = time.perf_counter()
                        result = store.query(args.name, question, HYBRID)
                        totals[budget, cost].append(time.perf_counter() - start)
                        stages = [(s.end_ns - s.start_ns) / 1e6 for s in result.timings if s.stage == "keyword"]
                        keyword[budget, cost] += stages
            print(f"{args.name}: {len(questions)} questions of {words:.1f} words, hybrid, {args.rounds} rounds")
            print("| postings budget | page cost | hybrid p50 ms | hybrid p99 ms | keyword stage p50 ms |")
            print("|---:|---:|---:|---:|---:|")
            for budget, cost in arms:
                p50, p99 = percentile(totals[budget, cost], 50) * 1000, percentile(totals[budget, cost], 99) * 1000
                print(f"| {budget} | {cost} | {p50:.1f} | {p99:.1f} | {percentile(keyword[budget, cost], 50):.1f} |")
            if args.quality:
                print("| postings budget | keyword doc nDCG@10 | hybrid doc nDCG@10 |")
                print("|---:|---:|---:|")
                for budget in dict.fromkeys(b for b, _ in arms):
                    bm25.MATCH_POSTINGS = budget  # type: ignore[misc]
                    report = evaluate_store(store, args.name, evalset, k=10, modes=["keyword", "hybrid"], options=UNCUT)
                    ndcg = {m.mode: m.document_ndcg or 0.0 for m in report.modes}
                    print(f"| {budget} | {ndcg['keyword']:.4f} | {ndcg['hybrid']:.4f} |")
    finally:
        if not settings.database_url:
            stop_server(settings.pgdata)


if __name__ == "__main__":
    main()
