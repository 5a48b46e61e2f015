"""`kbctl controller` as a long-lived service: Prometheus metrics from the engine's events, and /healthz.

`--metrics-address HOST:PORT` serves, on a thread of its own:
- `/metrics`: reconciles by knowledge base, trigger and outcome, their durations, failures, the last success
  per knowledge base, and the queue depth (knowledge bases whose recorded generation is not reconciled yet,
  counted on a connection of the server's own at each scrape);
- `/healthz`: 200 while the controller's loop has completed a pass recently (3 poll intervals, at least 60 s;
  a reconcile in progress counts as alive), else 503.
Nothing else is served: every other path is 404, every method but GET 405, and no request body is read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from kbctl import Event, ReconcileFailed, ReconcileFinished, ReconcileStarted, Reporter
from kbctl.errors import KbctlError, UsageError

__all__ = ["ControllerMetrics", "HealthServer", "parse_address"]

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


class HealthServer:
    """/metrics and /healthz on `address`, served from a daemon thread until `close`."""

    def __init__(self, address: tuple[str, int], metrics: ControllerMetrics, alive: Callable[[], bool]) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/metrics":
                    try:
                        owner._send(self, 200, metrics.render(), CONTENT_TYPE_LATEST)
                    except KbctlError as exc:  # the queue depth could not be counted: the store is away
                        owner._send(self, 503, f"store unavailable: {exc}\n".encode(), "text/plain")
                elif self.path == "/healthz":
                    ok = alive()
                    owner._send(self, 200 if ok else 503, b"ok\n" if ok else b"stalled\n", "text/plain")
                else:
                    owner._send(self, 404, b"not found\n", "text/plain")

            def do_POST(self) -> None:
                owner._send(self, 405, b"method not allowed\n", "text/plain")

            do_PUT = do_DELETE = do_PATCH = do_POST

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the controller's own log says what matters; scrapes would drown it

        self._server = ThreadingHTTPServer(address, Handler)
        self._server.daemon_threads = True
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
        self._server.shutdown()
        self._server.server_close()
