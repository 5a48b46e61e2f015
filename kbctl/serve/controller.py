"""`kbctl controller` as a long-lived service: Prometheus metrics from the engine's events and the store, /healthz
and /readyz.

`--metrics-address HOST:PORT` serves, on a thread of its own, `/metrics`: what this controller did, from the
engine's events (reconciles, their durations, failures by reason, the last success, Sync passes, losses of the
store), and what the store holds, read on a connection of the scrape's own at each scrape (the queue depth, and
per knowledge base and per Sync their state). Nothing else is served: every other path is 404, every method but
GET 405, and no request body is read.

Every series, and the alerts over them: docs/gitops.md#metrics-and-logs, docs/operations.md.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, get_args

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from kbctl import (
    Event,
    FailureReason,
    ReconcileFailed,
    ReconcileFinished,
    ReconcileStarted,
    Reporter,
    SourceReconciled,
    StoreUnavailable,
    SyncFinished,
)
from kbctl.errors import KbctlError, UsageError
from kbctl.manifest import duration_seconds

if TYPE_CHECKING:
    from kbctl.client import Overview, Readiness
    from kbctl.config import Settings

__all__ = [
    "ControllerMetrics",
    "HealthServer",
    "ReadyCheck",
    "StoreReadiness",
    "controller_readiness",
    "parse_address",
]

ReadyCheck = Callable[[], tuple[bool, dict[str, Any]]]
"""A readiness check for `HealthServer`: (ready, a JSON-able object of the checks, each "ok" or why not)."""

READY_TIMEOUT = 2.0  # seconds a readiness probe waits for a database connection

_REASONS: tuple[str, ...] = get_args(FailureReason)

_BUCKETS = (0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0)


def parse_address(text: str) -> tuple[str, int]:
    """`HOST:PORT` or `:PORT` (every interface) as (host, port), port 0 meaning any free one; UsageError otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise UsageError(f"invalid address {text!r}; use HOST:PORT or :PORT (e.g. :9090 or 127.0.0.1:9090)")
    return (host.strip("[]") or "0.0.0.0"), int(port)


class ControllerMetrics:
    """A Reporter that counts the engine's events into Prometheus metrics, then passes them to `inner`; at each
    `render` it reads the store (`state`, else only the queue depth of `pending`) for the per knowledge base and per
    Sync gauges, and drops the series of knowledge bases the store no longer holds."""

    def __init__(
        self,
        inner: Reporter,
        pending: Callable[[], int] | None = None,
        clock: Callable[[], float] = time.time,
        *,
        state: Callable[[], Overview] | None = None,
    ) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self._lists = state is not None  # the store's knowledge bases are read: deleted ones can be told
        if state is None:
            from kbctl.client import Overview

            count = pending or (lambda: 0)
            state = lambda: Overview(count())  # noqa: E731
        self._state: Callable[[], Overview] = state
        self._inner = inner
        self._clock = clock
        self._lock = threading.Lock()  # events (the controller's thread) and scrapes (the server's) meet here
        self._started: dict[str, tuple[float, str]] = {}  # knowledge base -> (start, trigger) of its reconcile
        self._unread: set[str] = set()  # knowledge bases whose reconcile in progress could not read a source
        self._series: dict[str, set[tuple[Any, tuple[str, ...]]]] = {}  # knowledge base -> (metric, labels) it made
        self._touched: dict[str, float] = {}  # knowledge base -> when an event last made one of its series
        self.registry = CollectorRegistry()
        self._engine_metrics(self.registry)
        self._store_metrics(self.registry)

    def _engine_metrics(self, r: CollectorRegistry) -> None:
        """The series counted from the engine's events: reconciles, their durations and failures, the last
        success, Sync passes, losses of the store."""
        kb = ["knowledge_base"]
        self.reconciles = Counter(
            "kbctl_controller_reconciles",
            "Reconciles done, by outcome: the action (created, configured, refreshed, unchanged) when every source "
            "was read, degraded when one could not be, failed when nothing was published.",
            ["knowledge_base", "trigger", "outcome"],
            registry=r,
        )
        self.duration = Histogram(
            "kbctl_controller_reconcile_duration_seconds",
            "How long a reconcile took.",
            ["knowledge_base", "trigger"],
            buckets=_BUCKETS,
            registry=r,
        )
        self.failures = Counter(
            "kbctl_controller_failures",
            "Reconciles that did not fully succeed, by reason (source_failed, no_content, store, model, manifest, "
            "other).",
            ["knowledge_base", "reason"],
            registry=r,
        )
        self.last_success = Gauge(
            "kbctl_controller_last_success_timestamp_seconds",
            "When a reconcile of the knowledge base last succeeded, every source read (Unix time).",
            kb,
            registry=r,
        )
        self.syncs = Counter(
            "kbctl_controller_sync_runs", "Sync passes, by outcome (applied, failed).", ["sync", "outcome"], registry=r
        )
        self.store_lost = Counter(
            "kbctl_controller_store_unavailable", "Times the controller lost the store and reconnected.", registry=r
        )

    def _store_metrics(self, r: CollectorRegistry) -> None:
        """The gauges each scrape sets from the store: the queue depth, each knowledge base's and each Sync's state."""
        kb = ["knowledge_base"]
        self.depth = Gauge(
            "kbctl_controller_queue_depth",
            "Knowledge bases whose recorded generation waits to be reconciled.",
            registry=r,
        )
        self.ready = Gauge(
            "kbctl_knowledge_base_ready",
            "1 while the knowledge base's Ready condition is True, else 0.",
            kb,
            registry=r,
        )
        self.sources = Gauge("kbctl_knowledge_base_sources", "Sources of the knowledge base.", kb, registry=r)
        self.failing = Gauge(
            "kbctl_knowledge_base_sources_failing",
            "Sources whose last read failed (stale: earlier content serves; failed: nothing serves).",
            kb,
            registry=r,
        )
        self.version = Gauge(
            "kbctl_knowledge_base_serving_version",
            "The version that serves queries (none before the first).",
            kb,
            registry=r,
        )
        sync = ["sync"]
        self.sync_failing = Gauge(
            "kbctl_sync_failing",
            "1 when the Sync's last pass applied nothing (see its status), else 0.",
            sync,
            registry=r,
        )
        self.sync_behind = Gauge(
            "kbctl_sync_behind",
            "1 when the last commit the Sync fetched is not the one it last applied, else 0.",
            sync,
            registry=r,
        )
        self.sync_applied = Gauge(
            "kbctl_sync_last_applied_timestamp_seconds",
            "When a pass of the Sync last applied its commit whole (Unix time; none before the first).",
            sync,
            registry=r,
        )
        self.sync_interval = Gauge(
            "kbctl_sync_interval_seconds", "How often the Sync is due (spec.interval).", sync, registry=r
        )
        self.sync_suspended = Gauge(
            "kbctl_sync_suspended", "1 while the Sync is suspended (spec.suspend), else 0.", sync, registry=r
        )
        # the gauges each scrape sets from the store, cleared first (what the store no longer holds leaves)
        self._store_gauges = (
            self.ready,
            self.sources,
            self.failing,
            self.version,
            self.sync_failing,
            self.sync_behind,
            self.sync_applied,
            self.sync_interval,
            self.sync_suspended,
        )

    def report(self, event: Event) -> None:
        """Count `event`, then hand it on."""
        with self._lock:
            self._count(event)
        self._inner.report(event)

    def _count(self, event: Event) -> None:
        now = self._clock()
        if isinstance(event, ReconcileStarted):
            self._started[event.name] = (now, event.trigger)
            self._unread.discard(event.name)
        elif isinstance(event, SourceReconciled):
            if event.source.failed:
                self._unread.add(event.name)
        elif isinstance(event, ReconcileFinished):
            unread = event.name in self._unread
            outcome = "degraded" if unread else event.action
            self._inc(self.reconciles, event.name, event.name, event.trigger, outcome)
            if unread:
                self._inc(self.failures, event.name, event.name, "source_failed")
            else:
                self._mark(self.last_success, event.name, event.name).set(now)
            started = self._started.pop(event.name, None)
            if started is not None:
                self._mark(self.duration, event.name, event.name, event.trigger).observe(now - started[0])
            self._unread.discard(event.name)
        elif isinstance(event, ReconcileFailed):
            started = self._started.pop(event.name, None)
            self._inc(self.reconciles, event.name, event.name, started[1] if started else "", "failed")
            self._inc(self.failures, event.name, event.name, event.reason)
            self._unread.discard(event.name)
        elif isinstance(event, SyncFinished):
            self.syncs.labels(event.name, "failed" if event.error is not None else "applied").inc()
        elif isinstance(event, StoreUnavailable):
            self.store_lost.inc()

    def _mark(self, metric: Any, name: str, *labels: str) -> Any:
        """The child of `metric` with `labels`, made by an event: noted as a series of knowledge base `name` (to
        drop with it), made now (a scrape that read the store before now does not drop it)."""
        self._touched[name] = self._clock()
        return self._note(metric, name, *labels)

    def _note(self, metric: Any, name: str, *labels: str) -> Any:
        """The child of `metric` with `labels`, noted as a series of knowledge base `name` (to drop with it)."""
        self._series.setdefault(name, set()).add((metric, labels))
        return metric.labels(*labels)

    def _inc(self, metric: Any, name: str, *labels: str) -> None:
        self._mark(metric, name, *labels).inc()

    def render(self) -> bytes:
        """The metrics in Prometheus' text format, the store's read now (KbctlError when it cannot be read)."""
        read_at = self._clock()
        state = self._state()
        with self._lock:
            self._refresh(state, read_at)
            return generate_latest(self.registry)

    def _refresh(self, state: Overview, read_at: float) -> None:
        self.depth.set(state.pending)
        for gauge in self._store_gauges:
            gauge.clear()
        for kb in state.knowledge_bases:
            for reason in _REASONS:  # every reason at 0 from the start, so the first failure is an increase
                self._note(self.failures, kb.name, kb.name, reason)
            self.ready.labels(kb.name).set(1 if kb.ready else 0)
            self.sources.labels(kb.name).set(kb.sources)
            self.failing.labels(kb.name).set(kb.sources - kb.ready_sources)
            if kb.version is not None:
                self.version.labels(kb.name).set(kb.version)
        for sync in state.syncs:
            attempted, applied = sync.last_attempted_revision, sync.last_applied_revision
            self.sync_failing.labels(sync.name).set(1 if sync.last_error is not None else 0)
            self.sync_behind.labels(sync.name).set(1 if attempted is not None and attempted != applied else 0)
            if sync.last_applied_at is not None:
                self.sync_applied.labels(sync.name).set(sync.last_applied_at.timestamp())
            self.sync_interval.labels(sync.name).set(duration_seconds(sync.interval))
            self.sync_suspended.labels(sync.name).set(1 if sync.suspend else 0)
        if not self._lists:
            return  # no list of knowledge bases to tell deleted ones by
        names = {kb.name for kb in state.knowledge_bases}
        for name in [n for n in self._series if n not in names and self._touched.get(n, 0.0) < read_at]:
            for metric, labels in self._series.pop(name):
                with contextlib.suppress(KeyError):  # removed already
                    metric.remove(*labels)
            self._touched.pop(name, None)


def controller_readiness(readiness: Readiness) -> tuple[bool, dict[str, Any]]:
    """A store's readiness as the controller's: its `database` and `migrations` checks. The query model's is left
    out: a controller loads the models of the knowledge bases it reconciles when they need them."""
    ready = readiness.database == readiness.migrations == "ok"
    return ready, {"ready": ready, "database": readiness.database, "migrations": readiness.migrations}


class StoreReadiness:
    """`kbctl controller`'s readiness check (a `ReadyCheck`): a KnowledgeBaseStore of the check's own on the
    controller's database (the primary, never a query replica), with a pool of one connection, so a probe neither
    waits for the controller's connection (busy with a reconcile) nor touches it from the server's thread. Each call
    asks, within `timeout` seconds for a connection and the pool's statement timeout for the query, whether the
    database answers and its schema is at this kbctl's last migration (`KnowledgeBaseStore.readiness`).

    Opening it migrates nothing the controller's own store has not (it opened first); `close` closes its
    connections (`HealthServer.close` does, for the check it serves)."""

    def __init__(self, settings: Settings, *, timeout: float = READY_TIMEOUT) -> None:
        from kbctl.client import KnowledgeBaseStore

        primary = replace(settings, query_database_url=None)
        self._store = KnowledgeBaseStore(settings=primary, pool_size=1, pool_timeout=timeout)

    def __call__(self) -> tuple[bool, dict[str, Any]]:
        return controller_readiness(self._store.readiness())

    def close(self) -> None:
        self._store.close()


class _ProbeServer(ThreadingHTTPServer):
    """The HTTP server of the probes: a client that went away is not an error."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return  # reset, closed or timed out mid-request (a probe that gave up): nothing to print
        super().handle_error(request, client_address)  # a bug: its traceback on stderr, as socketserver does


class HealthServer:
    """/metrics, /healthz and (given `ready`) /readyz on `address`, served from a daemon thread until `close`.

    `ready` is keyword-only and optional: without it the server is as it was, /readyz 404."""

    def __init__(
        self,
        address: tuple[str, int],
        metrics: ControllerMetrics,
        alive: Callable[[], bool],
        *,
        ready: ReadyCheck | None = None,
    ) -> None:
        owner = self
        self._ready = ready

        class Handler(BaseHTTPRequestHandler):
            timeout = 10.0  # seconds a client may take to send its request line and headers (no body is read)

            def do_GET(self) -> None:
                if self.path == "/metrics":
                    try:
                        owner._send(self, 200, metrics.render(), CONTENT_TYPE_LATEST)
                    except KbctlError as exc:  # the queue depth could not be counted: the store is away
                        owner._send(self, 503, f"store unavailable: {exc}\n".encode(), "text/plain")
                elif self.path == "/healthz":
                    ok = alive()
                    owner._send(self, 200 if ok else 503, b"ok\n" if ok else b"stalled\n", "text/plain")
                elif self.path == "/readyz" and ready is not None:
                    try:
                        ok, checks = ready()
                        body = json.dumps(checks, sort_keys=True)
                    except Exception as exc:  # a check that fails outright: not ready, and say so
                        ok, body = False, json.dumps({"ready": False, "error": type(exc).__name__})
                    owner._send(self, 200 if ok else 503, f"{body}\n".encode(), "application/json")
                else:
                    owner._send(self, 404, b"not found\n", "text/plain")

            def do_POST(self) -> None:
                owner._send(self, 405, b"method not allowed\n", "text/plain")

            do_PUT = do_DELETE = do_PATCH = do_POST

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the controller's own log says what matters; scrapes would drown it

        self._server = _ProbeServer(address, Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="kbctl-health", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, body: bytes, content_type: str) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def close(self) -> None:
        """Stop serving, then close the readiness check when it has a `close` (a `StoreReadiness`'s connections)."""
        self._server.shutdown()
        self._server.server_close()
        close = getattr(self._ready, "close", None)
        if callable(close):
            close()
