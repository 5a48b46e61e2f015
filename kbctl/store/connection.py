"""The store's seam with the driver: one connection, its transactions, snapshots and advisory locks, and the one
place where a psycopg error becomes a StoreError.

Every statement runs through `StoreCursor` (the connection's `cursor_factory`) and every transaction and wait for a
notification through `StoreConnection`: a driver error raised by a statement, a COPY, a commit or a connect is
translated there once (`store_error`), so the noun modules (kbctl.store.knowledgebases, versions, ...) hold only
SQL. `Connected` is the base every noun class of `kbctl.store.database.Database` builds on.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from typing import TYPE_CHECKING, Any, Self

import psycopg
from pgvector.psycopg import register_vector
from psycopg import errors as pgerrors
from psycopg.pq import TransactionStatus
from psycopg.rows import Row, TupleRow

from kbctl.defaults import LOCK_POLL_SECONDS
from kbctl.errors import StoreError
from kbctl.store.migrations import migrate, schema_problem
from kbctl.userconfig import redact

if TYPE_CHECKING:
    from psycopg import Notify, Transaction
    from psycopg.abc import Params, Query
    from psycopg.copy import Copy, Writer

    from kbctl.store.search import VectorIndex

__all__ = [
    "GC_LOCK_KEY",
    "Connected",
    "StoreConnection",
    "StoreCursor",
    "advisory_key",
    "lock_key",
    "poll_lock",
    "store_error",
]


def store_error(exc: psycopg.Error) -> StoreError:
    """The StoreError a driver error becomes: its first line, with the SQLSTATE."""
    state = f" [SQLSTATE {exc.sqlstate}]" if exc.sqlstate else ""
    return StoreError(f"database error{state}: {str(exc).strip().splitlines()[0]}")


class _Translating:
    """The one place a driver error becomes a StoreError (its `__cause__` the driver's error): a context every
    statement, fetch, COPY, transaction and notification of a store connection runs in."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, traceback: object) -> None:
        if isinstance(exc, psycopg.Error):
            raise store_error(exc) from exc


_TRANSLATING = _Translating()


class StoreCursor(psycopg.Cursor[Row]):
    """The cursor of every store connection: a statement, a batch, a COPY or a fetch that fails raises StoreError
    (its `__cause__` the driver's error)."""

    def execute(
        self, query: Query, params: Params | None = None, *, prepare: bool | None = None, binary: bool | None = None
    ) -> Self:
        with _TRANSLATING:
            # One signature for the driver's two overloads (a query with params, or a template): it checks the pair.
            return super().execute(query, params, prepare=prepare, binary=binary)  # type: ignore[arg-type,misc]

    def executemany(self, query: Query, params_seq: Iterable[Params], *, returning: bool = False) -> None:
        with _TRANSLATING:
            super().executemany(query, params_seq, returning=returning)

    @contextmanager
    def copy(self, statement: Query, params: Params | None = None, *, writer: Writer | None = None) -> Iterator[Copy]:
        with _TRANSLATING, super().copy(statement, params, writer=writer) as copy:
            yield copy

    def fetchone(self) -> Row | None:
        with _TRANSLATING:
            return super().fetchone()

    def fetchmany(self, size: int = 0) -> list[Row]:
        with _TRANSLATING:
            return super().fetchmany(size)

    def fetchall(self) -> list[Row]:
        with _TRANSLATING:
            return super().fetchall()


class StoreConnection(psycopg.Connection[TupleRow]):
    """A connection whose cursors and statements (refused when it is closed), transactions (BEGIN, COMMIT) and
    notifications raise StoreError once its cursor class is `StoreCursor` (until then, while it is set up, the
    driver's errors pass as they are)."""

    @property
    def translates(self) -> bool:
        """Whether driver errors are translated (the connection is set up: its cursors are StoreCursors)."""
        return issubclass(self.cursor_factory, StoreCursor)

    def _translating(self) -> AbstractContextManager[None]:
        """The context driver errors are translated in, once the connection is set up; until then none."""
        return _TRANSLATING if self.translates else nullcontext()

    if not TYPE_CHECKING:  # typed as the driver's own (overloaded) methods; at run time, translated

        def cursor(self, *args, **kwargs):
            with self._translating():  # a closed or broken connection is refused here, before any statement
                return super().cursor(*args, **kwargs)

        def execute(self, *args, **kwargs):
            with self._translating():  # also before its cursor's: a closed connection is refused as it is made
                return super().execute(*args, **kwargs)

    @contextmanager
    def transaction(self, savepoint_name: str | None = None, force_rollback: bool = False) -> Iterator[Transaction]:
        with self._translating(), super().transaction(savepoint_name, force_rollback) as tx:
            yield tx

    def notifies(self, *, timeout: float | None = None, stop_after: int | None = None) -> Generator[Notify]:
        with self._translating():
            yield from super().notifies(timeout=timeout, stop_after=stop_after)


# Garbage collection of cached vectors takes this advisory lock exclusively; every apply holds it shared
# (its vectors are cached before the chunks that reference them are published).
GC_LOCK_KEY = 0x6B6263746C_02


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


def _connect(url: str, migrate_schema: bool = True) -> StoreConnection:
    """A new autocommit connection with the schema migrated (unless told not to) and the vector type registered;
    its errors translated from then on. A failure to connect or to set up says why in its own words."""
    try:
        conn = StoreConnection.connect(url, autocommit=True, connect_timeout=10)
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
    except psycopg.Error as exc:  # any other failure of the migrations: as every statement's
        raise store_error(exc) from exc
    try:
        register_vector(conn)
    except psycopg.ProgrammingError as exc:  # only without migrations: a database kbctl never set up
        conn.close()
        raise StoreError(
            f"the vector type is not in this database ({redact(url)}): a query database must be a replica of one "
            "that kbctl has migrated"
        ) from exc
    except psycopg.Error as exc:
        raise store_error(exc) from exc
    conn.cursor_factory = StoreCursor
    return conn


class Connected:
    """The connection seam of a `Database`: connect, reconnect, close, transactions, read-only snapshots and
    advisory locks. Every noun class of the store (kbctl.store.knowledgebases, versions, ...) builds on it."""

    _conn: StoreConnection

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
        self._conn = _connect(url, migrate)

    @classmethod
    def borrowed(cls, conn: StoreConnection) -> Self:
        """A store over a connection someone else owns (a pool's: a StoreConnection in autocommit, with
        `prepare_connection` run on it). Nothing is migrated and `close` leaves the connection open: the owner
        closes it."""
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
        self._conn = _connect(self._url, self._migrate)

    @property
    def connection(self) -> StoreConnection:
        """The underlying connection, for the store's own modules (kbctl.store.*), not for callers."""
        return self._conn

    def close(self) -> None:
        """Close the connection (a borrowed one stays open for its owner)."""
        if not self._borrowed:
            self._conn.close()

    def __enter__(self) -> Self:
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
        key = lock_key(name)
        got = self._try_lock(key)
        if not got and on_wait is not None:
            on_wait()
        deadline = None if timeout is None else time.monotonic() + timeout
        if not got and not poll_lock(lambda: self._try_lock(key), deadline):
            raise StoreError(
                f'knowledgebase "{name}" is busy: another apply, delete or rollback holds it '
                f"(waited {timeout:g} s); try again when it is done"
            )
        try:
            yield
        finally:
            self._conn.execute("SELECT pg_advisory_unlock(%s)", (key,))

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
        with self._conn.transaction():
            self._conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield

    def schema_problem(self) -> str:
        """ "ok" when the schema is at this kbctl's last migration, else what it is at."""
        return schema_problem(self._conn)
