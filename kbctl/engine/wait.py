"""Waiting on the store: `kbctl wait` (a condition, or a deletion, of one or many knowledge bases), `kbctl rollout
status` (`RolloutStatus`: done, waiting or failed, and why), and `apply --wait` on work a controller
(kbctl.engine.controller) takes: its result read back from the store, or an error once no live controller is
left to do it (`controller_alive`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from kbctl.defaults import APPLY_WAIT_SECONDS, HEARTBEAT_TTL_SECONDS, WAIT_SECONDS
from kbctl.engine.conditions import condition as find_condition
from kbctl.engine.events import (
    ControllerGone,
    HandedToController,
    NullReporter,
    ReconcileFailed,
    ReconcileStarted,
    Reporter,
    report_sources,
)
from kbctl.engine.results import ApplyReport, KnowledgeBaseResult, PendingResult, reported
from kbctl.errors import NotFoundError
from kbctl.store.database import Database, KnowledgeBaseRow


def controller_alive(db: Database) -> bool:
    """Whether some controller has sent a heartbeat recently."""
    return db.controllers_alive(HEARTBEAT_TTL_SECONDS)


WAIT_POLL_SECONDS = 0.25  # how often `kbctl wait` and `kbctl rollout status` read the store


def wait_for(
    db: Database,
    name: str,
    *,
    condition: str = "Ready",
    value: bool = True,
    generation: int | None = None,
    timeout: float = WAIT_SECONDS,
    poll_seconds: float = 0.5,
) -> bool:
    """Wait until `name` has `condition` with status `value` (and has observed `generation`, if given).

    Ready=True is awaited for the latest generation when none is given: while a change waits for a controller the
    version in place keeps Ready True, and a pipeline that applies and then waits means the change. Returns
    False when `timeout` seconds pass first. Raises NotFoundError for an unknown name.
    """
    left = wait_for_all(
        db, [name], condition=condition, value=value, generation=generation, timeout=timeout, poll_seconds=poll_seconds
    )
    return not left


def wait_for_all(
    db: Database,
    names: Sequence[str],
    *,
    condition: str = "Ready",
    value: bool = True,
    generation: int | None = None,
    timeout: float = WAIT_SECONDS,
    poll_seconds: float = WAIT_POLL_SECONDS,
    on_met: Callable[[str], None] | None = None,
) -> list[str]:
    """Wait until every one of `names` has `condition` with status `value`, as `wait_for` does for one, within one
    deadline for all; `on_met` hears each name as soon as its condition holds. Returns the names whose condition
    did not hold when `timeout` seconds passed (none: all met). Raises NotFoundError for a name that does not exist
    (or no longer does)."""

    def met(name: str, row: KnowledgeBaseRow | None) -> bool:
        if row is None:
            raise NotFoundError(f'knowledgebase "{name}" not found')
        return _condition_met(row, condition, value, generation)

    return _poll(db, names, met, timeout, poll_seconds, on_met)


def wait_for_deletion(
    db: Database,
    names: Sequence[str],
    *,
    timeout: float = WAIT_SECONDS,
    poll_seconds: float = WAIT_POLL_SECONDS,
    on_deleted: Callable[[str], None] | None = None,
) -> list[str]:
    """Wait until none of `names` exists any more (`kubectl wait --for=delete`), within one deadline for all; a name
    that does not exist is deleted at once. `on_deleted` hears each name as soon as it is gone. Returns the names
    that still existed when `timeout` seconds passed (none: all deleted)."""
    return _poll(db, names, lambda _name, row: row is None, timeout, poll_seconds, on_deleted)


def _condition_met(row: KnowledgeBaseRow, condition: str, value: bool, generation: int | None) -> bool:
    """Whether `row` has `condition` with status `value`, having observed the generation that counts (see
    `wait_for`)."""
    wanted = generation if generation is not None else row.generation if condition == "Ready" and value else 0
    status = find_condition(row.conditions, condition).get("status")
    return row.observed_generation >= wanted and status == ("True" if value else "False")


def _rows(db: Database, names: Sequence[str]) -> dict[str, KnowledgeBaseRow | None]:
    """The stored row of each name (None for one that does not exist): one statement for one name or for many."""
    if len(names) == 1:
        return {names[0]: db.get_kb(names[0])}
    found = {row.name: row for row in db.list_kbs()}
    return {name: found.get(name) for name in names}


def _poll(
    db: Database,
    names: Sequence[str],
    met: Callable[[str, KnowledgeBaseRow | None], bool],
    timeout: float,
    poll_seconds: float,
    on_met: Callable[[str], None] | None,
) -> list[str]:
    """Read the rows of the names not met yet every `poll_seconds` until `met` holds for each (each is named to
    `on_met` once) or `timeout` seconds pass; every name is checked at least once. The names left, in order."""
    deadline = time.monotonic() + timeout
    waiting = list(dict.fromkeys(names))
    while True:
        for name, row in _rows(db, waiting).items():
            if met(name, row):
                waiting.remove(name)
                if on_met is not None:
                    on_met(name)
        left = deadline - time.monotonic()
        if not waiting or left <= 0:
            return waiting
        time.sleep(min(poll_seconds, left))


RolloutState = Literal["done", "waiting", "failed"]


@dataclass(frozen=True)
class RolloutStatus:
    """Where the rollout of a knowledge base's latest generation stands (`kbctl rollout status`).

    `state` is "done" (the latest generation is reconciled and the knowledge base is Ready), "failed" (its
    reconcile failed, or published nothing: Ready False with reason ReconcileFailed or NoContent), or "waiting";
    `message` says it in one line, as kubectl does: `Waiting for knowledgebase "NAME" rollout to finish: ...`,
    `knowledgebase "NAME" successfully rolled out (version N)`, or `knowledgebase "NAME" rollout failed: ...`.
    `stalled` is True when `wait_for_rollout` gave up on a waiting rollout that made no progress for its
    `progress_deadline` (a Deployment's ProgressDeadlineExceeded).
    """

    name: str
    state: RolloutState
    generation: int
    observed_generation: int
    version: int | None  # the version that serves queries
    reason: str  # the Ready condition's reason
    detail: str  # what it waits for, or why it failed (empty when done)
    message: str  # the whole line
    stalled: bool = False

    @property
    def done(self) -> bool:
        """The latest generation is rolled out."""
        return self.state == "done"


_ROLLOUT_FAILED = ("ReconcileFailed", "NoContent")


def rollout_status(db: Database, name: str) -> RolloutStatus:
    """The rollout status of `name` now (NotFoundError when it does not exist)."""
    row = db.get_kb(name)
    if row is None:
        raise NotFoundError(f'knowledgebase "{name}" not found')
    return _rollout_status(db, row)


def _rollout_status(db: Database, row: KnowledgeBaseRow) -> RolloutStatus:
    ready = find_condition(row.conditions, "Ready")
    reason, detail = str(ready.get("reason") or "Unknown"), str(ready.get("message") or "")
    state: RolloutState
    if reason in _ROLLOUT_FAILED:  # the latest reconcile's failure: a newer generation recorded resets Ready
        state, why = "failed", detail or reason
        message = f'knowledgebase "{row.name}" rollout failed: {why}'
    elif row.observed_generation >= row.generation and ready.get("status") == "True":
        state, why = "done", ""
        message = f'knowledgebase "{row.name}" successfully rolled out (version {row.current_version})'
    else:
        if row.observed_generation < row.generation:
            why = f"generation {row.generation} waits for a controller"
            if not controller_alive(db):
                why += " (none is running: start `kbctl controller`, or apply with --wait)"
        else:  # reconciled, but not Ready (every source failing, no version yet)
            why = detail or f"Ready is {ready.get('status', 'Unknown')} ({reason})"
        state, message = "waiting", f'Waiting for knowledgebase "{row.name}" rollout to finish: {why}...'
    return RolloutStatus(
        name=row.name,
        state=state,
        generation=row.generation,
        observed_generation=row.observed_generation,
        version=row.current_version,
        reason=reason,
        detail=why,
        message=message,
    )


def wait_for_rollout(
    db: Database,
    name: str,
    *,
    timeout: float | None = WAIT_SECONDS,
    progress_deadline: float | None = None,
    poll_seconds: float = WAIT_POLL_SECONDS,
    on_progress: Callable[[RolloutStatus], None] | None = None,
) -> RolloutStatus:
    """Wait until the latest generation of `name` is rolled out (`kubectl rollout status`): reconciled
    (generation == observedGeneration) and Ready. Returns the last status read: done, failed (the reconcile failed
    or published nothing; waiting stops), or waiting when `timeout` seconds passed first (None: no limit) or, with
    `progress_deadline`, when the rollout made no progress for that many seconds (then `stalled`). No progress: the
    same generation, observed generation, version and Ready reason while the generation is reconciled but not Ready,
    or waits while no controller is alive (one that is may take long to ingest). `on_progress` hears each waiting
    status whose message differs from the one before. Raises NotFoundError when `name` does not exist (or no
    longer does)."""
    start = time.monotonic()
    deadline = None if timeout is None else start + timeout
    said = ""
    since, last_mark = start, None  # when the rollout last made progress, and what it then stood at
    while True:
        status = rollout_status(db, name)
        if status.state != "waiting":
            return status
        if status.message != said and on_progress is not None:
            on_progress(status)
        said = status.message
        now = time.monotonic()
        left = float("inf") if deadline is None else deadline - now
        if left <= 0:
            return status
        if progress_deadline is not None:
            mark = (status.generation, status.observed_generation, status.version, status.reason)
            if mark != last_mark or (status.observed_generation < status.generation and controller_alive(db)):
                since, last_mark = now, mark  # progress, or a controller has it (an ingest may take long)
            elif now - since >= progress_deadline:
                return replace(status, stalled=True)
        time.sleep(min(poll_seconds, left))


def wait_for_controller(
    db: Database,
    pending: Sequence[PendingResult],
    *,
    reporter: Reporter | None = None,
    timeout: float = APPLY_WAIT_SECONDS,
    in_process: Callable[[PendingResult], KnowledgeBaseResult] | None = None,
    poll_seconds: float = 0.5,
) -> ApplyReport:
    """Wait for a controller to reconcile what `record_pending` recorded; report it as apply would.

    A failure the controller stores is reported as soon as it is stored. When no controller is alive any
    more (no heartbeat for HEARTBEAT_TTL_SECONDS), `in_process` reconciles the knowledge base here instead.
    """
    reporter = reporter or NullReporter()
    results: list[KnowledgeBaseResult] = []
    deadline = time.monotonic() + timeout
    for p in pending:
        if not p.pending:
            assert p.version is not None
            reporter.report(ReconcileStarted(p.name, "apply", "unchanged", p.version, 0))
            results.append(KnowledgeBaseResult(name=p.name, action="unchanged", version=p.version, sources=[]))
            continue
        reporter.report(HandedToController(p.name, p.action, p.version))
        outcome = _await(db, p, deadline, poll_seconds)
        if outcome == "reconciled":
            results.append(_result_from_store(db, p, reporter))
        elif outcome == "no controller" and in_process is not None:
            reporter.report(ControllerGone(p.name))
            results.append(in_process(p))
        else:
            reason = outcome if outcome != "timeout" else f"not reconciled by a controller within {timeout:.0f} s"
            if outcome == "no controller":
                reason = "no controller is alive any more: start `kbctl controller`, or apply with --wait again"
            reporter.report(ReconcileFailed(p.name, reason))
            results.append(KnowledgeBaseResult(name=p.name, action="failed", version=None, sources=[], message=reason))
    return ApplyReport(results=results)


def _await(db: Database, p: PendingResult, deadline: float, poll_seconds: float) -> str:
    """ "reconciled", "timeout", "no controller", or the failure a controller stored for this generation."""
    while True:
        row = db.get_kb(p.name)
        if row is None:
            raise NotFoundError(f'knowledgebase "{p.name}" not found')
        ready, progressing = find_condition(row.conditions, "Ready"), find_condition(row.conditions, "Progressing")
        if row.observed_generation >= p.generation and progressing.get("status") == "False":
            return "reconciled"
        # record_pending left Ready=Pending; a reconcile failure of this generation replaces it.
        if ready.get("reason") == "ReconcileFailed":
            return str(ready.get("message") or "the controller failed to reconcile it")
        if not controller_alive(db):
            return "no controller"
        if time.monotonic() >= deadline:
            return "timeout"
        time.sleep(poll_seconds)


def _result_from_store(db: Database, p: PendingResult, reporter: Reporter) -> KnowledgeBaseResult:
    """What the controller did, read back from the version it published, reported as apply's events."""
    row = db.get_kb(p.name)
    if row is None:
        raise NotFoundError(f'knowledgebase "{p.name}" not found')
    ready = find_condition(row.conditions, "Ready")
    version = db.get_version(row.id, row.current_version) if row.current_version is not None else None
    if ready.get("reason") in ("ReconcileFailed", "NoContent") or version is None or version.number < (p.version or 0):
        message = str(ready.get("message") or "the controller published no version")
        reporter.report(ReconcileFailed(p.name, message))
        return KnowledgeBaseResult(name=p.name, action="failed", version=None, sources=[], message=message)
    sources = [
        # A revision written by the same transaction as the version is new content ingested for it.
        reported(s, ingested=s.revision_created_at is not None and s.revision_created_at == version.created_at)
        for s in db.version_sources(version.id)
    ]
    report_sources(reporter, p.name, "apply", sources, version.model)
    action: Literal["created", "configured"] = "created" if p.action == "created" else "configured"
    return KnowledgeBaseResult(name=p.name, action=action, version=version.number, sources=sources)
