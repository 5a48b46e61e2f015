"""OpenTelemetry traces: what the SDK does not do on its own, and kbctl's spans (docs/tracing.md).

The provider: `configure_tracing` installs one only when the OTEL_* variables ask for traces and none is installed
yet, with the exporters OTEL_TRACES_EXPORTER names (the SDK has no public reader of it) and the service named
`kbctl`; the SDK and its exporters read the rest themselves (resource, sampler, batching, endpoint, headers).
The spans: `kbctl.query` per query with a child per retrieval stage, also a retrieval span of OpenInference and
OpenTelemetry GenAI (`retrieval_attributes`); `kbctl.apply`/`kbctl.refresh` > `kbctl.reconcile` > `kbctl.source`
from the engine's events. They name knowledge bases, versions, counts and scores, never a question, a text, a URL
or a secret unless KBCTL_TRACE_CONTENT asks (the question then redacted), and are bounded (kbctl.defaults TRACE_*).
Nothing imports OpenTelemetry unless the environment asks for traces: spans are made only once
`opentelemetry.trace` is imported, so a process that does not trace pays nothing.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from kbctl.defaults import (
    TRACE_CONTENT_CHARS,
    TRACE_DOCUMENT_CHARS,
    TRACE_DOCUMENTS,
    TRACE_FIELD_CHARS,
    TRACE_QUESTION_CHARS,
)
from kbctl.inputs.redaction import Redactor

if TYPE_CHECKING:
    from kbctl.engine.events import Event, Reporter
    from kbctl.engine.results import ApplyReport
    from kbctl.query.results import QueryResult

__all__ = [
    "CONTENT_ENV",
    "ApplySpans",
    "Redact",
    "SpanReporter",
    "apply_spans",
    "configure_tracing",
    "content_requested",
    "flush_traces",
    "provider_from_environment",
    "queries_traced_by_caller",
    "queries_traced_with",
    "retrieval_attributes",
    "span_reporter",
    "trace_ids",
    "trace_query",
    "traced",
    "tracing_requested",
]

log = logging.getLogger("kbctl.telemetry")

TRACER = "kbctl"
# The OTLP exporters of the SDK's entry points, by the package that provides each (for the warning when missing).
_EXPORTER_PACKAGES = {
    "otlp_proto_grpc": "opentelemetry-exporter-otlp-proto-grpc",
    "otlp_proto_http": "opentelemetry-exporter-otlp-proto-http",
}
_OTHER_SIGNALS = ("OTEL_EXPORTER_OTLP_METRICS_", "OTEL_EXPORTER_OTLP_LOGS_")

_lock = threading.Lock()
_configured = False


def _otel() -> Any:
    """`opentelemetry.trace` when something imported it, else None: without it no provider can be configured, so
    there is nothing to record (and importing it would cost every command its import time)."""
    return sys.modules.get("opentelemetry.trace")


# ---------------------------------------------------------------- the provider


def tracing_requested(environ: Mapping[str, str]) -> bool:
    """Whether the environment asks for traces: OTEL_TRACES_EXPORTER set to anything but `none`, or (without it)
    an OTEL_EXPORTER_OTLP_* variable other than one of metrics or logs; never with OTEL_SDK_DISABLED=true."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = environ.get("OTEL_TRACES_EXPORTER")
    if exporters is not None:
        return exporters.strip().lower() not in ("", "none")
    return any(k.startswith("OTEL_EXPORTER_OTLP_") and not k.startswith(_OTHER_SIGNALS) for k in environ)


def configure_tracing() -> bool:
    """Install the tracer provider the OTEL_* variables describe, once per process: only when they ask for traces
    (`tracing_requested`) and no provider is installed yet (an application's own, or `opentelemetry-instrument`'s,
    wins). A missing package (the SDK, an exporter) is one warning line, never an error. True when this call
    installed one."""
    global _configured
    with _lock:
        if _configured or not tracing_requested(os.environ):
            return False
        _configured = True
        try:
            from opentelemetry import trace
        except ImportError:
            log.warning(
                "kbctl: the OTEL_* variables ask for traces, but OpenTelemetry is not installed "
                "(pip install 'kbctl[otel]' opentelemetry-sdk): traces are not exported"
            )
            return False
        if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
            return False  # configured already: leave it alone
        provider = provider_from_environment()
        if provider is None:
            return False
        trace.set_tracer_provider(provider)
        return True


def provider_from_environment() -> Any:
    """A tracer provider (not installed) with a batching exporter per name of OTEL_TRACES_EXPORTER (`otlp` when
    only OTEL_EXPORTER_OTLP_* are set; `console` writes one JSON line per span to stderr, since stdout is a
    command's output or the MCP stdio channel), its service named `kbctl` unless OTEL_SERVICE_NAME or
    OTEL_RESOURCE_ATTRIBUTES name it. The SDK reads the rest: the resource, the sampler (OTEL_TRACES_SAMPLER),
    batching (OTEL_BSP_*), and each exporter its endpoint, headers, timeout and certificates. An exporter whose
    package is missing is left out with one warning line; None (with one warning line) without the SDK, or when
    no exporter is left."""
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning(
            "kbctl: the OTEL_* variables ask for traces, but opentelemetry-sdk is not installed "
            "(pip install opentelemetry-sdk): traces are not exported"
        )
        return None
    names = _exporter_names(os.environ)
    exporters = [e for e in (_exporter(name) for name in dict.fromkeys(names or ())) if e is not None]
    if not exporters:
        return None
    provider = TracerProvider(resource=_resource(Resource))
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


# The exporter `otlp` names, by OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL: OTLP over HTTP (protobuf) when neither is
# set, the OpenTelemetry specification's default (the Python SDK's own configurator picks gRPC, a package the otel
# extra does not install).
_OTLP_BY_PROTOCOL = {"": "otlp_proto_http", "http/protobuf": "otlp_proto_http", "grpc": "otlp_proto_grpc"}


def _exporter_names(environ: Mapping[str, str]) -> list[str] | None:
    """The exporters OTEL_TRACES_EXPORTER names (`otlp`, its default, when it is unset), `otlp` resolved by the
    protocol variables; None after one warning line when they name a protocol OTLP does not have."""
    names = environ.get("OTEL_TRACES_EXPORTER", "").strip() or "otlp"
    requested = [] if names.lower() == "none" else [n.strip() for n in names.split(",") if n.strip()]
    if "otlp" not in requested:
        return requested
    protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or ""
    otlp = _OTLP_BY_PROTOCOL.get(protocol.strip())
    if otlp is None:
        log.warning(f"kbctl: Unsupported OTLP protocol {protocol.strip()!r} is configured: traces are not exported")
        return None
    return [otlp if n == "otlp" else n for n in requested]


def _exporter(name: str) -> Any:
    """The span exporter of one exporter name (the SDK's entry points, group `opentelemetry_traces_exporter`),
    made with no arguments, so that it reads its own OTEL_EXPORTER_* settings; or None after one warning line."""
    from importlib.metadata import entry_points

    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SpanExporter

    if name == "console":
        return ConsoleSpanExporter(out=sys.stderr, formatter=lambda span: span.to_json(indent=None) + "\n")
    try:
        exporter_class = next(iter(entry_points(group="opentelemetry_traces_exporter", name=name))).load()
        if not issubclass(exporter_class, SpanExporter):
            raise TypeError(f"{name} is not a trace exporter")
    except Exception:  # no installed package provides it (or one that cannot be imported)
        package = _EXPORTER_PACKAGES.get(name)
        fix = f"pip install {package}" if package else f"install the package of the {name!r} exporter"
        if name == "otlp_proto_grpc":
            fix += ", or set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf with opentelemetry-exporter-otlp-proto-http"
        log.warning(f"kbctl: the trace exporter {name!r} is not installed ({fix}): its traces are not exported")
        return None
    try:
        return exporter_class()
    except Exception as exc:  # its settings are read from the environment; the message could quote a header
        log.warning(f"kbctl: the trace exporter {name!r} could not start ({type(exc).__name__}): not exported")
        return None


def _resource(resource_class: Any) -> Any:
    """The SDK's resource from the environment, named kbctl (and its version) unless the environment names it."""
    from kbctl._version import __version__

    resource = resource_class.create()
    defaults = {"service.name": "kbctl", "service.version": __version__}
    if not str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        defaults.pop("service.name")
    if "service.version" in resource.attributes:
        defaults.pop("service.version")
    return resource.merge(resource_class(defaults)) if defaults else resource


def trace_ids() -> dict[str, str]:
    """`traceId` and `spanId` of the span current in this thread or task (hex, as OpenTelemetry writes them), for a
    log line written inside it; empty when nothing traces or no span is current."""
    otel = _otel()
    if otel is None:
        return {}
    context = otel.get_current_span().get_span_context()
    if not context.is_valid:
        return {}
    return {"traceId": otel.format_trace_id(context.trace_id), "spanId": otel.format_span_id(context.span_id)}


def flush_traces() -> None:
    """Export the spans still buffered now (a process about to end without its exit handlers, which would)."""
    otel = _otel()
    flush = getattr(otel.get_tracer_provider(), "force_flush", None) if otel is not None else None
    if flush is not None:
        flush()


# ---------------------------------------------------------------- queries

# A redaction of what people type: a question in, the text a span may carry out (kbctl.inputs.redaction.Redactor).
Redact = Callable[[str], str]

# Within `queries_traced_by_caller`, the Python API leaves a query's spans to its caller.
_CALLER_TRACES: ContextVar[bool] = ContextVar("kbctl_caller_traces_queries", default=False)
# Within `queries_traced_by_caller(redact=...)` or `queries_traced_with(..., redact=...)`: the redaction of the
# questions its spans carry (None: the default patterns).
_REDACT: ContextVar[Redact | None] = ContextVar("kbctl_query_span_redaction", default=None)
# The results already recorded (by id, while they live), so that a result is never traced twice.
_recorded: dict[int, weakref.ref[Any]] = {}


@contextmanager
def queries_traced_by_caller(redact: Redact | None = None) -> Iterator[None]:
    """Within it (and the threads and tasks it starts), the Python API makes no query spans: the caller traces
    each result with `trace_query`, adding what only it knows (a server: the route and the caller's name).
    `redact`, when given, is the redaction of the questions of the spans made within it that name none."""
    token = _CALLER_TRACES.set(True)
    redaction = _REDACT.set(redact) if redact is not None else None
    try:
        yield
    finally:
        if redaction is not None:
            _REDACT.reset(redaction)
        _CALLER_TRACES.reset(token)


# Within `queries_traced_with`, the attributes every query span of the Python API carries.
_ATTRIBUTES: ContextVar[Mapping[str, str] | None] = ContextVar("kbctl_query_span_attributes", default=None)


@contextmanager
def queries_traced_with(attributes: Mapping[str, str], redact: Redact | None = None) -> Iterator[None]:
    """Within it, the Python API traces each query itself again (even inside `queries_traced_by_caller`), each
    span carrying `attributes` (and its question redacted by `redact`, when given): for a caller that never sees
    the individual results (a server's federated query, whose members are queried and fused by the library)."""
    caller = _CALLER_TRACES.set(False)
    extra = _ATTRIBUTES.set(attributes)
    redaction = _REDACT.set(redact) if redact is not None else None
    try:
        yield
    finally:
        if redaction is not None:
            _REDACT.reset(redaction)
        _ATTRIBUTES.reset(extra)
        _CALLER_TRACES.reset(caller)


def traced(result: QueryResult) -> QueryResult:
    """`result`, recorded as spans unless a caller traces it (`queries_traced_by_caller`): the Python API's hook."""
    if not _CALLER_TRACES.get():
        trace_query(result, _ATTRIBUTES.get())
    return result


def trace_query(
    result: QueryResult, attributes: Mapping[str, str] | None = None, *, redact: Redact | None = None
) -> None:
    """Record `result` as a `kbctl.query` span (knowledge base, version, model, mode, hits, candidates, best
    score, the hits' scores, and `attributes`) with a child per stage it ran (`kbctl.embed_question`,
    `kbctl.vector`, `kbctl.keyword`, `kbctl.fuse`, `kbctl.threshold`, `kbctl.rerank`, `kbctl.select`), timed as
    the stages were. The span is also a retrieval span of OpenInference and of OpenTelemetry's GenAI conventions
    (`retrieval_attributes`): with the question, redacted by `redact` (else the redaction set by
    `queries_traced_by_caller` or `queries_traced_with`, else the default patterns), and the hits' texts only
    when KBCTL_TRACE_CONTENT asks for content. Once per result: a result recorded already is not recorded again."""
    otel = _otel()
    if otel is None or not result.timings or _recorded_already(result):
        return
    key = id(result)
    _recorded[key] = weakref.ref(result, lambda _: _recorded.pop(key, None))
    tracer = otel.get_tracer(TRACER)
    first, last = result.timings[0], result.timings[-1]
    root: dict[str, Any] = {
        "kbctl.knowledge_base": result.knowledge_base,
        "kbctl.version": result.version,
        "kbctl.model": result.model,
        "kbctl.mode": result.mode,
        "kbctl.hits": len(result.hits),
        "kbctl.candidates": result.candidates,
        **(attributes or {}),
    }
    if result.best_score is not None:
        root["kbctl.best_score"] = result.best_score
    if result.hits:
        root["kbctl.scores"] = [h.score for h in result.hits]
    content = content_requested(os.environ)
    root.update(retrieval_attributes(result, redact=redact or _REDACT.get() or _default_redactor(), content=content))
    span = tracer.start_span("kbctl.query", start_time=first.start_ns, attributes=root)
    context = otel.set_span_in_context(span)
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


def _recorded_already(result: QueryResult) -> bool:
    ref = _recorded.get(id(result))
    return ref is not None and ref() is result


# ---------------------------------------------------------------- the public conventions of a retrieval span

CONTENT_ENV = "KBCTL_TRACE_CONTENT"
# OpenInference's span kind of a retrieval, and OpenTelemetry GenAI's operation name of one.
_RETRIEVER = "RETRIEVER"
_RETRIEVAL = "retrieval"


def content_requested(environ: Mapping[str, str]) -> bool:
    """Whether the environment asks query spans to carry content (KBCTL_TRACE_CONTENT `1` or `true`): the question,
    redacted, and the hits' texts, titles, headings and origins. Off by default: spans go to whoever reads the
    tracing backend, who need not be a reader of the documents."""
    return environ.get(CONTENT_ENV, "").strip().lower() in ("1", "true")


@functools.cache
def _default_redactor() -> Redactor:
    """The default redaction patterns, compiled once."""
    return Redactor()


def retrieval_attributes(result: QueryResult, *, redact: Redact, content: bool = False) -> dict[str, Any]:
    """The attributes that make a query's span a retrieval span of OpenInference (`openinference.span.kind`
    RETRIEVER, `retrieval.documents.{i}.document.id`, `.score`, `.metadata` and, with `content`, `.content` and
    `input.value`) and of OpenTelemetry's GenAI conventions (`gen_ai.operation.name` `retrieval`,
    `gen_ai.data_source.id`, `gen_ai.request.model`, `gen_ai.request.top_k`, `gen_ai.retrieval.documents` and, with
    `content`, `gen_ai.retrieval.query.text`).

    Only `result.hits` are described (what the caller's reader let it retrieve, never the candidates the query
    dropped), the first TRACE_DOCUMENTS by rank. Without `content`, a document is its id (`knowledge
    base/source#position`), score and metadata of names and numbers; with it, the question passes through `redact`
    (cut at TRACE_QUESTION_CHARS) and each text is cut at TRACE_DOCUMENT_CHARS, TRACE_CONTENT_CHARS in all (a cut
    one's metadata says `truncated`), titles, headings and origins at TRACE_FIELD_CHARS."""
    attributes: dict[str, Any] = {
        "openinference.span.kind": _RETRIEVER,
        "gen_ai.operation.name": _RETRIEVAL,
        "gen_ai.data_source.id": result.knowledge_base,
        "gen_ai.request.model": result.model,
        "gen_ai.request.top_k": float(result.top_k),
    }
    if content:
        question = redact(result.question)[:TRACE_QUESTION_CHARS]
        attributes |= {
            "input.value": question,
            "input.mime_type": "text/plain",
            "gen_ai.retrieval.query.text": question,
        }
    documents: list[dict[str, Any]] = []
    budget = TRACE_CONTENT_CHARS
    for i, hit in enumerate(result.hits[:TRACE_DOCUMENTS]):
        prefix = f"retrieval.documents.{i}.document"
        document_id = f"{result.knowledge_base}/{hit.source}#{hit.position}"
        metadata: dict[str, Any] = {
            "knowledgeBase": result.knowledge_base,
            "version": result.version,
            "source": hit.source,
            "rank": hit.rank,
            "similarity": hit.similarity,
        }
        attributes[f"{prefix}.id"] = document_id
        attributes[f"{prefix}.score"] = hit.score
        if content:
            text = hit.text[: min(TRACE_DOCUMENT_CHARS, budget)]
            budget -= len(text)
            attributes[f"{prefix}.content"] = text
            metadata["origin"] = hit.origin[:TRACE_FIELD_CHARS]
            if hit.title is not None:
                metadata["title"] = hit.title[:TRACE_FIELD_CHARS]
            metadata["headingPath"] = [h[:TRACE_FIELD_CHARS] for h in hit.heading_path]
            if len(text) < len(hit.text):
                metadata["truncated"] = True
        attributes[f"{prefix}.metadata"] = json.dumps(metadata, ensure_ascii=False)
        documents.append({"id": document_id, "score": hit.score, "similarity": hit.similarity, "rank": hit.rank})
    attributes["gen_ai.retrieval.documents"] = json.dumps(documents)
    return attributes


# ---------------------------------------------------------------- apply, refresh, controller


class SpanReporter:
    """Passes every event on to `inner`, and turns each knowledge base's reconcile into a `kbctl.reconcile` span
    (under `parent`, else a root: a controller's) with a `kbctl.source` child per source. The engine reports a
    source when its knowledge base is done, so a source's span marks when, not how long."""

    def __init__(self, inner: Reporter | None, otel: Any, parent: Any = None) -> None:
        self._inner = inner
        self._otel = otel
        self._tracer = otel.get_tracer(TRACER)
        self._parent = parent
        self._open: dict[str, Any] = {}
        self._lock = threading.Lock()

    def report(self, event: Event) -> None:
        """Record `event`, then pass it on within the span of its knowledge base's reconcile (so a log line it makes
        carries that span's ids: `trace_ids`)."""
        with self._lock:
            span = self._open.get(getattr(event, "name", ""))
            self._record(event)
            span = self._open.get(getattr(event, "name", "")) or span  # started by it, or ended by it
        if self._inner is None:
            return
        if span is None:
            self._inner.report(event)
            return
        with self._otel.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
            self._inner.report(event)

    def _record(self, event: Event) -> None:
        from kbctl.engine.events import (
            DocumentsRemoved,
            HandedToController,
            ReconcileFailed,
            ReconcileFinished,
            ReconcileStarted,
            SourceReconciled,
        )

        if isinstance(event, ReconcileStarted):
            self._end(event.name, failed=True)  # one left open by a pass that broke off
            self._start(event.name, trigger=event.trigger, action=event.action, version=event.version)
            self._open[event.name].set_attribute("kbctl.waiting_sources", event.waiting)
        elif isinstance(event, SourceReconciled):
            source = event.source
            attributes = {
                "kbctl.knowledge_base": event.name,
                "kbctl.source": source.name,
                "kbctl.state": source.state,
                "kbctl.fetched": source.fetched,
                "kbctl.ingested": source.ingested,
                "kbctl.chunks": source.chunks,
                "kbctl.embedded": source.embedded,
                "kbctl.reused": source.reused,
                "kbctl.model": event.model,
            }
            parent = self._otel.set_span_in_context(self._span(event.name, trigger=event.trigger))
            child = self._tracer.start_span("kbctl.source", context=parent, attributes=attributes)
            if source.state == "failed":
                child.set_status(self._otel.Status(self._otel.StatusCode.ERROR))
            child.end()
        elif isinstance(event, DocumentsRemoved):
            self._span(event.name, trigger=event.trigger).set_attribute("kbctl.documents_removed", len(event.documents))
        elif isinstance(event, HandedToController):
            self._span(event.name).set_attribute("kbctl.controller", True)
        elif isinstance(event, ReconcileFinished):
            span = self._span(event.name, trigger=event.trigger)
            span.set_attributes({"kbctl.action": event.action, "kbctl.version": event.version})
            self._end(event.name)
        elif isinstance(event, ReconcileFailed):
            self._span(event.name)
            self._end(event.name, failed=True)

    def _start(self, name: str, *, trigger: str | None = None, action: str | None = None, version: int = 0) -> Any:
        attributes: dict[str, Any] = {"kbctl.knowledge_base": name}
        if trigger is not None:
            attributes["kbctl.trigger"] = trigger
        if action is not None:
            attributes["kbctl.action"] = action
        if version:
            attributes["kbctl.version"] = version
        span = self._tracer.start_span("kbctl.reconcile", context=self._parent, attributes=attributes)
        self._open[name] = span
        return span

    def _span(self, name: str, *, trigger: str | None = None) -> Any:
        """The open span of `name`, started now if its start was not reported (a result read back)."""
        return self._open.get(name) or self._start(name, trigger=trigger)

    def _end(self, name: str, *, failed: bool = False) -> None:
        span = self._open.pop(name, None)
        if span is None:
            return
        if failed:
            span.set_status(self._otel.Status(self._otel.StatusCode.ERROR))
        span.end()

    def close(self) -> None:
        """End the spans still open (their reconcile broke off) as failed."""
        with self._lock:
            for name in list(self._open):
                self._end(name, failed=True)


def span_reporter(reporter: Reporter | None) -> Reporter | None:
    """`reporter` with a controller's `kbctl.reconcile` spans recorded too (unchanged when nothing can trace)."""
    otel = _otel()
    return reporter if otel is None else SpanReporter(reporter, otel)


class ApplySpans:
    """The `kbctl.apply` (or `kbctl.refresh`) span of one call and the reporter that adds its `kbctl.reconcile`
    children: `reporter` is the one to hand the engine (the caller's own when nothing can trace)."""

    def __init__(self, name: str, reporter: Reporter | None) -> None:
        self.reporter = reporter
        self.span: Any = None
        self._spans: SpanReporter | None = None
        self.otel = _otel()
        if self.otel is not None:
            self.span = self.otel.get_tracer(TRACER).start_span(name)
            self._spans = SpanReporter(reporter, self.otel, self.otel.set_span_in_context(self.span))
            self.reporter = self._spans

    def finished(self, report: ApplyReport) -> None:
        """Record what the call did: the knowledge bases reconciled, recorded for a controller, pruned."""
        if self.span is None:
            return
        self.span.set_attributes(
            {
                "kbctl.knowledge_bases": [r.name for r in report.results],
                "kbctl.recorded": len(report.recorded),
                "kbctl.pruned": len(report.pruned),
                "kbctl.fetched": report.fetched,
                "kbctl.embedded": report.embedded,
                "kbctl.failed": report.failed,
            }
        )
        if report.failed:
            self.span.set_status(self.otel.Status(self.otel.StatusCode.ERROR))

    def close(self) -> None:
        """End the span, and its children still open."""
        if self._spans is not None:
            self._spans.close()
        if self.span is not None:
            self.span.end()


@contextmanager
def apply_spans(name: str, reporter: Reporter | None) -> Iterator[ApplySpans]:
    """The `name` span (`kbctl.apply`, `kbctl.refresh`) of one call, current while it runs (so spans of
    instrumented libraries nest under it); failed when the call raises, with the exception's type only (its
    message could quote a connection string). Hand the engine `spans.reporter`, then call `spans.finished`."""
    spans = ApplySpans(name, reporter)
    if spans.span is None:
        yield spans
        return
    otel = spans.otel
    try:
        with otel.use_span(spans.span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
            yield spans
    except BaseException as exc:
        spans.span.set_status(otel.Status(otel.StatusCode.ERROR, type(exc).__name__))
        raise
    finally:
        spans.close()
