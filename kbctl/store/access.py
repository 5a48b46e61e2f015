"""Document-level access in SQL: the one filter every statement that selects a version's chunks for a caller adds.

`READABLE` reads the per-source `readers` and `reader_labels` of kb_version_sources, written at publish from the
manifest's `access`; a version without restricted chunks (`kb_versions.restricted_chunks` = 0) adds no filter.
A restricted version keeps per rule its BM25 statistics (`kb_version_rules`, `kb_version_rule_terms`) and its
background questions' best similarities (`background_bests`), so a caller's BM25 statistics and calibrated line
(`readable_background`) are those of what it may read. The filter stands before any ranking or cut.
Its Python form is kbctl.inputs.access.may_read.

Design: docs/access.md#how-it-is-stored. Figures: docs/access.md#what-it-costs, bench/README.md (bench/access.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import psycopg

from kbctl.inputs.access import Reader
from kbctl.store.rows import LIVE_STATE, live_join

__all__ = [
    "HIDDEN_RULES",
    "READABLE",
    "Rule",
    "delete_rule_statistics",
    "readable",
    "readable_background",
    "readable_counts",
    "readable_params",
    "readable_size",
    "rule_statistics",
    "store_calibration",
    "version_rules",
]

# The rule, over a kb_version_sources row `vs`, for the caller's groups %(rg)s and claim terms %(rc)s.
READABLE: Final = (
    "(vs.readers IS NULL OR vs.readers && %(rg)s::text[])"
    " AND (vs.reader_labels IS NULL OR vs.reader_labels <@ %(rc)s::text[])"
)


# The chunks behind exactly one rule, %(cr)s and %(cl)s as stored (NULL: no group rule, no label rule; both NULL:
# the chunks behind no rule), over a kb_version_sources row `vs`.
_OF_RULE: Final = (
    "vs.readers IS NOT DISTINCT FROM %(cr)s::text[] AND vs.reader_labels IS NOT DISTINCT FROM %(cl)s::text[]"
)


@dataclass(frozen=True)
class Rule:
    """One access rule of a version as stored (`readers`, `reader_labels`; both None: no rule): as a search's
    filter, the chunks behind exactly that rule, which calibration searches apart from the others."""

    readers: Sequence[str] | None
    reader_labels: Sequence[str] | None


def readable(reader: Reader | Rule | None) -> str:
    """The filter to AND into a statement over `vs`: READABLE for a caller, nothing without one (no rule to check:
    the version restricts nothing); for a `Rule`, the chunks behind that rule alone."""
    if isinstance(reader, Rule):
        return f" AND {_OF_RULE}"
    return f" AND {READABLE}" if reader is not None else ""


def readable_params(reader: Reader | Rule | None) -> dict[str, Any]:
    """The filter's parameters (none without a caller)."""
    if isinstance(reader, Rule):
        return {
            "cr": None if reader.readers is None else list(reader.readers),
            "cl": None if reader.reader_labels is None else list(reader.reader_labels),
        }
    if reader is None:
        return {}
    return {"rg": reader.group_list(), "rc": reader.claim_terms()}


def readable_size(conn: psycopg.Connection[Any], version_id: int, reader: Reader) -> tuple[int, int]:
    """(chunks, analyzed length) of the part of a version `reader` may read: BM25's N and total length, and how
    many chunks an indexed search may expect to find."""
    row = conn.execute(
        "SELECT v.chunk_count - coalesce(h.chunks, 0), v.term_count - coalesce(h.length, 0) FROM kb_versions v"
        " LEFT JOIN (SELECT sum(vs.chunks) AS chunks, sum(vs.term_count) AS length FROM kb_version_rules vs"
        " WHERE vs.version_id = %(v)s AND NOT (" + READABLE + ")) h ON true WHERE v.id = %(v)s",
        {"v": version_id, **readable_params(reader)},
    ).fetchone()
    return (int(row[0]), int(row[1])) if row is not None else (0, 0)


# The rules of version %(v)s that the caller does not pass (over kb_version_rules, aliased `vs` for READABLE).
HIDDEN_RULES: Final = "SELECT vs.rule FROM kb_version_rules vs WHERE vs.version_id = %(v)s AND NOT (" + READABLE + ")"

# Per rule of a new version's restricted sources (numbered from 1 in the order of (readers, reader_labels)): its
# chunks and analyzed length, and per lexeme how many of its chunks hold it (the sums over its revisions).
_RULE_STATISTICS = (
    "WITH src AS MATERIALIZED (SELECT vs.revision_id, vs.readers, vs.reader_labels, r.chunk_count, r.term_count,"
    " (dense_rank() OVER (ORDER BY vs.readers, vs.reader_labels))::integer AS rule"
    " FROM kb_version_sources vs JOIN kb_source_revisions r ON r.id = vs.revision_id"
    " WHERE vs.version_id = %(v)s AND (vs.readers IS NOT NULL OR vs.reader_labels IS NOT NULL)),"
    " rules AS (INSERT INTO kb_version_rules (version_id, rule, readers, reader_labels, chunks, term_count)"
    " SELECT %(v)s, rule, readers, reader_labels, sum(chunk_count), sum(term_count) FROM src"
    " GROUP BY rule, readers, reader_labels)"
    " INSERT INTO kb_version_rule_terms (version_id, lexeme, rule, chunks)"
    " SELECT %(v)s, t.lexeme, src.rule, sum(t.chunks)"
    " FROM src JOIN kb_revision_terms t ON t.revision_id = src.revision_id"
    " GROUP BY t.lexeme, src.rule ORDER BY 2, 3"  # in the primary key's order
)


def rule_statistics(conn: psycopg.Connection[Any], version_id: int) -> None:
    """Write the per-rule statistics of a version that restricts some sources (inside the publishing transaction,
    after its sources and revisions' statistics)."""
    delete_rule_statistics(conn, [version_id])  # rows left under this id by versions deleted outside kbctl
    conn.execute(_RULE_STATISTICS, {"v": version_id})


def delete_rule_statistics(
    conn: psycopg.Connection[Any], version_ids: Sequence[int] = (), *, kb_id: int | None = None
) -> None:
    """Delete the per-rule statistics of versions being deleted, `version_ids` or every version of `kb_id`."""
    if kb_id is not None:
        conn.execute(
            "DELETE FROM kb_version_rule_terms WHERE version_id IN (SELECT id FROM kb_versions WHERE kb_id = %s)",
            (kb_id,),
        )
    if version_ids:
        conn.execute("DELETE FROM kb_version_rule_terms WHERE version_id = ANY(%s)", (list(version_ids),))
        conn.execute("DELETE FROM kb_version_rules WHERE version_id = ANY(%s)", (list(version_ids),))


def version_rules(conn: psycopg.Connection[Any], version_id: int) -> list[tuple[int, Rule, int]]:
    """The rules of a version that restricts some sources, each with its number and its chunks."""
    rows = conn.execute(
        "SELECT rule, readers, reader_labels, chunks FROM kb_version_rules WHERE version_id = %s ORDER BY rule",
        (version_id,),
    ).fetchall()
    return [(int(r[0]), Rule(r[1], r[2]), int(r[3])) for r in rows]


def store_calibration(
    conn: psycopg.Connection[Any],
    version_id: int,
    whole: float | None,
    open_bests: Sequence[float],
    rule_bests: Mapping[int, Sequence[float]],
) -> None:
    """Keep a version's background similarity (`whole`) with what it is made of: the per-question best
    similarities among its chunks behind no rule, and per rule among that rule's (empty: no chunks). Inside the
    publishing transaction, after `rule_statistics`."""
    conn.execute(
        "UPDATE kb_versions SET background_similarity = %s, background_bests = %s::real[] WHERE id = %s",
        (whole, list(open_bests), version_id),
    )
    if rule_bests:
        with conn.cursor() as cur:
            cur.executemany(
                "UPDATE kb_version_rules SET background_bests = %s::real[] WHERE version_id = %s AND rule = %s",
                [(list(bests), version_id, rule) for rule, bests in rule_bests.items()],
            )


def readable_background(conn: psycopg.Connection[Any], version_id: int, reader: Reader) -> float | None:
    """The background similarity of the part of a version `reader` may read: per background question the best of the
    arrays of what it reads (the chunks behind no rule, each rule it passes), then their quantile. None when it may
    read nothing, or when the version keeps no arrays for some of what it reads (published before they were kept;
    a reader of every rule then takes the whole version's, which is its own)."""
    from kbctl.embedding.background import joint_similarity  # numpy, which `kbctl get` need not import

    rows = conn.execute(
        "SELECT 0 AS rule, true, v.background_bests, v.background_similarity FROM kb_versions v WHERE v.id = %(v)s"
        " UNION ALL SELECT vs.rule, (" + READABLE + "), vs.background_bests, NULL FROM kb_version_rules vs"
        " WHERE vs.version_id = %(v)s ORDER BY rule",
        {"v": version_id, **readable_params(reader)},
    ).fetchall()
    if not rows:
        return None
    if all(r[1] for r in rows):
        return None if rows[0][3] is None else float(rows[0][3])
    read = [r[2] for r in rows if r[1]]
    if any(bests is None for bests in read):
        return None
    return joint_similarity(read)


def readable_counts(conn: psycopg.Connection[Any], reader: Reader) -> dict[str, tuple[int, int, int, int]]:
    """For each knowledge base whose serving version restricts some source: (sources, ready sources, chunks) that
    `reader` may read, and how many sources it may not. Knowledge bases that restrict nothing are not listed."""
    rows = conn.execute(
        "SELECT k.name, count(*) FILTER (WHERE ok), count(*) FILTER (WHERE ok AND state = 'ready'),"
        " coalesce(sum(chunks) FILTER (WHERE ok), 0), count(*) FILTER (WHERE NOT ok)"
        " FROM kb_knowledge_bases k"
        " JOIN kb_versions v ON v.kb_id = k.id AND v.number = k.current_version AND v.restricted_chunks > 0"
        " CROSS JOIN LATERAL (SELECT (" + READABLE + f") AS ok, {LIVE_STATE} AS state,"
        " coalesce(r.chunk_count, 0) AS chunks FROM kb_version_sources vs"
        " LEFT JOIN kb_source_revisions r ON r.id = vs.revision_id"
        f"{live_join('k.id')}"
        " WHERE vs.version_id = v.id) s GROUP BY k.name",
        readable_params(reader),
    ).fetchall()
    return {str(r[0]): (int(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in rows}
