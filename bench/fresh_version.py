"""Queries of a version just published, with PostgreSQL's statistics of it stale and refreshed, side by side.

    python bench/fresh_version.py [--chunks 8700] [--queries 200] [--rounds 2] [--changed 0.01]

bench/scale.py's generated Markdown (~`--chunks` chunks of ~1,000 characters, 11 per source) applied in this process
into a fresh store through the same loopback stand-in embedder. Then, each round: `--changed` of the sources edited
and applied (a new version of every source), with the publish's ANALYZE of the versions' sources skipped and
autovacuum off for that table, so the planner knows nothing of the new version (as before kbctl analyzed after every
publish: it did so only past 1,000 sources); hybrid queries timed (p50 / p99, and the vector stage's median from the
stage timings each result records); then `Database.analyze_versions` (what the apply now runs, timed) and the same
queries again. Each query's time includes the stand-in's question embedding (a loopback HTTP call).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from embed_http import KEY, KEY_VAR, server_process, standin_config  # bench/embed_http.py: the stand-in server process
from retrieval import percentile  # bench/retrieval.py
from scale import KB, SECTIONS_PER_SOURCE, manifest, questions, sentence, source_text  # bench/scale.py

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings
from kbctl.manifest import CONTEXT_TOKENS_MAX, parse_manifests
from kbctl.query.options import QueryOptions
from kbctl.store.database import Database
from kbctl.store.embedded import stop_server

OPTIONS = QueryOptions(mode="hybrid", threshold=-1.0, top_k=10, max_tokens=CONTEXT_TOKENS_MAX)
ANALYZE = Database.analyze_versions


def timed(store: KnowledgeBaseStore, qs: list[str]) -> tuple[float, float, float]:
    """p50 and p99 ms of hybrid queries of `qs`, and their vector stage's median ms (from the stage timings every
    result records)."""
    times, vector = [], []
    for q in qs:
        start = time.perf_counter()
        result = store.query(KB, q, options=OPTIONS)
        times.append((time.perf_counter() - start) * 1000)
        vector += [(s.end_ns - s.start_ns) / 1e6 for s in result.timings if s.stage == "vector"]
    return percentile(times, 50), percentile(times, 99), statistics.median(vector)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=8_700)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--changed", type=float, default=0.01)
    args = parser.parse_args()
    sources = max(1, round(args.chunks / (SECTIONS_PER_SOURCE + 1)))
    home = Path(tempfile.mkdtemp(prefix="kbctl-fresh-"))
    with server_process("none", 0.0) as url:
        config = standin_config(home / "config.yaml", url)
        os.environ.update({"KBCTL_HOME": str(home / "store"), "KBCTL_CONFIG": str(config), KEY_VAR: KEY})
        os.environ.pop("KBCTL_DATABASE_URL", None)
        settings = Settings.from_env()
        rng = random.Random(42)
        texts = [source_text(rng, i) for i in range(sources)]
        qs = questions(random.Random(11), args.queries, sources)
        try:
            with KnowledgeBaseStore(settings=settings) as store:
                path = home / "kb.yaml"
                path.write_text(manifest(texts, "standin"))
                store.apply(parse_manifests(path.read_text(), str(path)))
                chunks = store.history(KB)[0].chunk_count
                print(f"{sources} sources, {chunks} chunks; {len(qs)} hybrid queries per arm; {os.cpu_count()} cores")
                for q in questions(random.Random(12), args.queries, sources):  # warm: the model, the hot rows
                    store.query(KB, q, options=OPTIONS)
                conn = store.db.connection
                print(f"{'round':<7}{'statistics':<12}{'p50 ms':>9}{'p99 ms':>9}{'vector stage':>14}")
                for round_ in range(1, args.rounds + 1):
                    for i in rng.sample(range(sources), max(1, round(sources * args.changed))):
                        texts[i] = texts[i] + "\n" + sentence(rng) + "\n"
                    path.write_text(manifest(texts, "standin"))
                    conn.execute("ALTER TABLE kb_version_sources SET (autovacuum_enabled = false)")
                    Database.analyze_versions = lambda self: None  # type: ignore[method-assign]
                    try:
                        store.apply(parse_manifests(path.read_text(), str(path)))
                    finally:
                        Database.analyze_versions = ANALYZE  # type: ignore[method-assign]
                    p50, p99, vector = timed(store, qs)
                    print(f"{round_:<7}{'stale':<12}{p50:>9.1f}{p99:>9.1f}{vector:>14.1f}")
                    start = time.perf_counter()
                    store.db.analyze_versions()
                    took = (time.perf_counter() - start) * 1000
                    conn.execute("ALTER TABLE kb_version_sources RESET (autovacuum_enabled)")
                    p50, p99, vector = timed(store, qs)
                    print(f"{round_:<7}{'analyzed':<12}{p50:>9.1f}{p99:>9.1f}{vector:>14.1f}   (ANALYZE {took:.1f} ms)")
        finally:
            stop_server(settings.pgdata)


if __name__ == "__main__":
    main()
