"""What the HTTP API and the MCP tools do, once: list, describe and query within a caller's scope, as its reader.

A thin adapter over the Python API: one pooled KnowledgeBaseStore (one connection pool, one copy of each model)
answers every call, with the caller's token scope as the store's `scope` and its groups and claims as its
`reader` (`Principal.reader`: documents behind an access rule it does not meet are neither retrieved nor
described). Each call borrows a pooled connection and reads in one snapshot, so a version published while the
server runs is served by the next call and no call sees a half-published version. Every method is synchronous and
thread-safe: the HTTP routes run them on worker threads, never on the event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from kbctl import (
    AskResult,
    FederatedResult,
    KnowledgeBaseDetail,
    KnowledgeBaseStore,
    KnowledgeBaseSummary,
    QueryOptions,
    QueryResult,
    Readiness,
    Retrieval,
    Selector,
)
from kbctl.config import Settings
from kbctl.errors import NotFoundError
from kbctl.serve.auth import Principal

__all__ = ["RetrievalService"]


class RetrievalService:
    """Retrieval for many concurrent callers over one store (pooled connections, shared models)."""

    def __init__(self, settings: Settings, *, pool_size: int = 10, timeout: float = 10.0) -> None:
        self.settings = settings
        self.store = KnowledgeBaseStore(settings=settings, pool_size=pool_size, pool_timeout=timeout)

    def close(self) -> None:
        self.store.close()

    def warm_up(self) -> None:
        """Load the default model now, so the first request does not pay for it."""
        self.store.warm_up()

    def knowledge_bases(self, principal: Principal, selector: Selector | None = None) -> list[KnowledgeBaseSummary]:
        """The knowledge bases in scope (and matching `selector`), by name."""
        return self.store.list(selector, scope=principal.may_see, reader=principal.reader)

    def describe(self, principal: Principal, name: str) -> KnowledgeBaseDetail:
        return self.store.describe(name, scope=principal.may_see, reader=principal.reader)

    def query(self, principal: Principal, name: str, question: str, options: QueryOptions) -> QueryResult:
        """The ranked chunks of `name` for `question` (NotFoundError outside the caller's scope)."""
        return self.store.query(name, question, options, scope=principal.may_see, reader=principal.reader)

    def ask(self, principal: Principal, name: str, question: str, options: QueryOptions) -> AskResult:
        """The grounded answer of `name` to `question` through the knowledge base's chat model (spec.answer, else
        the configuration's chat.defaultModel); the database connection goes back to the pool before the model
        is called."""
        return self.store.ask(name, question, options, scope=principal.may_see, reader=principal.reader)

    def query_many(
        self,
        principal: Principal,
        question: str,
        options: QueryOptions,
        *,
        names: Sequence[str] = (),
        selector: Selector | None = None,
        on_member: Callable[[QueryResult], None] | None = None,
    ) -> FederatedResult:
        """Query several knowledge bases (`names`, or those matching `selector`, or every one in scope) and fuse
        their rankings into one (KnowledgeBaseStore.query_many). A name outside the scope is NotFoundError;
        `on_member` is given each knowledge base's own result (the retrieval log keeps their traces)."""
        return self.store.query_many(
            question,
            options,
            names=names,
            selector=selector,
            scope=principal.may_see,
            reader=principal.reader,
            on_member=on_member,
        )

    @property
    def retrieval_log_enabled(self) -> bool:
        """Whether the configuration turns the retrieval log on (serve.retrievalLog.enabled)."""
        return self.settings.config.serve.retrieval_log.enabled

    def retrievals(
        self,
        principal: Principal,
        *,
        knowledge_base: str | None = None,
        caller: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        nothing_relevant: bool = False,
        limit: int = 50,
        before: int | None = None,
    ) -> list[Retrieval]:
        """The retrieval log, newest first, as the caller may see it: only runs whose every knowledge base is in its
        scope, the hits counted those it may read (KnowledgeBaseStore.retrievals, for its filters)."""
        return self.store.retrievals(
            knowledge_base=knowledge_base,
            caller=caller,
            since=since,
            until=until,
            nothing_relevant=nothing_relevant,
            limit=limit,
            before=before,
            scope=principal.may_see,
            reader=principal.reader,
        )

    def retrieval(self, principal: Principal, run_id: int) -> Retrieval | None:
        """One run of the retrieval log with its result and trace, as the caller may see it (the hits and trace
        entries of documents it may not read left out); None when there is none, or it is out of scope."""
        try:
            return self.store.retrieval(run_id, scope=principal.may_see, reader=principal.reader)
        except NotFoundError:
            return None

    def readiness(self) -> Readiness:
        """Whether requests can be served: the database answers, its schema is current, the model is loaded."""
        return self.store.readiness()
