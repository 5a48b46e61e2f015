"""The server's Prometheus metrics, in a registry of its own (so two apps in one process never share counts)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["CONTENT_TYPE_LATEST", "Metrics"]

_BUCKETS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)


class Metrics:
    """Requests, latency per route and knowledge base, hits returned, empty results, errors by kind."""

    def __init__(self) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # no `_created` twin of every series
        self.registry = CollectorRegistry()
        self.requests = Counter("kbctl_requests", "HTTP requests served.", ["route", "status"], registry=self.registry)
        self.latency = Histogram(
            "kbctl_request_duration_seconds",
            "Request latency.",
            ["route", "knowledge_base"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.hits = Counter(
            "kbctl_query_hits", "Chunks returned by queries.", ["knowledge_base"], registry=self.registry
        )
        self.empty = Counter(
            "kbctl_query_empty_results",
            "Queries that found nothing relevant.",
            ["knowledge_base"],
            registry=self.registry,
        )
        self.errors = Counter("kbctl_errors", "Error responses by kind.", ["kind"], registry=self.registry)

    def observe(
        self, *, route: str, status: int, seconds: float, knowledge_base: str, hits: int | None, error: str | None
    ) -> None:
        """Count one request. `knowledge_base` is "" unless the caller could see it (no label for a name guessed)."""
        self.requests.labels(route, str(status)).inc()
        self.latency.labels(route, knowledge_base).observe(seconds)
        if hits is not None:
            self.hits.labels(knowledge_base).inc(hits)
            if hits == 0:
                self.empty.labels(knowledge_base).inc()
        if error is not None:
            self.errors.labels(error).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
