"""The MCP server, exercised with the SDK's own client: over stdio (`kbctl mcp`) and over streamable HTTP at
/mcp under `kbctl serve`, behind the same tokens and scopes as the REST routes."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from kbctl.client import KnowledgeBaseStore
from tests.support.manifests import knowledge_base, text_source
from tests.support.serveproc import Served, kbctl_env, seeded, serving_with_config

TOKEN = "mcp-test-token-0123456789abcdef"
CONFIG = "serve:\n  tokens:\n    agent: {tokenEnv: TEST_MCP_TOKEN, knowledgeBases: [handbook]}\n"
HANDBOOK = knowledge_base(
    "handbook",
    text_source(
        "refunds",
        "# Refunds\n\nClients may ask for a refund within 30 days of the invoice date. Refunds are paid back "
        "within ten working days of approval.",
    ),
    description="How the support team handles refunds.",
)
PAYROLL = knowledge_base(
    "payroll",
    text_source("pay-dates", "# Pay dates\n\nSalaries are paid on the 25th of each month."),
    description="Payroll: pay dates.",
)


@pytest.fixture(scope="module")
def data(database_url: str, kbctl_home: Path) -> Iterator[KnowledgeBaseStore]:
    with seeded(database_url, kbctl_home, HANDBOOK, PAYROLL) as store:
        yield store


def text_of(result: Any) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


async def exercise(client: Client) -> dict[str, Any]:
    """Everything an agent does: list tools and resources, list knowledge bases, search, get context."""
    tools = await client.list_tools()
    resources = await client.list_resources()
    listed = await client.call_tool("list_knowledge_bases", {})
    found = await client.call_tool("search", {"knowledge_base": "handbook", "question": "how long for a refund?"})
    context = await client.call_tool("get_context", {"knowledge_base": "handbook", "question": "refund window"})
    nothing = await client.call_tool(
        "get_context", {"knowledge_base": "handbook", "question": "what colour is the office cat?"}
    )
    hidden = await client.call_tool("search", {"knowledge_base": "payroll", "question": "when are salaries paid?"})
    empty = await client.call_tool("search", {"knowledge_base": "handbook", "question": "  "})
    return {
        "tools": {t.name: t.description or "" for t in tools.tools},
        "resources": [str(r.uri) for r in resources.resources],
        "listed": json.loads(text_of(listed)),
        "found": json.loads(text_of(found)),
        "context": text_of(context),
        "nothing": text_of(nothing),
        "hidden": (hidden.is_error, text_of(hidden)),
        "empty": (empty.is_error, text_of(empty)),
    }


def check_common(seen: dict[str, Any]) -> None:
    assert set(seen["tools"]) == {"list_knowledge_bases", "search", "get_context", "ask"}
    assert "Answer only from" in seen["tools"]["get_context"] and "not cover" in seen["tools"]["search"]
    assert seen["found"]["found"] is True and "30 days" in seen["found"]["hits"][0]["text"]
    scores = [h["score"] for h in seen["found"]["hits"]]
    assert scores == sorted(scores, reverse=True) and all(-1 <= h["similarity"] <= 1 for h in seen["found"]["hits"])
    assert "<reference_data" in seen["context"] and "30 days" in seen["context"]
    assert "No relevant context was found" in seen["nothing"]
    assert seen["empty"][0] is True and "must not be empty" in seen["empty"][1]


def test_mcp_over_stdio(data: KnowledgeBaseStore, kbctl_home: Path, database_url: str, tmp_path: Path) -> None:
    env = kbctl_env(kbctl_home, database_url, HOME=str(tmp_path))
    params = StdioServerParameters(command=sys.executable, args=["-m", "kbctl", "mcp"], env=env)

    async def run() -> dict[str, Any]:
        async with Client(params, read_timeout_seconds=120) as client:
            return await exercise(client)

    seen = anyio.run(run)
    check_common(seen)
    # The local user sees every knowledge base, as with the CLI.
    assert {kb["name"] for kb in seen["listed"]["knowledgeBases"]} == {"handbook", "payroll"}
    assert seen["listed"]["knowledgeBases"][0]["description"]
    assert set(seen["resources"]) == {"kbctl://knowledgebases/handbook", "kbctl://knowledgebases/payroll"}
    assert seen["hidden"][0] is False


@pytest.fixture(scope="module")
def token_server(
    data: KnowledgeBaseStore, kbctl_home: Path, database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("mcp")
    with serving_with_config(kbctl_home, database_url, folder, CONFIG, TEST_MCP_TOKEN=TOKEN) as served:
        yield served


def test_mcp_over_http_behind_a_scoped_token(token_server: Served) -> None:
    async def run() -> dict[str, Any]:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as http,
            Client(streamable_http_client(token_server.url + "/mcp", http_client=http)) as client,
        ):
            seen = await exercise(client)
            resource = await client.read_resource("kbctl://knowledgebases/handbook")
            seen["resource"] = json.loads(resource.contents[0].text)  # type: ignore[union-attr]
            return seen

    seen = anyio.run(run)
    check_common(seen)
    assert [kb["name"] for kb in seen["listed"]["knowledgeBases"]] == ["handbook"]
    assert seen["resources"] == ["kbctl://knowledgebases/handbook"]
    assert seen["resource"]["name"] == "handbook" and seen["resource"]["description"]
    # Out of scope reads exactly like absent.
    assert seen["hidden"][0] is True and seen["hidden"][1].endswith('knowledgebase "payroll" not found')
    assert TOKEN not in token_server.log()


def test_mcp_over_http_needs_a_token(token_server: Served) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    headers = {"accept": "application/json, text/event-stream"}
    with httpx2.Client(base_url=token_server.url, timeout=30) as http:
        missing = http.post("/mcp", json=initialize, headers=headers)
        wrong = http.post("/mcp", json=initialize, headers={**headers, "Authorization": "Bearer wrong-token-but-long"})
        right = http.post("/mcp", json=initialize, headers={**headers, "Authorization": f"Bearer {TOKEN}"})
    assert missing.status_code == 401 and wrong.status_code == 401
    assert right.status_code == 200, right.text
