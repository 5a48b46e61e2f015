"""Property: whatever the access rules and whoever asks, no retrieval path names a document the caller may not read,
and every path returns each document it may read.

Hypothesis generates two knowledge bases whose sources carry random access rules (groups among a, b, c; the label
level=1; a knowledge-base default) and a caller with random groups and claims, then runs every path: the Python
API (query in each mode with its trace, context, the cross-knowledge-base query, describe), the CLI (`kbctl query
--as-group ... -o json`), and a real `kbctl serve` (HTTP query, context, ask through a real chat server on
127.0.0.1, the cross-knowledge-base /v1/query, describe and list; MCP search, get_context, ask and the resource),
whose tokens hold every combination of groups and claims. Each source's text holds a marker of its own: a marker
or a source name of a document the caller may not read, anywhere in what a path returns (or in what ask sends to
the chat model), fails the test; so does a readable document missing from a query (threshold -1, topK above the
documents: every readable document must come back).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from typer.testing import CliRunner

from kbctl import KnowledgeBaseStore, Reader
from kbctl.cli import app
from kbctl.inputs.access import label_terms, may_read
from kbctl.manifest import parse_manifests
from tests.support.chatserver import ChatServer, serve_chat
from tests.support.manifests import knowledge_base, text_source
from tests.support.serveproc import Served, seeded, serving_with_config

GROUPS = ("a", "b", "c")
KBS = ("pa", "pb")
NAMES = ("alpha", "bravo", "charlie", "delta", "echo")
TOPICS = {  # each document's own sentence, so that no two are near-duplicates (which a query would drop)
    "alpha": "Airport transfers by taxi are refunded up to forty euros.",
    "bravo": "Rail tickets in first class need a manager's approval beforehand.",
    "charlie": "Meals abroad are paid by a daily allowance set per country.",
    "delta": "Rental cars must be returned with a full tank of fuel.",
    "echo": "Conference fees are booked through the events team only.",
}
QUESTION = "What are the travel rules for hotel booking?"
CALLERS = [  # every combination of groups and the one claim: one token each
    (frozenset(groups), claim) for n in range(4) for groups in itertools.combinations(GROUPS, n) for claim in (0, 1)
]


def token_of(index: int) -> str:
    return f"access-property-token-{index:02d}-0123456789"


def marker(kb: str, name: str) -> str:
    return f"mk{kb}{name}zq"


rules = st.one_of(
    st.none(),
    st.builds(lambda g: {"groups": sorted(g)}, st.sets(st.sampled_from(GROUPS), min_size=1)),
    st.just({"labels": {"level": "1"}}),
    st.builds(lambda g: {"groups": sorted(g), "labels": {"level": "1"}}, st.sets(st.sampled_from(GROUPS), min_size=1)),
)
layouts = st.fixed_dictionaries({kb: st.tuples(rules, st.lists(rules, min_size=2, max_size=len(NAMES))) for kb in KBS})


def manifests(layout: dict[str, Any]) -> str:
    docs = []
    for kb, (default, sources) in layout.items():
        entries = [
            text_source(
                name,
                f"# {name.title()}\n\nThe travel rules for hotel booking: {TOPICS[name]} Code {marker(kb, name)}.",
                **({"access": rule} if rule is not None else {}),
            )
            for name, rule in zip(NAMES, sources, strict=False)
        ]
        spec = {"access": default} if default is not None else {}
        docs.append(knowledge_base(kb, *entries, answer={"model": "stand-in/chat-test-v1"}, **spec))
    return "\n---\n".join(docs)


def readable(layout: dict[str, Any], reader: Reader) -> dict[str, set[str]]:
    """Per knowledge base, the sources `reader` may read (by the Python form of the SQL's rule)."""
    found: dict[str, set[str]] = {}
    for kb, (default, sources) in layout.items():
        found[kb] = set()
        for name, rule in zip(NAMES, sources, strict=False):
            rule = rule if rule is not None else default
            groups = rule.get("groups") if rule else None
            labels = label_terms(rule["labels"]) if rule and rule.get("labels") else None
            if rule is None or may_read(reader, groups, labels):
                found[kb].add(name)
    return found


def forbidden(layout: dict[str, Any], allowed: dict[str, set[str]]) -> list[str]:
    """The markers and (unique) source names of the documents the caller may not read."""
    words = []
    for kb, (_, sources) in layout.items():
        for name in NAMES[: len(sources)]:
            if name not in allowed[kb]:
                words.append(marker(kb, name))
                if all(name not in allowed[other] for other in KBS):
                    words.append(name)
    return words


def leaks(text: str, words: list[str]) -> list[str]:
    lowered = text.lower()
    return [w for w in words if w.lower() in lowered]


@pytest.fixture(scope="module")
def chat() -> Iterator[ChatServer]:
    with serve_chat() as server:
        yield server


@pytest.fixture(scope="module")
def world(
    chat: ChatServer, database_url: str, kbctl_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[KnowledgeBaseStore, Served]]:
    tokens = {
        f"caller-{i}": {
            "tokenEnv": f"TEST_ACCESS_TOKEN_{i}",
            "knowledgeBases": list(KBS),
            "groups": sorted(groups),
            **({"claims": {"level": "1"}} if claim else {}),
        }
        for i, (groups, claim) in enumerate(CALLERS)
    }
    config = {
        "chat": {"providers": {"stand-in": {"baseURL": chat.url, "retries": 0}}},
        "serve": {"tokens": tokens},
    }
    variables = {f"TEST_ACCESS_TOKEN_{i}": token_of(i) for i in range(len(CALLERS))}
    with seeded(database_url, kbctl_home) as store:
        folder = tmp_path_factory.mktemp("access")
        with serving_with_config(kbctl_home, database_url, folder, json.dumps(config), **variables) as served:
            yield store, served


def python_paths(store: KnowledgeBaseStore, reader: Reader, mode: str) -> dict[str, Any]:
    options: dict[str, Any] = {"threshold": -1.0, "top_k": 50}
    seen: dict[str, Any] = {}
    for kb in KBS:
        seen[f"query {kb}"] = store.query(kb, QUESTION, reader=reader, mode=mode, explain=True, **options)
        seen[f"context {kb}"] = store.context(kb, QUESTION, reader=reader, mode=mode, **options)
        seen[f"describe {kb}"] = store.describe(kb, reader=reader)
    seen["query_many"] = store.query_many(QUESTION, names=list(KBS), reader=reader, mode=mode, **options)
    seen["list"] = [kb for kb in store.list(reader=reader) if kb.name in KBS]
    return seen


def cli_path(store: KnowledgeBaseStore, reader: Reader, mode: str) -> dict[str, Any]:
    runner = CliRunner(
        env={"KBCTL_DATABASE_URL": store.settings.database_url or "", "KBCTL_HOME": str(store.settings.home)}
    )
    flags = [arg for g in sorted(reader.groups) for arg in ("--as-group", g)]
    flags += [arg for term in reader.claim_terms() for arg in ("--as-claim", term)]
    seen = {}
    for kb in KBS:
        result = runner.invoke(
            app, ["query", kb, QUESTION, "--threshold", "-1", "--top-k", "50", "--mode", mode, "-o", "json", *flags]
        )
        assert result.exit_code == 0, result.output
        seen[f"cli {kb}"] = json.loads(result.stdout)
    return seen


def http_paths(served: Served, token: str, mode: str) -> dict[str, Any]:
    body = {"question": QUESTION, "threshold": -1, "topK": 50, "mode": mode}
    seen: dict[str, Any] = {}
    with served.client(token) as http:
        for kb in KBS:
            for route in ("query", "context", "ask"):
                response = http.post(f"/v1/knowledgebases/{kb}/{route}", json=body)
                assert response.status_code == 200, response.text
                seen[f"http {route} {kb}"] = response.json()
            seen[f"http describe {kb}"] = http.get(f"/v1/knowledgebases/{kb}").json()
        seen["http query many"] = http.post("/v1/query", json={**body, "knowledgeBases": list(KBS)}).json()
        seen["http list"] = http.get("/v1/knowledgebases").json()
    return seen


def mcp_paths(served: Served, token: str) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
            Client(streamable_http_client(served.url + "/mcp", http_client=http)) as client,
        ):
            for kb in KBS:
                arguments = {"knowledge_base": kb, "question": QUESTION, "threshold": -1.0, "top_k": 50}
                for tool in ("search", "get_context", "ask"):
                    called = await client.call_tool(tool, arguments)
                    assert not called.is_error
                    seen[f"mcp {tool} {kb}"] = [getattr(b, "text", "") for b in called.content]
                resource = await client.read_resource(f"kbctl://knowledgebases/{kb}")
                seen[f"mcp resource {kb}"] = [getattr(c, "text", "") for c in resource.contents]
            listed = await client.call_tool("list_knowledge_bases", {})
            seen["mcp list"] = [getattr(b, "text", "") for b in listed.content]
        return seen

    return anyio.run(run)


def dumped(value: Any) -> str:
    if hasattr(value, "model_dump_json"):
        return str(value.model_dump_json())
    if isinstance(value, list):
        return "\n".join(dumped(v) for v in value)
    return json.dumps(value)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    layout=layouts,
    caller=st.integers(min_value=0, max_value=len(CALLERS) - 1),
    mode=st.sampled_from(["hybrid", "vector", "keyword"]),
)
def test_no_path_names_a_document_the_caller_may_not_read(
    world: tuple[KnowledgeBaseStore, Served], chat: ChatServer, layout: dict[str, Any], caller: int, mode: str
) -> None:
    store, served = world
    assert store.apply(parse_manifests(manifests(layout), "kb.yaml"), wait=True).exit_code() == 0
    groups, claim = CALLERS[caller]
    reader = Reader.of(groups, {"level": "1"} if claim else None)
    allowed = readable(layout, reader)
    words = forbidden(layout, allowed)
    asked_before = len(chat.requests)

    seen = python_paths(store, reader, mode)
    seen |= cli_path(store, reader, mode)
    seen |= http_paths(served, token_of(caller), mode)
    seen |= mcp_paths(served, token_of(caller))
    for path, value in seen.items():
        assert not leaks(dumped(value), words), f"{path} names a document the caller may not read"
    prompts = [json.dumps(request.body) for request in chat.requests[asked_before:]]
    assert not leaks("\n".join(prompts), words), "ask sent the chat model a document the caller may not read"

    # Completeness: every readable document comes back, on every query path.
    for kb in KBS:
        assert {h.source for h in seen[f"query {kb}"].hits} == allowed[kb]
        assert {h["source"] for h in seen[f"cli {kb}"]["hits"]} == allowed[kb]
        assert {h["source"] for h in seen[f"http query {kb}"]["hits"]} == allowed[kb]
        assert {s.name for s in seen[f"describe {kb}"].source_status} == allowed[kb]
    fused = {(h.knowledge_base, h.source) for h in seen["query_many"].hits}
    assert fused == {(kb, name) for kb in KBS for name in allowed[kb]}
