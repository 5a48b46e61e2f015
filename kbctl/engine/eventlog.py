"""What the engine writes to the events table (kbctl.store.events), worded once here: a publish, a failed reconcile,
a failing source, a version calibrated in place, a rollback, a deletion or a prune. Recording never fails the work
it records: a store that refuses the event has already refused the work, or will say so on its own."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from kbctl.engine.events import VersionCalibrated
from kbctl.engine.results import KnowledgeBaseResult
from kbctl.errors import KbctlError
from kbctl.store.database import Database
from kbctl.store.events import NewEvent

__all__ = ["calibrated", "deleted", "record", "result_events", "rolled_back"]

REMOVED_NAMED = 20  # documents a DocumentsRemoved event names; the rest are counted


def result_events(result: KnowledgeBaseResult, component: str) -> list[NewEvent]:
    """The events of one reconcile (apply, refresh or a controller's): a new version published, the knowledge
    base failing as a whole, and each source failing or stale. An unchanged one with every source ready has none."""
    name = result.name
    events: list[NewEvent] = []
    if result.action in ("created", "configured", "refreshed"):
        chunks = sum(s.chunks for s in result.sources)
        embedded = sum(s.embedded for s in result.sources)
        message = (
            f"version {result.version} published ({result.action}): {chunks} chunks from {len(result.sources)} "
            f"sources, {embedded} embedded, {chunks - embedded} reused"
        )
        events.append(NewEvent(name, "Normal", "Published", message, component))
    elif result.action == "failed" and result.message:
        events.append(NewEvent(name, "Warning", "ReconcileFailed", result.message, component))
    if result.removed:
        gone = result.removed
        named = ", ".join(gone[:REMOVED_NAMED]) + (
            f" and {len(gone) - REMOVED_NAMED} more" if len(gone) > REMOVED_NAMED else ""
        )
        documents = f"{len(gone)} document{'s' if len(gone) != 1 else ''}"
        message = f"version {result.version} no longer serves {documents} gone at the source: {named}"
        events.append(NewEvent(name, "Normal", "DocumentsRemoved", message, component))
    for source in result.sources:
        if source.state == "stale":
            message = f"source {source.name}: {source.message}; its last good content still serves"
            events.append(NewEvent(name, "Warning", "SourceStale", message, component))
        elif source.state == "failed":
            events.append(
                NewEvent(name, "Warning", "SourceFailed", f"source {source.name}: {source.message}", component)
            )
    return events


def calibrated(event: VersionCalibrated, component: str) -> NewEvent:
    message = f"version {event.version} calibrated (published before its relevance gate was): {event.lines}"
    return NewEvent(event.name, "Normal", "Calibrated", message, component)


def rolled_back(name: str, from_version: int, to_version: int) -> NewEvent:
    message = f"version {to_version} serves again (was version {from_version})"
    return NewEvent(name, "Normal", "RolledBack", message, "rollout")


def deleted(name: str, component: str) -> NewEvent:
    reason = "Pruned" if component == "prune" else "Deleted"
    message = "no longer in the applied set: deleted" if component == "prune" else "deleted"
    return NewEvent(name, "Normal", reason, message, component)


def record(db: Database, events: Sequence[NewEvent]) -> None:
    """Record events; a store error is swallowed (see the module docstring)."""
    with contextlib.suppress(KbctlError):
        db.record_events(events)
