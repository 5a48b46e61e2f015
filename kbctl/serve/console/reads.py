"""Everything the console reads, for one person: each read passes their scope (the knowledge bases their bearer
may see) and their reader (groups and claims), exactly as the HTTP API's routes do, so no page or fragment shows
more than the same bearer would get over the API.

The reads are synchronous (the pages run them on worker threads). A knowledge base outside the scope is a
NotFoundError, as one that does not exist.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from kbctl import (
    EvalRun,
    KnowledgeBaseDetail,
    KnowledgeBaseSummary,
    QueryOptions,
    QueryResult,
    Retrieval,
    SyncStatus,
    VersionChange,
    VersionDiff,
    VersionInfo,
)
from kbctl.errors import NotFoundError
from kbctl.inputs.access import Reader
from kbctl.manifest.selectors import Selector
from kbctl.manifest.sync import SYNC_APPLYSET_PREFIX
from kbctl.serve.auth import Principal
from kbctl.serve.console.charts import QualityPoint
from kbctl.serve.service import RetrievalService
from kbctl.userconfig import redact

__all__ = ["KnowledgeBasePage", "Reads", "narrowed"]


@dataclass(frozen=True)
class KnowledgeBasePage:
    """What the page of one knowledge base shows."""

    detail: KnowledgeBaseDetail
    versions: list[VersionInfo]
    changes: dict[int, VersionChange]  # version number -> what changed in it, as the reader may see it
    sync: SyncStatus | None  # the Sync that applies it, when one does
    sync_url: str | None  # its repository, secrets hidden
    quality: list[QualityPoint]  # of the eval set and mode measured last, one point per version
    quality_of: str  # which: "eval set (mode)"


def _quality(runs: Sequence[EvalRun]) -> tuple[str, list[QualityPoint]]:
    """The runs of the eval set and mode recorded last, the newest of each version, oldest version first: one line
    per metric that a change of version moves, not of eval set or mode."""
    if not runs:
        return "", []
    last = max(runs, key=lambda r: (r.at, r.id))
    newest: dict[int, EvalRun] = {}
    for run in sorted(runs, key=lambda r: (r.at, r.id)):
        if (run.eval_set, run.mode, run.k) == (last.eval_set, last.mode, last.k):
            newest[run.version] = run
    points = [
        QualityPoint(
            version=v,
            label=f"v{v}",
            recall=run.metrics.recall,
            ndcg=run.metrics.ndcg,
            no_answer=run.metrics.no_answer_accuracy,
        )
        for v, run in sorted(newest.items())
    ]
    return f"{last.eval_set} ({last.mode}, k={last.k})", points


def narrowed(principal: Principal, groups: Sequence[str]) -> Principal:
    """`principal` reading as only those of its groups named (the playground's "groups": what an agent with fewer
    groups would get); never more than it holds, so the console cannot widen access. No groups named: as it is."""
    if not groups:
        return principal
    held = principal.reader
    return replace(principal, reader=Reader(groups=held.groups & frozenset(groups), claims=held.claims))


class Reads:
    """The console's reads as one person (`principal`) over the server's store."""

    def __init__(self, service: RetrievalService, principal: Principal) -> None:
        self.service = service
        self.principal = principal

    @property
    def _scoped(self) -> dict[str, Any]:
        return {"scope": self.principal.may_see, "reader": self.principal.reader}

    def knowledge_bases(self, selector: Selector | None) -> list[KnowledgeBaseSummary]:
        return self.service.knowledge_bases(self.principal, selector)

    def knowledge_base(self, name: str) -> KnowledgeBasePage:
        """The knowledge base `name` in detail (NotFoundError outside the scope)."""
        store = self.service.store
        detail = self.service.describe(self.principal, name)  # the scope's check, first
        versions = store.history(name)
        changes = {c.number: c for c in store.version_changes(name, **self._scoped)}
        quality = _quality(store.eval_history(name, **self._scoped))
        sync = None
        applyset = store.resource(name)["status"].get("applySet") or ""
        if applyset.startswith(SYNC_APPLYSET_PREFIX):
            owner = applyset.removeprefix(SYNC_APPLYSET_PREFIX)
            sync = next((s for s in store.syncs() if s.name == owner), None)
        return KnowledgeBasePage(
            detail=detail,
            versions=versions,
            changes=changes,
            sync=sync,
            sync_url=redact(sync.url) if sync is not None else None,
            quality=quality[1],
            quality_of=quality[0],
        )

    def version_diff(self, name: str, from_version: int, to_version: int) -> VersionDiff:
        self.service.describe(self.principal, name)
        return self.service.store.version_diff(name, from_version, to_version, **self._scoped)

    def query(self, name: str, question: str, options: QueryOptions, groups: Sequence[str] = ()) -> QueryResult:
        """The playground's query: with its trace, as the person (or as fewer of their groups)."""
        return self.service.query(narrowed(self.principal, groups), name, question, replace(options, explain=True))

    def retrievals(self, **filters: Any) -> list[Retrieval]:
        return self.service.retrievals(self.principal, **filters)

    def retrieval(self, run: int) -> Retrieval:
        found = self.service.retrieval(self.principal, run)
        if found is None:
            raise NotFoundError(f"retrieval {run} not found")
        return found
