"""OpenTelemetry spans of queries, when `opentelemetry-api` is installed (and an SDK configured): one span per
query with a child span per retrieval stage, made from the stage timings every query records."""

from __future__ import annotations

from typing import Any

from kbctl import QueryResult

__all__ = ["trace_query"]

try:
    from opentelemetry import trace as _otel
except ImportError:  # optional: without it, nothing is traced
    _otel = None  # type: ignore[assignment]


def trace_query(result: QueryResult, *, route: str, principal: str) -> None:
    """Record `result` as a `kbctl.query` span with one child per stage (embed, vector, keyword, fuse, threshold,
    rerank, select), carrying the knowledge base, version, hit count and scores. A no-op without OpenTelemetry
    (and, by the API's design, cheap without a configured SDK)."""
    if _otel is None or not result.timings:
        return
    tracer: Any = _otel.get_tracer("kbctl")
    first, last = result.timings[0], result.timings[-1]
    attributes = {
        "kbctl.knowledge_base": result.knowledge_base,
        "kbctl.version": result.version,
        "kbctl.model": result.model,
        "kbctl.mode": result.mode,
        "kbctl.hits": len(result.hits),
        "kbctl.candidates": result.candidates,
        "kbctl.best_score": result.best_score if result.best_score is not None else -1.0,
        "kbctl.route": route,
        "kbctl.token": principal,
    }
    if result.hits:
        attributes["kbctl.scores"] = [h.score for h in result.hits]
    span = tracer.start_span("kbctl.query", start_time=first.start_ns, attributes=attributes)
    context = _otel.set_span_in_context(span)
    for timing in result.timings:
        child = tracer.start_span(
            f"kbctl.{timing.stage.replace(' ', '_')}",
            context=context,
            start_time=timing.start_ns,
            attributes={
                "kbctl.knowledge_base": result.knowledge_base,
                "kbctl.version": result.version,
                "kbctl.count": timing.count,
            },
        )
        child.end(end_time=timing.end_ns)
    span.end(end_time=last.end_ns)
