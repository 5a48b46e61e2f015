"""The controller: a long-running reconciler that takes pending knowledge bases from PostgreSQL.

`apply` without `--wait` records the desired manifest (a new generation) and sends a NOTIFY; every
controller LISTENs, claims one pending knowledge base at a time with `FOR UPDATE SKIP LOCKED` and a
lease, reconciles it in-process, and releases it. Several controllers can share one database without
processing the same generation twice; a crashed controller's claim expires with its lease, and one that lost its
connection releases its claims as soon as it reconnects, so the work it lost is taken up again at once.

A controller heartbeats only while it makes progress: its loop ticks while idle, and while it reconciles, an
event (a page fetched, a batch embedded, a source done) or a statement the server is running for it counts.
A controller stuck for STALL_SECONDS stops heartbeating, so `apply --wait` stops waiting for it.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from kbctl.defaults import (
    HEARTBEAT_SECONDS,
    HEARTBEAT_TTL_SECONDS,
    LEASE_SECONDS,
    RECONNECT_MAX_SECONDS,
    RETRY_SECONDS,
    STALL_SECONDS,
)
from kbctl.embedding import Embedder
from kbctl.engine.apply import apply_knowledge_bases, refresh_knowledge_bases
from kbctl.engine.conditions import PublishedNothing, observe
from kbctl.engine.conditions import condition as find_condition
from kbctl.engine.drift import converge_drift
from kbctl.engine.eventlog import record
from kbctl.engine.events import (
    ApplyResumed,
    ControllerGone,
    DriftFound,
    Event,
    HandedToController,
    NullReporter,
    ReconcileFailed,
    ReconcileStarted,
    Reporter,
    StoreUnavailable,
    report_sources,
)
from kbctl.engine.results import ApplyReport, KnowledgeBaseResult, PendingResult, reported
from kbctl.engine.sync import run_due_syncs
from kbctl.errors import KbctlError, NotFoundError, StoreError
from kbctl.manifest import KnowledgeBase
from kbctl.sources.url import FetchPolicy
from kbctl.store.claims import CHANNEL, Claim
from kbctl.store.database import Database, KnowledgeBaseRow
from kbctl.store.events import NewEvent

__all__ = [
    "CHANNEL",
    "Controller",
    "RolloutStatus",
    "controller_alive",
    "record_pending",
    "rollout_status",
    "wait_for",
    "wait_for_all",
    "wait_for_controller",
    "wait_for_deletion",
    "wait_for_rollout",
]


def record_pending(db: Database, kb: KnowledgeBase) -> PendingResult:
    """Record `kb` as the desired state for a controller to reconcile, and wake the controllers."""
    row = db.record_desired(kb.name, kb.to_manifest())
    pending = row.generation > row.observed_generation
    if not pending:
        return PendingResult(kb.name, "unchanged", row.current_version, row.generation, False)
    observe(db, row)
    db.notify_work(kb.name)
    action = "created" if row.current_version is None else "configured"
    return PendingResult(kb.name, action, db.next_version_number(row.id), row.generation, True)


def controller_alive(db: Database) -> bool:
    """Whether some controller has sent a heartbeat recently."""
    return db.controllers_alive(HEARTBEAT_TTL_SECONDS)


class Controller:
    """Reconciles pending knowledge bases, one claim at a time; see the module docstring."""

    def __init__(
        self,
        db: Database,
        embedder_for: Callable[[str], Embedder],
        *,
        reporter: Reporter | None = None,
        policy: FetchPolicy | None = None,
        lease_seconds: int = LEASE_SECONDS,
        stall_seconds: float = STALL_SECONDS,
        heartbeat_seconds: float = HEARTBEAT_SECONDS,
    ) -> None:
        self.db = db
        self.id = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._embedder_for = embedder_for
        self._reporter = _ProgressReporter(reporter, self._progressed)
        self._policy = policy
        self._lease = lease_seconds
        self._stall = stall_seconds
        self._beat_seconds = heartbeat_seconds
        self.processed: list[KnowledgeBaseResult] = []
        # Read by other threads (heartbeat, health check): when the loop last made progress, whether it is
        # working, and whether the server was last seen running a statement of its reconcile.
        self.last_progress = time.monotonic()
        self.working = False
        self._statement_running = False
        self._backend = 0  # the server process of the loop's connection, set when a reconcile starts

    def _progressed(self) -> None:
        self.last_progress = time.monotonic()

    def alive(self, stalled_after: float | None = None) -> bool:
        """Whether the loop moved (an idle tick, an engine event) less than `stalled_after` (default: the stall
        limit) seconds ago, or is working while the server runs a statement for it."""
        window = self._stall if stalled_after is None else stalled_after
        return time.monotonic() - self.last_progress < window or (self.working and self._statement_running)

    def heartbeat(self) -> None:
        """Announce this controller as alive."""
        self.db.heartbeat(self.id)

    def deregister(self) -> None:
        """Remove this controller's heartbeat row."""
        self.db.deregister(self.id)

    def claim(self) -> Claim | None:
        """Claim the oldest pending knowledge base no other controller holds (SKIP LOCKED + lease)."""
        return self.db.claim_next(self.id, self._lease)

    def process(self, claim: Claim) -> KnowledgeBaseResult:
        """Reconcile one claimed knowledge base and release the claim."""
        retry_after: int | None = None
        self._progressed()
        self._backend = self.db.connection.info.backend_pid  # whose statements count as progress
        try:
            try:
                kb = KnowledgeBase.from_manifest(claim.manifest)
            except StoreError as exc:
                # A manifest that no longer validates (an older kbctl wrote it) cannot be retried as is.
                row = self.db.get_kb(claim.name)
                if row is not None:
                    failure = PublishedNothing("ReconcileFailed", str(exc))
                    observe(self.db, row, finished=claim.generation, failure=failure)
                self._reporter.report(ReconcileFailed(claim.name, str(exc), "manifest"))
                result = KnowledgeBaseResult(
                    name=claim.name, action="failed", version=None, sources=[], message=str(exc)
                )
            else:
                kb = self._resumed(claim, kb)
                [result] = apply_knowledge_bases(
                    self.db,
                    [kb],
                    self._embedder_for,
                    self._reporter,
                    policy=self._policy,
                    generation=claim.generation,
                    component="controller",
                ).results
                if result.action == "failed" and result.version is None and not result.sources:
                    # the store or the model failed (not the sources, whose outcome is recorded): try again later
                    retry_after = RETRY_SECONDS
        finally:
            self.db.release_claim(claim, self.id, retry_after=retry_after)
        self.processed.append(result)
        return result

    def _resumed(self, claim: Claim, kb: KnowledgeBase) -> KnowledgeBase:
        """`kb` with its path: sources read where the apply that recorded them read them, when that folder is on this
        host (otherwise they keep what they serve); and, for a generation an interrupted apply left, an event."""
        folder = self.db.applied_from(kb.name) if kb.reads_files else None
        here = folder is not None and Path(folder).is_dir()
        if claim.left_by is not None:
            stranded = kb.reads_files and not here
            left = f"generation {claim.generation} was left unfinished by an interrupted apply ({claim.left_by})"
            outcome = (
                "the files of its path: sources are not on this host, so they keep what they serve: apply again where "
                "they are"
                if stranded
                else "this controller finishes it"
            )
            event = NewEvent(
                kb.name, "Warning" if stranded else "Normal", "ApplyResumed", f"{left}; {outcome}", "controller"
            )
            record(self.db, [event])
            self._reporter.report(ApplyResumed(kb.name, claim.generation, claim.left_by, files_here=not stranded))
        return kb.located(folder) if here and folder is not None else kb

    def run_once(self) -> ApplyReport:
        """Apply the Syncs that are due (kbctl.engine.sync), bring back knowledge bases that drifted from their applied
        manifest (kbctl.engine.drift), process pending
        knowledge bases until none is left, then the scheduled refreshes that are due (`spec.refresh`); return what
        this pass did, one result per knowledge base processed (`exit_code()` is 1 when a reconcile or a source
        failed)."""
        self.heartbeat()
        self._progressed()
        done: list[KnowledgeBaseResult] = []
        failed_syncs: list[str] = []
        self.working = True
        try:
            for sync in run_due_syncs(self.db, self._embedder_for, self._reporter, self._policy):
                done.extend(sync.results)
                if sync.error is not None:
                    failed_syncs.append(sync.name)
                self.heartbeat()
            for drift in converge_drift(self.db):  # first: a reverted one is then claimed in this same pass
                self._reporter.report(DriftFound(drift.name, drift.serving, drift.reverted))
            while (claim := self.claim()) is not None:
                done.append(self.process(claim))
                self.heartbeat()
            while (name := self.db.claim_due_refresh()) is not None:
                done.append(self.refresh(name))
                self.heartbeat()
        finally:
            self.working = False
            self._progressed()
        return ApplyReport(results=done, failed_syncs=failed_syncs)

    def refresh(self, name: str) -> KnowledgeBaseResult:
        """Run a claimed scheduled refresh of `name` (as `kbctl refresh` does); a failure is reported and kept
        in the knowledge base's status, and the next run stays scheduled."""
        try:
            [result] = refresh_knowledge_bases(
                self.db, [name], self._embedder_for, self._reporter, policy=self._policy, component="controller"
            ).results
        except NotFoundError as exc:  # deleted, or no version yet: nothing to refresh
            result = KnowledgeBaseResult(name=name, action="failed", version=None, sources=[], message=str(exc))
        self.processed.append(result)
        return result

    def run(
        self, stop: threading.Event, *, poll_seconds: float = 5.0, max_backoff: float = RECONNECT_MAX_SECONDS
    ) -> None:
        """Serve until `stop` is set: process what is pending, then sleep until a NOTIFY or the poll interval.

        A heartbeat thread (on its own connection) keeps the controller visible while it works. When the
        database goes away the controller reports it, waits (1 s, doubling up to `max_backoff`), reconnects
        and carries on; work in flight is lost, not published half way.
        """
        beating = threading.Thread(target=self._beat, args=(stop,), name="kbctl-heartbeat", daemon=True)
        beating.start()
        backoff = 1.0
        try:
            while not stop.is_set():
                try:
                    self._serve(stop, poll_seconds)
                except StoreError as exc:
                    self._report(StoreUnavailable(str(exc), backoff))
                    if stop.wait(backoff):
                        break
                    backoff = min(backoff * 2, max_backoff)
                    try:
                        self.db.reconnect()
                        self.db.release_held(self.id)
                        backoff = 1.0
                    except StoreError:
                        continue
        finally:
            try:
                self.db.unlisten()
                self.deregister()
            except KbctlError:
                pass  # the connection is gone: nothing left to clean up
            beating.join(timeout=HEARTBEAT_SECONDS + 1)

    def _serve(self, stop: threading.Event, poll_seconds: float) -> None:
        self.db.listen()
        while not stop.is_set():
            self.run_once()
            deadline = time.monotonic() + poll_seconds
            while not stop.is_set() and time.monotonic() < deadline:
                self._progressed()
                if any(True for _ in self.db.wake_ups(0.5)):
                    break

    def _beat(self, stop: threading.Event) -> None:
        """Heartbeat every few seconds on a connection of its own while the loop makes progress, even while a
        long reconcile runs; a loop stuck for the stall limit (see `alive`) is no longer announced."""
        db: Database | None = None
        while not stop.wait(self._beat_seconds):
            try:
                db = db or Database(self.db.url, migrate=False)
                self._statement_running = self.working and db.backend_active(self._backend)
                if self.alive():
                    db.heartbeat(self.id)
            except KbctlError:
                if db is not None:
                    db.close()
                db = None  # try again at the next beat
        if db is not None:
            db.close()

    def _report(self, event: Event) -> None:
        self._reporter.report(event)


class _ProgressReporter:
    """Forwards the engine's events to the controller's reporter, noting each as progress of its loop."""

    def __init__(self, inner: Reporter | None, progressed: Callable[[], None]) -> None:
        self._inner = inner
        self._progressed = progressed

    def report(self, event: Event) -> None:
        """Note progress, then hand the event on."""
        self._progressed()
        if self._inner is not None:
            self._inner.report(event)


WAIT_POLL_SECONDS = 0.25  # how often `kbctl wait` and `kbctl rollout status` read the store


def wait_for(
    db: Database,
    name: str,
    *,
    condition: str = "Ready",
    value: bool = True,
    generation: int | None = None,
    timeout: float = 300.0,
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
    timeout: float = 300.0,
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
    timeout: float = 300.0,
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
    timeout: float | None = 300.0,
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
    timeout: float = 600.0,
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
