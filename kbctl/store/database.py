"""The PostgreSQL store: one connection, the schema, and every read and write kbctl makes."""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any, Final, ParamSpec, TypeVar

import psycopg
from pgvector.psycopg import register_vector
from psycopg import errors as pgerrors
from psycopg.pq import TransactionStatus
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from kbctl.defaults import INDEX_LOOKUP_SECONDS, LOCK_POLL_SECONDS
from kbctl.errors import StoreError
from kbctl.inputs.access import Reader
from kbctl.manifest.digest import sha256_json
from kbctl.store.access import (
    Rule,
    readable_background,
    readable_counts,
    readable_size,
    rule_statistics,
    store_calibration,
    version_rules,
)
from kbctl.store.bm25 import (
    containing_all_words,
    delete_revision_terms,
    delete_version_terms,
    keyword_search,
    version_statistics,
)
from kbctl.store.bulk import insert_revisions
from kbctl.store.migrations import migrate, schema_problem
from kbctl.store.rows import (
    ChunkHit,
    ChunkRow,
    KnowledgeBaseRow,
    NewRevision,
    QueryTarget,
    SourceRow,
    SummaryRow,
    VersionRow,
    WrittenRevision,
)
from kbctl.store.search import (
    EF_SEARCH,
    EXACT_SCAN_MAX,
    VectorIndex,
    as_float32,
    build_vector_index,
    exact_search,
    indexed_search,
    pgvector_version,
    vector_index,
)
from kbctl.store.texts import Packing, pack, store_texts, unpack

if TYPE_CHECKING:
    from datetime import datetime

    from kbctl.embedding import Vector
from kbctl.userconfig import redact

__all__ = [
    "GC_LOCK_KEY",
    "ChunkHit",
    "ChunkRow",
    "Database",
    "KnowledgeBaseRow",
    "NewRevision",
    "QueryTarget",
    "SourceRow",
    "VersionRow",
    "WrittenRevision",
    "lock_key",
    "poll_lock",
    "store_error",
]


P = ParamSpec("P")
R = TypeVar("R")


def _store_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Translate driver errors where they enter: a failed read or write is a StoreError."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except psycopg.Error as exc:
            raise store_error(exc) from exc

    return wrapper


def store_error(exc: psycopg.Error) -> StoreError:
    """The StoreError a driver error becomes: its first line, with the SQLSTATE."""
    state = f" [SQLSTATE {exc.sqlstate}]" if exc.sqlstate else ""
    return StoreError(f"database error{state}: {str(exc).strip().splitlines()[0]}")


# Garbage collection of cached vectors takes this advisory lock exclusively; every apply holds it shared
# (its vectors are cached before the chunks that reference them are published).
GC_LOCK_KEY = 0x6B6263746C_02


# The columns of a KnowledgeBaseRow: never the manifests themselves (see KnowledgeBaseRow).
_KB_COLUMNS = (
    "id, name, labels, current_version, created_at, updated_at, generation, observed_generation, conditions,"
    " desired_manifest IS NOT NULL AS pending, applyset"
)


def advisory_key(label: str) -> int:
    """A stable signed 64-bit advisory lock key for a label (`kbctl:kb:NAME`, `kbctl:index:MODEL`)."""
    return int.from_bytes(hashlib.sha256(label.encode()).digest()[:8], "big", signed=True)


def lock_key(name: str) -> int:
    """A stable signed 64-bit advisory lock key for a knowledge base name."""
    return advisory_key(f"kbctl:kb:{name}")


def poll_lock(try_once: Callable[[], bool], deadline: float | None = None) -> bool:
    """Take an advisory lock by trying `try_once` again (after 1/8 of LOCK_POLL_SECONDS, doubling up to it) until it
    succeeds or the monotonic `deadline` passes (None: no deadline); whether it was taken.

    Waited for by polling, never in a blocking pg_advisory_lock: a statement blocked there holds a snapshot, and the
    holder's CREATE INDEX CONCURRENTLY (an apply's first vector index) waits for every snapshot older than its own:
    the two would deadlock (40P01)."""
    pause = LOCK_POLL_SECONDS / 8
    while not try_once():
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return False
        time.sleep(pause if left is None else min(pause, left))
        pause = min(pause * 2, LOCK_POLL_SECONDS)
    return True


_SOURCE_COUNTS: Final = (
    # A knowledge base's sources (those of the serving version, else those with a live state that its last
    # applied manifest still names) and how many are ready: a live state (the last fetch) wins over the version's.
    # For a statement with `k` (id, manifest) and `v` (its serving version, or NULLs) in scope.
    "SELECT count(*) AS sources, count(*) FILTER (WHERE u.state = 'ready') AS ready_sources FROM ("
    " SELECT coalesce(ss.state, vs.state) AS state FROM kb_version_sources vs"
    " LEFT JOIN kb_source_status ss ON ss.kb_id = k.id AND ss.source_name = vs.source_name"
    " WHERE vs.version_id = v.id"
    " UNION ALL"
    " SELECT ss.state FROM kb_source_status ss"
    " WHERE v.id IS NULL AND ss.kb_id = k.id AND split_part(ss.source_name, '/', 1) IN"
    "  (SELECT jsonb_array_elements(k.manifest -> 'spec' -> 'sources') ->> 'name')"
    ") u"
)


class Database:
    """A connection to the store; migrates the schema on open. Use as a context manager."""

    def __init__(self, url: str, *, resolve: Callable[[], str] | None = None, migrate: bool = True) -> None:
        """Connect to `url`; `resolve`, when given, finds the URL again for `reconnect` (it may start a server).

        `migrate=False` is for a read replica, where nothing can be written: the schema is the primary's.
        """
        self._url = url
        self._resolve = resolve
        self._exact = False
        self._pgvector: tuple[int, ...] | None = None  # the server's pgvector version, read on first need
        self._indexes: dict[str, tuple[float, VectorIndex]] = {}  # model -> (when looked up, its HNSW index)
        self._migrate = migrate
        self._borrowed = False
        self._conn = self._connect(url, migrate)

    @classmethod
    def borrowed(cls, conn: psycopg.Connection[Any]) -> Database:
        """A store over a connection someone else owns (a pool's: autocommit, with `prepare_connection` run on it).

        Nothing is migrated and `close` leaves the connection open: the owner closes it.
        """
        db = cls.__new__(cls)
        db._url = ""
        db._resolve = None
        db._exact = False
        db._pgvector = None
        db._indexes = {}
        db._migrate = False
        db._conn = conn
        db._borrowed = True
        return db

    @staticmethod
    def prepare_connection(conn: psycopg.Connection[Any]) -> None:
        """Make a connection kbctl did not open ready for `borrowed`: the vector type registered (the schema
        must already be migrated)."""
        register_vector(conn)

    @staticmethod
    def _connect(url: str, migrate_schema: bool = True) -> psycopg.Connection[Any]:
        """A new autocommit connection with the schema migrated (unless told not to) and the vector type
        registered."""
        try:
            conn: psycopg.Connection[Any] = psycopg.connect(url, autocommit=True, connect_timeout=10)
        except psycopg.OperationalError as exc:
            reason = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
            raise StoreError(f"cannot connect to PostgreSQL: {redact(reason)}") from exc
        except psycopg.Error as exc:  # e.g. ProgrammingError for a malformed conninfo string
            raise StoreError(f"invalid database URL ({redact(url)}): {redact(str(exc))}") from None
        try:
            if migrate_schema:
                migrate(conn)
        except pgerrors.FeatureNotSupported as exc:
            raise StoreError(f"the pgvector extension is not available on this server: {exc}") from exc
        except pgerrors.UndefinedFile as exc:
            raise StoreError(
                "the pgvector extension is not installed on this PostgreSQL server; install pgvector "
                "(https://github.com/pgvector/pgvector) and run CREATE EXTENSION vector"
            ) from exc
        except pgerrors.InsufficientPrivilege as exc:
            raise StoreError(
                "cannot create the vector extension (insufficient privilege): "
                "ask a superuser to run CREATE EXTENSION vector in this database"
            ) from exc
        try:
            register_vector(conn)
        except psycopg.ProgrammingError as exc:  # only without migrations: a database kbctl never set up
            conn.close()
            raise StoreError(
                f"the vector type is not in this database ({redact(url)}): a query database must be a replica of one "
                "that kbctl has migrated"
            ) from exc
        return conn

    @property
    def url(self) -> str:
        """The URL this store connects to (it may hold a password: never print it)."""
        return self._url

    def reconnect(self) -> None:
        """Replace a broken connection with a new one (StoreError while the server is still unreachable)."""
        if self._borrowed:
            raise StoreError("a borrowed connection is replaced by its pool, not reconnected")
        with suppress(psycopg.Error):  # already gone
            self._conn.close()
        if self._resolve is not None:
            self._url = self._resolve()
        self._pgvector = None
        self._indexes.clear()
        self._conn = self._connect(self._url, self._migrate)

    @property
    def connection(self) -> psycopg.Connection[Any]:
        """The underlying connection, for the store's own modules (kbctl.store.*), not for callers."""
        return self._conn

    def close(self) -> None:
        """Close the connection (a borrowed one stays open for its owner)."""
        if not self._borrowed:
            self._conn.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def kb_lock(
        self, name: str, *, timeout: float | None = None, on_wait: Callable[[], None] | None = None
    ) -> Iterator[None]:
        """Hold the advisory lock of one knowledge base: applies, deletes and rollbacks of one KB serialize.

        When another command holds it, `on_wait` is called once and the lock is waited for: without
        `timeout` for as long as it takes, with one at most that many seconds (then StoreError says so).
        """
        # Translated here: a decorator on a generator function would only wrap the generator's creation.
        key = lock_key(name)
        try:
            got = self._try_lock(key)
            if not got and on_wait is not None:
                on_wait()
            deadline = None if timeout is None else time.monotonic() + timeout
            if not got and not poll_lock(lambda: self._try_lock(key), deadline):
                raise StoreError(
                    f'knowledgebase "{name}" is busy: another apply, delete or rollback holds it '
                    f"(waited {timeout:g} s); try again when it is done"
                )
        except psycopg.Error as exc:
            raise store_error(exc) from exc
        try:
            yield
        finally:
            try:
                self._conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
            except psycopg.Error as exc:
                raise store_error(exc) from exc

    def _try_lock(self, key: int) -> bool:
        row = self._conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
        return bool(row and row[0])

    @contextmanager
    def read_only(self) -> Iterator[None]:
        """One read-only REPEATABLE READ transaction: every read in it sees one snapshot, and nothing is written.

        Inside a transaction the caller already opened, the reads simply join it.
        """
        if self._conn.info.transaction_status != TransactionStatus.IDLE:
            yield
            return
        try:
            with self._conn.transaction():
                self._conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                yield
        except psycopg.Error as exc:
            raise store_error(exc) from exc

    # -- reads -----------------------------------------------------------------------------------

    @_store_errors
    def schema_problem(self) -> str:
        """ "ok" when the schema is at this kbctl's last migration, else what it is at."""
        return schema_problem(self._conn)

    @_store_errors
    def get_kb(self, name: str) -> KnowledgeBaseRow | None:
        """The knowledge base called `name`, or None."""
        with self._conn.cursor(row_factory=class_row(KnowledgeBaseRow)) as cur:
            return cur.execute(
                "SELECT " + _KB_COLUMNS + " FROM kb_knowledge_bases WHERE name = %s",
                (name,),
            ).fetchone()

    @_store_errors
    def list_kbs(self) -> list[KnowledgeBaseRow]:
        """Every knowledge base, by name."""
        with self._conn.cursor(row_factory=class_row(KnowledgeBaseRow)) as cur:
            return cur.execute("SELECT " + _KB_COLUMNS + " FROM kb_knowledge_bases ORDER BY name").fetchall()

    @_store_errors
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

    @_store_errors
    def source_counts(self, kb_id: int) -> tuple[int, int]:
        """(sources, ready ones) of a knowledge base, counted as `get` counts them (see list_summaries)."""
        row = self._conn.execute(
            "SELECT s.sources, s.ready_sources FROM (SELECT id, manifest, current_version FROM kb_knowledge_bases"
            " WHERE id = %s) k LEFT JOIN kb_versions v ON v.kb_id = k.id AND v.number = k.current_version"
            f" LEFT JOIN LATERAL ({_SOURCE_COUNTS}) s ON true",
            (kb_id,),
        ).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    @_store_errors
    def pending_count(self) -> int:
        """How many knowledge bases have a recorded generation not reconciled yet (a controller's queue)."""
        row = self._conn.execute(
            "SELECT count(*) FROM kb_knowledge_bases WHERE generation > observed_generation"
        ).fetchone()
        return int(row[0]) if row else 0

    @_store_errors
    def join_applyset(self, names: Sequence[str], applyset: str) -> None:
        """Make the stored knowledge bases `names` members of `applyset` (those already in it stay)."""
        self._conn.execute(
            "UPDATE kb_knowledge_bases SET applyset = %s WHERE name = ANY(%s) AND applyset IS DISTINCT FROM %s",
            (applyset, list(names), applyset),
        )

    @_store_errors
    def last_manifest(self, kb_id: int) -> dict[str, Any]:
        """The manifest last applied to a knowledge base (what describes it before any version is published)."""
        row = self._conn.execute("SELECT manifest FROM kb_knowledge_bases WHERE id = %s", (kb_id,)).fetchone()
        return unpack(self._conn, dict(row[0])) if row else {}

    @_store_errors
    def desired_manifest(self, kb_id: int) -> dict[str, Any] | None:
        """The desired manifest waiting to be reconciled, or None."""
        row = self._conn.execute("SELECT desired_manifest FROM kb_knowledge_bases WHERE id = %s", (kb_id,)).fetchone()
        return unpack(self._conn, dict(row[0])) if row and row[0] is not None else None

    @_store_errors
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
                " manifest_sha256, model, chunk_count, embedded_count, reused_count, created_at, background_similarity"
                " FROM kb_versions WHERE kb_id = %s AND number = %s",
                (sha, kb_id, number),
            ).fetchone()
        if row is not None and row.manifest is None and known is not None:
            return replace(row, manifest=known[1])
        if row is None or packed:
            return row
        return replace(row, manifest=unpack(self._conn, row.manifest))

    @_store_errors
    def query_target(self, name: str) -> QueryTarget | None:
        """The knowledge base `name` as a query needs it, in one statement that never ships the whole manifest."""
        with self._conn.cursor(row_factory=class_row(QueryTarget)) as cur:
            return cur.execute(
                "SELECT k.id AS kb_id, k.labels, k.conditions, v.id AS version_id, v.number, v.model, v.chunk_count,"
                " v.retrieval, v.restricted_chunks, v.background_similarity"
                " FROM (SELECT " + _KB_COLUMNS + ", manifest FROM kb_knowledge_bases) k"
                " LEFT JOIN kb_versions v ON v.kb_id = k.id AND v.number = k.current_version"
                " WHERE k.name = %s",
                (name,),
            ).fetchone()

    @_store_errors
    def answer_spec(self, version_id: int) -> dict[str, Any]:
        """The spec.answer a version was published with ({} when it had none)."""
        row = self._conn.execute("SELECT answer FROM kb_versions WHERE id = %s", (version_id,)).fetchone()
        return dict(row[0]) if row is not None and row[0] else {}

    @_store_errors
    def version_sources(self, version_id: int) -> list[SourceRow]:
        """The sources of a version in manifest order, with the revision each one serves."""
        with self._conn.cursor(row_factory=class_row(SourceRow)) as cur:
            return cur.execute(
                "SELECT vs.position, vs.source_name, vs.source_sha256, vs.revision_id, vs.state, vs.message,"
                " vs.embedded_count, vs.reused_count, vs.readers, vs.reader_labels, r.origin, r.title,"
                " coalesce(r.chunk_count, 0) AS chunk_count, r.content_sha256,"
                " r.created_at AS revision_created_at"
                " FROM kb_version_sources vs LEFT JOIN kb_source_revisions r ON r.id = vs.revision_id"
                " WHERE vs.version_id = %s ORDER BY vs.position",
                (version_id,),
            ).fetchall()

    @_store_errors
    def source_statuses(self, kb_id: int) -> dict[str, SourceRow]:
        """The live status of each source of a knowledge base, by source name."""
        with self._conn.cursor(row_factory=class_row(SourceRow)) as cur:
            rows = cur.execute(
                "SELECT source_name, state, message, origin, etag, last_modified, fetched_at, checked_at"
                " FROM kb_source_status WHERE kb_id = %s",
                (kb_id,),
            ).fetchall()
        return {r.source_name: r for r in rows}

    @_store_errors
    def write_statuses(
        self, kb_id: int, statuses: Sequence[SourceRow], stored: Mapping[str, SourceRow] | None = None
    ) -> None:
        """Replace the live status rows of a knowledge base (sources not listed lose theirs); `stored`, the rows
        as read before (`source_statuses`), spares rewriting those that changed only in when they were checked."""
        with self._conn.transaction():
            self._write_statuses(kb_id, statuses, stored)

    def _write_statuses(
        self, kb_id: int, statuses: Sequence[SourceRow], stored: Mapping[str, SourceRow] | None = None
    ) -> None:
        self._conn.execute(
            "DELETE FROM kb_source_status WHERE kb_id = %s AND NOT source_name = ANY(%s)",
            (kb_id, [s.source_name for s in statuses]),
        )
        if stored:
            # A row that differs from the stored one only in checked_at (a source read again and found the same)
            # is one UPDATE per distinct time with the others, not an upsert each: 0.5 s at 9,000 sources.
            checked: dict[datetime | None, list[str]] = {}
            changed = []
            for s in statuses:
                before = stored.get(s.source_name)
                if before is not None and replace(before, checked_at=s.checked_at) == s:
                    if before.checked_at != s.checked_at:
                        checked.setdefault(s.checked_at, []).append(s.source_name)
                else:
                    changed.append(s)
            for at, names in checked.items():
                self._conn.execute(
                    "UPDATE kb_source_status SET checked_at = %s WHERE kb_id = %s AND source_name = ANY(%s)",
                    (at, kb_id, names),
                )
            statuses = changed
        with self._conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO kb_source_status (kb_id, source_name, state, message, origin, etag, last_modified,"
                " fetched_at, checked_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (kb_id, source_name) DO UPDATE SET state = excluded.state,"
                " message = excluded.message, origin = excluded.origin, etag = excluded.etag,"
                " last_modified = excluded.last_modified, fetched_at = excluded.fetched_at,"
                " checked_at = excluded.checked_at",
                [
                    (
                        kb_id,
                        s.source_name,
                        s.state,
                        s.message,
                        s.origin,
                        s.etag,
                        s.last_modified,
                        s.fetched_at,
                        s.checked_at,
                    )
                    for s in statuses
                ],
            )

    @_store_errors
    def find_revision(self, kb_id: int, source_name: str, revision_key: str) -> tuple[int, int] | None:
        """(id, chunk count) of an already stored revision with this key, or None."""
        row = self._conn.execute(
            "SELECT id, chunk_count FROM kb_source_revisions"
            " WHERE kb_id = %s AND source_name = %s AND revision_key = %s",
            (kb_id, source_name, revision_key),
        ).fetchone()
        return (row[0], row[1]) if row else None

    @_store_errors
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

    @_store_errors
    def stored_revisions(self, kb_id: int) -> dict[tuple[str, str], tuple[int, int]]:
        """Every stored revision of a knowledge base: (source name, revision key) → (id, chunk count)."""
        rows = self._conn.execute(
            "SELECT source_name, revision_key, id, chunk_count FROM kb_source_revisions WHERE kb_id = %s", (kb_id,)
        ).fetchall()
        return {(str(n), str(k)): (int(i), int(c)) for n, k, i, c in rows}

    @_store_errors
    def revision_chunks(self, revision_id: int) -> list[tuple[bytes, int]]:
        """(sha256 of the embedded text, tokens) of each chunk of a stored revision, in order."""
        rows = self._conn.execute(
            "SELECT e.text_sha256, c.token_count FROM kb_chunks c JOIN kb_embeddings e ON e.id = c.embedding_id"
            " WHERE c.revision_id = %s ORDER BY c.ordinal",
            (revision_id,),
        ).fetchall()
        return [(bytes(h), int(t)) for h, t in rows]

    @_store_errors
    def next_version_number(self, kb_id: int | None) -> int:
        """The number the next version of a knowledge base gets (1 for a new one)."""
        if kb_id is None:
            return 1
        row = self._conn.execute("SELECT max(number) FROM kb_versions WHERE kb_id = %s", (kb_id,)).fetchone()
        return (row[0] or 0) + 1 if row else 1

    @_store_errors
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

    @_store_errors
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

    @_store_errors
    def set_conditions(self, kb_id: int, conditions: Sequence[dict[str, Any]]) -> None:
        """Replace the conditions of a knowledge base."""
        self._conn.execute(
            "UPDATE kb_knowledge_bases SET conditions = %s WHERE id = %s", (Jsonb(list(conditions)), kb_id)
        )

    # -- the embedding cache -----------------------------------------------------------------------

    @_store_errors
    def cached_embeddings(self, model: str, hashes: Sequence[bytes]) -> dict[bytes, int]:
        """Ids of the stored vectors among `hashes` for `model` (the content-addressed cache)."""
        if not hashes:
            return {}
        rows = self._conn.execute(
            "SELECT text_sha256, id FROM kb_embeddings WHERE model = %s AND text_sha256 = ANY(%s)",
            (model, list(hashes)),
        ).fetchall()
        return {bytes(h): i for h, i in rows}

    @_store_errors
    def store_embeddings(self, model: str, items: Sequence[tuple[bytes, Vector]]) -> dict[bytes, int]:
        """Add vectors to the cache (committed at once, so a later failure loses none); return their ids."""
        if not items:
            return {}
        ids: dict[bytes, int] = {}
        with self._conn.transaction(), self._conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO kb_embeddings (model, text_sha256, embedding) VALUES (%s, %s, %s)"
                " ON CONFLICT (model, text_sha256) DO NOTHING RETURNING text_sha256, id",
                [(model, h, as_float32(v)) for h, v in items],
                returning=True,
            )
            while True:
                ids.update((bytes(h), i) for h, i in cur.fetchall())
                if not cur.nextset():
                    break
        # A vector another writer stored meanwhile returns no row here: look those few up (reading back the rows
        # just inserted would cost a random heap read each, seconds on a cold 100k-vector table).
        others = [h for h, _ in items if h not in ids]
        return (ids | self.cached_embeddings(model, others)) if others else ids

    # -- the background questions' vectors (kbctl.embedding.background) -------------------------

    @_store_errors
    def background_vectors(self, model: str) -> dict[bytes, Vector]:
        """The stored vectors of the background questions for `model`, by question key."""
        rows = self._conn.execute(
            "SELECT question_sha256, embedding FROM kb_background_vectors WHERE model = %s", (model,), binary=True
        ).fetchall()
        return {bytes(k): as_float32(v) for k, v in rows}

    @_store_errors
    def store_background_vectors(self, model: str, items: Sequence[tuple[bytes, Vector]]) -> None:
        """Keep background questions' vectors for `model` (committed at once; a vector already stored stays)."""
        if not items:
            return
        with self._conn.transaction(), self._conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO kb_background_vectors (model, question_sha256, embedding) VALUES (%s, %s, %s)"
                " ON CONFLICT DO NOTHING",
                [(model, k, as_float32(v)) for k, v in items],
            )

    @_store_errors
    def background_similarity(
        self, version_id: int, model: str, chunks: int, vectors: Sequence[Vector]
    ) -> float | None:
        """The background similarity of a version (kbctl.embedding.background): each background question's best
        cosine similarity among its `chunks` chunks, searched as a query searches them, then their quantile."""
        from kbctl.embedding.background import background_similarity

        return background_similarity(self.background_bests(version_id, model, chunks, vectors))

    @_store_errors
    def background_bests(
        self, version_id: int, model: str, chunks: int, vectors: Sequence[Vector], part: Rule | None = None
    ) -> list[float]:
        """Each background question's best cosine similarity among a version's `chunks` chunks, in the order of
        `vectors`, searched as a query searches them; with a `part`, among the chunks behind that rule alone
        (`chunks` of them). Empty when there are none (or a question finds none: no line comes of a part half
        searched)."""
        if chunks <= 0:
            return []
        bests = [
            hits[0].score
            for vector in vectors
            if (hits := self.search(version_id, vector, 1, model=model, version_chunks=chunks, reader=part))
        ]
        return bests if len(bests) == len(vectors) else []

    def _calibrate(self, version_id: int, model: str, chunks: int, restricted: int, vectors: Sequence[Vector]) -> None:
        """Calibrate a version being published (kbctl.embedding.background): the background questions' best
        similarities among its chunks behind no rule and, when it restricts some, among each rule's, searched apart
        (kbctl.store.access), so that every caller's line is of what it may read; the version's own is of them all."""
        from kbctl.embedding.background import joint_similarity

        if not restricted:
            bests = self.background_bests(version_id, model, chunks, vectors)
            store_calibration(self._conn, version_id, joint_similarity([bests]), bests, {})
            return
        open_bests = self.background_bests(version_id, model, chunks - restricted, vectors, Rule(None, None))
        rule_bests = {
            rule: self.background_bests(version_id, model, count, vectors, part)
            for rule, part, count in version_rules(self._conn, version_id)
        }
        whole = joint_similarity([open_bests, *rule_bests.values()])
        store_calibration(self._conn, version_id, whole, open_bests, rule_bests)

    @_store_errors
    def readable_background(self, version_id: int, reader: Reader) -> float | None:
        """The background similarity of what `reader` may read of a version (kbctl.store.access.readable_background;
        None: nothing, or a version published before it was calibrated per rule, of which it may not read all)."""
        return readable_background(self._conn, version_id, reader)

    # -- publishing ----------------------------------------------------------------------------

    @_store_errors
    def publish(
        self,
        *,
        name: str,
        manifest: dict[str, Any],
        manifest_sha256: str,
        model: str,
        number: int,
        new_revisions: Sequence[NewRevision],
        sources: Sequence[SourceRow],
        statuses: Sequence[SourceRow],
        change_cause: str = "",
        stored_statuses: Mapping[str, SourceRow] | None = None,
        packed: Packing | None = None,
        background: Sequence[Vector] = (),
    ) -> int:
        """Write a complete version and make it current, all in one transaction; return its number.

        `background`, the background questions' vectors for `model`, calibrates the version: its background
        similarity is stored with it, and per access rule what a caller's is made of (kbctl.embedding.background,
        kbctl.store.access); without them it has none.

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
            # One COPY: the pipeline of INSERTs it replaces took ~0.35 s (profiled) for a version of 9,091 sources.
            with (
                self._conn.cursor() as cur,
                cur.copy(
                    "COPY kb_version_sources (version_id, position, source_name, source_sha256, revision_id, state,"
                    " message, embedded_count, reused_count, readers, reader_labels) FROM STDIN (FORMAT BINARY)"
                ) as copy,
            ):
                copy.set_types(
                    ["int8", "int4", "text", "text", "int8", "text", "text", "int4", "int4", "text[]", "text[]"]
                )
                for s in sources:
                    copy.write_row(
                        (
                            vrow[0],
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
            version_statistics(self._conn, kb_id, int(vrow[0]))
            if restricted:
                rule_statistics(self._conn, int(vrow[0]))
            self._write_statuses(kb_id, statuses, stored_statuses)
            if background:  # last: an indexed search's settings last until the end of the transaction
                self._calibrate(int(vrow[0]), model, chunks, restricted, background)
            self._conn.execute("UPDATE kb_knowledge_bases SET current_version = %s WHERE id = %s", (number, kb_id))
        return number

    @_store_errors
    def has_text_search_config(self, name: str) -> bool:
        """Whether PostgreSQL has a text search configuration called `name` (english, simple, german...)."""
        row = self._conn.execute("SELECT count(*) FROM pg_ts_config WHERE cfgname = %s", (name,)).fetchone()
        return bool(row and row[0])

    # -- search and delete -------------------------------------------------------------------------

    @_store_errors
    def search(
        self,
        version_id: int,
        vector: Vector,
        limit: int,
        *,
        model: str | None = None,
        version_chunks: int | None = None,
        ef_search: int = EF_SEARCH,
        reader: Reader | Rule | None = None,
    ) -> list[ChunkHit]:
        """The `limit` chunks of a version nearest to `vector` by cosine similarity, best first.

        With the version's `model` and chunk count, a version of more than EXACT_SCAN_MAX chunks is searched
        through the model's HNSW index (`ef_search` candidates per layer), else every chunk is compared. With a
        `reader`, only the chunks it may read, `version_chunks` of them (a `Rule`: those behind it; kbctl.store.access).
        """
        if self._exact or model is None or version_chunks is None or version_chunks <= EXACT_SCAN_MAX:
            return exact_search(self._conn, version_id, vector, limit, reader)
        index = self._vector_index(model)
        hits = None
        if index is not None:
            if self._pgvector is None:
                self._pgvector = pgvector_version(self._conn)
            # The index settings last until the end of the transaction: the caller's (a query's snapshot; a
            # savepoint would not end them sooner, RELEASE keeps them), or else one opened here.
            inside = self._conn.info.transaction_status != TransactionStatus.IDLE
            with nullcontext() if inside else self._conn.transaction():
                hits = indexed_search(
                    self._conn,
                    index,
                    model,
                    version_id,
                    version_chunks,
                    vector,
                    limit,
                    ef_search=ef_search,
                    pgvector=self._pgvector,
                    reader=reader,
                )
        return hits if hits is not None else exact_search(self._conn, version_id, vector, limit, reader)

    def _vector_index(self, model: str) -> VectorIndex | None:
        """The HNSW index of `model`, as looked up at most INDEX_LOOKUP_SECONDS ago (a catalog query per search
        costs ~0.4 ms). Only a found index is remembered: one built meanwhile is used by the next search. An index
        remembered after it was dropped costs nothing wrong: the search names its expression, not the index."""
        now = time.monotonic()
        known = self._indexes.get(model)
        if known is not None and now - known[0] < INDEX_LOOKUP_SECONDS:
            return known[1]
        index = vector_index(self._conn, model)
        if index is None:
            self._indexes.pop(model, None)
        else:
            self._indexes[model] = (now, index)
        return index

    @contextmanager
    def exact_searches(self) -> Iterator[None]:
        """Every vector search in this block compares every chunk (the reference the index is measured against)."""
        self._exact = True
        try:
            yield
        finally:
            self._exact = False

    @_store_errors
    def build_vector_index(self, model: str) -> VectorIndex | None:
        """Build the HNSW index of a model's vectors once it has enough of them (see kbctl.store.search). One
        process builds it at a time: while another holds the model's build lock, nothing is built here (never waited
        on)."""
        key = advisory_key(f"kbctl:index:{model}")
        if not self._try_lock(key):
            return None
        try:
            return build_vector_index(self._conn, model)
        finally:
            self._conn.execute("SELECT pg_advisory_unlock(%s)", (key,))

    @_store_errors
    def estimated_chunks(self) -> int:
        """How many chunk rows PostgreSQL's statistics say the store holds (0 before they were ever gathered)."""
        row = self._conn.execute(
            "SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = 'kb_chunks'::regclass"
        ).fetchone()
        return int(row[0]) if row is not None else 0

    @_store_errors
    def analyze_chunks(self) -> None:
        """Refresh PostgreSQL's statistics of the chunks (the planner's estimates of full-text matches)."""
        self._conn.execute("ANALYZE kb_chunks")

    @_store_errors
    def analyze_versions(self) -> None:
        """Refresh PostgreSQL's statistics of the versions' sources, of the two columns searches join by (~10 ms at
        18,182 rows; the whole table's took ~45). Until then the planner takes a new version for one of a few
        sources and plans its searches so: an indexed search reads the whole version into a hash instead of
        looking up its 100 candidates (at 90,910 chunks ~400 ms a query; at 7,910 chunks of 791 sources, 9.3 ms
        against 2.6), until autovacuum's ANALYZE comes (~40 s after the publish at 90,910 chunks)."""
        self._conn.execute("ANALYZE kb_version_sources (version_id, revision_id)")

    @_store_errors
    def vector_index(self, model: str) -> VectorIndex | None:
        """The HNSW index of a model's vectors, or None."""
        return vector_index(self._conn, model)

    @_store_errors
    def keyword_search(
        self,
        version_id: int,
        language: str,
        question: str,
        vector: Vector,
        limit: int,
        among: Sequence[ChunkHit] = (),
        reader: Reader | None = None,
    ) -> list[ChunkHit]:
        """The `limit` chunks of a version with the best BM25 score for `question` (full text in `language`), best
        first, each with its cosine similarity to `vector`; `among`: chunks already read (the vector list), the
        ones scored when every word of the question is common (see kbctl.store.bm25). With a `reader`, only the
        chunks it may read, scored by their statistics alone (kbctl.store.access)."""
        return keyword_search(self._conn, version_id, language, question, vector, limit, among, reader)

    @_store_errors
    def readable_counts(self, reader: Reader) -> dict[str, tuple[int, int, int, int]]:
        """Per knowledge base that restricts sources: (sources, ready, chunks) `reader` may read, and sources it may
        not (kbctl.store.access.readable_counts)."""
        return readable_counts(self._conn, reader)

    @_store_errors
    def readable_chunks(self, version_id: int, reader: Reader) -> int:
        """How many chunks of a version `reader` may read."""
        return readable_size(self._conn, version_id, reader)[0]

    @_store_errors
    def containing_all_words(self, chunk_ids: Sequence[int], language: str, question: str) -> set[int]:
        """Those of `chunk_ids` whose full text holds every word of `question` (stemmed, stop words dropped);
        none when the question has fewer than two such words."""
        return containing_all_words(self._conn, chunk_ids, language, question)

    @_store_errors
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

    @_store_errors
    def counts(self) -> dict[str, int]:
        """Row counts of the main tables (for tests, benchmarks and `describe`)."""
        tables = ("kb_knowledge_bases", "kb_versions", "kb_source_revisions", "kb_chunks", "kb_embeddings")
        return {
            t.removeprefix("kb_"): int(self._conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0])  # type: ignore[index]
            for t in tables
        }
