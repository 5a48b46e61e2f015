"""`kbctl controller` as a long-lived service: Prometheus metrics from the engine's events, /healthz and /readyz.

`--metrics-address HOST:PORT` serves, on a thread of its own:
- `/metrics`: reconciles by knowledge base, trigger and outcome, their durations, failures, the last success
  per knowledge base, and the queue depth (knowledge bases whose recorded generation is not reconciled yet,
  counted on a connection of the server's own at each scrape);
- `/healthz`: 200 while the controller's loop has completed a pass recently (3 poll intervals, at least 60 s;
  a reconcile in progress counts as alive), else 503;
- `/readyz` (given a readiness check, e.g. `StoreReadiness`): 200 and a JSON object of the checks, each "ok", while
  the controller can work (the database answers on a connection of the check's own within 2 s, and its schema is at
  this kbctl's last migration); else 503 and the same object, the failed check saying why. Without a check, /readyz
  is 404, as any other path.
Nothing else is served: every other path is 404, every method but GET 405, and no request body is read. A client
that resets or closes its connection mid-request (a probe that timed out) is not logged.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from kbctl import Event, ReconcileFailed, ReconcileFinished, ReconcileStarted, Reporter
from kbctl.errors import KbctlError, UsageError

if TYPE_CHECKING:
    from kbctl.client import Readiness
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

_BUCKETS = (0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0)


def parse_address(text: str) -> tuple[str, int]:
    """`HOST:PORT` or `:PORT` (every interface) as (host, port), port 0 meaning any free one; UsageError otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise UsageError(f"invalid address {text!r}; use HOST:PORT or :PORT (e.g. :9090 or 127.0.0.1:9090)")
    return (host.strip("[]") or "0.0.0.0"), int(port)


class ControllerMetrics:
    """A Reporter that counts the engine's events into Prometheus metrics, then passes them to `inner`."""

    def __init__(self, inner: Reporter, pending: Callable[[], int], clock: Callable[[], float] = time.time) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self._inner = inner
        self._clock = clock
        self._started: dict[str, float] = {}
        self.registry = CollectorRegistry()
        labels = ["knowledge_base", "trigger", "outcome"]
        self.reconciles = Counter("kbctl_controller_reconciles", "Reconciles done.", labels, registry=self.registry)
        self.duration = Histogram(
            "kbctl_controller_reconcile_duration_seconds",
            "How long a reconcile took.",
            ["knowledge_base", "trigger"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.failures = Counter(
            "kbctl_controller_failures", "Reconciles that failed.", ["knowledge_base"], registry=self.registry
        )
        self.last_success = Gauge(
            "kbctl_controller_last_success_timestamp_seconds",
            "When a reconcile of the knowledge base last succeeded (Unix time).",
            ["knowledge_base"],
            registry=self.registry,
        )
        depth = Gauge(
            "kbctl_controller_queue_depth",
            "Knowledge bases whose recorded generation waits to be reconciled.",
            registry=self.registry,
        )
        depth.set_function(lambda: float(pending()))

    def report(self, event: Event) -> None:
        """Count `event`, then hand it on."""
        now = self._clock()
        if isinstance(event, ReconcileStarted):
            self._started[event.name] = now
        elif isinstance(event, ReconcileFinished):
            self.reconciles.labels(event.name, event.trigger, event.action).inc()
            self.last_success.labels(event.name).set(now)
            if event.name in self._started:
                self.duration.labels(event.name, event.trigger).observe(now - self._started.pop(event.name))
        elif isinstance(event, ReconcileFailed):
            self.reconciles.labels(event.name, "", "failed").inc()
            self.failures.labels(event.name).inc()
            self._started.pop(event.name, None)
        self._inner.report(event)

    def render(self) -> bytes:
        return generate_latest(self.registry)


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
