"""kbctl's HNSW build against pgvector's own CREATE INDEX on the same vectors with the same settings, in one run.

    python bench/hnsw_build.py HOME [--model standin/all-MiniLM-L6-v2] [--rounds 2]

HOME is a store kept by `bench/scale.py --keep HOME` (or any store with at least INDEX_MIN_VECTORS vectors of the
model). The model's vectors are copied once into a plain table as halfvec (not timed). Then, alternating, --rounds
times, each index dropped after it is timed:
- kbctl: `kbctl.store.search.build_vector_index`, what an apply runs: CREATE INDEX CONCURRENTLY on the expression
  embedding::halfvec(d) of kb_embeddings, partial on the model, with maintenance_work_mem INDEX_BUILD_MEMORY;
- pgvector: CREATE INDEX on the plain table's halfvec column, the same operator class, defaults (m 16,
  ef_construction 64), maintenance_work_mem and parallel maintenance workers;
- kbctl's statement without CONCURRENTLY, to show what that part costs.
The store's own index is rebuilt by kbctl's arm, so the store is left as it was.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg
from psycopg import sql

from kbctl.config import Settings
from kbctl.defaults import INDEX_BUILD_MEMORY
from kbctl.store.embedded import embedded_url, stop_server
from kbctl.store.search import build_vector_index, vector_index


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("home", type=Path)
    parser.add_argument("--model", default="standin/all-MiniLM-L6-v2")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    pgdata = Settings(home=args.home).pgdata
    times: dict[str, list[float]] = {"kbctl (CONCURRENTLY, expression, partial)": [], "pgvector CREATE INDEX": []}
    times["kbctl's statement without CONCURRENTLY"] = []
    try:
        with psycopg.connect(embedded_url(pgdata), autocommit=True) as conn:
            count, dims = conn.execute(
                "SELECT count(*), max(vector_dims(embedding)) FROM kb_embeddings WHERE model = %s", (args.model,)
            ).fetchone()
            conn.execute("DROP TABLE IF EXISTS bench_hnsw_vectors")
            conn.execute(
                sql.SQL(
                    "CREATE TABLE bench_hnsw_vectors AS SELECT id, embedding::halfvec({d}) AS v FROM kb_embeddings"
                    " WHERE model = %s"
                ).format(d=sql.Literal(int(dims))),
                (args.model,),
            )
            conn.execute("VACUUM ANALYZE bench_hnsw_vectors")
            workers = conn.execute("SHOW max_parallel_maintenance_workers").fetchone()[0]
            buffers = conn.execute("SHOW shared_buffers").fetchone()[0]
            print(
                f"{count:,} vectors of {dims} dimensions ({args.model}); maintenance_work_mem {INDEX_BUILD_MEMORY},"
                f" max_parallel_maintenance_workers {workers}, shared_buffers {buffers}",
                file=sys.stderr,
            )

            def drop_kbctls() -> None:
                found = vector_index(conn, args.model)
                if found is not None:
                    conn.execute(sql.SQL("DROP INDEX CONCURRENTLY {}").format(sql.Identifier(found.name)))

            for _ in range(args.rounds):
                drop_kbctls()
                started = time.perf_counter()
                built = build_vector_index(conn, args.model)
                times["kbctl (CONCURRENTLY, expression, partial)"].append(time.perf_counter() - started)
                assert built is not None
                conn.execute(sql.SQL("SET maintenance_work_mem = {}").format(sql.Literal(INDEX_BUILD_MEMORY)))
                started = time.perf_counter()
                conn.execute("CREATE INDEX bench_hnsw_plain ON bench_hnsw_vectors USING hnsw (v halfvec_cosine_ops)")
                times["pgvector CREATE INDEX"].append(time.perf_counter() - started)
                conn.execute("DROP INDEX bench_hnsw_plain")
                started = time.perf_counter()
                conn.execute(
                    sql.SQL(
                        "CREATE INDEX bench_hnsw_expression ON kb_embeddings USING hnsw"
                        " ((embedding::halfvec({d})) halfvec_cosine_ops) WHERE model = {m}"
                    ).format(d=sql.Literal(int(dims)), m=sql.Literal(args.model))
                )
                times["kbctl's statement without CONCURRENTLY"].append(time.perf_counter() - started)
                conn.execute("DROP INDEX bench_hnsw_expression")
                conn.execute("RESET maintenance_work_mem")
                print({k: [round(t, 1) for t in v] for k, v in times.items()}, file=sys.stderr, flush=True)
            conn.execute("DROP TABLE bench_hnsw_vectors")
    finally:
        stop_server(pgdata)
    plain = statistics.median(times["pgvector CREATE INDEX"])
    print(f"{count:,} vectors, {args.rounds} rounds, alternating")
    print(f"{'build':42} {'median s':>9} {'each s':>16} {'vs pgvector':>12}")
    for label, values in times.items():
        each = ", ".join(f"{t:.1f}" for t in values)
        print(f"{label:42} {statistics.median(values):9.1f} {each:>16} {statistics.median(values) / plain:11.2f}x")


if __name__ == "__main__":
    main()
