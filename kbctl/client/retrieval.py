"""Retrieval (`Queries`): `query` one knowledge base, `query_many` several fused into one ranking, the `context`
block for a model, `ask` for an answer through a chat model; `warm_up` and `readiness` (`Readiness`, `/readyz`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Unpack

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from kbctl import telemetry
from kbctl.client._base import Scope
from kbctl.client.reads import Reads
from kbctl.errors import KbctlError

if TYPE_CHECKING:
    from kbctl.answer import AskResult
    from kbctl.inputs.access import Reader
    from kbctl.manifest.selectors import Selector
    from kbctl.query.context import GroundedContext
    from kbctl.query.federated import FederatedResult
    from kbctl.query.options import QueryOptions, QueryOverrides
    from kbctl.query.results import QueryResult
    from kbctl.store.database import Database

__all__ = ["Queries", "Readiness"]


class Readiness(BaseModel):
    """Whether queries can be served (`/readyz`): each check "ok", or a word on why not."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    ready: bool
    database: str
    migrations: str
    model: str


class Queries(Reads):
    """Retrieval: querying one knowledge base or several, the context block, answers, and readiness to serve."""

    def _preload_model(self, db: Database, name: str) -> None:
        """On a store's first query: start loading the model of `name`'s serving version in the background
        (kbctl.embedding.preload), so the query's modules import while the model loads. Later queries (a server's)
        skip the lookup; a model they are the first to need loads when they embed. What the query itself reads, in
        its own snapshot, decides: a version published meanwhile with another model only wastes this load."""
        from kbctl.embedding import preload

        if not self._first_query:
            return
        self._first_query = False
        target = db.query_target(name)
        if target is None or target.model is None:
            return
        with suppress(KbctlError):  # an unknown model is reported by the query
            preload(self.embedder(target.model))

    def query(
        self,
        name: str,
        question: str,
        options: QueryOptions | None = None,
        *,
        scope: Scope | None = None,
        reader: Reader | None = None,
        **overrides: Unpack[QueryOverrides],
    ) -> QueryResult:
        """The chunks most relevant to `question` (hybrid, vector or keyword; spec defaults for what is unset);
        `rerank` False skips the spec's reranker, True requires one; `explain` adds a per-stage trace of
        candidates, ranks, scores, cuts and timings. The overrides given (not None: top_k, threshold,
        max_tokens, mode, explain, rerank) replace those of `options`. Outside `scope` it is NotFoundError.

        `reader` is the caller's groups and claims (`Reader.of(["hr"])`): documents behind an `access` rule it
        does not meet are never candidates, so no hit, count, score or trace names them. None is a caller without
        any, who reads only documents without a rule."""
        from kbctl.query.options import QueryOptions

        options = QueryOptions.build(options, **overrides)
        with self._reading(query=True) as db:
            self._preload_model(db, name)
            from kbctl.query.retrieve import query_knowledge_base

            result = query_knowledge_base(
                db, name, question, self.embedder, options, reranker_for=self.reranker, visible=scope, reader=reader
            )
        return telemetry.traced(result)

    def query_many(
        self,
        question: str,
        options: QueryOptions | None = None,
        *,
        names: Sequence[str] = (),
        selector: Selector | None = None,
        scope: Scope | None = None,
        reader: Reader | None = None,
        on_member: Callable[[QueryResult], None] | None = None,
        **overrides: Unpack[QueryOverrides],
    ) -> FederatedResult:
        """Query several knowledge bases (`names`, or those matching `selector`, or every one with a published
        version in `scope`) and fuse their rankings into one by reciprocal rank (kbctl.query.federated). topK
        and the token budget apply to the fused list, by default the largest of the knowledge bases'. A name
        that does not exist, or is outside `scope`, is NotFoundError. `reader` as for `query`; `on_member` is
        given each knowledge base's own result (with its trace when explaining: kbctl serve's retrieval log)."""
        from kbctl.query.federated import query_many
        from kbctl.query.options import QueryOptions

        options = QueryOptions.build(options, **overrides)
        if names:
            with self._reading() as db:
                for name in names:
                    self._in_scope(db, name, scope)
            targets = list(names)
        else:
            targets = [kb.name for kb in self.list(selector, scope=scope) if kb.version is not None]

        def one(name: str) -> QueryResult:
            result = self.query(name, question, options, scope=scope, reader=reader)
            if on_member is not None:
                on_member(result)
            return result

        return query_many(question, targets, options, one)

    def context(
        self,
        name: str,
        question: str,
        options: QueryOptions | None = None,
        *,
        scope: Scope | None = None,
        reader: Reader | None = None,
        **overrides: Unpack[QueryOverrides],
    ) -> GroundedContext:
        """The block a model should receive for `question`: merged passages marked as reference data,
        or an explicit "no relevant context was found" block. The overrides given replace those of `options`;
        `reader` as for `query`."""
        from kbctl.query.context import build_context

        return build_context(self.query(name, question, options, scope=scope, reader=reader, **overrides))

    def ask(
        self,
        name: str,
        question: str,
        options: QueryOptions | None = None,
        *,
        model: str | None = None,
        on_text: Callable[[str], None] | None = None,
        scope: Scope | None = None,
        reader: Reader | None = None,
        **overrides: Unpack[QueryOverrides],
    ) -> AskResult:
        """Answer `question` from the knowledge base's passages through a chat model, citing them as [1], [2].

        When nothing passes the similarity threshold no model is called: the result has `answer` None and
        `reason` "noContext". The model is `model` (`provider/name` or `profile:NAME`), else the version's
        `spec.answer`, else the configuration's `chat.defaultModel`. With `on_text` the answer is streamed to
        it as it arrives. The retrieval overrides given replace those of `options`, and `reader` filters the
        passages, as for `query`. The database connection is given back before the model is called.
        """
        from kbctl.answer import answer_ask, prepare_ask
        from kbctl.query.options import QueryOptions

        options = QueryOptions.build(options, **overrides)
        with self._reading(query=True) as db:
            plan = prepare_ask(
                db,
                name,
                question,
                self.embedder,
                self.chat_model,
                options,
                model=model,
                default_model=self.settings.config.chat.default_model,
                reranker_for=self.reranker,
                visible=scope,
                reader=reader,
            )
        result = answer_ask(plan, on_text)
        telemetry.traced(result.retrieval)
        return result

    def warm_up(self) -> None:
        """Load the default embedding model now, so the first query does not pay for it."""
        from kbctl.manifest.models import DEFAULT_MODEL

        self.embedder(DEFAULT_MODEL).embed(["warm up"], "query")

    def readiness(self) -> Readiness:
        """Whether queries can be served: the database answers, its schema is current, the model is loaded."""
        from kbctl.manifest.models import DEFAULT_MODEL

        if self._pool is not None:
            database, migrations = self._pool.schema_problem()
        else:
            database, migrations = "ok", self._query_database.schema_problem()
        model = "ok" if getattr(self.embedder(DEFAULT_MODEL), "loaded", True) else "not loaded yet"
        return Readiness(
            ready=database == migrations == model == "ok", database=database, migrations=migrations, model=model
        )
