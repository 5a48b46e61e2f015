"""`POST /v1/knowledgebases/{name}/ask` and the MCP `ask` tool under a real `kbctl serve`, answering through a
real OpenAI-compatible chat server on 127.0.0.1, behind scoped tokens."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support.chatserver import ChatServer, serve_chat
from tests.support.manifests import knowledge_base, text_source
from tests.support.serveproc import Served, seeded, serving_with_config

TOKEN = "ask-test-token-0123456789abcdef"
OTHER = "ask-other-token-0123456789abcdef"
HANDBOOK = knowledge_base(
    "handbook",
    text_source(
        "refunds",
        "# Refunds\n\nClients may ask for a refund within 30 days of the invoice date. Refunds are paid back "
        "within ten working days of approval.",
    ),
    description="How the support team handles refunds.",
    answer={"model": "stand-in/chat-test-v1"},
)
PAYROLL = knowledge_base(
    "payroll",
    text_source("pay-dates", "# Pay dates\n\nSalaries are paid on the 25th of each month by bank transfer."),
    description="Payroll: pay dates.",
)  # no spec.answer: the configuration's chat.defaultModel answers


@pytest.fixture(scope="module")
def chat() -> Iterator[ChatServer]:
    with serve_chat() as server:
        yield server


@pytest.fixture(scope="module")
def server(
    chat: ChatServer, database_url: str, kbctl_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    config = {
        "chat": {
            "providers": {"stand-in": {"baseURL": chat.url, "retries": 1}},
            "defaultModel": "stand-in/chat-test-v1",
        },
        "serve": {
            "tokens": {
                "agent": {"tokenEnv": "TEST_ASK_TOKEN", "knowledgeBases": ["handbook", "payroll"]},
                "payroll-only": {"tokenEnv": "TEST_ASK_OTHER", "knowledgeBases": ["payroll"]},
            }
        },
    }
    with seeded(database_url, kbctl_home, HANDBOOK, PAYROLL):
        folder = tmp_path_factory.mktemp("ask")
        with serving_with_config(
            kbctl_home, database_url, folder, json.dumps(config), TEST_ASK_TOKEN=TOKEN, TEST_ASK_OTHER=OTHER
        ) as served:
            yield served


def test_ask_answers_with_citations_in_camel_case(server: Served, chat: ChatServer) -> None:
    chat.reset()
    with server.client(TOKEN) as http:
        response = http.post(
            "/v1/knowledgebases/handbook/ask", json={"question": "How long can clients ask for a refund?"}
        )
    assert response.status_code == 200, response.text
    data = response.json()
    assert data["reason"] == "answered" and "30 days" in data["answer"] and data["model"] == "stand-in/chat-test-v1"
    [citation] = data["citations"]
    assert citation["source"] == "refunds" and citation["headingPath"] == ["Refunds"]
    assert data["invalidCitations"] == [] and data["retrieval"]["hits"][0]["source"] == "refunds"
    assert data["timings"]["retrieveMs"] > 0 and len(chat.completions) == 1


def test_nothing_relevant_is_answered_without_a_model(server: Served, chat: ChatServer) -> None:
    chat.reset()
    with server.client(TOKEN) as http:
        response = http.post("/v1/knowledgebases/handbook/ask", json={"question": "What colour is the office cat?"})
    assert response.status_code == 200 and response.json()["answer"] is None
    assert response.json()["reason"] == "noContext" and chat.request_count == 0


def test_a_knowledge_base_without_spec_answer_uses_the_default_model(server: Served, chat: ChatServer) -> None:
    chat.reset()
    with server.client(TOKEN) as http:
        response = http.post("/v1/knowledgebases/payroll/ask", json={"question": "When are salaries paid?"})
    assert response.status_code == 200, response.text
    assert response.json()["model"] == "stand-in/chat-test-v1" and "25th" in response.json()["answer"]


def test_scope_and_bounds_apply_to_ask(server: Served, chat: ChatServer) -> None:
    with server.client(OTHER) as http:
        hidden = http.post("/v1/knowledgebases/handbook/ask", json={"question": "How long for a refund?"})
        chosen = http.post("/v1/knowledgebases/payroll/ask", json={"question": "When?", "model": "openai/gpt-4o"})
    assert hidden.status_code == 404 and hidden.json()["detail"] == 'knowledgebase "handbook" not found'
    assert chosen.status_code == 422 and "model" in chosen.text  # the caller never picks the model (or its bill)


def test_a_failing_chat_model_is_a_502_naming_the_endpoint(server: Served, chat: ChatServer) -> None:
    chat.reset()
    chat.fail_next(500, times=2, headers={"Retry-After": "0"})
    with server.client(TOKEN) as http:
        response = http.post("/v1/knowledgebases/handbook/ask", json={"question": "How long for a refund?"})
    assert response.status_code == 502, response.text
    problem = response.json()
    assert problem["type"] == "/problems/chat-unavailable" and "HTTP 500 Internal Server Error" in problem["detail"]
    chat.reset()


def test_mcp_ask_tool(server: Served, chat: ChatServer) -> None:
    chat.reset()

    async def run() -> tuple[dict[str, Any], dict[str, Any]]:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as http,
            Client(streamable_http_client(server.url + "/mcp", http_client=http)) as client,
        ):
            found = await client.call_tool("ask", {"knowledge_base": "handbook", "question": "refund window?"})
            nothing = await client.call_tool(
                "ask", {"knowledge_base": "handbook", "question": "What colour is the office cat?"}
            )
            texts = ["\n".join(getattr(b, "text", "") for b in r.content) for r in (found, nothing)]
            return json.loads(texts[0]), json.loads(texts[1])

    found, nothing = anyio.run(run)
    assert found["reason"] == "answered" and found["citations"][0]["source"] == "refunds"
    assert found["citations"][0]["section"] == "Refunds" and "[1]" in found["answer"]
    assert nothing["answer"] is None and nothing["reason"] == "noContext"
    assert len(chat.completions) == 1
