"""Reading what the store holds (`Reads`): every knowledge base (`list`, `resource`), one in detail (`describe`),
Syncs, events, the retrieval log (and its writer's record and prune), and `Overview`, what a controller's metrics
read at each scrape."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from kbctl.client._base import Scope, StoreBase
from kbctl.errors import NotFoundError

if TYPE_CHECKING:
    from kbctl.engine.status import KnowledgeBaseDetail, KnowledgeBaseSummary, SyncDetail
    from kbctl.inputs.access import Reader
    from kbctl.manifest.selectors import Selector
    from kbctl.store.events import KnowledgeBaseEvent
    from kbctl.store.retrievals import NewRetrieval, Retrieval
    from kbctl.store.syncs import SyncStatus

__all__ = ["Overview", "Reads"]


@dataclass(frozen=True)
class Overview:
    """What a controller's metrics read at each scrape: the queue depth, every knowledge base, every Sync."""

    pending: int
    knowledge_bases: Sequence[KnowledgeBaseSummary] = ()
    syncs: Sequence[SyncStatus] = ()


class Reads(StoreBase):
    """Reading what the store holds: knowledge bases, Syncs, events, the retrieval log (and its writes)."""

    def pending_count(self) -> int:
        """Knowledge bases whose desired state a controller has not reconciled yet, read on a connection of its
        own (safe from another thread, e.g. a metrics scrape, while this store's connection works)."""
        from kbctl.store.database import Database

        with Database(self.db.url, migrate=False) as db:
            return db.pending_count()

    def overview(self) -> Overview:
        """The queue depth (`pending_count`), every knowledge base (as `list` gives them) and every Sync (as `syncs`),
        read in one snapshot on a connection of its own (safe from another thread, e.g. a metrics scrape)."""
        from kbctl.engine.status import list_knowledge_bases
        from kbctl.store.database import Database

        with Database(self.db.url, migrate=False) as db, db.read_only():
            knowledge_bases, syncs = list_knowledge_bases(db), db.list_syncs()
        # pending_count's own condition, counted on the rows just read rather than in a statement of its own
        pending = sum(kb.generation > kb.observed_generation for kb in knowledge_bases)
        return Overview(pending, knowledge_bases, syncs)

    def events(
        self, names: Sequence[str] | None = None, *, scope: Scope | None = None, limit: int | None = None
    ) -> list[KnowledgeBaseEvent]:
        """What happened to knowledge bases (those of `names`, else every one, deleted ones included), oldest
        first: publishes, failed reconciles, failing sources, rollbacks, deletions. `limit` keeps the newest.
        With `scope`, only events of knowledge bases that exist and that `scope` lets the caller see (not those of a
        Sync of the same name)."""

        if scope is not None:
            visible = {kb.name for kb in self.list(scope=scope)}
            names = [n for n in names if n in visible] if names is not None else sorted(visible)
        with self._reading() as db:
            return db.list_events(names, limit=limit, kind="KnowledgeBase" if scope is not None else None)

    def retrievals(
        self,
        *,
        knowledge_base: str | None = None,
        caller: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        nothing_relevant: bool = False,
        limit: int = 50,
        before: int | None = None,
        scope: Scope | None = None,
        reader: Reader | None = None,
    ) -> list[Retrieval]:
        """The retrieval log of `kbctl serve` (serve.retrievalLog), newest first, without results: at most `limit`
        runs (1 - 500) with an id below `before` (the next page), of `knowledge_base`, of `caller`, from `since`
        until `until`, only those that found nothing relevant with `nothing_relevant`. With `scope`, only the runs
        whose every knowledge base it lets the caller see; with `reader`, the hits counted are those it may read
        (kbctl.store.retrievals). ValueError for a limit out of bounds."""

        with self._reading() as db:
            return db.list_retrievals(
                knowledge_base=knowledge_base,
                caller=caller,
                since=since,
                until=until,
                nothing_relevant=nothing_relevant,
                limit=limit,
                before=before,
                scope=scope,
                reader=reader,
            )

    def retrieval(self, run_id: int, *, scope: Scope | None = None, reader: Reader | None = None) -> Retrieval:
        """One run of the retrieval log with its result and trace, as `scope` and `reader` may see it (the hits and
        trace entries of sources the reader may not read left out); NotFoundError when there is none, or it is
        out of scope."""

        with self._reading() as db:
            found = db.get_retrieval(run_id, scope=scope, reader=reader)
        if found is None:
            raise NotFoundError(f"retrieval {run_id} not found")
        return found

    def record_retrievals(self, runs: Sequence[NewRetrieval], *, max_result_bytes: int) -> None:
        """Record runs in the retrieval log (kbctl serve's writer thread), in one batch, each result cut to
        `max_result_bytes` of JSON (its hit texts shortened, then its trace entries dropped, and flagged)."""

        with self._writing() as db:
            db.record_retrievals(runs, max_result_bytes=max_result_bytes)

    def prune_retrievals(self, *, days: int, max_rows: int) -> int:
        """Delete the runs of the retrieval log older than `days` and beyond the newest `max_rows`; how many."""

        with self._writing() as db:
            return db.prune_retrievals(days=days, max_rows=max_rows)

    def syncs(self) -> list[SyncStatus]:
        """The Syncs recorded (git folders of manifests a controller keeps applied), by name, with what each last
        applied."""

        with self._reading() as db:
            return db.list_syncs()

    def describe_sync(self, name: str) -> SyncDetail:
        """A Sync in detail (`kbctl describe sync`): its spec, the commit it last applied and when, its last error,
        the knowledge bases it applied and its events (NotFoundError when there is none called `name`)."""
        from kbctl.engine.status import describe_sync

        with self._reading() as db:
            return describe_sync(db, name)

    def delete_sync(self, name: str) -> bool:
        """Stop and forget a Sync (the knowledge bases it applied stay); False when there was none called `name`."""

        return self.db.delete_sync(name)

    def list(
        self, selector: Selector | None = None, *, scope: Scope | None = None, reader: Reader | None = None
    ) -> list[KnowledgeBaseSummary]:
        """Every knowledge base (whose labels match `selector`, and that `scope` lets the caller see, when
        given), by name. With a `reader`, as that caller sees them: the counts of a knowledge base that restricts
        sources (`access`) are of what it may read."""
        from kbctl.engine.status import list_knowledge_bases

        with self._reading() as db:
            found = list_knowledge_bases(db, reader)
        return [
            s
            for s in found
            if (selector is None or selector.matches(s.labels)) and (scope is None or scope(s.name, s.labels))
        ]

    def resource(self, name: str) -> dict[str, Any]:
        """A knowledge base as a Kubernetes-style object (`kbctl get kb NAME -o yaml`): metadata, the applied spec
        with defaults, status. Applying its YAML again changes nothing."""
        from kbctl.engine.status import knowledge_base_resource

        return knowledge_base_resource(self.db, name)

    @staticmethod
    def resource_list(items: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """Several `resource` objects as one Kubernetes `List` (`kbctl get kb -o yaml`)."""
        from kbctl.engine.status import resource_list

        return resource_list(list(items))

    def describe(self, name: str, *, scope: Scope | None = None, reader: Reader | None = None) -> KnowledgeBaseDetail:
        """Spec in force, current version and per-source state of one knowledge base (NotFoundError outside
        `scope`). With a `reader`, as that caller sees it: the sources it may not read are left out, with their
        chunks, events and condition messages."""
        from kbctl.engine.status import describe_knowledge_base

        with self._reading() as db:
            if scope is not None:
                self._in_scope(db, name, scope)
            return describe_knowledge_base(db, name, reader)
