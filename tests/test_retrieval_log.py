"""The retrieval log of `kbctl serve` (serve.retrievalLog): runs served over HTTP and MCP recorded with their trace,
caller, version and latency; questions redacted; off by default; bounded in rows, days and bytes; kept across a
restart; and read back only within the viewer's scope and as its reader."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from fastapi.testclient import TestClient
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from typer.testing import CliRunner

from kbctl import KnowledgeBaseStore, NewRetrieval, Reader, Retrieval
from kbctl.cli import app as cli_app
from kbctl.config import Settings
from kbctl.errors import InputError
from kbctl.manifest import parse_manifests
from kbctl.serve import Principal, RetrievalService, Tokens, create_app
from kbctl.serve.retrievals import RetrievalLog
from kbctl.userconfig import RetrievalLogConfig, ServeConfig
from tests.support.manifests import knowledge_base, text_source
from tests.support.serveproc import serving_with_config

SUPPORT_TOKEN = "retrieval-log-support-0123456789"
HANDBOOK = knowledge_base(
    "handbook",
    text_source(
        "refunds",
        "# Refunds\n\nClients may ask for a refund within 30 days of the invoice date. Refunds are paid back "
        "within ten working days of approval.",
    ),
)
PAYROLL = knowledge_base(
    "payroll", text_source("pay-dates", "# Pay dates\n\nSalaries are paid on the 25th of each month.")
)
CONFIG = """
serve:
  tokens:
    support: {tokenEnv: TEST_RL_SUPPORT, knowledgeBases: [handbook]}
  retrievalLog:
    enabled: true
    redact: ['ticket-[0-9]+']
"""
# The access example of tests/test_access.py: salaries for hr-managers only.
HR = knowledge_base(
    "hr",
    text_source("handbook", "Every employee has twenty-five days of paid holiday per calendar year."),
    text_source(
        "salaries",
        "Salary band E4 pays between 81,000 and 97,000 euros a year; band E5 starts at 98,000 euros.",
        access={"groups": ["hr-managers"]},
    ),
)
EVERYONE = Principal(name="auditor", everything=True)  # every knowledge base, no group


@pytest.fixture
def logged_store(store: KnowledgeBaseStore) -> KnowledgeBaseStore:
    """The test store with handbook and payroll, and an empty retrieval log."""
    store.db.connection.execute("TRUNCATE kb_retrievals RESTART IDENTITY")
    store.apply(parse_manifests(f"{HANDBOOK}\n---\n{PAYROLL}", "kb.yaml"))
    return store


def runs_of(store: KnowledgeBaseStore, count: int, **filters: Any) -> list[Retrieval]:
    """The newest runs, once at least `count` are recorded (the server writes them in the background)."""
    deadline = time.monotonic() + 30
    while True:
        found = store.retrievals(**filters)
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


@pytest.fixture
def in_process(logged_store: KnowledgeBaseStore) -> Iterator[tuple[TestClient, RetrievalService, RetrievalLog]]:
    """The app in this process, no tokens, with the retrieval log on."""
    service = RetrievalService(logged_store.settings, pool_size=2)
    log = RetrievalLog(service.store, RetrievalLogConfig(enabled=True))
    try:
        with TestClient(create_app(service, Tokens(ServeConfig(), {}), retrieval_log=log)) as client:
            yield client, service, log
    finally:
        log.close()
        service.close()


# ---------------------------------------------------------------- recorded, over HTTP and MCP, across a restart


def test_http_and_mcp_runs_are_recorded_with_trace_caller_version_and_latency(
    logged_store: KnowledgeBaseStore, database_url: str, kbctl_home: Path, tmp_path: Path
) -> None:
    question = "refund window? write to ann@example.com about ticket-48213"
    with serving_with_config(kbctl_home, database_url, tmp_path, CONFIG, TEST_RL_SUPPORT=SUPPORT_TOKEN) as served:
        with served.client(SUPPORT_TOKEN) as c:
            response = c.post("/v1/knowledgebases/handbook/query", json={"question": question})
            missing = c.post("/v1/knowledgebases/payroll/query", json={"question": "when are salaries paid?"})

        async def over_mcp() -> str:
            async with (
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {SUPPORT_TOKEN}"}, timeout=60) as http,
                Client(streamable_http_client(served.url + "/mcp", http_client=http)) as client,
            ):
                found = await client.call_tool(
                    "search", {"knowledge_base": "handbook", "question": "how long for a refund?"}
                )
                return "\n".join(getattr(block, "text", "") for block in found.content)

        searched = json.loads(anyio.run(over_mcp))
    # The caller gets no trace it did not ask for; a scope's 404 reads as always.
    assert response.status_code == 200 and response.json()["trace"] is None and response.json()["hits"]
    assert missing.status_code == 404 and searched["found"] is True
    assert SUPPORT_TOKEN not in served.log()

    # A new service over the same database (the server has stopped) lists what it recorded, newest first.
    service = RetrievalService(logged_store.settings, pool_size=2)
    try:
        runs = service.retrievals(EVERYONE)
        detail = {r.channel + r.status: service.retrieval(EVERYONE, r.id) for r in runs}
    finally:
        service.close()
    assert [(r.channel, r.operation, r.status) for r in runs] == [
        ("mcp", "query", "ok"),
        ("http", "query", "not-found"),
        ("http", "query", "ok"),
    ]
    http = detail["httpok"]
    assert http is not None and http.result is not None
    assert http.caller == "support" and http.knowledge_bases == ["handbook"] and http.version == 1
    assert http.latency_ms > 0 and http.hits == len(response.json()["hits"]) and not http.nothing_relevant
    assert [s["stage"] for s in http.result["trace"]][:2] == ["embed question", "vector"]
    assert any(s["entries"] for s in http.result["trace"])
    assert http.result["hits"][0]["text"] == response.json()["hits"][0]["text"]
    # Redacted by default (an e-mail address) and by the configured pattern, in the result too.
    assert http.question == "refund window? write to [redacted] about [redacted]"
    assert http.result["question"] == http.question and "example.com" not in json.dumps(http.result)
    failed = detail["httpnot-found"]
    assert failed is not None and failed.result is None and failed.knowledge_bases == ["payroll"]
    mcp = detail["mcpok"]
    assert mcp is not None and mcp.result is not None and mcp.caller == "support" and mcp.result["trace"]
    # Filters: by knowledge base, caller, nothing relevant, and pages by id.
    assert [r.id for r in logged_store.retrievals(knowledge_base="payroll")] == [failed.id]
    assert logged_store.retrievals(caller="nobody") == []
    assert logged_store.retrievals(nothing_relevant=True) == []
    assert [r.id for r in logged_store.retrievals(limit=1, before=runs[0].id)] == [runs[1].id]
    # ... and by time: from `since` (included) until `until` (excluded).
    first = min(r.at for r in runs)
    assert logged_store.retrievals(until=first) == []
    after_first = logged_store.retrievals(until=first + timedelta(microseconds=1))
    assert [r.id for r in after_first] == [r.id for r in runs if r.at == first] != []
    assert [r.id for r in logged_store.retrievals(since=runs[0].at)] == [r.id for r in runs if r.at >= runs[0].at]
    assert len(logged_store.retrievals(since=first, caller="support", knowledge_base="handbook")) == 2
    with pytest.raises(ValueError, match="limit"):
        logged_store.retrievals(limit=501)


def test_off_by_default(logged_store: KnowledgeBaseStore) -> None:
    assert ServeConfig().retrieval_log.enabled is False
    service = RetrievalService(logged_store.settings, pool_size=2)
    try:
        assert RetrievalLog.configured(service.store, ServeConfig().retrieval_log) is None
        assert service.retrieval_log_enabled is False
        with TestClient(create_app(service, Tokens(ServeConfig(), {}))) as c:
            answered = c.post("/v1/knowledgebases/handbook/query", json={"question": "refund window?"})
        assert answered.status_code == 200
    finally:
        service.close()
    count = logged_store.db.connection.execute("SELECT count(*) FROM kb_retrievals").fetchone()
    assert count is not None and count[0] == 0


def test_context_federated_and_explain_are_recorded_as_served(
    in_process: tuple[TestClient, RetrievalService, RetrievalLog],
) -> None:
    c, service, log = in_process
    explained = c.post("/v1/knowledgebases/handbook/query", json={"question": "refund window?", "explain": True})
    context = c.post("/v1/knowledgebases/handbook/context", json={"question": "refund window?"})
    fused = c.post("/v1/query", json={"question": "when are salaries paid?", "knowledgeBases": ["handbook", "payroll"]})
    assert explained.json()["trace"] and context.status_code == 200 and fused.status_code == 200
    assert log.flush()
    runs = service.retrievals(EVERYONE)
    assert [(r.operation, r.caller) for r in runs] == [
        ("federated", "anonymous"),
        ("context", "anonymous"),
        ("query", "anonymous"),
    ]
    federated = service.retrieval(EVERYONE, runs[0].id)
    assert federated is not None and federated.result is not None and federated.version is None
    assert federated.knowledge_bases == ["handbook", "payroll"] and federated.hits == len(fused.json()["hits"])
    assert {m["knowledgeBase"] for m in federated.result["trace"]} == {"handbook", "payroll"}
    assert all(m["stages"] for m in federated.result["trace"])
    assert log.dropped == 0 and log.failed == 0 and log.written == 3


# ---------------------------------------------------------------- bounded


def _new(question: str, result: dict[str, Any] | None = None) -> NewRetrieval:
    return NewRetrieval(
        channel="http",
        operation="query",
        knowledge_bases=["handbook"],
        version=1,
        caller="support",
        question=question,
        nothing_relevant=False,
        hits=len((result or {}).get("hits", [])),
        best_similarity=0.5,
        latency_ms=1.0,
        status="ok",
        result=result,
    )


def test_runs_are_kept_within_days_and_rows(logged_store: KnowledgeBaseStore) -> None:
    logged_store.record_retrievals([_new(f"question {i}") for i in range(6)], max_result_bytes=1024)
    logged_store.db.connection.execute("UPDATE kb_retrievals SET at = now() - interval '9 days' WHERE id <= 2")
    assert logged_store.prune_retrievals(days=7, max_rows=10) == 2
    assert logged_store.prune_retrievals(days=7, max_rows=3) == 1
    assert [r.question for r in logged_store.retrievals()] == ["question 5", "question 4", "question 3"]
    assert logged_store.prune_retrievals(days=7, max_rows=3) == 0


def test_a_result_is_cut_to_the_bytes_bound_and_flagged(logged_store: KnowledgeBaseStore) -> None:
    result = logged_store.query("handbook", "refund window?", explain=True).model_dump(mode="json", by_alias=True)
    result["hits"][0]["text"] *= 40
    whole = len(json.dumps(result, separators=(",", ":")).encode())
    # Texts shortened first (the trace is kept while that suffices), then trace entries dropped.
    logged_store.record_retrievals([_new("kept", result)], max_result_bytes=whole + 10)
    logged_store.record_retrievals([_new("texts", result)], max_result_bytes=whole // 2)
    logged_store.record_retrievals([_new("entries", result)], max_result_bytes=1024)
    kept, texts, entries = (logged_store.retrieval(r.id) for r in reversed(logged_store.retrievals()))
    assert not kept.result_cut and kept.result == result
    assert texts.result_cut and texts.result is not None
    assert len(json.dumps(texts.result, separators=(",", ":")).encode()) <= whole // 2
    assert len(texts.result["hits"][0]["text"]) < len(result["hits"][0]["text"])
    assert [s["entries"] for s in texts.result["trace"]] == [s["entries"] for s in result["trace"]]
    assert entries.result_cut and entries.result is not None
    assert len(json.dumps(entries.result, separators=(",", ":")).encode()) <= 1024
    kept_entries = sum(len(s["entries"]) for s in entries.result["trace"])
    assert kept_entries < sum(len(s["entries"]) for s in result["trace"]) and entries.result["hits"]


def test_a_full_queue_drops_and_counts_instead_of_waiting(logged_store: KnowledgeBaseStore) -> None:
    log = RetrievalLog(logged_store, RetrievalLogConfig(enabled=True), queue_size=1, prune_seconds=3600)
    try:
        started = time.perf_counter()
        for _ in range(200):
            log.record("http", "query", EVERYONE, ["handbook"], "refund window?", started)
        assert log.flush()
        assert log.dropped > 0 and log.written + log.dropped == 200
    finally:
        log.close()


# ---------------------------------------------------------------- scoped reading


def test_a_token_of_one_knowledge_base_lists_no_run_of_another(
    in_process: tuple[TestClient, RetrievalService, RetrievalLog],
) -> None:
    c, service, log = in_process
    for name in ("handbook", "payroll"):
        assert c.post(f"/v1/knowledgebases/{name}/query", json={"question": "when?"}).status_code == 200
    fused = c.post("/v1/query", json={"question": "when?", "knowledgeBases": ["handbook", "payroll"]})
    assert fused.status_code == 200 and log.flush()
    support = Principal(name="support", names=frozenset({"handbook"}))
    everything = service.retrievals(EVERYONE)
    seen = service.retrievals(support)
    assert len(everything) == 3 and [r.knowledge_bases for r in seen] == [["handbook"]]
    assert all(service.retrieval(support, r.id) is None for r in everything if r.id != seen[0].id)
    assert service.retrievals(support, knowledge_base="payroll") == []


def test_a_reader_without_the_group_does_not_see_restricted_hits(
    logged_store: KnowledgeBaseStore,
) -> None:
    assert logged_store.apply(parse_manifests(HR, "hr.yaml"), wait=True).exit_code() == 0
    config = ServeConfig.model_validate(
        {"tokens": {"manager": {"tokenEnv": "T_MGR", "knowledgeBases": ["hr"], "groups": ["hr-managers"]}}}
    )
    token = "manager-token-0123456789abcdef"
    service = RetrievalService(logged_store.settings, pool_size=2)
    log = RetrievalLog(service.store, RetrievalLogConfig(enabled=True))
    try:
        with TestClient(create_app(service, Tokens(config, {"T_MGR": token}), retrieval_log=log)) as c:
            body = {"question": "what does salary band E4 pay?", "threshold": -1.0, "topK": 10}
            served = c.post("/v1/knowledgebases/hr/query", json=body, headers={"Authorization": f"Bearer {token}"})
        assert served.status_code == 200 and "salaries" in {h["source"] for h in served.json()["hits"]}
        run_id = service.retrievals(EVERYONE)[0].id
        manager = Principal(name="m", everything=True, reader=Reader.of(["hr-managers"]))
        as_manager = service.retrieval(manager, run_id)
        as_other = service.retrieval(EVERYONE, run_id)
        listed = service.retrievals(EVERYONE)[0]
    finally:
        log.close()
        service.close()
    assert as_manager is not None and as_manager.result is not None and as_manager.hidden_hits == 0
    assert "salaries" in {h["source"] for h in as_manager.result["hits"]}
    assert as_other is not None and as_other.result is not None
    assert {h["source"] for h in as_other.result["hits"]} == {"handbook"}
    assert as_other.hidden_hits >= 1 and as_other.hits == len(as_other.result["hits"])
    entries = [e["source"] for s in as_other.result["trace"] for e in s["entries"]]
    assert entries and "salaries" not in entries
    assert as_other.best_similarity == max(h["similarity"] for h in as_other.result["hits"])
    assert listed.hidden_hits == as_other.hidden_hits and listed.result is None
    # The owner of the store (no reader) sees everything; once the version is gone nothing can be checked: no hit
    # is shown to a reader, not even one of its own groups.
    assert logged_store.retrieval(run_id).hidden_hits == 0
    logged_store.delete("hr")
    gone = logged_store.retrieval(run_id, reader=Reader.of(["hr-managers"]))
    assert gone.result is not None and gone.result["hits"] == [] and gone.best_similarity is None
    assert not any(s["entries"] for s in gone.result["trace"])


# ---------------------------------------------------------------- configuration


def test_a_bad_redact_pattern_is_one_line_naming_the_file_and_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("serve:\n  retrievalLog:\n    enabled: true\n    redact: ['ticket-[0-9]+', 'open(']\n")
    monkeypatch.setenv("KBCTL_CONFIG", str(path))
    with pytest.raises(InputError) as raised:
        Settings.from_env(home=tmp_path)
    [problem] = [str(p) for p in raised.value.problems]
    assert problem.startswith(f"{path}:4: serve.retrievalLog.redact: pattern 2: not a regular expression")
    result = CliRunner().invoke(cli_app, ["config", "view"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output.strip().splitlines() == [problem]
    path.write_text("serve:\n  retrievalLog: {days: 0, maxRowBytes: 100}\n")
    with pytest.raises(InputError) as raised:
        Settings.from_env(home=tmp_path)
    assert {p.field for p in raised.value.problems} == {"serve.retrievalLog.days", "serve.retrievalLog.maxRowBytes"}
