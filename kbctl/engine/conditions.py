"""Status conditions of a knowledge base (Ready, Progressing, Degraded), kept the Kubernetes way.

Each condition has a status ("True"/"False"), a CamelCase reason, a human message and the time its
status last changed; a condition whose status is unchanged keeps its lastTransitionTime.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

__all__ = ["Condition", "conditions_for", "is_true"]

ConditionType = Literal["Ready", "Progressing", "Degraded"]


class Condition(BaseModel):
    """One observed aspect of a knowledge base's state."""

    model_config = ConfigDict(populate_by_name=True, frozen=True)

    type: ConditionType
    status: Literal["True", "False"]
    reason: str
    message: str = ""
    last_transition_time: datetime = Field(
        serialization_alias="lastTransitionTime",
        validation_alias=AliasChoices("lastTransitionTime", "last_transition_time"),
    )


def _merge(
    old: Sequence[dict[str, Any]], new: list[tuple[ConditionType, bool, str, str]], now: datetime
) -> list[Condition]:
    before = {c["type"]: Condition.model_validate(c) for c in old}
    out = []
    for kind, ok, reason, message in new:
        status: Literal["True", "False"] = "True" if ok else "False"
        prev = before.get(kind)
        since = prev.last_transition_time if prev is not None and prev.status == status else now
        out.append(Condition(type=kind, status=status, reason=reason, message=message, last_transition_time=since))
    return out


def conditions_for(
    old: Sequence[dict[str, Any]],
    *,
    now: datetime,
    serving: int | None,
    pending: bool = False,
    failure: str | None = None,
    failing_sources: Sequence[tuple[str, str]] = (),
) -> list[dict[str, Any]]:
    """The conditions after an event, as JSON-able dicts (camelCase keys) ready to store.

    serving: the version that serves queries (None: none yet); pending: desired state recorded but not
    reconciled yet; failure: the last reconcile failed as a whole; failing_sources: (name, reason) of
    sources that are stale or failed.
    """
    if failure is not None:
        ready = (False, "ReconcileFailed", failure)
    elif pending:
        ready = (False, "Pending", "a new generation waits to be reconciled")
    elif serving is None:
        ready = (False, "NoVersion", "no version has been published")
    else:
        ready = (True, "Reconciled", f"version {serving} serves queries")
    progressing = (True, "Pending", "waiting for a controller") if pending else (False, "Reconciled", "")
    degraded = (
        (True, "SourcesFailing", "; ".join(f"{name}: {reason}" for name, reason in failing_sources))
        if failing_sources
        else (False, "AllSourcesReady", "")
    )
    merged = _merge(
        old,
        [("Ready", *ready), ("Progressing", *progressing), ("Degraded", *degraded)],
        now,
    )
    return [c.model_dump(mode="json", by_alias=True) for c in merged]


def is_true(conditions: Sequence[dict[str, Any]], kind: str) -> bool:
    """Whether the condition `kind` is present with status "True"."""
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)
