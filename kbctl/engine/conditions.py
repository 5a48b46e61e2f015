"""Status conditions of a knowledge base (Ready, Progressing, Degraded), computed in one place from the stored state.

Each condition has a status ("True", "False" or "Unknown"), a CamelCase reason, a message that names the
cause and the next step, and the time its status last changed; a condition whose status is unchanged keeps
its lastTransitionTime. Every change of state (a reconcile finished or failed, a manifest recorded for a
controller, a rollback) ends in `observe`, which reads the knowledge base back and writes its conditions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from kbctl.store.database import Database, KnowledgeBaseRow

__all__ = ["Condition", "Facts", "PublishedNothing", "condition", "conditions_for", "is_true", "observe"]

ConditionType = Literal["Ready", "Progressing", "Degraded"]
Status = Literal["True", "False", "Unknown"]


class Condition(BaseModel):
    """One observed aspect of a knowledge base's state."""

    model_config = ConfigDict(populate_by_name=True, frozen=True)

    type: ConditionType
    status: Status
    reason: str
    message: str = ""
    last_transition_time: datetime = Field(
        serialization_alias="lastTransitionTime",
        validation_alias=AliasChoices("lastTransitionTime", "last_transition_time"),
    )


@dataclass(frozen=True)
class PublishedNothing:
    """Why the last reconcile published nothing: `ReconcileFailed` (the KB as a whole) or `NoContent`."""

    reason: Literal["ReconcileFailed", "NoContent"]
    message: str


@dataclass(frozen=True)
class Facts:
    """What the conditions are computed from: the stored state, and the failure of the reconcile just done."""

    serving: int | None  # the version that serves queries
    pending: int | None  # the desired generation waiting to be reconciled, if any
    failed_sources: Sequence[tuple[str, str]] = ()  # (name, reason) of stale or failed sources
    failure: PublishedNothing | None = None
    sources: int = 0  # the serving version's sources, counted as `get` counts them
    ready_sources: int = 0  # of those, the ready ones: none, and the version serves only stale content


def _serves(serving: int | None) -> str:
    return f"version {serving} still serves queries" if serving is not None else "no version serves queries"


def _ready(f: Facts) -> tuple[Status, str, str]:
    if f.failure is not None:
        return "False", f.failure.reason, f"{f.failure.message}; {_serves(f.serving)}; fix the cause and apply again"
    if f.pending is not None and f.serving is not None:  # a change waits: the version in place still serves
        return (
            "True",
            "Serving",
            f"version {f.serving} serves queries; generation {f.pending} waits for a controller "
            "(start `kbctl controller`, or apply with --wait)",
        )
    if f.pending is not None:
        return (
            "False",
            "Pending",
            f"generation {f.pending} waits for a controller ({_serves(f.serving)}); "
            "start `kbctl controller`, or apply with --wait",
        )
    if f.serving is None:
        return "False", "NoVersion", "no version has been published; apply the manifest with --wait"
    if f.sources and not f.ready_sources:
        return (
            "False",
            "SourcesFailing",
            f"no source could be read (see Degraded); version {f.serving} still serves their last good content",
        )
    return "True", "Reconciled", f"version {f.serving} serves queries"


def _progressing(f: Facts) -> tuple[Status, str, str]:
    if f.failure is not None:
        return "False", f.failure.reason, f.failure.message
    if f.pending is not None:
        return "True", "Pending", "waiting for a controller"
    return "False", "Reconciled", ""


def _degraded(f: Facts) -> tuple[Status, str, str]:
    if f.failed_sources:
        return "True", "SourcesFailing", "; ".join(f"{name}: {reason}" for name, reason in f.failed_sources)
    if f.failure is not None and f.serving is None:
        return "Unknown", "NotReconciled", "no source has been read yet"
    return "False", "AllSourcesReady", ""


def conditions_for(old: Sequence[dict[str, Any]], facts: Facts, now: datetime) -> list[dict[str, Any]]:
    """The conditions for `facts`, as JSON-able dicts (camelCase keys) ready to store; the one place they are made."""
    before = {c["type"]: Condition.model_validate(c) for c in old}
    out = []
    computed: list[tuple[ConditionType, tuple[Status, str, str]]] = [
        ("Ready", _ready(facts)),
        ("Progressing", _progressing(facts)),
        ("Degraded", _degraded(facts)),
    ]
    for kind, (status, reason, message) in computed:
        prev = before.get(kind)
        since = prev.last_transition_time if prev is not None and prev.status == status else now
        condition = Condition(type=kind, status=status, reason=reason, message=message, last_transition_time=since)
        out.append(condition.model_dump(mode="json", by_alias=True))
    return out


def observe(
    db: Database, row: KnowledgeBaseRow, *, finished: int | None = None, failure: PublishedNothing | None = None
) -> list[dict[str, Any]]:
    """Compute a knowledge base's conditions from what the store holds now, and write them.

    `finished` marks that generation reconciled in the same statement (a newer one recorded meanwhile stays
    pending); `failure` is why the reconcile just done published nothing. Returns the conditions written.
    """
    latest = db.get_kb(row.name) or row
    observed = max(latest.observed_generation, finished or 0)
    failed = [(n, s.message or s.state) for n, s in sorted(db.source_statuses(latest.id).items()) if s.state != "ready"]
    sources, ready = db.source_counts(latest.id)
    facts = Facts(
        serving=latest.current_version,
        pending=latest.generation if latest.generation > observed else None,
        failed_sources=failed,
        failure=failure,
        sources=sources,
        ready_sources=ready,
    )
    conditions = conditions_for(latest.conditions, facts, datetime.now(UTC))
    if finished is not None:
        db.finish_generation(latest.id, finished, conditions)
    else:
        db.set_conditions(latest.id, conditions)
    return conditions


def condition(conditions: Sequence[dict[str, Any]], kind: str) -> dict[str, Any]:
    """The stored condition `kind` (camelCase keys), or {} when there is none."""
    return next((c for c in conditions if c.get("type") == kind), {})


_NOT_READY: Final = {"ReconcileFailed": "Failed", "SourcesFailing": "Stale"}


def status_word(conditions: Sequence[dict[str, Any]]) -> str:
    """The conditions in one word, for `get`'s STATUS column: why it is not Ready (Pending, NoVersion, Failed,
    NoContent, Stale: every source failing), else Pending (a newer generation waits), Degraded (some sources
    failing) or Ready."""
    ready = condition(conditions, "Ready")
    if ready.get("status") != "True":
        reason = str(ready.get("reason") or "Unknown")
        return _NOT_READY.get(reason, reason)
    if is_true(conditions, "Progressing"):
        return "Pending"
    if is_true(conditions, "Degraded"):
        return "Degraded"
    return "Ready"


def is_true(conditions: Sequence[dict[str, Any]], kind: str) -> bool:
    """Whether the condition `kind` is present with status "True"."""
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)
