"""The vector index's recall and a vector query's latency at several `ef_search` values, side by side, on a kept store.

    python bench/ef_search.py HOME NAME [--ef 40,64,100] [--rounds 2] [--limit-queries N] [--hybrid] [--questions F]

HOME is a store kept by `bench/retrieval.py DIR --keep HOME` or imported with `KBCTL_HOME=HOME kbctl import beir`
(its eval set in HOME/eval.jsonl), NAME its knowledge base (`beir-bench` for bench/retrieval.py). Each question of
the eval set is asked in vector mode (topK 10, nothing cut) once with every chunk compared (the exact top 10), then
through the HNSW index at each `ef_search` value, alternating for `--rounds` rounds: the share of the exact top 10
found, and p50 / p99 of `store.query(...)`, the question's embedding by the real model included. The version must
hold more than 5,000 chunks (smaller ones are always searched exactly). `--hybrid` adds to each round, at the
default `ef_search`, the same questions in hybrid mode (the defaults' topK, nothing cut) and the question's embedding
alone (`embed(..., purpose="query")`), so what a query spends besides its embedding shows. `--questions F` asks the
questions of another eval set instead (e.g. another dataset's short questions, where HOME's own are long): recall is
measured against the exact top 10, so no judgement is needed.
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
from kbctl.manifest import CONTEXT_TOKENS_MAX
from kbctl.query import plan as query_plan
from kbctl.query.options import QueryOptions
from kbctl.store.embedded import stop_server

OPTIONS = QueryOptions(mode="vector", threshold=-1.0, top_k=10, max_tokens=CONTEXT_TOKENS_MAX)
HYBRID = QueryOptions(mode="hybrid", threshold=-1.0, top_k=10, max_tokens=CONTEXT_TOKENS_MAX)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("home", type=Path)
    parser.add_argument("name")
    parser.add_argument("--ef", default="40,64,100", help="ef_search values, comma-separated")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--limit-queries", type=int, default=None, metavar="N")
    parser.add_argument("--hybrid", action="store_true", help="also time hybrid mode and the embedding alone")
    parser.add_argument("--questions", type=Path, default=None, help="an eval set whose questions to ask instead")
    args = parser.parse_args()
    settings = Settings.from_env(home=args.home)
    evalset = args.questions if args.questions is not None else args.home / "eval.jsonl"
    questions = [q.question for q in load_evalset(str(evalset)).queries[: args.limit_queries]]
    try:
        with KnowledgeBaseStore(settings=settings) as store:
            detail = store.describe(args.name)
            chunks = sum(s.chunks for s in detail.source_status)
            embedder = store.embedder(detail.model)
            with store.db.exact_searches():
                exact = [{(h.source, h.position) for h in store.query(args.name, q, OPTIONS).hits} for q in questions]
            words = sum(len(q.split()) for q in questions) / max(1, len(questions))
            print(f"{args.name}: {chunks} chunks, {len(questions)} questions of {words:.1f} words, top 10")
            print("| round | what | ef_search | recall@10 against exact | p50 ms | p99 ms |")
            print("|---:|---|---:|---:|---:|---:|")
            default_ef = query_plan.EF_SEARCH  # type: ignore[attr-defined]
            for round_ in range(1, args.rounds + 1):
                if args.hybrid:
                    query_plan.EF_SEARCH = default_ef  # type: ignore[attr-defined]
                    for what, ask in (
                        ("embedding alone", lambda q: embedder.embed([q], purpose="query")),
                        ("hybrid query", lambda q: store.query(args.name, q, HYBRID)),
                    ):
                        times = []
                        for question in questions:
                            start = time.perf_counter()
                            ask(question)
                            times.append(time.perf_counter() - start)
                        p50, p99 = percentile(times, 50) * 1000, percentile(times, 99) * 1000
                        print(f"| {round_} | {what} | {default_ef} | | {p50:.1f} | {p99:.1f} |")
                for ef in (int(v) for v in args.ef.split(",")):
                    query_plan.EF_SEARCH = ef  # type: ignore[attr-defined]  # what a spec without efSearch gets
                    found, times = 0, []
                    for question, best in zip(questions, exact, strict=True):
                        start = time.perf_counter()
                        hits = store.query(args.name, question, OPTIONS).hits
                        times.append(time.perf_counter() - start)
                        found += len({(h.source, h.position) for h in hits} & best)
                    recall = found / max(1, sum(len(b) for b in exact))
                    p50, p99 = percentile(times, 50) * 1000, percentile(times, 99) * 1000
                    print(f"| {round_} | vector query | {ef} | {recall:.4f} | {p50:.1f} | {p99:.1f} |")
    finally:
        if not settings.database_url:
            stop_server(settings.pgdata)


if __name__ == "__main__":
    main()
