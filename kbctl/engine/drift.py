"""Drift converged: a knowledge base whose serving version is not the one its applied manifest made (a manual
`rollout undo`) gets the applied manifest recorded as desired again, for the controller to reconcile (its stored
content is reused: nothing is re-embedded); with spec.suspend it is left as it is and reported. Each case leaves
an event."""

from __future__ import annotations

from dataclasses import dataclass

from kbctl.engine.conditions import observe
from kbctl.engine.eventlog import record
from kbctl.store.database import Database
from kbctl.store.events import NewEvent

__all__ = ["DriftOutcome", "converge_drift"]


@dataclass(frozen=True)
class DriftOutcome:
    """What the controller did about one knowledge base that drifted."""

    name: str
    serving: int
    reverted: bool  # False: spec.suspend was set, and it was left as it is


def converge_drift(db: Database) -> list[DriftOutcome]:
    """Record the applied manifest again for each knowledge base that drifted, unless it is suspended; one event
    each (a suspended one's event is recorded once per drift, not on every pass)."""
    outcomes: list[DriftOutcome] = []
    for drift in db.drifted():
        what = f"version {drift.serving} serves a manifest other than the one last applied"
        if drift.suspended:
            message = f"{what} (rolled back?); spec.suspend is set, so it is left as it is"
            newest = db.list_events([drift.name], limit=1, kind="KnowledgeBase")
            if not newest or (newest[0].reason, newest[0].message) != ("DriftDetected", message):
                record(db, [NewEvent(drift.name, "Warning", "DriftDetected", message, "controller")])
            outcomes.append(DriftOutcome(drift.name, drift.serving, reverted=False))
            continue
        row = db.record_desired(drift.name, drift.manifest(db), digest=drift.applied_sha256)
        observe(db, row)  # Progressing: the applied generation waits for this controller
        message = f"{what} (rolled back?); re-applying it as generation {row.generation}"
        record(db, [NewEvent(drift.name, "Normal", "DriftReverted", message, "controller")])
        outcomes.append(DriftOutcome(drift.name, drift.serving, reverted=True))
    return outcomes
