"""What a version's BM25 statistics cost at publish, written whole against by difference, side by side in one run.

    python bench/bm25_statistics.py [--revisions 90909] [--shared 170] [--own 12] [--changed 0.01] [--rounds 3]

In a fresh KBCTL_HOME (the embedded server), builds the statistics of one knowledge base shaped like
`bench/scale.py --chunks 1000000 --layout files`: --revisions documents (revisions) of 10 chunks, each holding up to
--shared words drawn log-uniformly from a vocabulary of 20,000 (the common ones in most documents, the rare in few)
and --own words of its own (reference codes), so a version holds ~revisions x own lexemes (~1.09 million at the
defaults, as measured there). The rows are generated in SQL: only the tables publishing reads for the statistics
(revisions, their term rows, the versions' sources), no chunks or vectors. Version 1 is written whole.

Version 2 replaces --changed of the revisions with new ones. Its statistics are written by kbctl's own
`kbctl.store.bm25.version_statistics`, by difference (the default) and whole (BASE_FRACTION 0: what every publish
did before), each in a transaction rolled back, alternating, --rounds times. Then both forms are kept (version 2 by
difference, version 3 the same sources whole) and the statistics of 300 questions of 8 words are read from each,
alternating: what the difference costs a query (two index probes per word instead of one).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kbctl.client import KnowledgeBaseStore  # noqa: E402
from kbctl.config import Settings  # noqa: E402
from kbctl.store import bm25  # noqa: E402
from kbctl.store.embedded import stop_server  # noqa: E402

VOCABULARY = 20_000


def _version(conn: Any, kb: int, number: int) -> int:
    row = conn.execute(
        "INSERT INTO kb_versions (kb_id, number, manifest, manifest_sha256, model, chunk_count, embedded_count,"
        " reused_count) VALUES (%s, %s, '{}', '', 'local/all-MiniLM-L6-v2', 0, 0, 0) RETURNING id",
        (kb, number),
    ).fetchone()
    return int(row[0])


def _sources(conn: Any, version: int, first: int, last: int, skip: int = 0) -> None:
    """Version `version` serves revisions first..last (ids), less the first `skip` of them."""
    conn.execute(
        "INSERT INTO kb_version_sources (version_id, position, source_name, source_sha256, revision_id, state)"
        " SELECT %s, row_number() OVER (ORDER BY id), 'doc' || id, '', id, 'ready' FROM kb_source_revisions"
        " WHERE id BETWEEN %s AND %s AND id > %s",
        (version, first, last, first - 1 + skip),
    )


def build(store: KnowledgeBaseStore, revisions: int, changed: int, shared: int, own: int) -> tuple[int, list[int]]:
    """The knowledge base's revisions, term rows and version 1 (whole); returns (kb id, [version 1, version 2])."""
    conn = store.db.connection
    started = time.perf_counter()
    with conn.transaction():
        kb = int(
            conn.execute(
                "INSERT INTO kb_knowledge_bases (name, manifest) VALUES ('big', '{}') RETURNING id"
            ).fetchone()[0]
        )
        conn.execute(
            "INSERT INTO kb_source_revisions (kb_id, source_name, revision_key, content_sha256, origin, char_count,"
            " chunk_count, term_count) SELECT %s, 'doc' || g, 'k' || g, md5(g::text), 'generated', 9000, 10, 1500"
            " FROM generate_series(1, %s) g",
            (kb, revisions + changed),
        )
        first, last = conn.execute(
            "SELECT min(id), max(id) FROM kb_source_revisions WHERE kb_id = %s", (kb,)
        ).fetchone()
        conn.execute(
            "INSERT INTO kb_revision_terms (lexeme, revision_id, chunks)"
            " SELECT lexeme, r, max(n) FROM ("
            " SELECT 'w' || floor(exp(random() * ln(%(v)s)))::int AS lexeme, r, 1 + (random() * 3)::int AS n"
            " FROM generate_series(%(first)s::bigint, %(last)s::bigint) r, generate_series(1, %(shared)s) s"
            " UNION ALL SELECT 'c' || r || 'x' || k, r, 1 FROM generate_series(%(first)s::bigint, %(last)s::bigint) r,"
            " generate_series(1, %(own)s) k"
            ") t GROUP BY lexeme, r ORDER BY 1, 2",
            {"v": VOCABULARY, "first": first, "last": last, "shared": shared, "own": own},
        )
        one = _version(conn, kb, 1)
        _sources(conn, one, first, first + revisions - 1)
        bm25.version_statistics(conn, kb, one)
        two = _version(conn, kb, 2)
        # Version 2: the first `changed` revisions replaced by the `changed` new ones after the last.
        _sources(conn, two, first, last, skip=changed)
    conn.execute("ANALYZE kb_revision_terms, kb_version_terms, kb_version_sources, kb_source_revisions, kb_versions")
    rows = conn.execute("SELECT count(*) FROM kb_revision_terms").fetchone()[0]
    lexemes = conn.execute("SELECT count(*) FROM kb_version_terms WHERE version_id = %s", (one,)).fetchone()[0]
    print(
        f"built in {time.perf_counter() - started:.1f} s: {revisions + changed:,} revisions, {rows:,} revision term"
        f" rows, version 1 holds {lexemes:,} lexemes",
        file=sys.stderr,
    )
    return kb, [one, two]


def timed_statistics(store: KnowledgeBaseStore, kb: int, version: int, fraction: float) -> tuple[float, int, bool]:
    """Seconds to write `version`'s statistics with BASE_FRACTION `fraction` (rolled back), the rows written, and
    whether they were a difference."""
    conn = store.db.connection
    saved = bm25.BASE_FRACTION
    bm25.BASE_FRACTION = fraction
    try:
        with conn.transaction(force_rollback=True):
            started = time.perf_counter()
            bm25.version_statistics(conn, kb, version)
            elapsed = time.perf_counter() - started
            base, rows = conn.execute(
                "SELECT terms_base, (SELECT count(*) FROM kb_version_terms WHERE version_id = %s) FROM kb_versions"
                " WHERE id = %s",
                (version, version),
            ).fetchone()
    finally:
        bm25.BASE_FRACTION = saved
    return elapsed, int(rows), base is not None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--revisions", type=int, default=90_909)
    parser.add_argument(
        "--shared", type=int, default=170, help="shared words drawn per revision (fewer once deduplicated)"
    )
    parser.add_argument("--own", type=int, default=12, help="words of each revision's own")
    parser.add_argument("--changed", type=float, default=0.01)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--questions", type=int, default=300)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="kbctl-bm25-"))
    changed = max(1, round(args.revisions * args.changed))
    try:
        store = KnowledgeBaseStore(settings=Settings(home=home))
        kb, (_, two) = build(store, args.revisions, changed, args.shared, args.own)
        times: dict[str, list[float]] = {"whole": [], "difference": []}
        rows: dict[str, int] = {}
        for _ in range(args.rounds):
            for label, fraction in (("whole", 0.0), ("difference", bm25.BASE_FRACTION)):
                elapsed, written, difference = timed_statistics(store, kb, two, fraction)
                assert difference == (label == "difference"), (label, difference)
                times[label].append(elapsed)
                rows[label] = written
        conn = store.db.connection
        with conn.transaction():
            bm25.version_statistics(conn, kb, two)
            three = _version(conn, kb, 3)
            conn.execute(
                "INSERT INTO kb_version_sources (version_id, position, source_name, source_sha256, revision_id, state)"
                " SELECT %s, position, source_name, source_sha256, revision_id, state FROM kb_version_sources"
                " WHERE version_id = %s",
                (three, two),
            )
            saved, bm25.BASE_FRACTION = bm25.BASE_FRACTION, 0.0
            try:
                bm25.version_statistics(conn, kb, three)
            finally:
                bm25.BASE_FRACTION = saved
        conn.execute("ANALYZE kb_version_terms, kb_versions")
        assert bm25.version_frequencies(conn, two) == bm25.version_frequencies(conn, three)
        rng = random.Random(7)
        words = [f"w{int(pow(VOCABULARY, rng.random()))}" for _ in range(args.questions * 6)]
        codes = [
            f"c{rng.randrange(1, args.revisions)}x{rng.randrange(1, args.own + 1)}" for _ in range(args.questions * 2)
        ]
        questions = [" ".join(words[i * 6 : i * 6 + 6] + codes[i * 2 : i * 2 + 2]) for i in range(args.questions)]
        reads: dict[str, list[float]] = {"whole": [], "difference": []}
        for q in questions[:20]:  # warm
            bm25.question_terms(conn, two, "simple", q)
            bm25.question_terms(conn, three, "simple", q)
        for q in questions:
            for label, version in (("difference", two), ("whole", three)):
                started = time.perf_counter()
                terms = bm25.question_terms(conn, version, "simple", q)
                reads[label].append((time.perf_counter() - started) * 1000)
            assert len(terms.lexemes) >= 6
        store.close()
    finally:
        stop_server(home / "pg")
    print(
        f"{args.revisions:,} revisions of 10 chunks, {changed:,} replaced ({args.changed:.0%}); {args.rounds} rounds,"
        " alternating, each rolled back"
    )
    print(f"{'version 2 statistics':24} {'rows written':>13} {'median s':>9} {'min s':>7} {'vs whole':>9}")
    whole = statistics.median(times["whole"])
    for label in ("whole", "difference"):
        median = statistics.median(times[label])
        print(f"{label:24} {rows[label]:13,} {median:9.2f} {min(times[label]):7.2f} {median / whole:8.3f}x")
    print(f"{'question statistics':24} {'p50 ms':>13} {'p99 ms':>9}")
    for label in ("whole", "difference"):
        values = sorted(reads[label])
        p99 = values[min(len(values) - 1, int(len(values) * 0.99))]
        print(f"{label:24} {statistics.median(values):13.3f} {p99:9.3f}")


if __name__ == "__main__":
    main()
