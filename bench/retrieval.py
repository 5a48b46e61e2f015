"""Retrieval benchmark on a BEIR dataset: ranking quality and query latency per retrieval mode, in one run.

    python bench/retrieval.py [BEIR_DIR] [--split test] [--limit-docs N] [--limit-queries N] [--rerank MODEL]
                              [--keep HOME] [--variant headings|no-headings|merged|window]
                              [--model local/bge-small-en-v1.5] [--modes vector,hybrid] [--no-timing]

Imports the dataset (default examples/beir/policies) into a fresh embedded store (or KBCTL_DATABASE_URL)
with the real local model, like `kbctl import beir`, then for each mode (vector, keyword = BM25, hybrid, and
hybrid+rerank with --rerank) measures, over the eval set, with the similarity threshold and token budget out of
the way so only the ranking counts: chunk-level recall@10, MRR@10 and nDCG@10; document-level nDCG@10 and
recall@10 (a document ranks at its best chunk, as published BEIR figures rank documents); and recall@100 over
the first 100 chunks. Then hybrid at the manifest defaults (topK, token budget, and the version's relevance gate,
calibrated as a publish calibrates it: `as_published`), after hybrid at the defaults' topK with no gate or budget:
the difference is what those two cut. Latency is a separate loop:
one warm-up query per mode, then every query timed around `store.query(...)`.

--rerank MODEL sets `spec.retrieval.rerank.model` (a rerank provider of the kbctl configuration, or
local/NAME); the plain modes are then still measured without the reranker. --keep HOME imports into HOME and
leaves it there (a second run with the same HOME finds the dataset imported and embeds nothing), for
bench/fusion.py. --variant chunks otherwise than kbctl does (bench/variants.py: no heading path in the embedded
text, small sections merged, or chunks fitted to the model's window), to measure what kbctl's chunking is worth.
--model embeds with another model (`spec.embedding.model`); --modes measures only those modes (hybrid at the
defaults is always measured); --no-timing skips the latency loops and the index comparison (quality only).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scale import vector_recall  # bench/scale.py: the index against an exact scan
from variants import VARIANTS, apply_variant  # bench/variants.py: chunking counterfactuals

from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings
from kbctl.defaults import LANGUAGE
from kbctl.embedding.background import keyword_threshold, version_threshold
from kbctl.engine.ingest import background_vectors
from kbctl.errors import KbctlError
from kbctl.eval.beir import RANKING_RETRIEVAL, BeirImport, import_beir
from kbctl.eval.evalset import EvalQuery, EvalSet, load_evalset
from kbctl.eval.run import QueryOutcome, evaluate, evaluate_store, split_mode
from kbctl.manifest import Embedding, Retrieval, load_manifests
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
DEEP = 100  # chunks asked per query: recall@100 over chunks (within the default candidates, so fusion is as served)
# Published nDCG@10 of BM25 in the BEIR paper (Thakur et al., 2021, table 2), by dataset folder name.
PUBLISHED_BM25 = {"nfcorpus": 0.325, "arguana": 0.315, "scidocs": 0.158, "fiqa": 0.236, "trec-covid": 0.656}
DEFAULTS = "hybrid at defaults"
TOP_K_ONLY = "hybrid at topK, uncut"  # the defaults' topK, no threshold or budget: what the two cut, side by side


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank q-th percentile (0 < q <= 100) of values."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def retrieval_settings(rerank: str | None) -> Retrieval:
    """The ranking benchmark's retrieval spec, with a reranker when one is named."""
    if rerank is None:
        return RANKING_RETRIEVAL
    return Retrieval.model_validate({**RANKING_RETRIEVAL.model_dump(by_alias=True), "rerank": {"model": rerank}})


def at_defaults() -> QueryOptions:
    """The manifest defaults' topK and token budget, and no threshold: the serving version's calibrated relevance gate
    decides (see `as_published`)."""
    spec = Retrieval()
    return QueryOptions(top_k=spec.top_k, max_tokens=spec.max_context_tokens)


@dataclass(frozen=True)
class Calibration:
    """A version's relevance gate as a publish makes it: its two lines and the background values under them."""

    version_id: int
    model: str
    background: float | None
    line: float
    keyword_background: float | None
    keyword_line: float | None
    language: str


def as_published(store: KnowledgeBaseStore, name: str) -> Calibration:
    """Make the serving version of `name` look as a publish now makes it, with kbctl's own code: no
    similarityThreshold in its stored spec (an import sets -1, ranking), and its background similarity and keyword
    share calibrated on the background questions (a store kept before either existed has none). The store is the
    benchmark's; queries at the defaults then meet the gate kbctl ships."""
    target = store.db.query_target(name)
    assert target is not None and target.version_id is not None and target.chunk_count is not None
    assert target.model is not None
    vectors = background_vectors(store.db, store.embedder(target.model))
    background = store.db.background_similarity(target.version_id, target.model, target.chunk_count, vectors)
    language = str((target.retrieval or {}).get("language") or LANGUAGE)
    keyword = store.db.background_keyword(target.version_id, language, vectors)
    store.db.connection.execute(
        "UPDATE kb_versions SET retrieval = retrieval - 'similarityThreshold', background_similarity = %s,"
        " background_keyword = %s WHERE id = %s",
        (background, keyword, target.version_id),
    )
    return Calibration(
        target.version_id,
        target.model,
        background,
        version_threshold(target.model, background),
        keyword,
        keyword_threshold(keyword),
        language,
    )


@contextmanager
def examples_store(model: str | None = None) -> Iterator[KnowledgeBaseStore]:
    """examples/kb applied into a fresh temporary store (each knowledge base embedded with `model`, else its own),
    open; the store and its files are gone afterwards."""
    home = Path(tempfile.mkdtemp(prefix="kbctl-examples-"))
    settings = Settings(home=home)
    try:
        with KnowledgeBaseStore(settings=settings) as store:
            manifests = [m.kb for m in load_manifests([str(ROOT / "examples" / "kb")])]
            if model is not None:
                embedding = Embedding(model=model)
                manifests = [
                    kb.model_copy(update={"spec": kb.spec.model_copy(update={"embedding": embedding})})
                    for kb in manifests
                ]
            if store.apply(manifests).failed:
                raise SystemExit("examples/kb did not apply")
            yield store
    finally:
        stop_server(settings.pgdata)
        shutil.rmtree(home, ignore_errors=True)


def time_queries(
    store: KnowledgeBaseStore, evalset: EvalSet, mode: str, defaults: QueryOptions | None = None
) -> list[float]:
    """Seconds per query over the whole eval set in one mode, after one warm-up query; with `defaults`
    (`at_defaults`), at the manifest defaults (threshold, token budget, topK) instead of the ranking settings."""
    base, rerank = split_mode(mode)  # a plain mode runs without the reranker, as in evaluate_store
    limits = defaults or QueryOptions(top_k=K, threshold=THRESHOLD, max_tokens=MAX_TOKENS)
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


@dataclass(frozen=True)
class Figures:
    """One mode's ranking quality over the eval set's answerable queries."""

    label: str
    recall: float  # chunk level, @10
    mrr: float
    ndcg: float
    doc_ndcg: float
    doc_recall: float  # @10
    recall_100: float  # over the first 100 chunks


def figures(label: str, outcomes: Sequence[QueryOutcome], queries: dict[str, EvalQuery]) -> Figures:
    """The means of one mode's outcomes (each scored at k = DEEP)."""
    ranked = [o for o in outcomes if not o.no_answer]

    def mean(values: Sequence[float]) -> float:
        return sum(values) / max(1, len(values))

    def top(o: QueryOutcome, k: int, *, documents: bool) -> set[str]:
        retrieved = list(dict.fromkeys(o.retrieved)) if documents else o.retrieved
        return set(retrieved[:k])

    def recall(o: QueryOutcome, k: int, documents: bool) -> float:
        expected = queries[o.id].expected_sources
        found = top(o, k, documents=documents)
        return sum(s in found for s in expected) / max(1, len(expected))

    return Figures(
        label=label,
        recall=mean([recall(o, K, False) for o in ranked]),
        mrr=mean([o.reciprocal_rank or 0.0 for o in ranked]),
        ndcg=mean([o.ndcg or 0.0 for o in ranked]),
        doc_ndcg=mean([o.document_ndcg or 0.0 for o in ranked]),
        doc_recall=mean([recall(o, K, True) for o in ranked]),
        recall_100=mean([recall(o, DEEP, False) for o in ranked]),
    )


def measure(store: KnowledgeBaseStore, evalset: EvalSet, modes: Sequence[str], defaults: QueryOptions) -> list[Figures]:
    """Every mode's figures, then hybrid's at the defaults' topK alone and at the manifest defaults (`at_defaults`)."""
    queries = {q.id: q for q in evalset.queries}
    found: list[Figures] = []
    for mode in [*modes, TOP_K_ONLY, DEFAULTS]:
        limits = {
            DEFAULTS: defaults,
            TOP_K_ONLY: QueryOptions(top_k=defaults.top_k, threshold=THRESHOLD, max_tokens=MAX_TOKENS),
        }.get(mode, QueryOptions(top_k=DEEP, threshold=THRESHOLD, max_tokens=MAX_TOKENS))
        asked = "hybrid" if mode in (DEFAULTS, TOP_K_ONLY) else mode
        found.append(figures(mode, outcomes(store, evalset, asked, limits), queries))
    return found


def outcomes(store: KnowledgeBaseStore, evalset: EvalSet, mode: str, limits: QueryOptions) -> list[QueryOutcome]:
    """Every question of the eval set asked in `mode` (`hybrid+rerank` with the spec's reranker) with these
    limits, each outcome scored at k = DEEP."""
    base, rerank = split_mode(mode)
    options = QueryOptions.build(limits, mode=base, rerank=rerank)

    def ask(question: str, _: str | None) -> Sequence[Any]:
        return store.query(NAME, question, options).hits

    [report] = evaluate(ask, evalset, k=DEEP, modes=[mode]).modes
    return report.results


def print_results(
    dataset: Path,
    result: BeirImport,
    seconds: float,
    chunks: int,
    rows: Sequence[Figures],
    timings: dict[str, list[float]],
    calibration: Calibration,
) -> None:
    print(
        f"dataset: {dataset.name} ({result.split}): {result.documents} of {result.corpus_documents} documents, "
        f"{result.queries} queries ({result.judgements} relevant judgements, {result.skipped_queries} skipped), "
        f"model {calibration.model}, {os.cpu_count()} cores"
    )
    truncated = sum(s.truncated for r in result.report.results for s in r.sources)
    print(
        f"import: {seconds:.2f} s, {chunks} chunks, {result.report.embedded} embedded,"
        f" {truncated} longer than the model reads\n"
    )
    print(
        f"| mode | recall@{K} | MRR@10 | nDCG@10 | doc nDCG@10 | doc recall@{K} | recall@{DEEP} chunks"
        " | p50 ms | p99 ms |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        times = timings.get(row.label)
        metrics = (row.recall, row.mrr, row.ndcg, row.doc_ndcg, row.doc_recall, row.recall_100)
        cells = " | ".join(f"{x:.3f}" for x in metrics)
        latency = f"{percentile(times, 50) * 1000:.1f} | {percentile(times, 99) * 1000:.1f}" if times else "- | -"
        print(f"| {row.label} | {cells} | {latency} |")
    spec = Retrieval()
    published = PUBLISHED_BM25.get(dataset.name.lower())
    print(
        f"\n{DEFAULTS}: the version's relevance gate (similarity line {calibration.line:g}, keyword line"
        f" {calibration.keyword_line}), an answer's chunks not cut, topK {spec.top_k}, {spec.max_context_tokens}"
        f" tokens; {TOP_K_ONLY}: topK {spec.top_k} alone."
        + (f" Published BM25 nDCG@10 (documents): {published:.3f}." if published is not None else "")
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
    parser.add_argument("--keep", metavar="HOME", type=Path, default=None, help="import into HOME and keep it")
    parser.add_argument(
        "--variant", choices=VARIANTS, default="headings", help="chunk as kbctl does, or a counterfactual (variants.py)"
    )
    parser.add_argument("--model", default=MODEL, help="the knowledge base's embedding model (spec.embedding.model)")
    parser.add_argument("--modes", default=",".join(MODES), help="modes to measure, comma-separated")
    parser.add_argument("--no-timing", action="store_true", help="quality only: no latency loops, no index comparison")
    args = parser.parse_args()
    chosen = [m for m in args.modes.split(",") if m]
    modes = [*chosen, RERANK_MODE] if args.rerank else chosen

    home = args.keep if args.keep is not None else Path(tempfile.mkdtemp(prefix="kbctl-bench-"))
    home.mkdir(parents=True, exist_ok=True)
    settings = Settings.from_env(home=home)
    apply_variant(args.variant, settings)
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
                embedding=Embedding(model=args.model),
            )
            seconds = time.perf_counter() - start
            if result.report.failed:
                raise SystemExit(f"import failed: {result.report.model_dump_json()}")
            evalset = load_evalset(result.eval_file)
            limits = QueryOptions(threshold=THRESHOLD, max_tokens=MAX_TOKENS)
            calibration = as_published(store, NAME)
            defaults = at_defaults()
            rows = measure(store, evalset, modes, defaults)
            timings: dict[str, list[float]] = {}
            indexed = None
            if not args.no_timing:
                timings = {mode: time_queries(store, evalset, mode) for mode in modes}
                timings[DEFAULTS] = time_queries(store, evalset, "hybrid", defaults)
                if store.db.vector_index(args.model) is not None:
                    indexed = index_comparison(store, evalset, limits)
            chunks = store.describe(NAME).chunks
    finally:
        if not settings.database_url:
            stop_server(settings.pgdata)
        if args.keep is None:
            shutil.rmtree(home, ignore_errors=True)
    print(f"chunking: {args.variant}")
    print_results(args.dataset, result, seconds, chunks, rows, timings, calibration)
    if indexed is not None:
        exact, overlap = indexed
        print(
            f"\nvector search through the HNSW index vs an exact scan of every chunk: recall@{K} of the exact top {K} "
            f"{overlap:.3f}; exact scan: recall@{K} {exact.recall or 0:.3f}, nDCG@10 {exact.ndcg or 0:.3f}"
        )


if __name__ == "__main__":
    main()
