"""A query's span as other tracing consoles read it: OpenInference's RETRIEVER span and OpenTelemetry's GenAI
retrieval span, on the Python API (no content by default; with KBCTL_TRACE_CONTENT, the question redacted and the
texts bounded) and on a real `kbctl serve` exporting over OTLP/HTTP to a loopback receiver, where a caller's span
describes only the hits that caller's groups may read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from kbctl import telemetry
from kbctl.client import KnowledgeBaseStore
from kbctl.defaults import TRACE_CONTENT_CHARS, TRACE_DOCUMENT_CHARS, TRACE_DOCUMENTS
from kbctl.inputs.access import Reader
from kbctl.inputs.redaction import REDACTED
from kbctl.manifest import parse_manifests
from kbctl.query.results import QueryResult
from tests.support.manifests import knowledge_base, text_source
from tests.support.otel import Collector, plain, send_spans_to
from tests.support.serveproc import kbctl_env, seeded, serving

EMAIL = "jane.doe@example.com"
QUESTION = f"How many days of annual leave do staff get? Reply to {EMAIL}"
# One long section (a single chunk of ~2,600 characters under maxChars 4000), longer than a span carries.
LEAVE = "# Annual leave\n\n" + " ".join(
    f"Staff in their year {n} of service get {20 + n} days of annual leave, booked with their manager."
    for n in range(1, 31)
)
PAY_DATES = "# Pay dates\n\nSalaries are paid on the twenty-fifth of each month, or the working day before it."
BANDS = "# Salary bands\n\nSalary band E4 pays between 61,000 and 68,000 euros; annual leave is as for all staff."
MANIFEST = knowledge_base(
    "hr",
    text_source("leave", LEAVE, access={"groups": ["employees"]}),
    text_source("pay-dates", PAY_DATES, access={"groups": ["employees"]}),
    text_source("salary-bands", BANDS, access={"groups": ["hr-managers"]}),
    chunking={"maxChars": 4000, "overlapChars": 150},
)
EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def tracer_provider() -> None:
    send_spans_to(EXPORTER)


def documents(attributes: dict[str, Any]) -> list[dict[str, Any]]:
    """OpenInference's flattened retrieval.documents.{i}.document.* of a span, in order."""
    found: list[dict[str, Any]] = []
    while f"retrieval.documents.{len(found)}.document.id" in attributes:
        prefix = f"retrieval.documents.{len(found)}.document"
        found.append(
            {
                "id": attributes[f"{prefix}.id"],
                "score": attributes[f"{prefix}.score"],
                "metadata": json.loads(attributes[f"{prefix}.metadata"]),
                "content": attributes.get(f"{prefix}.content"),
            }
        )
    return found


def the_query_span(result: QueryResult) -> dict[str, Any]:
    [root] = [s for s in EXPORTER.get_finished_spans() if s.name == "kbctl.query"]
    assert (root.attributes or {})["kbctl.hits"] == len(result.hits)
    return dict(root.attributes or {})


def test_a_query_span_is_a_retriever_of_both_conventions_without_content(
    store: KnowledgeBaseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """By default the span names its hits by id, score and place (both conventions, the same documents), and
    carries neither the question nor a word of a text, a title or an origin."""
    monkeypatch.delenv(telemetry.CONTENT_ENV, raising=False)
    store.apply(parse_manifests(MANIFEST, "kb.yaml"))
    EXPORTER.clear()
    result = store.query("hr", QUESTION, reader=Reader.of(["employees"]), threshold=-1.0)
    attributes = the_query_span(result)
    assert attributes["openinference.span.kind"] == "RETRIEVER"
    assert attributes["gen_ai.operation.name"] == "retrieval" and attributes["gen_ai.data_source.id"] == "hr"
    assert attributes["gen_ai.request.model"] == result.model and attributes["gen_ai.request.top_k"] == result.top_k
    described = documents(attributes)
    assert [d["id"] for d in described] == [f"hr/{h.source}#{h.position}" for h in result.hits]
    assert {h.source for h in result.hits} == {"leave", "pay-dates"}  # the caller's groups read no salary band
    assert [d["score"] for d in described] == pytest.approx([h.score for h in result.hits])
    assert all(d["content"] is None for d in described)
    assert [set(d["metadata"]) for d in described] == [
        {"knowledgeBase", "version", "source", "rank", "similarity"}
    ] * len(described)
    assert [d["metadata"]["rank"] for d in described] == [h.rank for h in result.hits]
    gen_ai = json.loads(attributes["gen_ai.retrieval.documents"])
    assert [(d["id"], d["score"]) for d in gen_ai] == [(d["id"], d["score"]) for d in described]
    assert "input.value" not in attributes and "gen_ai.retrieval.query.text" not in attributes
    text = json.dumps(attributes)
    assert "annual leave" not in text.lower() and EMAIL not in text and "Pay dates" not in text


def test_with_content_the_question_is_redacted_and_the_texts_bounded(
    store: KnowledgeBaseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KBCTL_TRACE_CONTENT=true adds the question, through the default redaction, and the hits' texts, titles and
    headings: at most TRACE_DOCUMENTS hits (the first by rank), each text cut at TRACE_DOCUMENT_CHARS and all of
    them at TRACE_CONTENT_CHARS, a cut one flagged (bounds made small here to see them bind)."""
    monkeypatch.setenv(telemetry.CONTENT_ENV, "true")
    monkeypatch.setattr(telemetry, "TRACE_DOCUMENTS", 2)
    monkeypatch.setattr(telemetry, "TRACE_DOCUMENT_CHARS", 50)
    monkeypatch.setattr(telemetry, "TRACE_CONTENT_CHARS", 70)
    store.apply(parse_manifests(MANIFEST, "kb.yaml"))
    EXPORTER.clear()
    result = store.query("hr", QUESTION, reader=Reader.of(["employees", "hr-managers"]), threshold=-1.0)
    assert len(result.hits) == 3
    attributes = the_query_span(result)
    assert attributes["input.value"] == attributes["gen_ai.retrieval.query.text"]
    assert EMAIL not in attributes["input.value"] and REDACTED in attributes["input.value"]
    assert attributes["input.value"].startswith("How many days of annual leave")
    described = documents(attributes)
    assert [d["id"] for d in described] == [f"hr/{h.source}#{h.position}" for h in result.hits[:2]]
    assert len(json.loads(attributes["gen_ai.retrieval.documents"])) == 2
    contents = [d["content"] for d in described]
    assert [len(c) for c in contents] == [50, 20]  # the first whole to its bound, the second to what is left
    assert all(h.text.startswith(c) and len(h.text) > len(c) for h, c in zip(result.hits, contents, strict=False))
    assert all(d["metadata"]["truncated"] is True for d in described)
    first = described[0]["metadata"]
    assert first["origin"] == "inline" and first["headingPath"] == result.hits[0].heading_path


def test_the_default_bounds_hold_a_span_small() -> None:
    """The bounds are of a span a console takes: a chunk of the default size whole, the default topK's hits."""
    assert TRACE_DOCUMENTS == 10 and TRACE_DOCUMENT_CHARS == 1_200 and TRACE_CONTENT_CHARS <= 10_000


def otlp_serve_env(home: Path, database_url: str, folder: Path, collector: Collector) -> dict[str, str]:
    """`kbctl serve` exporting OTLP/HTTP to `collector` (the endpoint alone), promptly, with content asked for and
    tokens of two groups' callers in its configuration."""
    config = folder / "config.yaml"
    config.write_text(
        json.dumps(
            {
                "serve": {
                    "retrievalLog": {"redact": ["Reply to"]},  # the server's own pattern redacts its spans too
                    "tokens": {
                        "staff": {"tokenEnv": "TEST_STAFF_TOKEN", "knowledgeBases": ["hr"], "groups": ["employees"]},
                        "hr-manager": {
                            "tokenEnv": "TEST_MANAGER_TOKEN",
                            "knowledgeBases": ["hr"],
                            "groups": ["employees", "hr-managers"],
                        },
                    },
                }
            }
        )
    )
    env = kbctl_env(
        home,
        database_url,
        HOME=str(folder),
        KBCTL_CONFIG=str(config),
        KBCTL_TRACE_CONTENT="true",
        TEST_STAFF_TOKEN="staff-token-0123456789abcdef",
        TEST_MANAGER_TOKEN="manager-token-0123456789abcdef",
        OTEL_EXPORTER_OTLP_ENDPOINT=collector.url,
        OTEL_SERVICE_NAME="kb-hr",
        OTEL_BSP_SCHEDULE_DELAY="100",
    )
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"):
        env.pop(name, None)
    return env


def test_kbctl_serve_exports_a_callers_own_hits_redacted_and_bounded(
    database_url: str, kbctl_home: Path, tmp_path: Path
) -> None:
    """A real `kbctl serve` posts each query's span to a loopback OTLP receiver with both conventions' retrieval
    attributes: for a caller whose groups read the handbook only, the documents are that caller's hits (never the
    salary bands, which a manager's query of the same question does get), by a single knowledge base's route and
    by /v1/query; the question's e-mail address is redacted; each text is cut at TRACE_DOCUMENT_CHARS."""
    body = {"question": QUESTION, "threshold": -1.0}
    with Collector() as collector, seeded(database_url, kbctl_home, MANIFEST):
        env = otlp_serve_env(kbctl_home, database_url, tmp_path, collector)
        with serving(env, tmp_path / "serve.log") as served:
            with served.client("staff-token-0123456789abcdef") as staff:
                own = staff.post("/v1/knowledgebases/hr/query", json=body)
                federated = staff.post("/v1/query", json={**body, "knowledgeBases": ["hr"]})
            with served.client("manager-token-0123456789abcdef") as manager:
                managers = manager.post("/v1/knowledgebases/hr/query", json=body)
            assert own.status_code == federated.status_code == managers.status_code == 200
    assert {h["source"] for h in own.json()["hits"]} == {"leave", "pay-dates"}
    assert "salary-bands" in {h["source"] for h in managers.json()["hits"]}

    roots = [s for s in collector.spans if s["name"] == "kbctl.query"]
    spans = [{k: plain(v) for k, v in root["attributes"].items()} for root in roots]
    assert [(s["kbctl.token"], s["kbctl.route"]) for s in spans] == [
        ("staff", "/v1/knowledgebases/hr/query"),
        ("staff", "/v1/query"),
        ("hr-manager", "/v1/knowledgebases/hr/query"),
    ]
    for attributes in spans:
        assert attributes["openinference.span.kind"] == "RETRIEVER"
        assert attributes["gen_ai.operation.name"] == "retrieval" and attributes["gen_ai.data_source.id"] == "hr"
        assert attributes["input.value"] == attributes["gen_ai.retrieval.query.text"]
        assert EMAIL not in attributes["input.value"] and REDACTED in attributes["input.value"]
        assert "Reply to" not in attributes["input.value"]
        described = documents(attributes)
        gen_ai = json.loads(attributes["gen_ai.retrieval.documents"])
        assert [d["id"] for d in gen_ai] == [d["id"] for d in described] and described
        assert all(len(d["content"]) <= TRACE_DOCUMENT_CHARS for d in described)
        assert sum(len(d["content"]) for d in described) <= TRACE_CONTENT_CHARS
        leave = next(d for d in described if d["metadata"]["source"] == "leave")
        assert len(leave["content"]) == TRACE_DOCUMENT_CHARS and leave["metadata"]["truncated"] is True
        assert leave["metadata"]["headingPath"] == ["Annual leave"] and leave["metadata"]["origin"] == "inline"

    for attributes, response in zip(spans[:2], (own, federated), strict=True):
        described = documents(attributes)
        assert [d["metadata"]["source"] for d in described] == [h["source"] for h in response.json()["hits"]]
        assert "salary-bands" not in json.dumps(attributes) and "Salary band" not in json.dumps(attributes)
    managers_sources = [d["metadata"]["source"] for d in documents(spans[2])]
    assert managers_sources == [h["source"] for h in managers.json()["hits"]] and "salary-bands" in managers_sources
    everything = json.dumps([{k: str(plain(v)) for k, v in s["attributes"].items()} for s in collector.spans])
    assert EMAIL not in everything
