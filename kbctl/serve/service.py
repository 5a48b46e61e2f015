"""What the HTTP API and the MCP tools do, once: list, describe and query within a caller's scope.

One process holds one connection pool and one copy of each model. Each call borrows a pooled connection and
reads in one snapshot (`kbctl.query.retrieve`), so a version published while the server runs is served by the
next call and no call sees a half-published version. Every method is synchronous and thread-safe: the HTTP
routes run them on worker threads, never on the event loop.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout
from pydantic import BaseModel

from kbctl.answer import AskResult, answer_ask, prepare_ask
from kbctl.chat import ChatModel, get_chat_model
from kbctl.config import Settings
from kbctl.embedding import Embedder, get_embedder
from kbctl.engine.status import KnowledgeBaseDetail, KnowledgeBaseSummary, describe_knowledge_base, list_knowledge_bases
from kbctl.errors import NotFoundError, StoreError
from kbctl.manifest.models import DEFAULT_MODEL
from kbctl.manifest.selectors import Selector
from kbctl.query.options import QueryOptions
from kbctl.query.results import API_MODEL, QueryHit, QueryResult
from kbctl.query.retrieve import query_knowledge_base
from kbctl.rerank import Reranker, get_reranker
from kbctl.serve.auth import Principal
from kbctl.store.database import Database
from kbctl.store.embedded import embedded_url
from kbctl.store.migrations import MIGRATIONS

__all__ = ["FederatedHit", "FederatedResult", "Readiness", "RetrievalService", "SourceOutcome"]

FEDERATED_RRF_K = 60  # rank fusion across knowledge bases: ranks, not scores, since their models may differ
STATEMENT_TIMEOUT_MS = 10_000  # no SQL statement of a request runs longer


class SourceOutcome(BaseModel):
    """What one knowledge base of a cross-knowledge-base query gave."""

    model_config = API_MODEL

    knowledge_base: str
    version: int | None
    hits: int
    best_score: float | None
    message: str


class FederatedHit(QueryHit):
    """A hit of a cross-knowledge-base query, naming the knowledge base (and version) it comes from."""

    knowledge_base: str
    version: int


class FederatedResult(BaseModel):
    """One ranking fused from the rankings of several knowledge bases."""

    model_config = API_MODEL

    question: str
    knowledge_bases: list[str]
    top_k: int
    max_context_tokens: int
    hits: list[FederatedHit]
    tokens: int
    results: list[SourceOutcome]

    @property
    def message(self) -> str:
        if self.hits:
            return f"{len(self.hits)} chunks from {len({h.knowledge_base for h in self.hits})} knowledge bases"
        return "nothing relevant found in " + (", ".join(self.knowledge_bases) or "any knowledge base in scope")


class Readiness(BaseModel):
    """`/readyz`: the checks, each with a word on why it failed."""

    model_config = API_MODEL

    ready: bool
    database: str
    migrations: str
    model: str


class RetrievalService:
    """Retrieval for many concurrent callers over one store (pooled connections, shared models)."""

    def __init__(self, settings: Settings, *, pool_size: int = 10, timeout: float = 10.0) -> None:
        self.settings = settings
        self.timeout = timeout
        primary = settings.database_url or embedded_url(settings.pgdata)
        with Database(primary):  # migrates the schema once, before the pool opens
            pass
        url = settings.query_database_url or primary
        self.pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            url,
            min_size=min(2, pool_size),
            max_size=pool_size,
            kwargs={
                "autocommit": True,
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
            self.pool.open(wait=True, timeout=timeout)
        except PoolTimeout as exc:
            raise StoreError(f"cannot open a connection pool to PostgreSQL within {timeout:g} s") from exc

    def close(self) -> None:
        self.pool.close()

    @contextmanager
    def _db(self) -> Iterator[Database]:
        try:
            with self.pool.connection(timeout=self.timeout) as conn:
                yield Database.borrowed(conn)
        except PoolTimeout as exc:
            raise StoreError(f"no database connection became free within {self.timeout:g} s") from exc

    def embedder(self, model_id: str) -> Embedder:
        return get_embedder(model_id, self.settings)

    def reranker(self, model_id: str) -> Reranker:
        return get_reranker(model_id, self.settings)

    def chat_model(self, model_id: str) -> ChatModel:
        return get_chat_model(model_id, self.settings)

    def warm_up(self) -> None:
        """Load the default model now, so the first request does not pay for it."""
        self.embedder(DEFAULT_MODEL).embed(["warm up"], "query")

    # ---------------------------------------------------------------- scope

    def _visible(self, db: Database, principal: Principal, name: str) -> None:
        """NotFoundError unless `name` exists and is in scope: out of scope looks exactly like absent."""
        row = db.get_kb(name)
        if row is None or not principal.may_see(row.name, row.labels):
            raise NotFoundError(f'knowledgebase "{name}" not found')

    def knowledge_bases(self, principal: Principal, selector: Selector | None = None) -> list[KnowledgeBaseSummary]:
        """The knowledge bases in scope (and matching `selector`), by name."""
        with self._db() as db:
            found = list_knowledge_bases(db)
        return [
            kb
            for kb in found
            if principal.may_see(kb.name, kb.labels) and (selector is None or selector.matches(kb.labels))
        ]

    def describe(self, principal: Principal, name: str) -> KnowledgeBaseDetail:
        with self._db() as db:
            self._visible(db, principal, name)
            return describe_knowledge_base(db, name)

    # ---------------------------------------------------------------- retrieval

    def query(self, principal: Principal, name: str, question: str, options: QueryOptions) -> QueryResult:
        """The ranked chunks of `name` for `question` (NotFoundError outside the caller's scope)."""
        with self._db() as db:
            return query_knowledge_base(
                db, name, question, self.embedder, options, reranker_for=self.reranker, visible=principal.may_see
            )

    def ask(self, principal: Principal, name: str, question: str, options: QueryOptions) -> AskResult:
        """The grounded answer of `name` to `question` through the knowledge base's chat model (spec.answer, else
        the configuration's chat.defaultModel); the database connection goes back to the pool before the model
        is called."""
        with self._db() as db:
            plan = prepare_ask(
                db,
                name,
                question,
                self.embedder,
                self.chat_model,
                options,
                default_model=self.settings.config.chat.default_model,
                reranker_for=self.reranker,
                visible=principal.may_see,
            )
        return answer_ask(plan)

    def query_many(
        self,
        principal: Principal,
        question: str,
        options: QueryOptions,
        *,
        names: Sequence[str] = (),
        selector: Selector | None = None,
    ) -> FederatedResult:
        """Query several knowledge bases (`names`, or those matching `selector`, or every one in scope) and fuse
        their rankings into one by reciprocal rank. topK and the token budget apply to the fused list (by
        default the largest of the knowledge bases'). A name outside the scope is NotFoundError."""
        if names:
            with self._db() as db:
                for name in names:
                    self._visible(db, principal, name)
            targets = list(dict.fromkeys(names))
        else:
            targets = [kb.name for kb in self.knowledge_bases(principal, selector) if kb.version is not None]
        results: list[QueryResult] = []
        outcomes: list[SourceOutcome] = []
        for name in targets:
            try:
                result = self.query(principal, name, question, options)
            except NotFoundError as exc:  # no published version yet: said, not fatal to the others
                outcomes.append(
                    SourceOutcome(knowledge_base=name, version=None, hits=0, best_score=None, message=str(exc))
                )
                continue
            results.append(result)
            outcomes.append(
                SourceOutcome(
                    knowledge_base=name,
                    version=result.version,
                    hits=len(result.hits),
                    best_score=result.best_score,
                    message=result.message,
                )
            )
        return _fuse(question, targets, results, outcomes, options)

    # ---------------------------------------------------------------- health

    def readiness(self) -> Readiness:
        """Whether requests can be served: the database answers, its schema is current, the model is loaded."""
        database, migrations = "ok", "ok"
        try:
            with self.pool.connection(timeout=2.0) as conn:
                row = conn.execute("SELECT max(version) FROM kb_schema_migrations").fetchone()
            latest = MIGRATIONS[-1][0]
            if row is None or row[0] != latest:
                migrations = f"schema at migration {row[0] if row else None}, this kbctl needs {latest}"
        except PoolTimeout:
            database = migrations = "unreachable: no connection within 2 s"
        except psycopg.Error as exc:
            database = migrations = f"unreachable: {type(exc).__name__}"
        embedder = self.embedder(DEFAULT_MODEL)
        model = "ok" if getattr(embedder, "loaded", True) else "not loaded yet"
        return Readiness(
            ready=database == migrations == model == "ok", database=database, migrations=migrations, model=model
        )


def _fuse(
    question: str,
    targets: list[str],
    results: list[QueryResult],
    outcomes: list[SourceOutcome],
    options: QueryOptions,
) -> FederatedResult:
    top_k = options.top_k or max((r.top_k for r in results), default=1)
    budget = options.max_tokens or max((r.max_context_tokens for r in results), default=1)
    scored = [
        (1.0 / (FEDERATED_RRF_K + hit.rank), hit.score, r.knowledge_base, r.version, hit)
        for r in results
        for hit in r.hits
    ]
    scored.sort(key=lambda item: (-item[0], -item[1], item[2]))
    hits: list[FederatedHit] = []
    tokens = 0
    for fused, _, name, version, hit in scored:
        if len(hits) == top_k or tokens + hit.tokens > budget:
            break  # the first hit that does not fit ends the list, as in one knowledge base
        data = hit.model_dump() | {"rank": len(hits) + 1, "fused_score": round(fused, 6)}
        hits.append(FederatedHit(**data, knowledge_base=name, version=version))
        tokens += hit.tokens
    return FederatedResult(
        question=question,
        knowledge_bases=targets,
        top_k=top_k,
        max_context_tokens=budget,
        hits=hits,
        tokens=tokens,
        results=outcomes,
    )
