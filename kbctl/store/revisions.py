"""Revisions: a source's content chunked and embedded under one set of settings, stored ahead of the version that
serves it."""

from __future__ import annotations

from collections.abc import Sequence

from kbctl.store.bulk import insert_revisions
from kbctl.store.connection import Connected
from kbctl.store.rows import NewRevision, WrittenRevision

__all__ = ["Revisions"]


class Revisions(Connected):
    """The stored revisions of sources (kb_source_revisions) and their chunks."""

    def find_revision(self, kb_id: int, source_name: str, revision_key: str) -> tuple[int, int] | None:
        """(id, chunk count) of an already stored revision with this key, or None."""
        row = self._conn.execute(
            "SELECT id, chunk_count FROM kb_source_revisions"
            " WHERE kb_id = %s AND source_name = %s AND revision_key = %s",
            (kb_id, source_name, revision_key),
        ).fetchone()
        return (row[0], row[1]) if row else None

    def write_revisions(self, kb_id: int, revisions: Sequence[NewRevision]) -> list[WrittenRevision]:
        """Store new revisions with their chunks in one transaction, ahead of the version that will serve them (no
        version points at them until one is published; kbctl.engine.ingest writes a large ingest so, a slice at a
        time)."""
        with self._conn.transaction():
            ids = insert_revisions(self._conn, kb_id, revisions)
        return [
            WrittenRevision(
                r.source_name,
                r.revision_key,
                ids[(r.source_name, r.revision_key)],
                r.chunk_count,
                r.embedded,
                r.truncated,
            )
            for r in revisions
        ]

    def stored_revisions(self, kb_id: int) -> dict[tuple[str, str], tuple[int, int]]:
        """Every stored revision of a knowledge base: (source name, revision key) → (id, chunk count)."""
        rows = self._conn.execute(
            "SELECT source_name, revision_key, id, chunk_count FROM kb_source_revisions WHERE kb_id = %s", (kb_id,)
        ).fetchall()
        return {(str(n), str(k)): (int(i), int(c)) for n, k, i, c in rows}

    def revision_chunks(self, revision_id: int) -> list[tuple[bytes, int]]:
        """(sha256 of the embedded text, tokens) of each chunk of a stored revision, in order."""
        rows = self._conn.execute(
            "SELECT e.text_sha256, c.token_count FROM kb_chunks c JOIN kb_embeddings e ON e.id = c.embedding_id"
            " WHERE c.revision_id = %s ORDER BY c.ordinal",
            (revision_id,),
        ).fetchall()
        return [(bytes(h), int(t)) for h, t in rows]
