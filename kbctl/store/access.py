"""Document-level access in SQL: the one filter every statement that selects a version's chunks for a caller adds.

A version keeps, per source row (kb_version_sources), who may read it: `readers` (groups, any one suffices; NULL:
no group rule) and `reader_labels` (`key=value` terms the caller's claims must all hold; NULL: none), written at
publish from the manifest's `access` (kbctl.manifest.Access.columns). `kb_versions.restricted_chunks` counts the
chunks behind a rule, so a query of a version without any (every knowledge base that sets no `access`) adds no
filter at all.

The filter stands in the statement that selects candidates (the vector search's join, BM25's selection and its
statistics), before any ranking or cut, so what a caller may not read is never ranked, counted or scored: topK,
the best score, "nothing relevant", `--explain` and BM25's idf are all of the readable documents alone. Its Python
form, for checks, is kbctl.inputs.access.may_read.
"""

from __future__ import annotations

from typing import Any, Final

import psycopg

from kbctl.inputs.access import Reader

__all__ = ["READABLE", "readable", "readable_counts", "readable_params", "readable_size"]

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
        "SELECT coalesce(sum(r.chunk_count), 0), coalesce(sum(r.term_count), 0)"
        " FROM kb_version_sources vs JOIN kb_source_revisions r ON r.id = vs.revision_id"
        " WHERE vs.version_id = %(v)s" + readable(reader),
        {"v": version_id, **readable_params(reader)},
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


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
