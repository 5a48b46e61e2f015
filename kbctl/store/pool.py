"""A pool of connections for many concurrent readers (`kbctl serve`, `kbctl mcp`): each call borrows one,
bounded in how long it waits and how long any statement runs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from kbctl.defaults import STATEMENT_TIMEOUT_MS
from kbctl.errors import StoreError
from kbctl.store.connection import StoreConnection, StoreCursor
from kbctl.store.database import Database
from kbctl.store.migrations import schema_problem

__all__ = ["STATEMENT_TIMEOUT_MS", "DatabasePool"]


class DatabasePool:
    """Pooled connections to `url` (the schema must be migrated already: the primary's `Database` does that)."""

    def __init__(self, url: str, *, size: int, timeout: float) -> None:
        self.timeout = timeout
        self._pool: ConnectionPool[StoreConnection] = ConnectionPool(
            url,
            connection_class=StoreConnection,
            min_size=min(2, size),
            max_size=size,
            kwargs={
                "autocommit": True,
                "cursor_factory": StoreCursor,  # its statements' errors translated as a Database's own
                "connect_timeout": 5,
                "options": f"-c statement_timeout={STATEMENT_TIMEOUT_MS}",
            },
            configure=Database.prepare_connection,
            check=ConnectionPool.check_connection,
            timeout=timeout,
            open=False,
            name="kbctl-serve",
        )
        try:
            self._pool.open(wait=True, timeout=timeout)
        except PoolTimeout as exc:
            raise StoreError(f"cannot open a connection pool to PostgreSQL within {timeout:g} s") from exc

    @contextmanager
    def borrow(self) -> Iterator[Database]:
        """A Database over a pooled connection, given back when the block ends (StoreError when none is free in
        time)."""
        try:
            with self._pool.connection(timeout=self.timeout) as conn:
                yield Database.borrowed(conn)
        except PoolTimeout as exc:
            raise StoreError(f"no database connection became free within {self.timeout:g} s") from exc

    def schema_problem(self) -> tuple[str, str]:
        """(database, migrations): "ok" each, or why not, asked within 2 s (a readiness probe)."""
        try:
            with self._pool.connection(timeout=2.0) as conn:
                return "ok", schema_problem(conn)
        except PoolTimeout:
            return "unreachable: no connection within 2 s", "unreachable: no connection within 2 s"
        except (psycopg.Error, StoreError) as exc:
            driver = exc.__cause__ if isinstance(exc, StoreError) and exc.__cause__ is not None else exc
            return f"unreachable: {type(driver).__name__}", f"unreachable: {type(driver).__name__}"

    def close(self) -> None:
        self._pool.close()
