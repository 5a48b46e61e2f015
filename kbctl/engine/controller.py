"""The controller: a long-running reconciler that takes pending knowledge bases from PostgreSQL.

`apply` without `--wait` records the desired manifest (a new generation) and sends a NOTIFY; every
controller LISTENs, claims one pending knowledge base at a time with `FOR UPDATE SKIP LOCKED` and a
lease, reconciles it in-process, and releases it. Several controllers can share one database without
processing the same generation twice; a crashed controller's claim expires with its lease, and one that lost its
connection releases its claims as soon as it reconnects, so the work it lost is taken up again at once.

A controller heartbeats only while it makes progress: its loop ticks while idle, and while it reconciles, an
event (a page fetched, a batch embedded, a source done) or a statement the server is running for it counts.
A controller stuck for STALL_SECONDS stops heartbeating, so `apply --wait` (kbctl.engine.wait) stops waiting
for it.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from kbctl.defaults import HEARTBEAT_SECONDS, LEASE_SECONDS, RECONNECT_MAX_SECONDS, RETRY_SECONDS, STALL_SECONDS
from kbctl.embedding import Embedder
from kbctl.engine.apply import apply_knowledge_bases, refresh_knowledge_bases
from kbctl.engine.conditions import PublishedNothing, observe
from kbctl.engine.drift import converge_drift
from kbctl.engine.eventlog import record
from kbctl.engine.events import ApplyResumed, DriftFound, Event, ReconcileFailed, Reporter, StoreUnavailable
from kbctl.engine.results import ApplyReport, KnowledgeBaseResult, PendingResult
from kbctl.engine.sync import run_due_syncs
from kbctl.engine.wait import (
    RolloutStatus,
    controller_alive,
    rollout_status,
    wait_for,
    wait_for_all,
    wait_for_controller,
    wait_for_deletion,
    wait_for_rollout,
)
from kbctl.errors import KbctlError, NotFoundError, StoreError
from kbctl.manifest import KnowledgeBase
from kbctl.sources.url import FetchPolicy
from kbctl.store.claims import CHANNEL, Claim
from kbctl.store.database import Database
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
