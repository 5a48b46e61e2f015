"""What every part of `KnowledgeBaseStore` builds on (`StoreBase`): the settings, the store's database opened (the
embedded server's unless a URL is given), its pool and read replica, where a read or a write goes (`_reading`,
`_writing`), the scope check, the process's models, the embedded server's statics, closing. `Scope` is here too.

The stages are imported by the methods that use them, in every module of kbctl.client, so that a command (or an
agent) pays at start-up only for what it calls: `get` never loads the fetcher, the chunker or the model runtime.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from kbctl import telemetry
from kbctl.errors import NotFoundError, StoreError
from kbctl.store.names import LOOKUP_TIMEOUT, knowledge_base_names, reachable_url

if TYPE_CHECKING:
    from kbctl.chat import ChatModel
    from kbctl.config import Settings
    from kbctl.embedding import Embedder
    from kbctl.rerank import Reranker
    from kbctl.sources.url import FetchPolicy
    from kbctl.store.database import Database
    from kbctl.store.embedded import ServerStatus
    from kbctl.store.pool import DatabasePool

__all__ = ["Scope", "StoreBase"]


Scope = Callable[[str, Mapping[str, str]], bool]
"""May the caller see a knowledge base (name, labels)? A server's token scope; refused looks like absent."""


def _or_env(settings: Settings | None) -> Settings:
    """`settings`, else those of the environment (the configuration module is loaded only then)."""
    from kbctl.config import Settings

    return settings or Settings.from_env()


class StoreBase:
    """What every family of `KnowledgeBaseStore`'s operations builds on: the settings, the store's database (and
    its pool and read replica), where a read or a write goes, the process's models, closing."""

    def __init__(
        self,
        *,
        database_url: str | None = None,
        home: str | Path | None = None,
        settings: Settings | None = None,
        fetch_policy: FetchPolicy | None = None,
        pool_size: int | None = None,
        pool_timeout: float = 10.0,
    ) -> None:
        """`pool_size` opens a pool of that many connections that reads borrow from, one per call (many
        concurrent callers: `kbctl serve`, `kbctl mcp`); `pool_timeout` bounds the wait for one. When the OTEL_*
        variables ask for traces and no tracer provider is installed, the first store installs one
        (kbctl.telemetry; docs/tracing.md)."""
        from kbctl.config import Settings

        telemetry.configure_tracing()
        self.settings = settings or Settings.from_env(home=home, database_url=database_url)
        self.db = self._open_database()  # migrates the schema, before any pool opens
        self._query_db: Database | None = None
        self._first_query = True  # the only one that starts loading its model in the background
        self._fetch_policy = fetch_policy
        self._pool: DatabasePool | None = None
        if pool_size is not None:
            from kbctl.store.pool import DatabasePool

            url = self.settings.query_database_url or self._database_url()
            self._pool = DatabasePool(url, size=pool_size, timeout=pool_timeout)

    @property
    def fetch_policy(self) -> FetchPolicy:
        """How URL, git and crawl sources are fetched: the one given, else from kbctl's configuration (built on
        first use), with kbctl's repository cache unless it names one."""
        if self._fetch_policy is None:
            from kbctl.sources.url import FetchPolicy

            self._fetch_policy = FetchPolicy.from_config(self.settings.config)
        self._fetch_policy = self._with_cache(self._fetch_policy)
        return self._fetch_policy

    @fetch_policy.setter
    def fetch_policy(self, policy: FetchPolicy) -> None:
        self._fetch_policy = policy

    def _with_cache(self, policy: FetchPolicy) -> FetchPolicy:
        """`policy` with kbctl's repository cache (git sources) unless it names one."""
        return policy if policy.cache_dir is not None else replace(policy, cache_dir=self.settings.home / "git")

    def _open_database(self) -> Database:
        """The store's database; the embedded server's by its socket when it is already up (the server library is
        loaded only to start it, or when that socket does not answer)."""
        from kbctl.store.database import Database
        from kbctl.store.embedded import running_url

        if self.settings.database_url is None:
            url = running_url(self.settings.pgdata)
            if url is not None:
                with suppress(StoreError):
                    return Database(url, resolve=self._database_url)
        return Database(self._database_url(), resolve=self._database_url)

    def _database_url(self) -> str:
        """The configured database, or the embedded server's URL (started if it is not running)."""
        from kbctl.store.embedded import embedded_url

        return self.settings.database_url or embedded_url(self.settings.pgdata)

    @property
    def _query_database(self) -> Database:
        """Where queries read: the read replica of `KBCTL_QUERY_DATABASE_URL` (connected on first use, never
        migrated), else the store's own database."""
        url = self.settings.query_database_url
        if url is None:
            return self.db
        if self._query_db is None:
            from kbctl.store.database import Database

            self._query_db = Database(url, migrate=False)
        return self._query_db

    @staticmethod
    def server_status(settings: Settings | None = None) -> ServerStatus:
        """Whether the embedded PostgreSQL (of `settings`, else of the environment) runs, without starting it."""
        from kbctl.store.embedded import server_status

        return server_status(_or_env(settings).pgdata)

    @staticmethod
    def peek_names(prefix: str = "", *, settings: Settings | None = None, timeout: float = LOOKUP_TIMEOUT) -> list[str]:
        """The names of the stored knowledge bases that start with `prefix`, sorted, read within `timeout` seconds
        without starting the embedded server or migrating anything (shell completion); [] when the store is not
        running, cannot be reached in time, or fails."""
        settings = _or_env(settings)
        url = reachable_url(settings.database_url, settings.pgdata)
        return [] if url is None else knowledge_base_names(url, prefix, timeout=timeout)

    @staticmethod
    def stop_server(settings: Settings | None = None) -> bool:
        """Stop the embedded PostgreSQL (of `settings`, else of the environment); False when it was not running."""
        from kbctl.store.embedded import stop_server

        return stop_server(_or_env(settings).pgdata)

    def close(self) -> None:
        """Close the connections (the embedded server keeps running; `kbctl server stop` stops it)."""
        if self._pool is not None:
            self._pool.close()
        self.db.close()
        if self._query_db is not None:
            self._query_db.close()

    def embedder(self, model_id: str) -> Embedder:
        """The embedder of a model id, loaded once per process."""
        from kbctl.embedding import get_embedder

        return get_embedder(model_id, self.settings)

    def reranker(self, model_id: str) -> Reranker:
        """The reranker of a `provider/name` model id, loaded once per process."""
        from kbctl.rerank import get_reranker

        return get_reranker(model_id, self.settings)

    def chat_model(self, model_id: str) -> ChatModel:
        """The chat model of a `provider/name` model id or `profile:NAME`, built once per process."""
        from kbctl.chat import get_chat_model

        return get_chat_model(model_id, self.settings)

    @contextmanager
    def _reading(self, *, query: bool = False) -> Iterator[Database]:
        """Where a read goes: a pooled connection (a store opened with `pool_size`), else the read replica for a
        query (`_query_database`), else the store's own connection."""
        if self._pool is not None:
            with self._pool.borrow() as db:
                yield db
        else:
            yield self._query_database if query else self.db

    @contextmanager
    def _writing(self) -> Iterator[Database]:
        """Where a write of a pooled store goes: a pooled connection when the pool is the primary's, else the
        store's own connection (the pool of a store with a read replica reads the replica)."""
        if self._pool is not None and self.settings.query_database_url is None:
            with self._pool.borrow() as db:
                yield db
        else:
            yield self.db

    @staticmethod
    def _in_scope(db: Database, name: str, scope: Scope | None) -> None:
        """NotFoundError unless `name` exists and `scope` lets the caller see it: out of scope looks like absent."""
        row = db.get_kb(name)
        if row is None or (scope is not None and not scope(row.name, row.labels)):
            raise NotFoundError(f'knowledgebase "{name}" not found')
