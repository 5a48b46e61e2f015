"""In one process: a query's OpenTelemetry spans (one per query, a child per stage, with the route and caller
under `server_traces` as `kbctl serve` runs it, once all the same without), and an internal error's 500 carrying
an id that the log also has."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from kbctl import telemetry
from kbctl.client import KnowledgeBaseStore
from kbctl.inputs.redaction import REDACTED, Redactor
from kbctl.manifest import parse_manifests
from kbctl.serve import RetrievalService, Tokens, create_app
from kbctl.serve.tracing import server_traces
from kbctl.userconfig import ServeConfig
from tests.support.manifests import knowledge_base, text_source
from tests.support.otel import send_spans_to

MANIFEST = knowledge_base(
    "office", text_source("invoices", "# Invoices\n\nInvoices are kept for seven years after the financial year.")
)

EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def tracer_provider() -> None:
    send_spans_to(EXPORTER)


def under_server_traces(app: Any, redact: Redactor | None = None) -> Any:
    """`app` with each request within `server_traces` (with the server's redaction `redact`), as `kbctl serve`
    runs it (TestClient runs the app on a thread of its own, which does not inherit the context of the test's)."""

    async def traced(scope: Any, receive: Any, send: Any) -> None:
        with server_traces(redact=redact):
            await app(scope, receive, send)

    return traced


@pytest.fixture(params=[True, False], ids=["server_traces", "create_app_alone"])
def client(request: pytest.FixtureRequest, store: KnowledgeBaseStore) -> Iterator[tuple[TestClient, RetrievalService]]:
    """The app on a fresh store, run as `kbctl serve` runs it, and as an application that builds it with create_app
    and no more."""
    store.apply(parse_manifests(MANIFEST, "kb.yaml"))
    service = RetrievalService(store.settings, pool_size=2)
    app = create_app(service, Tokens(ServeConfig(), {}))
    try:
        with TestClient(under_server_traces(app) if request.param else app, raise_server_exceptions=False) as c:
            yield c, service
    finally:
        service.close()


def test_a_query_is_one_span_with_a_child_per_stage(client: tuple[TestClient, RetrievalService]) -> None:
    EXPORTER.clear()
    c, _ = client
    response = c.post("/v1/knowledgebases/office/query", json={"question": "how long are invoices kept?"})
    assert response.status_code == 200
    spans = EXPORTER.get_finished_spans()
    root = [s for s in spans if s.name == "kbctl.query"]
    assert len(root) == 1
    attributes = root[0].attributes or {}
    assert attributes["kbctl.knowledge_base"] == "office" and attributes["kbctl.version"] == 1
    assert attributes["kbctl.hits"] == len(response.json()["hits"]) >= 1
    assert attributes["kbctl.best_score"] == response.json()["bestScore"]
    children = [s for s in spans if s.parent is not None and s.parent.span_id == root[0].context.span_id]
    names = [s.name for s in children]
    assert names == [
        "kbctl.embed_question",
        "kbctl.vector",
        "kbctl.keyword",
        "kbctl.fuse",
        "kbctl.threshold",
        "kbctl.select",
    ]
    assert all(root[0].start_time <= s.start_time <= s.end_time <= root[0].end_time for s in children)


def test_an_internal_error_is_a_500_with_an_id_in_the_log(
    client: tuple[TestClient, RetrievalService], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    c, service = client

    def broken(*args: object) -> None:  # a fault injected below the route: a bug, not bad input
        raise RuntimeError("secret internals: postgresql://kb:hunter2@db/kb")

    monkeypatch.setattr(service, "query", broken)
    with caplog.at_level(logging.ERROR, logger="kbctl.serve"):
        response = c.post("/v1/knowledgebases/office/query", json={"question": "x"})
    assert response.status_code == 500
    assert response.headers["x-kbctl-error"] == "internal" and response.headers["x-request-id"]  # logged and counted
    body = response.json()
    assert body["type"] == "/problems/internal" and "hunter2" not in response.text and "internals" not in response.text
    error_id = body["detail"].split("id ")[1].split(",")[0]
    logged = [r for r in caplog.records if error_id in r.getMessage()]
    assert logged and "hunter2" not in logged[0].getMessage()


def test_a_context_request_is_traced_too(
    client: tuple[TestClient, RetrievalService], request: pytest.FixtureRequest
) -> None:
    """A /context request is one kbctl.query tree too: with its route and caller under `server_traces`; made by
    the store, without them, in an app built with create_app alone."""
    EXPORTER.clear()
    c, _ = client
    response = c.post("/v1/knowledgebases/office/context", json={"question": "how long are invoices kept?"})
    assert response.status_code == 200 and response.json()["found"] is True
    roots = [s for s in EXPORTER.get_finished_spans() if s.name == "kbctl.query"]
    assert len(roots) == 1
    attributes = roots[0].attributes or {}
    if request.node.callspec.params["client"]:  # under server_traces
        assert attributes["kbctl.route"] == "/v1/knowledgebases/office/context"
        assert attributes["kbctl.token"] == "anonymous"
    else:
        assert "kbctl.route" not in attributes and attributes["kbctl.knowledge_base"] == "office"


def test_a_federated_query_traces_each_member(client: tuple[TestClient, RetrievalService]) -> None:
    """/v1/query (one question to several knowledge bases) records one kbctl.query tree per member asked, each
    carrying the route and the caller's token name, as a single knowledge base's query does."""
    EXPORTER.clear()
    c, _ = client
    response = c.post("/v1/query", json={"question": "how long are invoices kept?", "knowledgeBases": ["office"]})
    assert response.status_code == 200 and response.json()["hits"]
    roots = [s for s in EXPORTER.get_finished_spans() if s.name == "kbctl.query"]
    assert len(roots) == 1
    attributes = roots[0].attributes or {}
    assert attributes["kbctl.knowledge_base"] == "office"
    assert attributes["kbctl.route"] == "/v1/query" and attributes["kbctl.token"] == "anonymous"
    children = [s for s in EXPORTER.get_finished_spans() if s.parent and s.parent.span_id == roots[0].context.span_id]
    assert {s.name for s in children} >= {"kbctl.embed_question", "kbctl.select"}


def test_the_servers_redaction_is_the_one_its_spans_use(
    store: KnowledgeBaseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With content asked for, a question's span carries it through the redaction the server hands
    `server_traces` (its configured patterns with the defaults), by a knowledge base's route and by /v1/query."""
    monkeypatch.setenv(telemetry.CONTENT_ENV, "true")
    store.apply(parse_manifests(MANIFEST, "kb.yaml"))
    service = RetrievalService(store.settings, pool_size=2)
    app = under_server_traces(create_app(service, Tokens(ServeConfig(), {})), Redactor([r"\bcase-[0-9]{3,}\b"]))
    question = "how long are invoices kept for case-20417? ask ops@example.com"
    try:
        with TestClient(app) as c:
            EXPORTER.clear()
            one = c.post("/v1/knowledgebases/office/query", json={"question": question})
            many = c.post("/v1/query", json={"question": question, "knowledgeBases": ["office"]})
            assert one.status_code == many.status_code == 200
    finally:
        service.close()
    roots = [dict(s.attributes or {}) for s in EXPORTER.get_finished_spans() if s.name == "kbctl.query"]
    assert [r["kbctl.route"] for r in roots] == ["/v1/knowledgebases/office/query", "/v1/query"]
    for attributes in roots:
        assert attributes["input.value"] == f"how long are invoices kept for {REDACTED}? ask {REDACTED}"
        assert attributes["gen_ai.retrieval.query.text"] == attributes["input.value"]
        assert attributes["retrieval.documents.0.document.id"] == "office/invoices#0"
