"""Version history: list a knowledge base's versions, roll back to one, prune old ones, collect unused vectors."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime

from psycopg.rows import class_row
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from kbctl.errors import NotFoundError, RollbackError, UsageError
from kbctl.store.bm25 import delete_revision_terms, delete_version_terms, rebase_terms
from kbctl.store.connection import GC_LOCK_KEY, poll_lock
from kbctl.store.knowledgebases import KnowledgeBases
from kbctl.store.texts import delete_unused_texts

__all__ = ["GC_LOCK_KEY", "GcResult", "History", "RollbackResult", "VersionInfo"]

# Every apply and refresh holds this advisory lock shared for its whole run (see `applying`); garbage
# collection takes it exclusively, so it never deletes a vector that an apply in progress has cached and
# will reference only when it publishes. A fixed 64-bit key, next to the migrations' 0x6B6263746C_01.


class VersionInfo(BaseModel):
    """One retained version of a knowledge base, as `kbctl rollout history` lists it."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    number: int
    created_at: datetime
    change_cause: str
    chunk_count: int
    embedded_count: int
    reused_count: int
    model: str
    current: bool
    sources: int
    failed_sources: int


class RollbackResult(BaseModel):
    """What `rollout undo` did: the version that served before, the one serving now, the sources re-fetched next."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    name: str
    from_version: int
    to_version: int
    reset_sources: list[str]
    warnings: list[str] = Field(
        default_factory=list, exclude=True, description="A forced rollback of a knowledge base a Sync manages warns."
    )


class GcResult(BaseModel):
    """What garbage collection removed, or that it skipped because an apply was in progress."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    removed: int
    batches: int
    skipped: bool
    texts_removed: int = 0  # inline source texts no stored manifest names any more


class History(KnowledgeBases):
    """Version history: list, roll back, prune, and collect unused vectors."""

    def list_versions(self, name: str) -> list[VersionInfo]:
        """The retained versions of a knowledge base, newest first, the serving one marked `current`."""
        with self._conn.cursor(row_factory=class_row(VersionInfo)) as cur:
            versions = cur.execute(
                "SELECT v.number, v.created_at, v.change_cause, v.chunk_count, v.embedded_count, v.reused_count,"
                " v.model, coalesce(v.number = k.current_version, false) AS current,"
                " count(vs.source_name) AS sources,"
                " count(vs.source_name) FILTER (WHERE vs.state <> 'ready') AS failed_sources"
                " FROM kb_knowledge_bases k JOIN kb_versions v ON v.kb_id = k.id"
                " LEFT JOIN kb_version_sources vs ON vs.version_id = v.id"
                " WHERE k.name = %s GROUP BY v.id, k.current_version ORDER BY v.number DESC",
                (name,),
            ).fetchall()
        if not versions and self.get_kb(name) is None:
            raise NotFoundError(f'knowledgebase "{name}" not found')
        return versions

    def rollback_kb(
        self,
        name: str,
        to_version: int | None = None,
        *,
        timeout: float | None = 60.0,
        on_wait: Callable[[], None] | None = None,
    ) -> RollbackResult:
        """Make a retained version serve again (default: the newest one before the current), re-embedding nothing.

        One transaction under the knowledge base's lock. The live status of each source whose content
        differs between the two versions (or that only one of them has) is dropped, so its HTTP validators never
        describe content that no longer serves (the next refresh fetches it in full). The version's manifest
        becomes the one in force and the desired state (a new generation, observed at once, when it differs: like
        `kubectl rollout undo`, this drops a manifest still pending for a controller). Conditions are the caller's
        to update.
        """
        conn = self._conn
        with self.kb_lock(name, timeout=timeout, on_wait=on_wait), conn.transaction():
            kb = conn.execute(
                "SELECT id, current_version FROM kb_knowledge_bases WHERE name = %s FOR UPDATE", (name,)
            ).fetchone()
            if kb is None or kb[1] is None:
                raise NotFoundError(f'knowledgebase "{name}" not found')
            kb_id, current = int(kb[0]), int(kb[1])
            kept = [int(r[0]) for r in conn.execute("SELECT number FROM kb_versions WHERE kb_id = %s", (kb_id,))]
            target = to_version if to_version is not None else max((n for n in kept if n < current), default=None)
            if target is None:
                raise NotFoundError(f'knowledgebase "{name}" has no version before {current} to roll back to')
            if target == current:
                raise RollbackError(f"version {target} is already current")
            if target not in kept:
                numbers = ", ".join(str(n) for n in sorted(kept))
                raise NotFoundError(f'knowledgebase "{name}" has no version {target} (versions kept: {numbers})')
            reset = conn.execute(
                "WITH served AS (SELECT v.number, vs.source_name, vs.revision_id FROM kb_versions v"
                "  JOIN kb_version_sources vs ON vs.version_id = v.id"
                "  WHERE v.kb_id = %(kb)s AND v.number IN (%(old)s, %(new)s)),"
                " differing AS (SELECT coalesce(o.source_name, n.source_name) AS source_name"
                "  FROM (SELECT * FROM served WHERE number = %(old)s) o"
                "  FULL JOIN (SELECT * FROM served WHERE number = %(new)s) n ON n.source_name = o.source_name"
                "  WHERE o.revision_id IS DISTINCT FROM n.revision_id OR o.source_name IS NULL OR"
                " n.source_name IS NULL)"
                " DELETE FROM kb_source_status s USING differing d"
                " WHERE s.kb_id = %(kb)s AND s.source_name = d.source_name RETURNING s.source_name",
                {"kb": kb_id, "old": current, "new": target},
            ).fetchall()
            # The version's manifest becomes the desired state, reconciled at once: a new generation when it
            # differs from what was desired (a pending manifest a controller has not applied yet is dropped).
            conn.execute(
                "UPDATE kb_knowledge_bases k SET current_version = v.number, manifest = v.manifest,"
                " labels = coalesce(v.manifest -> 'metadata' -> 'labels', '{}'), desired_manifest = NULL,"
                " desired_sha256 = NULL,"
                " generation = k.generation + (coalesce(k.desired_manifest, cur.manifest) <> v.manifest)::int,"
                " observed_generation = k.generation + (coalesce(k.desired_manifest, cur.manifest) <> v.manifest)::int,"
                " updated_at = now()"
                " FROM kb_versions v, kb_versions cur WHERE k.id = %(kb)s AND v.kb_id = k.id AND v.number = %(new)s"
                " AND cur.kb_id = k.id AND cur.number = %(old)s",
                {"kb": kb_id, "new": target, "old": current},
            )
        return RollbackResult(
            name=name, from_version=current, to_version=target, reset_sources=sorted(str(r[0]) for r in reset)
        )

    def prune_history(self, kb_id: int, keep: int) -> int:
        """Delete the versions of a knowledge base beyond the newest `keep`, never the current one; return how many.

        Revisions no remaining version serves go too (their chunks cascade); the vectors they used stay in
        the cache until `collect_garbage`. Call it under the knowledge base's lock, after publishing.
        """
        if keep < 1:
            raise UsageError(f"keep must be at least 1, got {keep}")
        conn = self._conn
        with conn.transaction():
            gone = conn.execute(
                "DELETE FROM kb_versions v USING kb_knowledge_bases k"
                " WHERE v.kb_id = %(kb)s AND k.id = v.kb_id AND v.number IS DISTINCT FROM k.current_version"
                " AND v.number NOT IN"
                " (SELECT number FROM kb_versions WHERE kb_id = %(kb)s ORDER BY number DESC LIMIT %(keep)s)"
                " RETURNING v.id",
                {"kb": kb_id, "keep": keep},
            ).fetchall()
            deleted = len(gone)
            if deleted:
                rebase_terms(conn, [int(r[0]) for r in gone])
                delete_version_terms(conn, [int(r[0]) for r in gone])
                dropped = conn.execute(
                    "DELETE FROM kb_source_revisions r WHERE r.kb_id = %s"
                    " AND NOT EXISTS (SELECT 1 FROM kb_version_sources vs WHERE vs.revision_id = r.id) RETURNING r.id",
                    (kb_id,),
                ).fetchall()
                delete_revision_terms(conn, [int(r[0]) for r in dropped])
        return deleted

    def _lock_shared(self) -> None:
        poll_lock(self._try_shared)  # never blocked on: see poll_lock

    def _try_shared(self) -> bool:
        row = self._conn.execute("SELECT pg_try_advisory_lock_shared(%s)", (GC_LOCK_KEY,)).fetchone()
        return bool(row and row[0])

    def _unlock_shared(self) -> None:
        self._conn.execute("SELECT pg_advisory_unlock_shared(%s)", (GC_LOCK_KEY,))

    @contextmanager
    def applying(self) -> Iterator[None]:
        """Hold the garbage-collection lock shared while an apply or refresh runs (applies never wait on each other)."""
        self._lock_shared()
        try:
            yield
        finally:
            self._unlock_shared()

    def collect_garbage(self, batch: int = 1000) -> GcResult:
        """Delete the cached vectors no chunk references, `batch` at a time, each batch in its own transaction.

        Skips (skipped=True, nothing deleted) while any apply or refresh holds `applying`, or another
        collection runs.
        """
        if batch < 1:
            raise UsageError(f"batch must be at least 1, got {batch}")
        conn = self._conn
        row = conn.execute("SELECT pg_try_advisory_lock(%s)", (GC_LOCK_KEY,)).fetchone()
        if row is None or not row[0]:
            return GcResult(removed=0, batches=0, skipped=True)
        removed = batches = after = 0
        try:
            while True:
                with conn.transaction():
                    ids = conn.execute(
                        "DELETE FROM kb_embeddings WHERE id IN (SELECT e.id FROM kb_embeddings e WHERE e.id > %s"
                        " AND NOT EXISTS (SELECT 1 FROM kb_chunks c WHERE c.embedding_id = e.id)"
                        " ORDER BY e.id LIMIT %s) RETURNING id",
                        (after, batch),
                    ).fetchall()
                if not ids:
                    break
                batches, removed, after = batches + 1, removed + len(ids), max(int(r[0]) for r in ids)
                if len(ids) < batch:
                    break
            with conn.transaction():
                texts = delete_unused_texts(conn)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (GC_LOCK_KEY,))
        return GcResult(removed=removed, batches=batches, skipped=False, texts_removed=texts)
