"""OpenTelemetry in tests: the test process's SDK provider, shared by the test modules that collect spans in memory,
and a loopback OTLP/HTTP receiver that a real kbctl subprocess exports its spans to."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter

__all__ = ["Collector", "plain", "send_spans_to"]


def send_spans_to(exporter: SpanExporter) -> None:
    """Make the process's SDK provider send its spans to `exporter` too: another test module may have installed
    the provider already, and there can be only one per process."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(exporter))


def plain(value: Any) -> Any:
    """An OTLP attribute value (`AnyValue`) as Python: str, bool, int, float, or a list of them."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [plain(v) for v in value.array_value.values]
    return getattr(value, kind) if kind is not None else None


class Collector:
    """An OTLP/HTTP trace receiver on 127.0.0.1: keeps every span of every ExportTraceServiceRequest posted to
    /v1/traces (protobuf), with its resource's attributes. Point a process at it with
    OTEL_EXPORTER_OTLP_ENDPOINT=`url`."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.path == "/v1/traces" and self.headers.get("content-type") == "application/x-protobuf":
                    collector.received(ExportTraceServiceRequest.FromString(body))
                    self.send_response(200)
                else:
                    self.send_response(404)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def received(self, request: Any) -> None:
        """Keep the spans of one export: name, ids, attributes (as `AnyValue`s: see `plain`) and resource."""
        for resource_spans in request.resource_spans:
            resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    attributes = {a.key: a.value for a in span.attributes}
                    with self._lock:
                        self.spans.append(
                            {
                                "name": span.name,
                                "trace_id": span.trace_id.hex(),
                                "span_id": span.span_id.hex(),
                                "parent_id": span.parent_span_id.hex() or None,
                                "attributes": attributes,
                                "resource": resource,
                            }
                        )

    def __enter__(self) -> Collector:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
