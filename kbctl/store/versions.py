"""Versions: reading a knowledge base's versions and their sources, and publishing a new one (its revisions,
sources, term statistics, live statuses and calibration, made current in one transaction)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from kbctl.defaults import LANGUAGE
from kbctl.store.access import rule_statistics
from kbctl.store.bm25 import version_statistics
from kbctl.store.bulk import insert_revisions
from kbctl.store.embeddings import Embeddings
from kbctl.store.rows import LiveSourceRow, NewRevision, VersionRow, VersionSourceRow
from kbctl.store.statuses import SourceStatuses
from kbctl.store.texts import Packing, pack, store_texts, unpack

if TYPE_CHECKING:
    from kbctl.embedding import Vector

__all__ = ["Versions"]


class Versions(SourceStatuses, Embeddings):
    """A knowledge base's versions (kb_versions) and their sources (kb_version_sources)."""

    def get_version(
        self, kb_id: int, number: int, *, known: tuple[str, dict[str, Any]] | None = None, packed: bool = False
    ) -> VersionRow | None:
        """Version `number` of a knowledge base, or None.

        `known` is a (sha256, manifest) pair the caller holds: when the version's manifest has that hash, the
        caller's copy is used instead of reading it back (with inline sources it holds all their text).
        `packed`: the manifest as stored, each inline text standing as its sha256 (kbctl.store.texts), not read
        back from the texts (87 MB of them at 100k chunks); enough to compare it with another (packed) manifest.
        """
        sha = known[0] if known is not None else None
        with self._conn.cursor(row_factory=class_row(VersionRow)) as cur:
            row = cur.execute(
                "SELECT id, number, CASE WHEN manifest_sha256 = %s THEN NULL ELSE manifest END AS manifest,"
                " manifest_sha256, model, chunk_count, embedded_count, reused_count, created_at, background_similarity,"
                " background_keyword, restricted_chunks, background_bests IS NOT NULL AS background_parts"
                " FROM kb_versions WHERE kb_id = %s AND number = %s",
                (sha, kb_id, number),
            ).fetchone()
        if row is not None and row.manifest is None and known is not None:
            return replace(row, manifest=known[1])
        if row is None or packed:
            return row
        return replace(row, manifest=unpack(self._conn, row.manifest))

    def answer_spec(self, version_id: int) -> dict[str, Any]:
        """The spec.answer a version was published with ({} when it had none)."""
        row = self._conn.execute("SELECT answer FROM kb_versions WHERE id = %s", (version_id,)).fetchone()
        return dict(row[0]) if row is not None and row[0] else {}

    def version_sources(self, version_id: int) -> list[VersionSourceRow]:
        """The sources of a version in manifest order, with the revision each one serves."""
        with self._conn.cursor(row_factory=class_row(VersionSourceRow)) as cur:
            return cur.execute(
                "SELECT vs.position, vs.source_name, vs.source_sha256, vs.revision_id, vs.state, vs.message,"
                " vs.embedded_count, vs.reused_count, vs.readers, vs.reader_labels, r.origin, r.title,"
                " coalesce(r.chunk_count, 0) AS chunk_count, r.content_sha256,"
                " r.created_at AS revision_created_at"
                " FROM kb_version_sources vs LEFT JOIN kb_source_revisions r ON r.id = vs.revision_id"
                " WHERE vs.version_id = %s ORDER BY vs.position",
                (version_id,),
            ).fetchall()

    def next_version_number(self, kb_id: int | None) -> int:
        """The number the next version of a knowledge base gets (1 for a new one)."""
        if kb_id is None:
            return 1
        row = self._conn.execute("SELECT max(number) FROM kb_versions WHERE kb_id = %s", (kb_id,)).fetchone()
        return (row[0] or 0) + 1 if row else 1

    def publish(
        self,
        *,
        name: str,
        manifest: dict[str, Any],
        manifest_sha256: str,
        model: str,
        number: int,
        new_revisions: Sequence[NewRevision],
        sources: Sequence[VersionSourceRow],
        statuses: Sequence[LiveSourceRow],
        change_cause: str = "",
        stored_statuses: Mapping[str, LiveSourceRow] | None = None,
        packed: Packing | None = None,
        background: Sequence[Vector] = (),
        language: str = LANGUAGE,
    ) -> int:
        """Write a complete version and make it current, all in one transaction; return its number.

        `background`, the background questions' vectors for `model`, calibrates the version: its background
        similarity is stored with it, and per access rule what a caller's is made of (kbctl.embedding.background,
        kbctl.store.access), and its background keyword share, searched in `language` (the spec's); without them it
        has none.

        The live source statuses (with the HTTP validators of the content this version serves) are
        written in the same transaction, so they can never describe content that is not published;
        `stored_statuses`, as read before, spares rewriting those that changed only in when they were checked;
        `packed`, making `pack(manifest)` when the caller has one (`packing`), spares hashing every inline text again.
        """
        labels = manifest.get("metadata", {}).get("labels", {})
        packed_manifest, texts = packed() if packed is not None else pack(manifest)
        with self._conn.transaction():
            store_texts(self._conn, texts)
            row = self._conn.execute(
                "INSERT INTO kb_knowledge_bases (name, labels, manifest) VALUES (%s, %s, %s)"
                " ON CONFLICT (name) DO UPDATE SET labels = excluded.labels, manifest = excluded.manifest,"
                " updated_at = now() RETURNING id",
                (name, Jsonb(labels), Jsonb(packed_manifest)),
            ).fetchone()
            assert row is not None
            kb_id = int(row[0])
            # Keyed by source too: two sources with the same text and settings share a key, not a revision.
            new_ids = insert_revisions(self._conn, kb_id, new_revisions)
            chunks = sum(s.chunk_count for s in sources if s.serves)
            restricted = sum(s.chunk_count for s in sources if s.serves and s.restricted)
            embedded = sum(s.embedded_count for s in sources)
            vrow = self._conn.execute(
                "INSERT INTO kb_versions (kb_id, number, manifest, manifest_sha256, model, chunk_count,"
                " embedded_count, reused_count, change_cause, retrieval, answer, restricted_chunks)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                " RETURNING id",
                (
                    kb_id,
                    number,
                    Jsonb(packed_manifest),
                    manifest_sha256,
                    model,
                    chunks,
                    embedded,
                    chunks - embedded,
                    change_cause,
                    Jsonb(manifest.get("spec", {}).get("retrieval", {})),
                    Jsonb(manifest.get("spec", {}).get("answer", {})),
                    restricted,
                ),
            ).fetchone()
            assert vrow is not None
            self._copy_version_sources(int(vrow[0]), sources, new_ids)
            version_statistics(self._conn, kb_id, int(vrow[0]))
            if restricted:
                rule_statistics(self._conn, int(vrow[0]))
            self._write_statuses(kb_id, statuses, stored_statuses)
            if background:  # last: an indexed search's settings last until the end of the transaction
                self._calibrate(int(vrow[0]), model, chunks, restricted, background, language)
            self._conn.execute("UPDATE kb_knowledge_bases SET current_version = %s WHERE id = %s", (number, kb_id))
        return number

    def _copy_version_sources(
        self, version_id: int, sources: Sequence[VersionSourceRow], new_ids: Mapping[tuple[str, str], int]
    ) -> None:
        """Write a version's sources, each with the revision it serves (a new one's id from `new_ids`)."""
        # One COPY: the pipeline of INSERTs it replaces took ~0.35 s (profiled) for a version of 9,091 sources.
        with (
            self._conn.cursor() as cur,
            cur.copy(
                "COPY kb_version_sources (version_id, position, source_name, source_sha256, revision_id, state,"
                " message, embedded_count, reused_count, readers, reader_labels) FROM STDIN (FORMAT BINARY)"
            ) as copy,
        ):
            copy.set_types(["int8", "int4", "text", "text", "int8", "text", "text", "int4", "int4", "text[]", "text[]"])
            for s in sources:
                copy.write_row(
                    (
                        version_id,
                        s.position,
                        s.source_name,
                        s.source_sha256,
                        new_ids[(s.source_name, s.revision_key)] if s.revision_key is not None else s.revision_id,
                        s.state,
                        s.message,
                        s.embedded_count,
                        s.reused_count,
                        None if s.readers is None else list(s.readers),
                        None if s.reader_labels is None else list(s.reader_labels),
                    )
                )

    def analyze_versions(self) -> None:
        """Refresh PostgreSQL's statistics of the versions' sources, of the two columns searches join by (~10 ms at
        18,182 rows; the whole table's took ~45). Until then the planner takes a new version for one of a few
        sources and plans its searches so: an indexed search reads the whole version into a hash instead of
        looking up its 100 candidates (at 90,910 chunks ~400 ms a query; at 7,910 chunks of 791 sources, 9.3 ms
        against 2.6), until autovacuum's ANALYZE comes (~40 s after the publish at 90,910 chunks)."""
        self._conn.execute("ANALYZE kb_version_sources (version_id, revision_id)")
