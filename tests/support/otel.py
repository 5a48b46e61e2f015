"""The test process's OpenTelemetry SDK provider, shared by the test modules that collect spans in memory."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter

__all__ = ["send_spans_to"]


def send_spans_to(exporter: SpanExporter) -> None:
    """Make the process's SDK provider send its spans to `exporter` too: another test module may have installed
    the provider already, and there can be only one per process."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
