"""Traces that export: the Python API's query, context, ask, apply and refresh spans on a real store, the tracer
provider of the OTEL_* variables, and a real `kbctl serve` printing its spans with OTEL_TRACES_EXPORTER=console and
posting them to a real OTLP/HTTP receiver with OTEL_EXPORTER_OTLP_ENDPOINT alone."""

from __future__ import annotations

import ast
import json
import logging
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from kbctl import telemetry
from kbctl.client import KnowledgeBaseStore
from kbctl.manifest import parse_manifests
from kbctl.telemetry import provider_from_environment, tracing_requested
from tests.support.manifests import knowledge_base, text_source
from tests.support.otel import Collector, send_spans_to
from tests.support.serveproc import kbctl_env, seeded, serving

QUESTION = "how long are invoices kept?"
MANIFEST = knowledge_base(
    "office",
    text_source("invoices", "# Invoices\n\nInvoices are kept for seven years after the financial year."),
    text_source("travel", "# Travel\n\nTrain tickets are booked through the travel desk, second class."),
)
STAGES = ["kbctl.embed_question", "kbctl.vector", "kbctl.keyword", "kbctl.fuse", "kbctl.threshold", "kbctl.select"]
EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def tracer_provider() -> None:
    send_spans_to(EXPORTER)


def named(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def children(spans: Sequence[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


def no_question(spans: Sequence[ReadableSpan]) -> bool:
    """No span carries the question, or a word of a source's text."""
    text = json.dumps([dict(s.attributes or {}) for s in spans])
    return "invoices kept" not in text and "seven years" not in text


def test_a_python_api_query_is_a_span_tree(store: KnowledgeBaseStore) -> None:
    """store.query records one kbctl.query span (knowledge base, version, mode, hits, best score) with a child
    per stage, in order and within it, and never the question."""
    store.apply(parse_manifests(MANIFEST, "kb.yaml"))
    EXPORTER.clear()
    result = store.query("office", QUESTION)
    spans = EXPORTER.get_finished_spans()
    [root] = named(spans, "kbctl.query")
    assert root.parent is None
    attributes = dict(root.attributes or {})
    assert attributes["kbctl.knowledge_base"] == "office" and attributes["kbctl.version"] == 1
    assert attributes["kbctl.mode"] == "hybrid" and attributes["kbctl.hits"] == len(result.hits) >= 1
    assert attributes["kbctl.best_score"] == result.best_score
    assert "kbctl.route" not in attributes and "kbctl.token" not in attributes
    stages = children(spans, root)
    assert [s.name for s in stages] == STAGES and len(spans) == 1 + len(STAGES)
    assert all((s.attributes or {})["kbctl.knowledge_base"] == "office" for s in stages)
    assert (stages[-1].attributes or {})["kbctl.count"] == len(result.hits)
    assert all(root.start_time <= s.start_time <= s.end_time <= root.end_time for s in stages)  # type: ignore[operator]
    assert no_question(spans)


def test_context_and_a_question_without_context_are_traced(store: KnowledgeBaseStore) -> None:
    """store.context and store.ask (nothing relevant: no model is called) each record one kbctl.query tree."""
    store.apply(parse_manifests(MANIFEST, "kb.yaml"))
    EXPORTER.clear()
    assert store.context("office", QUESTION).found
    answered = store.ask("office", "what colour is the reception sofa upholstery?", model="openai/gpt-4o-mini")
    assert answered.reason == "noContext"
    spans = EXPORTER.get_finished_spans()
    roots = named(spans, "kbctl.query")
    hits = [(r.attributes or {})["kbctl.hits"] for r in roots]
    assert len(roots) == 2 and hits[0] >= 1 and hits[1] == 0
    assert "kbctl.best_score" in (roots[1].attributes or {})  # candidates were scored, none passed
    assert all([s.name for s in children(spans, r)] == STAGES for r in roots)


def test_apply_and_refresh_are_spans_with_a_child_per_knowledge_base_and_source(store: KnowledgeBaseStore) -> None:
    """store.apply records kbctl.apply > kbctl.reconcile (per knowledge base) > kbctl.source (per source), with
    what each did; store.refresh records kbctl.refresh the same way; the caller's reporter still hears every
    event."""
    heard: list[str] = []

    class Listener:
        def report(self, event: object) -> None:
            heard.append(type(event).__name__)

    EXPORTER.clear()
    store.apply(parse_manifests(MANIFEST, "kb.yaml"), reporter=Listener())
    spans = EXPORTER.get_finished_spans()
    [apply] = named(spans, "kbctl.apply")
    assert apply.parent is None and apply.status.status_code is not StatusCode.ERROR
    assert (apply.attributes or {})["kbctl.knowledge_bases"] == ("office",)
    assert (apply.attributes or {})["kbctl.embedded"] >= 2
    [kb] = children(spans, apply)
    assert kb.name == "kbctl.reconcile"
    assert dict(kb.attributes or {}) | {"kbctl.waiting_sources": 0} == {
        "kbctl.knowledge_base": "office",
        "kbctl.trigger": "apply",
        "kbctl.action": "created",
        "kbctl.version": 1,
        "kbctl.waiting_sources": 0,
    }
    sources = children(spans, kb)
    assert sorted((s.attributes or {})["kbctl.source"] for s in sources) == ["invoices", "travel"]
    invoices = next(dict(s.attributes or {}) for s in sources if (s.attributes or {})["kbctl.source"] == "invoices")
    assert invoices["kbctl.state"] == "ready" and invoices["kbctl.fetched"] is False
    assert invoices["kbctl.ingested"] is True and invoices["kbctl.chunks"] == invoices["kbctl.embedded"] == 1
    assert {"ReconcileStarted", "SourceReconciled", "ReconcileFinished"} <= set(heard)
    assert no_question(spans)

    EXPORTER.clear()
    store.refresh(["office"])
    spans = EXPORTER.get_finished_spans()
    [refresh] = named(spans, "kbctl.refresh")
    [kb] = children(spans, refresh)
    assert (kb.attributes or {})["kbctl.trigger"] == "refresh"
    assert (kb.attributes or {})["kbctl.action"] == "unchanged" and (kb.attributes or {})["kbctl.version"] == 1


def test_a_failed_apply_is_an_error_span(store: KnowledgeBaseStore) -> None:
    """A knowledge base whose only source cannot be read is a failed kbctl.reconcile under a failed kbctl.apply,
    and the span says which source failed, without its URL."""
    url = "http://127.0.0.1:9/nothing-listens-here"
    manifest = knowledge_base("broken", {"name": "gone", "url": url})
    EXPORTER.clear()
    report = store.apply(parse_manifests(manifest, "kb.yaml"))
    assert report.failed
    spans = EXPORTER.get_finished_spans()
    [apply] = named(spans, "kbctl.apply")
    [kb] = children(spans, apply)
    assert apply.status.status_code is StatusCode.ERROR and kb.status.status_code is StatusCode.ERROR
    failed = [s for s in children(spans, kb) if (s.attributes or {})["kbctl.state"] == "failed"]
    assert [(s.attributes or {})["kbctl.source"] for s in failed] == ["gone"]
    assert "nothing-listens-here" not in json.dumps([dict(s.attributes or {}) for s in spans])


@pytest.mark.parametrize(
    ("environ", "requested"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "kb"}, False),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://collector:4318/v1/metrics"}, False),
        ({"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}, False),
    ],
)
def test_traces_are_configured_only_when_asked_for(environ: dict[str, str], requested: bool) -> None:
    """OTEL_TRACES_EXPORTER (not `none`) or an OTLP variable of traces asks for traces; nothing else does."""
    assert tracing_requested(environ) is requested


def test_the_provider_follows_the_sdk_variables(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """console exports; `otlp` is OTLP over HTTP (the specification's default, what the otel extra installs); the
    resource is OTEL_SERVICE_NAME's; an exporter that is not installed (gRPC, asked for by the protocol variable)
    is one warning line naming the package, and the others still export."""
    for name in ("OTEL_RESOURCE_ATTRIBUTES", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console,otlp")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "kb-api")
    with caplog.at_level(logging.WARNING, logger="kbctl.telemetry"):
        provider: Any = provider_from_environment()
    try:
        assert isinstance(provider, TracerProvider)
        assert provider.resource.attributes["service.name"] == "kb-api"
        assert provider.resource.attributes["service.version"]
        exporters = [p.span_exporter for p in provider._active_span_processor._span_processors]
        assert [type(e).__name__ for e in exporters] == ["ConsoleSpanExporter", "OTLPSpanExporter"]
        assert type(exporters[1]).__module__.startswith("opentelemetry.exporter.otlp.proto.http")
        assert not caplog.records
    finally:
        provider.shutdown()

    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    with caplog.at_level(logging.WARNING, logger="kbctl.telemetry"):
        assert provider_from_environment() is None  # nothing left to export to
    [warning] = [r.getMessage() for r in caplog.records]
    assert "'otlp_proto_grpc' is not installed" in warning and "opentelemetry-exporter-otlp-proto-grpc" in warning


@pytest.mark.parametrize(
    ("protocols", "exporters"),
    [
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, ["OTLPSpanExporter"]),
        (
            {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"},
            ["OTLPSpanExporter"],
        ),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"}, None),
    ],
)
def test_otlp_is_the_exporter_of_the_protocol_variables(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    protocols: dict[str, str],
    exporters: list[str] | None,
) -> None:
    """`otlp` is the exporter of OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else of OTEL_EXPORTER_OTLP_PROTOCOL; a protocol
    OTLP does not have exports nothing, with one warning line naming it."""
    for name in ("OTEL_RESOURCE_ATTRIBUTES", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console,otlp")
    for name, value in protocols.items():
        monkeypatch.setenv(name, value)
    with caplog.at_level(logging.WARNING, logger="kbctl.telemetry"):
        provider: Any = provider_from_environment()
    if exporters is None:
        assert provider is None
        [warning] = [r.getMessage() for r in caplog.records]
        assert "'carrier-pigeon'" in warning and "not exported" in warning
        return
    try:
        names = [type(p.span_exporter).__name__ for p in provider._active_span_processor._span_processors]
        assert names == ["ConsoleSpanExporter", *exporters] and not caplog.records
    finally:
        provider.shutdown()


def test_the_provider_uses_only_the_public_modules_of_opentelemetry() -> None:
    """kbctl.telemetry imports no private module of OpenTelemetry (`opentelemetry.sdk._configuration`): an upgrade
    of the SDK may change those without notice."""
    tree = ast.parse(Path(telemetry.__file__).read_text())
    named = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
    named += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    named += [
        n.args[0].value
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and n.args
        and isinstance(n.args[0], ast.Constant)
        and "import" in ast.unparse(n.func)
    ]
    otel = [str(m) for m in named if str(m).startswith("opentelemetry")]
    assert otel and not [m for m in otel if any(part.startswith("_") for part in m.split("."))]


def exported_spans(log: str) -> list[dict[str, Any]]:
    """The spans a console exporter printed among a server's JSON log lines."""
    spans = []
    for line in log.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if {"name", "context", "parent_id"} <= record.keys():
                spans.append(record)
    return spans


def test_kbctl_serve_exports_its_query_spans(database_url: str, kbctl_home: Path, tmp_path: Path) -> None:
    """A real `kbctl serve` with OTEL_TRACES_EXPORTER=console prints one JSON line per span (and exports them
    when stopped by SIGTERM): a kbctl.query per query, carrying route, caller and OTEL_SERVICE_NAME, its stages
    as children; an exporter that is missing is one warning line, and the server serves all the same."""
    with seeded(database_url, kbctl_home, MANIFEST):
        env = kbctl_env(
            kbctl_home,
            database_url,
            HOME=str(tmp_path),
            OTEL_TRACES_EXPORTER="console,otlp",
            OTEL_SERVICE_NAME="kb-api",
            OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
        )
        with serving(env, tmp_path / "serve.log") as served, served.client() as http:
            query = http.post("/v1/knowledgebases/office/query", json={"question": QUESTION})
            context = http.post("/v1/knowledgebases/office/context", json={"question": QUESTION})
            assert query.status_code == context.status_code == 200
    log = served.log()
    spans = exported_spans(log)
    roots = [s for s in spans if s["name"] == "kbctl.query"]
    assert [r["attributes"]["kbctl.route"] for r in roots] == [
        "/v1/knowledgebases/office/query",
        "/v1/knowledgebases/office/context",
    ]
    by_id = {s["context"]["span_id"]: s for s in spans}
    for root in roots:
        assert root["resource"]["attributes"]["service.name"] == "kb-api"
        if root["parent_id"] is not None:  # FastAPI's own span of the request, when it makes one
            assert by_id[root["parent_id"]]["context"]["trace_id"] == root["context"]["trace_id"]
        assert root["attributes"]["kbctl.knowledge_base"] == "office" and root["attributes"]["kbctl.version"] == 1
        assert root["attributes"]["kbctl.hits"] == len(query.json()["hits"]) and root["attributes"]["kbctl.token"]
        stages = [s for s in spans if s["parent_id"] == root["context"]["span_id"]]
        assert [s["name"] for s in stages] == STAGES
        assert {s["context"]["trace_id"] for s in stages} == {root["context"]["trace_id"]}
    kbctl_spans = [s for s in spans if s["name"].startswith("kbctl.")]
    assert len(kbctl_spans) == len(roots) * (1 + len(STAGES))  # each query once: not by the store and the route
    assert "invoices kept" not in json.dumps(spans)
    warnings = [line for line in log.splitlines() if "otlp_proto_grpc" in line]
    assert len(warnings) == 1 and json.loads(warnings[0])["level"] == "warning"


def otlp_env(kbctl_home: Path, database_url: str, home: Path, collector: Collector) -> dict[str, str]:
    """A kbctl subprocess's environment that asks for OTLP traces by the endpoint alone, exported promptly."""
    env = kbctl_env(
        kbctl_home,
        database_url,
        HOME=str(home),
        OTEL_EXPORTER_OTLP_ENDPOINT=collector.url,
        OTEL_SERVICE_NAME="kb-agents",
        OTEL_BSP_SCHEDULE_DELAY="100",
    )
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"):
        env.pop(name, None)
    return env


def test_kbctl_serve_exports_over_otlp_to_a_collector(database_url: str, kbctl_home: Path, tmp_path: Path) -> None:
    """`kbctl serve` with only OTEL_EXPORTER_OTLP_ENDPOINT set (the otel extra, nothing else installed or
    configured) posts its spans as OTLP/HTTP protobuf to a real receiver: one kbctl.query tree per query, each
    with its route, knowledge base and stages, under OTEL_SERVICE_NAME; and /v1/query one tree per member."""
    with Collector() as collector, seeded(database_url, kbctl_home, MANIFEST):
        env = otlp_env(kbctl_home, database_url, tmp_path, collector)
        with serving(env, tmp_path / "serve.log") as served, served.client() as http:
            assert http.post("/v1/knowledgebases/office/query", json={"question": QUESTION}).status_code == 200
            federated = http.post("/v1/query", json={"question": QUESTION, "knowledgeBases": ["office"]})
            assert federated.status_code == 200
        # stopped by SIGTERM: the spans still buffered were exported before the process ended
    roots = [s for s in collector.spans if s["name"] == "kbctl.query"]
    assert [r["attributes"]["kbctl.route"].string_value for r in roots] == [
        "/v1/knowledgebases/office/query",
        "/v1/query",
    ]
    for root in roots:
        assert root["resource"]["service.name"] == "kb-agents"
        assert root["attributes"]["kbctl.knowledge_base"].string_value == "office"
        stages = [s for s in collector.spans if s["parent_id"] == root["span_id"]]
        assert [s["name"] for s in stages] == STAGES
        assert {s["trace_id"] for s in stages} == {root["trace_id"]}
    assert "invoices kept" not in served.log()


def test_kbctl_mcp_exports_its_tool_queries(database_url: str, kbctl_home: Path, tmp_path: Path) -> None:
    """`kbctl mcp` over stdio exports a kbctl.query tree for a search tool call when the client closes it."""
    with Collector() as collector, seeded(database_url, kbctl_home, MANIFEST):
        env = otlp_env(kbctl_home, database_url, tmp_path, collector)
        params = StdioServerParameters(command=sys.executable, args=["-m", "kbctl", "mcp"], env=env)

        async def search() -> None:
            async with Client(params, read_timeout_seconds=120) as client:
                result = await client.call_tool("search", {"knowledge_base": "office", "question": QUESTION})
                assert not result.is_error

        anyio.run(search)
    [root] = [s for s in collector.spans if s["name"] == "kbctl.query"]
    assert root["resource"]["service.name"] == "kb-agents"
    assert root["attributes"]["kbctl.knowledge_base"].string_value == "office"
    assert [s["name"] for s in collector.spans if s["parent_id"] == root["span_id"]] == STAGES


def test_kbctl_controller_exports_its_reconciles(
    database_url: str, kbctl_home: Path, tmp_path: Path, store: KnowledgeBaseStore
) -> None:
    """`kbctl controller --once` exports a kbctl.reconcile root per knowledge base it reconciled, with a
    kbctl.source child per source, named by knowledge base and source."""
    store.apply(parse_manifests(MANIFEST, "kb.yaml"), wait=False)  # recorded, left to a controller
    with Collector() as collector:
        env = otlp_env(kbctl_home, database_url, tmp_path, collector)
        done = subprocess.run(
            [sys.executable, "-m", "kbctl", "controller", "--once"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
    [reconcile] = [s for s in collector.spans if s["name"] == "kbctl.reconcile"]
    assert reconcile["parent_id"] is None and reconcile["attributes"]["kbctl.knowledge_base"].string_value == "office"
    sources = [s for s in collector.spans if s["parent_id"] == reconcile["span_id"]]
    assert sorted(s["attributes"]["kbctl.source"].string_value for s in sources) == ["invoices", "travel"]
    assert {s["name"] for s in sources} == {"kbctl.source"}
