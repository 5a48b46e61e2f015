"""Knowledge bases: their rows (desired and applied manifests, generations, conditions, applysets), the summaries
`get` lists, and deleting one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from typing import Any, Final

from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from kbctl.manifest.digest import sha256_json
from kbctl.store.bm25 import delete_revision_terms, delete_version_terms
from kbctl.store.connection import GC_LOCK_KEY, Connected
from kbctl.store.rows import LIVE_STATE, KnowledgeBaseRow, QueryTarget, SummaryRow, live_join
from kbctl.store.texts import Packing, pack, store_texts, unpack

__all__ = ["KnowledgeBases"]

# The columns of a KnowledgeBaseRow: never the manifests themselves (see KnowledgeBaseRow).
_KB_COLUMNS = (
    "id, name, labels, current_version, created_at, updated_at, generation, observed_generation, conditions,"
    " desired_manifest IS NOT NULL AS pending, applyset"
)

_SOURCE_COUNTS: Final = (
    # A knowledge base's sources (those of the serving version, else those with a live state that its last
    # applied manifest still names) and how many are ready: a live state (the last fetch) wins over the version's
    # (kbctl.store.rows). For a statement with `k` (id, manifest) and `v` (its serving version, or NULLs) in scope.
    "SELECT count(*) AS sources, count(*) FILTER (WHERE u.state = 'ready') AS ready_sources FROM ("
    f" SELECT {LIVE_STATE} AS state FROM kb_version_sources vs{live_join('k.id')}"
    " WHERE vs.version_id = v.id"
    " UNION ALL"
    " SELECT ss.state FROM kb_source_status ss"
    " WHERE v.id IS NULL AND ss.kb_id = k.id AND split_part(ss.source_name, '/', 1) IN"
    "  (SELECT jsonb_array_elements(k.manifest -> 'spec' -> 'sources') ->> 'name')"
    ") u"
)


class KnowledgeBases(Connected):
    """The knowledge bases' rows (kb_knowledge_bases)."""

    def get_kb(self, name: str) -> KnowledgeBaseRow | None:
        """The knowledge base called `name`, or None."""
        with self._conn.cursor(row_factory=class_row(KnowledgeBaseRow)) as cur:
            return cur.execute(
                "SELECT " + _KB_COLUMNS + " FROM kb_knowledge_bases WHERE name = %s",
                (name,),
            ).fetchone()

    def list_kbs(self) -> list[KnowledgeBaseRow]:
        """Every knowledge base, by name."""
        with self._conn.cursor(row_factory=class_row(KnowledgeBaseRow)) as cur:
            return cur.execute("SELECT " + _KB_COLUMNS + " FROM kb_knowledge_bases ORDER BY name").fetchall()

    def list_summaries(self) -> list[SummaryRow]:
        """Every knowledge base with what `get` shows, by name, in one statement.

        A source's state is its live one (the last fetch) when it has one, else the serving version's; before
        any version, the sources are those with a live state that the last applied manifest still names."""
        with self._conn.cursor(row_factory=class_row(SummaryRow)) as cur:
            return cur.execute(
                "SELECT " + ", ".join(f"k.{f.name}" for f in fields(KnowledgeBaseRow)) + ","
                " coalesce(coalesce(v.manifest, k.manifest) #>> '{spec,description}', '') AS description,"
                " coalesce(v.model, k.manifest #>> '{spec,embedding,model}', '') AS model,"
                " coalesce(v.chunk_count, 0) AS chunks, s.sources, s.ready_sources"
                " FROM (SELECT " + _KB_COLUMNS + ", manifest FROM kb_knowledge_bases) k"
                " LEFT JOIN kb_versions v ON v.kb_id = k.id AND v.number = k.current_version"
                f" LEFT JOIN LATERAL ({_SOURCE_COUNTS}) s ON true"
                " ORDER BY k.name"
            ).fetchall()

    def source_counts(self, kb_id: int) -> tuple[int, int]:
        """(sources, ready ones) of a knowledge base, counted as `get` counts them (see list_summaries)."""
        row = self._conn.execute(
            "SELECT s.sources, s.ready_sources FROM (SELECT id, manifest, current_version FROM kb_knowledge_bases"
            " WHERE id = %s) k LEFT JOIN kb_versions v ON v.kb_id = k.id AND v.number = k.current_version"
            f" LEFT JOIN LATERAL ({_SOURCE_COUNTS}) s ON true",
            (kb_id,),
        ).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def pending_count(self) -> int:
        """How many knowledge bases have a recorded generation not reconciled yet (a controller's queue)."""
        row = self._conn.execute(
            "SELECT count(*) FROM kb_knowledge_bases WHERE generation > observed_generation"
        ).fetchone()
        return int(row[0]) if row else 0

    def join_applyset(self, names: Sequence[str], applyset: str) -> None:
        """Make the stored knowledge bases `names` members of `applyset` (those already in it stay)."""
        self._conn.execute(
            "UPDATE kb_knowledge_bases SET applyset = %s WHERE name = ANY(%s) AND applyset IS DISTINCT FROM %s",
            (applyset, list(names), applyset),
        )

    def last_manifest(self, kb_id: int) -> dict[str, Any]:
        """The manifest last applied to a knowledge base (what describes it before any version is published)."""
        row = self._conn.execute("SELECT manifest FROM kb_knowledge_bases WHERE id = %s", (kb_id,)).fetchone()
        return unpack(self._conn, dict(row[0])) if row else {}

    def desired_manifest(self, kb_id: int) -> dict[str, Any] | None:
        """The desired manifest waiting to be reconciled, or None."""
        row = self._conn.execute("SELECT desired_manifest FROM kb_knowledge_bases WHERE id = %s", (kb_id,)).fetchone()
        return unpack(self._conn, dict(row[0])) if row and row[0] is not None else None

    def query_target(self, name: str) -> QueryTarget | None:
        """The knowledge base `name` as a query needs it, in one statement that never ships the whole manifest."""
        with self._conn.cursor(row_factory=class_row(QueryTarget)) as cur:
            return cur.execute(
                "SELECT k.id AS kb_id, k.labels, k.conditions, v.id AS version_id, v.number, v.model, v.chunk_count,"
                " v.retrieval, v.restricted_chunks, v.background_similarity, v.background_keyword"
                " FROM (SELECT " + _KB_COLUMNS + ", manifest FROM kb_knowledge_bases) k"
                " LEFT JOIN kb_versions v ON v.kb_id = k.id AND v.number = k.current_version"
                " WHERE k.name = %s",
                (name,),
            ).fetchone()

    def record_desired(
        self,
        name: str,
        manifest: dict[str, Any],
        *,
        digest: str | None = None,
        packed: Packing | None = None,
        files_changed: bool = False,
    ) -> KnowledgeBaseRow:
        """Record `manifest` as the desired state of `name`; a change bumps the generation, and so does
        `files_changed` (the files of its path: sources changed under the same manifest: an apply found them so).

        The desired state is compared with what is desired already: a pending manifest, or the manifest
        of the serving version, by hash (`digest`: `sha256_json(manifest)`, computed here when not given). A new
        knowledge base gets a row with generation 1 and no version yet. `packed` makes `pack(manifest)` when the caller
        has it (`packing`) (hashing every inline text again costs ~0.15 s per 90 MB).
        """
        labels = Jsonb(manifest.get("metadata", {}).get("labels", {}))
        digest = digest or sha256_json(manifest)
        with self._conn.transaction():
            # Hashes first: the manifest of a large knowledge base (all its inline text) is read back only for a
            # pending manifest recorded before its hash was kept.
            row = self._conn.execute(
                "SELECT k.id, coalesce(k.desired_sha256, CASE WHEN k.desired_manifest IS NULL THEN v.manifest_sha256"
                " END), k.desired_manifest IS NOT NULL AND k.desired_sha256 IS NULL, k.applied_sha256"
                " FROM kb_knowledge_bases k"
                " LEFT JOIN kb_versions v ON v.kb_id = k.id AND v.number = k.current_version"
                " WHERE k.name = %s FOR UPDATE OF k",
                (name,),
            ).fetchone()
            if row is not None and row[2]:
                legacy = self._conn.execute(
                    "SELECT desired_manifest FROM kb_knowledge_bases WHERE id = %s", (row[0],)
                ).fetchone()
                changed = legacy is None or unpack(self._conn, legacy[0]) != manifest
            else:
                changed = row is not None and row[1] != digest
            newly_applied = row is None or row[3] != digest
            changed = changed or (row is not None and files_changed)
            if row is None or changed or newly_applied:
                desired, texts = packed() if packed is not None else pack(manifest)
                store_texts(self._conn, texts)
            if row is None:
                self._conn.execute(
                    "INSERT INTO kb_knowledge_bases (name, labels, manifest, generation, observed_generation,"
                    " desired_manifest, desired_sha256) VALUES (%s, %s, %s, 1, 0, %s, %s)",
                    (name, labels, Jsonb(desired), Jsonb(desired), digest),
                )
            elif changed:
                self._conn.execute(
                    "UPDATE kb_knowledge_bases SET desired_manifest = %s, desired_sha256 = %s,"
                    " generation = generation + 1, updated_at = now() WHERE id = %s",
                    (Jsonb(desired), digest, row[0]),
                )
            # What was applied, and at which generation (kbctl.engine.drift): a rollback leaves it as it is.
            self._conn.execute(
                "UPDATE kb_knowledge_bases SET applied_sha256 = %(digest)s, applied_generation = generation,"
                " applied_manifest = CASE WHEN %(new)s THEN %(manifest)s ELSE applied_manifest END"
                " WHERE name = %(name)s",
                {
                    "digest": digest,
                    "new": newly_applied,
                    "manifest": Jsonb(desired) if newly_applied else None,
                    "name": name,
                },
            )
        stored = self.get_kb(name)
        assert stored is not None
        return stored

    def finish_generation(self, kb_id: int, generation: int, conditions: Sequence[dict[str, Any]]) -> None:
        """Mark `generation` reconciled; a newer desired manifest recorded meanwhile stays pending."""
        self._conn.execute(
            "UPDATE kb_knowledge_bases SET observed_generation = greatest(observed_generation, %s),"
            " conditions = %s,"
            " desired_manifest = CASE WHEN generation <= %s THEN NULL ELSE desired_manifest END,"
            " desired_sha256 = CASE WHEN generation <= %s THEN NULL ELSE desired_sha256 END"
            " WHERE id = %s",
            (generation, Jsonb(list(conditions)), generation, generation, kb_id),
        )

    def set_conditions(self, kb_id: int, conditions: Sequence[dict[str, Any]]) -> None:
        """Replace the conditions of a knowledge base."""
        self._conn.execute(
            "UPDATE kb_knowledge_bases SET conditions = %s WHERE id = %s", (Jsonb(list(conditions)), kb_id)
        )

    def delete_kb(self, name: str) -> tuple[int, int] | None:
        """Delete a knowledge base with its versions, chunks and the vectors no other KB uses.

        Returns (chunks deleted, vectors deleted), or None when there is no such knowledge base.
        """
        with self._conn.transaction():
            kb = self._conn.execute("SELECT id FROM kb_knowledge_bases WHERE name = %s FOR UPDATE", (name,)).fetchone()
            if kb is None:
                return None
            row = self._conn.execute(
                "SELECT count(*), coalesce(array_agg(DISTINCT c.embedding_id), '{}') FROM kb_chunks c"
                " JOIN kb_source_revisions r ON r.id = c.revision_id WHERE r.kb_id = %s",
                (kb[0],),
            ).fetchone()
            assert row is not None
            chunks, embedding_ids = int(row[0]), list(row[1])
            delete_version_terms(self._conn, kb_id=kb[0])
            delete_revision_terms(self._conn, kb_id=kb[0])
            self._conn.execute("DELETE FROM kb_knowledge_bases WHERE id = %s", (kb[0],))
            lock = self._conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (GC_LOCK_KEY,)).fetchone()
            if not (lock and lock[0]):  # an apply is running: it may be about to use these vectors
                return chunks, 0
            cur = self._conn.execute(
                "DELETE FROM kb_embeddings e WHERE e.id = ANY(%s)"
                " AND NOT EXISTS (SELECT 1 FROM kb_chunks c WHERE c.embedding_id = e.id)",
                (embedding_ids,),
            )
            return chunks, cur.rowcount

    def counts(self) -> dict[str, int]:
        """Row counts of the main tables (for tests, benchmarks and `describe`)."""
        tables = ("kb_knowledge_bases", "kb_versions", "kb_source_revisions", "kb_chunks", "kb_embeddings")
        return {
            t.removeprefix("kb_"): int(self._conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0])  # type: ignore[index]
            for t in tables
        }
