"""Retrieval benchmark on a BEIR dataset: ranking quality and query latency per retrieval mode, in one run.

    python bench/retrieval.py [BEIR_DIR] [--split test] [--limit-docs N] [--limit-queries N] [--rerank MODEL]

Imports the dataset (default examples/beir/policies) into a fresh embedded store (or KBCTL_DATABASE_URL)
with the real local model, like `kbctl import beir`, then for each mode (vector, keyword, hybrid, and
hybrid+rerank with --rerank) measures recall@10, MRR@10, nDCG@10 and hit@10 over the eval set, with the
similarity threshold and token budget out of the way so only the ranking counts. Latency is a separate
loop: one warm-up query per mode, then every query timed around `store.query(...)`.

--rerank MODEL sets `spec.retrieval.rerank.model` (a rerank provider of the kbctl configuration, or
local/NAME); the plain modes are then still measured without the reranker.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scale import vector_recall  # bench/scale.py: the index against an exact scan

from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings
from kbctl.errors import KbctlError
from kbctl.eval.beir import RANKING_RETRIEVAL, BeirImport, import_beir
from kbctl.eval.evalset import EvalSet, load_evalset
from kbctl.eval.run import EvalReport, evaluate_store, split_mode
from kbctl.manifest import Retrieval
from kbctl.query.options import QueryOptions
from kbctl.store.embedded import stop_server

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATASET = ROOT / "examples" / "beir" / "policies"
NAME = "beir-bench"
K = 10
THRESHOLD = -1.0
MAX_TOKENS = 1_000_000
MODES = ["vector", "keyword", "hybrid"]
MODEL = "local/all-MiniLM-L6-v2"
RERANK_MODE = "hybrid+rerank"


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank q-th percentile (0 < q <= 100) of values."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def retrieval_settings(rerank: str | None) -> Retrieval:
    """The ranking benchmark's retrieval spec, with a reranker when one is named."""
    if rerank is None:
        return RANKING_RETRIEVAL
    return Retrieval.model_validate({**RANKING_RETRIEVAL.model_dump(by_alias=True), "rerank": {"model": rerank}})


def time_queries(store: KnowledgeBaseStore, evalset: EvalSet, mode: str, *, defaults: bool = False) -> list[float]:
    """Seconds per query over the whole eval set in one mode, after one warm-up query; with `defaults`, at
    the manifest defaults (threshold, token budget, topK) instead of the ranking settings."""
    base, rerank = split_mode(mode)  # a plain mode runs without the reranker, as in evaluate_store
    if defaults:
        spec = Retrieval()
        limits = QueryOptions(top_k=spec.top_k, threshold=spec.similarity_threshold, max_tokens=spec.max_context_tokens)
    else:
        limits = QueryOptions(top_k=K, threshold=THRESHOLD, max_tokens=MAX_TOKENS)
    options = QueryOptions.build(limits, mode=base, rerank=rerank)

    def ask(question: str) -> None:
        store.query(NAME, question, options)

    ask(evalset.queries[0].question)
    timings = []
    for query in evalset.queries:
        start = time.perf_counter()
        ask(query.question)
        timings.append(time.perf_counter() - start)
    return timings


def print_results(
    dataset: Path, result: BeirImport, seconds: float, chunks: int, report: EvalReport, timings: dict[str, list[float]]
) -> None:
    print(
        f"dataset: {dataset.name} ({result.split}): {result.documents} of {result.corpus_documents} documents, "
        f"{result.queries} queries ({result.judgements} relevant judgements, {result.skipped_queries} skipped), "
        f"model local/all-MiniLM-L6-v2, {os.cpu_count()} cores"
    )
    print(f"import: {seconds:.2f} s, {chunks} chunks, {result.report.embedded} embedded\n")
    print(f"| mode | recall@{K} | MRR@10 | nDCG@10 | hit@{K} | p50 ms | p99 ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for m in report.modes:
        assert m.mode is not None
        times = timings[m.mode]
        metrics = (m.recall, m.mrr, m.ndcg, m.hit_rate)
        cells = " | ".join(f"{x or 0.0:.3f}" for x in metrics)
        p50, p99 = percentile(times, 50) * 1000, percentile(times, 99) * 1000
        print(f"| {m.label} | {cells} | {p50:.1f} | {p99:.1f} |")
    spec = Retrieval()
    times = timings["hybrid (defaults)"]
    print(
        f"\nhybrid at the manifest defaults (threshold {spec.similarity_threshold}, topK {spec.top_k}, "
        f"{spec.max_context_tokens} tokens): p50 {percentile(times, 50) * 1000:.1f} ms, "
        f"p99 {percentile(times, 99) * 1000:.1f} ms"
    )


def index_comparison(store: KnowledgeBaseStore, evalset: EvalSet, limits: QueryOptions) -> tuple[Any, float]:
    """The vector mode's quality with every chunk compared, and the share of that exact top K the index finds."""
    with store.db.exact_searches():
        [exact] = evaluate_store(store, NAME, evalset, k=K, modes=["vector"], options=limits).modes
    return exact, vector_recall(store, NAME, [q.question for q in evalset.queries], K)


def main() -> None:
    try:
        run()
    except KbctlError as error:
        raise SystemExit(f"error: {error}") from None


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", nargs="?", type=Path, default=DEFAULT_DATASET, help="BEIR dataset folder")
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit-docs", type=int, default=None)
    parser.add_argument("--limit-queries", type=int, default=None)
    parser.add_argument("--rerank", metavar="MODEL", default=None, help="reranker for the hybrid+rerank mode")
    args = parser.parse_args()
    modes = [*MODES, RERANK_MODE] if args.rerank else MODES

    home = Path(tempfile.mkdtemp(prefix="kbctl-bench-"))
    settings = Settings.from_env(home=home)
    try:
        with KnowledgeBaseStore(settings=settings) as store:
            start = time.perf_counter()
            result = import_beir(
                store,
                args.dataset,
                NAME,
                split=args.split,
                eval_out=home / "eval.jsonl",
                limit_docs=args.limit_docs,
                limit_queries=args.limit_queries,
                retrieval=retrieval_settings(args.rerank),
            )
            seconds = time.perf_counter() - start
            if result.report.failed:
                raise SystemExit(f"import failed: {result.report.model_dump_json()}")
            evalset = load_evalset(result.eval_file)
            limits = QueryOptions(threshold=THRESHOLD, max_tokens=MAX_TOKENS)
            report = evaluate_store(store, NAME, evalset, k=K, modes=modes, options=limits)
            timings = {mode: time_queries(store, evalset, mode) for mode in modes}
            timings["hybrid (defaults)"] = time_queries(store, evalset, "hybrid", defaults=True)
            chunks = store.describe(NAME).chunks
            indexed = index_comparison(store, evalset, limits) if store.db.vector_index(MODEL) is not None else None
    finally:
        if not settings.database_url:
            stop_server(settings.pgdata)
        shutil.rmtree(home, ignore_errors=True)
    print_results(args.dataset, result, seconds, chunks, report, timings)
    if indexed is not None:
        exact, overlap = indexed
        print(
            f"\nvector search through the HNSW index vs an exact scan of every chunk: recall@{K} of the exact top {K} "
            f"{overlap:.3f}; exact scan: recall@{K} {exact.recall or 0:.3f}, nDCG@10 {exact.ndcg or 0:.3f}"
        )


if __name__ == "__main__":
    main()
