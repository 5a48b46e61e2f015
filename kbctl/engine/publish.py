"""Publish: the engine's side of writing what a plan and its ingest produced (kbctl.store does the writing).

A new version: the row it keeps for each source (the revision it serves, and who may read it), the live status
each source leaves, and the one-line cause `rollout history` shows, written by `Database.publish` in one
transaction. When nothing is published (the plan changes nothing, or no source would serve any content), only
the live statuses are written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

from kbctl.engine.ingest import IngestRun
from kbctl.engine.plan import Fail, KnowledgeBasePlan, SourcePlan
from kbctl.engine.results import AppliedSource
from kbctl.manifest import Access
from kbctl.manifest.changes import access_changes, field_changes
from kbctl.manifest.digest import source_sha256
from kbctl.sources import source_of
from kbctl.store.database import Database, LiveSourceRow, NewRevision, VersionSourceRow, WrittenRevision
from kbctl.store.rows import source_state
from kbctl.store.state import StoredState
from kbctl.store.texts import pack

__all__ = ["CAUSE_ITEMS", "Outcome", "change_cause", "live_status", "publish_version", "write_live_statuses"]

CAUSE_ITEMS = 3  # changes named per kind in a version's change cause (`rollout history`'s CHANGE column)
_T = TypeVar("_T")

Outcome = NewRevision | WrittenRevision | Fail  # what ingesting a source gave (kbctl.engine.ingest)


def publish_version(
    db: Database,
    plan: KnowledgeBasePlan,
    run: IngestRun,
    results: Sequence[AppliedSource],
    statuses: list[LiveSourceRow],
    stored: Mapping[str, LiveSourceRow],
) -> None:
    """Publish the plan's next version: its rows (one per source, as `results` report them), the new revisions
    `run` holds, the live `statuses` (`stored`: the rows as read before) and the change cause."""
    entries = [
        _version_row(position, p, run.outcomes.get(p.name), r, plan.kb.spec.access_of(p.source))
        for position, (p, r) in enumerate(zip(plan.sources, results, strict=True))
    ]
    db.publish(
        name=plan.name,
        manifest=plan.manifest,
        manifest_sha256=plan.manifest_sha256,
        model=plan.model_id,
        number=plan.next_version,
        new_revisions=[o for o in run.outcomes.values() if isinstance(o, NewRevision)],
        sources=entries,
        statuses=statuses,
        change_cause=change_cause(plan),
        stored_statuses=stored,
        packed=plan.packed,
        background=run.background,
        language=plan.kb.spec.retrieval.language,
    )


def write_live_statuses(
    db: Database, kb_id: int, statuses: Sequence[LiveSourceRow], stored: Mapping[str, LiveSourceRow] | None = None
) -> None:
    """Publish no version, only the live status each source leaves (`stored`: the rows as read before)."""
    db.write_statuses(kb_id, statuses, stored)


def _version_row(
    position: int, p: SourcePlan, outcome: Outcome | None, result: AppliedSource, access: Access | None
) -> VersionSourceRow:
    """The row a published version keeps for a source: it points at its new revision (by key when the version
    inserts it, by id when it was written ahead), at the stored revision it keeps serving, or at nothing, and says
    who may read it (`access`: the source's, else the spec's)."""
    key = outcome.revision_key if isinstance(outcome, NewRevision) else None
    if isinstance(outcome, WrittenRevision):
        kept: int | None = outcome.revision_id
    else:
        kept = p.serving.revision_id if key is None and p.serving is not None else None
    serves = key is not None or kept is not None
    readers, reader_labels = access.columns() if access is not None else (None, None)
    return VersionSourceRow(
        readers=readers,
        reader_labels=reader_labels,
        source_name=p.name,
        state=result.state,
        message=result.message,
        position=position,
        source_sha256=p.source_sha256,
        revision_id=kept,
        revision_key=key,
        chunk_count=result.chunks,
        embedded_count=result.embedded,
        reused_count=result.chunks - result.embedded if serves else 0,
    )


def live_status(p: SourcePlan, outcome: Outcome | None, state: StoredState, now: datetime) -> LiveSourceRow:
    """The live status row a source leaves: the plan's, the ingest failure's, or the stored one kept."""
    status = p.status or state.statuses.get(p.name) or LiveSourceRow(source_name=p.name, state="ready", checked_at=now)
    if isinstance(outcome, Fail):  # fetched (or read) fine, but its content could not be ingested
        serving = source_state(read=False, serving=outcome.keep is not None)
        return replace(status, state=serving, message=outcome.message, checked_at=now)
    return status


def change_cause(plan: KnowledgeBasePlan) -> str:
    """One line for `rollout history`: what made this version."""
    old, new = plan.previous_manifest, plan.manifest
    if old is None:
        return "created"
    added, removed, changed = plan.source_changes()
    fields = field_changes(old, new)
    parts = [f"{p.path.removeprefix('spec.')} changed" for p in _first(fields)]
    parts += [f"source {n} added" for n in _first(added)] + [f"source {n} removed" for n in _first(removed)]
    access = {c.path.removeprefix("spec.sources[").removesuffix("].access") for c in access_changes(old, new)}
    packed_old, packed_new = pack(old)[0], plan.packed()[0]  # compared as source_changes compares them
    reread = [n for n in changed if n not in access or _differs_beyond_access(packed_old, packed_new, n)]
    parts += [f"source {n} changed" for n in _first(reread)]
    parts += [f"access of {n} changed" for n in _first([n for n in changed if n in access])]
    respec = set(added) | set(changed)
    fresh = [p.name for p in plan.to_ingest if p.name not in respec]
    if fresh:
        parts.append(("refreshed: " if plan.trigger == "refresh" else "new content: ") + ", ".join(_first(fresh)))
    gone = [n for n in plan.documents_removed if source_of(n) not in respec]
    if gone:
        parts.append("removed: " + ", ".join(_first(gone)))
    hidden = sum(max(0, len(x) - CAUSE_ITEMS) for x in (fields, added, removed, changed, fresh, gone))
    if hidden:
        parts.append(f"and {hidden} more")
    return "; ".join(parts) or "no content change"


def _differs_beyond_access(old: dict[str, Any], new: dict[str, Any], name: str) -> bool:
    """Whether source `name` differs between two manifests in more than its `access`."""
    [before] = [s for s in old["spec"]["sources"] if s["name"] == name]
    [after] = [s for s in new["spec"]["sources"] if s["name"] == name]
    return source_sha256(before) != source_sha256(after)


def _first(items: Sequence[_T]) -> Sequence[_T]:
    """The first CAUSE_ITEMS of a list of changes: a change cause stays one readable line."""
    return items[:CAUSE_ITEMS]
