"""Document-level access in SQL: the one filter every statement that selects a version's chunks for a caller adds.

A version keeps, per source row (kb_version_sources), who may read it: `readers` (groups, any one suffices; NULL:
no group rule) and `reader_labels` (`key=value` terms the caller's claims must all hold; NULL: none), written at
publish from the manifest's `access` (kbctl.manifest.Access.columns). `kb_versions.restricted_chunks` counts the
chunks behind a rule, so a query of a version without any (every knowledge base that sets no `access`) adds no
filter at all.

A version that restricts some sources also keeps, per rule (one (readers, reader_labels) pair), the statistics of
the chunks behind it (`kb_version_rules`: chunks and analyzed length; `kb_version_rule_terms`: each lexeme's document
frequency), written at publish. What a caller may read of a version is then the version's statistics minus those of
the rules it does not pass: a few rows per question word, however many sources the version has.

The filter stands in the statement that selects candidates (the vector search's join, BM25's selection and its
statistics), before any ranking or cut, so what a caller may not read is never ranked, counted or scored: topK,
the best score, "nothing relevant", `--explain` and BM25's idf are all of the readable documents alone. Its Python
form, for checks, is kbctl.inputs.access.may_read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import psycopg

from kbctl.inputs.access import Reader

__all__ = [
    "HIDDEN_RULES",
    "READABLE",
    "delete_rule_statistics",
    "readable",
    "readable_counts",
    "readable_params",
    "readable_size",
    "rule_statistics",
]

# The rule, over a kb_version_sources row `vs`, for the caller's groups %(rg)s and claim terms %(rc)s.
READABLE: Final = (
    "(vs.readers IS NULL OR vs.readers && %(rg)s::text[])"
    " AND (vs.reader_labels IS NULL OR vs.reader_labels <@ %(rc)s::text[])"
)


def readable(reader: Reader | None) -> str:
    """The filter to AND into a statement over `vs`: READABLE for a caller, nothing without one (no rule to check:
    the version restricts nothing)."""
    return f" AND {READABLE}" if reader is not None else ""


def readable_params(reader: Reader | None) -> dict[str, Any]:
    """The filter's parameters (none without a caller)."""
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


def readable_counts(conn: psycopg.Connection[Any], reader: Reader) -> dict[str, tuple[int, int, int, int]]:
    """For each knowledge base whose serving version restricts some source: (sources, ready sources, chunks) that
    `reader` may read, and how many sources it may not. Knowledge bases that restrict nothing are not listed."""
    rows = conn.execute(
        "SELECT k.name, count(*) FILTER (WHERE ok), count(*) FILTER (WHERE ok AND state = 'ready'),"
        " coalesce(sum(chunks) FILTER (WHERE ok), 0), count(*) FILTER (WHERE NOT ok)"
        " FROM kb_knowledge_bases k"
        " JOIN kb_versions v ON v.kb_id = k.id AND v.number = k.current_version AND v.restricted_chunks > 0"
        " CROSS JOIN LATERAL (SELECT (" + READABLE + ") AS ok, coalesce(ss.state, vs.state) AS state,"
        " coalesce(r.chunk_count, 0) AS chunks FROM kb_version_sources vs"
        " LEFT JOIN kb_source_revisions r ON r.id = vs.revision_id"
        " LEFT JOIN kb_source_status ss ON ss.kb_id = k.id AND ss.source_name = vs.source_name"
        " WHERE vs.version_id = v.id) s GROUP BY k.name",
        readable_params(reader),
    ).fetchall()
    return {str(r[0]): (int(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in rows}
