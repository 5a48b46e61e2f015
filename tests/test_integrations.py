"""kbctl.integrations against the real frameworks (langchain-core, llama-index-core): the retrievers in process and
over a real `kbctl serve` with tokens, their metadata and access, the tool export against the MCP server's own tool
list, and docs/agents.md's examples run as they are."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import io
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from langchain_core.documents import Document
from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from typer.testing import CliRunner

from kbctl import QueryResult, Reader
from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings
from kbctl.errors import AuthError, NotFoundError, UsageError
from kbctl.integrations import langchain as lc
from kbctl.integrations import llamaindex as li
from kbctl.integrations import tool_definitions
from tests.conftest import TABLES
from tests.support.chatserver import serve_chat
from tests.support.serveproc import Served, serving_with_config

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "agents.md"
STAFF_TOKEN = "staff-token-0123456789abcdef"
MANAGER_TOKEN = "manager-token-0123456789abcdef"
DOC_TOKEN = "agents-doc-token-0123456789abcdef"
CONFIG = """
serve:
  tokens:
    staff: {tokenEnv: TEST_STAFF_TOKEN, knowledgeBases: [hr, data-handling-policy], groups: [employees]}
    manager: {tokenEnv: TEST_MANAGER_TOKEN, knowledgeBases: [hr], groups: [employees, hr-managers]}
"""
INVOICES = "how long do we keep invoices?"
SALARY = "what does salary band E4 pay?"
HANDBOOK = {"handbook/leave.md", "handbook/pay.md"}
KEYS = {"knowledge_base", "version", "source", "section", "score", "similarity", "citation", "char_start", "char_end"}


@pytest.fixture(scope="module")
def data(database_url: str, kbctl_home: Path) -> Iterator[KnowledgeBaseStore]:
    """The example knowledge bases and the access example (hr: a handbook for employees, a restricted folder)."""
    store = KnowledgeBaseStore(settings=Settings(home=kbctl_home, database_url=database_url))
    store.db.connection.execute(f"TRUNCATE {TABLES} RESTART IDENTITY CASCADE")
    store.apply_paths([str(REPO / "examples" / "kb"), str(REPO / "examples" / "access")])
    try:
        yield store
    finally:
        store.close()


@pytest.fixture(scope="module")
def server(
    data: KnowledgeBaseStore, kbctl_home: Path, database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """`kbctl serve` with a staff token (group employees) and an HR manager's (employees, hr-managers)."""
    folder = tmp_path_factory.mktemp("integrations")
    tokens = {"TEST_STAFF_TOKEN": STAFF_TOKEN, "TEST_MANAGER_TOKEN": MANAGER_TOKEN}
    with serving_with_config(kbctl_home, database_url, folder, CONFIG, **tokens) as served:
        yield served


def citation_of(hit: Any) -> str:
    section = " > ".join(hit.heading_path)
    return f"{hit.source} | {section} | chars {hit.char_start}-{hit.char_end}"


def check_documents(docs: list[Document], expected: QueryResult) -> None:
    """LangChain documents hold the hits of `expected`, in order, with their metadata and citation."""
    assert docs and len(docs) == len(expected.hits)
    for doc, hit in zip(docs, expected.hits, strict=True):
        assert isinstance(doc, Document) and doc.page_content == hit.text
        assert doc.metadata.keys() >= KEYS
        meta = doc.metadata
        assert (meta["knowledge_base"], meta["version"]) == (expected.knowledge_base, expected.version)
        assert (meta["source"], meta["section"]) == (hit.source, " > ".join(hit.heading_path))
        assert meta["score"] == pytest.approx(hit.score, abs=1e-6)
        assert meta["similarity"] == pytest.approx(hit.similarity, abs=1e-6)
        assert meta["citation"] == citation_of(hit)


def check_nodes(nodes: list[NodeWithScore], expected: QueryResult) -> None:
    """LlamaIndex nodes hold the hits of `expected`, in order, scored, with their metadata and character range."""
    assert nodes and len(nodes) == len(expected.hits)
    for scored, hit in zip(nodes, expected.hits, strict=True):
        node = scored.node
        assert isinstance(node, TextNode) and node.text == hit.text
        assert scored.score == pytest.approx(hit.score, abs=1e-6)
        assert node.metadata["similarity"] == pytest.approx(hit.similarity, abs=1e-6)
        assert (node.start_char_idx, node.end_char_idx) == (hit.char_start, hit.char_end)
        assert node.metadata.keys() >= KEYS
        assert node.metadata["version"] == expected.version and node.metadata["source"] == hit.source
        assert node.metadata["citation"] == citation_of(hit)
        # The prompt sees the citation and the text; the embedding text sees no metadata.
        assert node.get_content(MetadataMode.LLM) == f"citation: {citation_of(hit)}\n\n{hit.text}"
        assert node.get_content(MetadataMode.EMBED) == hit.text


# ---------------------------------------------------------------- in process


def test_langchain_retriever_in_process_returns_cited_documents(data: KnowledgeBaseStore) -> None:
    """The in-process LangChain retriever returns the store's hits as Documents with source, section, score,
    version and citation, honouring top_k, threshold and mode."""
    retriever = lc.KnowledgeBaseRetriever(store=data, knowledge_base="data-handling-policy", top_k=2)
    docs = retriever.invoke(INVOICES)
    check_documents(docs, data.query("data-handling-policy", INVOICES, top_k=2))
    assert docs[0].metadata["section"] == "Retention schedule > Financial and contract records"
    assert len(docs) == 2

    keyword = lc.KnowledgeBaseRetriever(store=data, knowledge_base="data-handling-policy", mode="keyword")
    check_documents(keyword.invoke("invoices"), data.query("data-handling-policy", "invoices", mode="keyword"))
    strict = lc.KnowledgeBaseRetriever(store=data, knowledge_base="data-handling-policy", threshold=0.99)
    assert strict.invoke(INVOICES) == []
    with pytest.raises(ValueError, match="top_k must be"):
        lc.KnowledgeBaseRetriever(store=data, knowledge_base="data-handling-policy", top_k=0)


def test_llamaindex_retriever_in_process_returns_cited_nodes(data: KnowledgeBaseStore) -> None:
    """The in-process LlamaIndex retriever returns the store's hits as scored TextNodes, honouring the options."""
    retriever = li.KnowledgeBaseRetriever(data, "client-service-policy", top_k=3, mode="vector")
    check_nodes(retriever.retrieve(INVOICES), data.query("client-service-policy", INVOICES, top_k=3, mode="vector"))
    assert li.KnowledgeBaseRetriever(data, "client-service-policy", threshold=0.99).retrieve(INVOICES) == []
    with pytest.raises(UsageError, match="mode must be"):
        li.KnowledgeBaseRetriever(data, "client-service-policy", mode="fuzzy")  # type: ignore[arg-type]
    with pytest.raises(NotFoundError):
        li.KnowledgeBaseRetriever(data, "no-such-kb").retrieve(INVOICES)


def test_the_reader_decides_which_documents_come_back(data: KnowledgeBaseStore) -> None:
    """A restricted source comes back only to a reader in its group; no reader reads only unrestricted documents."""
    staff = Reader.of(["employees"])
    managers = Reader.of(["hr-managers"])
    as_staff = lc.KnowledgeBaseRetriever(store=data, knowledge_base="hr", reader=staff).invoke(SALARY)
    assert as_staff and {d.metadata["source"] for d in as_staff} <= HANDBOOK
    as_manager = lc.KnowledgeBaseRetriever(store=data, knowledge_base="hr", reader=managers).invoke(SALARY)
    assert as_manager[0].metadata["source"] == "restricted/salary-bands.md"
    assert lc.KnowledgeBaseRetriever(store=data, knowledge_base="hr").invoke(SALARY) == []

    nodes = li.KnowledgeBaseRetriever(data, "hr", reader=staff).retrieve(SALARY)
    assert nodes and {n.node.metadata["source"] for n in nodes} <= HANDBOOK
    assert li.KnowledgeBaseRetriever(data, "hr", reader=managers).retrieve(SALARY)[0].node.metadata["source"] == (
        "restricted/salary-bands.md"
    )
    assert li.KnowledgeBaseRetriever(data, "hr").retrieve(SALARY) == []


# ---------------------------------------------------------------- over kbctl serve


def test_http_retrievers_match_the_store_sync_and_async(server: Served, data: KnowledgeBaseStore) -> None:
    """Over a real `kbctl serve` with a token, both frameworks' HTTP retrievers (sync and async) return what the
    store returns in process, with the same metadata."""
    expected = data.query("data-handling-policy", INVOICES, top_k=3, threshold=0.3, mode="hybrid", reader=None)
    options: dict[str, Any] = {"top_k": 3, "threshold": 0.3, "mode": "hybrid"}
    lc_remote = lc.HTTPKnowledgeBaseRetriever(
        url=server.url, token=STAFF_TOKEN, knowledge_base="data-handling-policy", **options
    )
    check_documents(lc_remote.invoke(INVOICES), expected)
    check_documents(asyncio.run(lc_remote.ainvoke(INVOICES)), expected)
    assert STAFF_TOKEN not in repr(lc_remote)

    li_remote = li.HTTPKnowledgeBaseRetriever(server.url, "data-handling-policy", token=STAFF_TOKEN, **options)
    check_nodes(li_remote.retrieve(INVOICES), expected)
    check_nodes(asyncio.run(li_remote.aretrieve(INVOICES)), expected)
    assert STAFF_TOKEN not in repr(li_remote)
    # The ids are stable: the same chunk of the same version, whichever way it was retrieved.
    assert [d.id for d in lc_remote.invoke(INVOICES)] == [n.node.node_id for n in li_remote.retrieve(INVOICES)]


def test_http_retrievers_scores_follow_the_rank(server: Served, data: KnowledgeBaseStore) -> None:
    """Over `kbctl serve`, in hybrid mode, where fusion and not the cosine orders the hits, each document's and
    node's score is at most the one before it, so sorting by score keeps kbctl's order; the cosine is `similarity`."""
    options: dict[str, Any] = {"top_k": 5, "threshold": -1.0, "mode": "hybrid"}
    expected = data.query("data-handling-policy", INVOICES, **options)
    similarities = [h.similarity for h in expected.hits]
    assert similarities != sorted(similarities, reverse=True)  # the cosine alone would order them otherwise
    docs = lc.HTTPKnowledgeBaseRetriever(
        url=server.url, token=STAFF_TOKEN, knowledge_base="data-handling-policy", **options
    ).invoke(INVOICES)
    assert sorted(docs, key=lambda d: -d.metadata["score"]) == docs
    check_documents(docs, expected)
    nodes = li.HTTPKnowledgeBaseRetriever(server.url, "data-handling-policy", token=STAFF_TOKEN, **options).retrieve(
        INVOICES
    )
    assert [n.node.node_id for n in sorted(nodes, key=lambda n: -(n.score or 0.0))] == [n.node.node_id for n in nodes]
    check_nodes(nodes, expected)

    strict = li.HTTPKnowledgeBaseRetriever(server.url, "data-handling-policy", token=STAFF_TOKEN, threshold=0.99)
    assert strict.retrieve(INVOICES) == []
    keyword = lc.HTTPKnowledgeBaseRetriever(
        url=server.url, token=STAFF_TOKEN, knowledge_base="data-handling-policy", mode="keyword"
    )
    check_documents(keyword.invoke("invoices"), data.query("data-handling-policy", "invoices", mode="keyword"))


def test_http_retrievers_read_as_the_token(server: Served) -> None:
    """Over HTTP the token's groups decide: the staff token never gets the restricted folder, the manager's does."""
    staff = lc.HTTPKnowledgeBaseRetriever(url=server.url, token=STAFF_TOKEN, knowledge_base="hr").invoke(SALARY)
    assert staff and {d.metadata["source"] for d in staff} <= HANDBOOK
    manager = li.HTTPKnowledgeBaseRetriever(server.url, "hr", token=MANAGER_TOKEN)
    assert manager.retrieve(SALARY)[0].node.metadata["source"] == "restricted/salary-bands.md"
    assert asyncio.run(manager.aretrieve(SALARY))[0].node.metadata["source"] == "restricted/salary-bands.md"


def test_http_retrievers_raise_kbctl_errors(server: Served) -> None:
    """Out of the token's scope is NotFoundError, a wrong token AuthError, a refused request UsageError."""
    with pytest.raises(NotFoundError, match="client-service-policy"):
        li.HTTPKnowledgeBaseRetriever(server.url, "client-service-policy", token=STAFF_TOKEN).retrieve(INVOICES)
    with pytest.raises(AuthError, match="401"):
        lc.HTTPKnowledgeBaseRetriever(url=server.url, token="not-a-token-at-all-0000", knowledge_base="hr").invoke("x")
    with pytest.raises(AuthError, match="401"):
        asyncio.run(li.HTTPKnowledgeBaseRetriever(server.url, "hr").aretrieve("x"))
    with pytest.raises(UsageError):
        lc.HTTPKnowledgeBaseRetriever(url=server.url, token=STAFF_TOKEN, knowledge_base="hr").invoke("   ")


@pytest.mark.parametrize(
    ("module", "extra", "blocked"),
    [("langchain", "langchain", "langchain_core"), ("llamaindex", "llamaindex", "llama_index")],
)
def test_a_missing_framework_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, module: str, extra: str, blocked: str
) -> None:
    """Importing a framework module without its framework is an ImportError that says which extra to install."""
    for name in [n for n in sys.modules if n == blocked or n.startswith(blocked + ".")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, blocked, None)
    monkeypatch.delitem(sys.modules, f"kbctl.integrations.{module}")
    with pytest.raises(ImportError, match=re.escape(f"pip install 'kbctl[{extra}]'")):
        importlib.import_module(f"kbctl.integrations.{module}")


# ---------------------------------------------------------------- tool export


def test_tool_export_is_the_mcp_servers_tool_list(server: Served) -> None:
    """The OpenAI and Anthropic exports carry exactly the names, descriptions and input schemas the MCP server
    lists to a client (over /mcp of a real kbctl serve), and the CLI prints the same JSON."""

    async def listed() -> list[Any]:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {STAFF_TOKEN}"}, timeout=60) as http,
            Client(streamable_http_client(server.url + "/mcp", http_client=http)) as client,
        ):
            return list((await client.list_tools()).tools)

    tools = anyio.run(listed)
    served = [(t.name, t.description, t.input_schema) for t in tools]
    assert {name for name, _, _ in served} == {"list_knowledge_bases", "search", "get_context", "ask"}
    openai = tool_definitions("openai")
    assert [(t["function"]["name"], t["function"]["description"], t["function"]["parameters"]) for t in openai] == (
        served
    )
    assert all(t["type"] == "function" for t in openai)
    anthropic = tool_definitions("anthropic")
    assert [(t["name"], t["description"], t["input_schema"]) for t in anthropic] == served
    assert [t["name"] for t in tool_definitions("mcp")] == [name for name, _, _ in served]
    with pytest.raises(UsageError, match="openai, anthropic"):
        tool_definitions("gemini")

    runner = CliRunner()
    for style, expected in (("openai", openai), ("anthropic", anthropic)):
        printed = runner.invoke(app, ["serve", "--print-tools", style])
        assert printed.exit_code == 0, printed.output
        assert json.loads(printed.output) == expected
    wrong = runner.invoke(app, ["serve", "--print-tools", "gemini"])
    assert wrong.exit_code == 2


# ---------------------------------------------------------------- docs/agents.md


def test_the_agents_doc_examples_run(
    data: KnowledgeBaseStore,
    kbctl_home: Path,
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docs/agents.md's Python blocks run in order, as one script, against the real store, a real `kbctl serve`
    with the doc's own token configuration, and the chat stand-in; what they print is what the doc shows."""
    text = DOC.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    shown = re.findall(r"```text\n(.*?)```", text, re.DOTALL)
    config = re.findall(r"```yaml\n(.*?)```", text, re.DOTALL)
    assert len(blocks) >= 6 and len(shown) >= 4 and len(config) == 1
    monkeypatch.chdir(REPO)  # the examples name examples/kb/ relative to the repository
    monkeypatch.setenv("KBCTL_DATABASE_URL", database_url)
    monkeypatch.setenv("KBCTL_HOME", str(kbctl_home))
    with (
        serve_chat() as chat,
        serving_with_config(kbctl_home, database_url, tmp_path, config[0], KB_TOKEN=DOC_TOKEN) as served,
    ):
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        monkeypatch.setenv("KBCTL_URL", served.url)
        monkeypatch.setenv("KB_TOKEN", DOC_TOKEN)
        out = io.StringIO()
        namespace: dict[str, Any] = {"__name__": "docs_example"}
        for number, block in enumerate(blocks, start=1):
            with contextlib.redirect_stdout(out):
                try:
                    exec(compile(block, f"{DOC.name} example {number}", "exec"), namespace)
                except Exception as exc:
                    raise AssertionError(f"{DOC.name} example {number} failed: {exc!r}") from exc
        # the chain and the query engine asked the stand-in once each, the agent twice (a tool call, then an answer)
        assert len(chat.requests) >= 4
        assert sum(1 for r in chat.requests if isinstance(r.body, dict) and r.body.get("tools")) == 2
    printed = out.getvalue().splitlines()
    for block in shown:
        for line in block.strip().splitlines():
            assert line in printed, f"docs/agents.md shows {line!r}; the examples print:\n" + "\n".join(printed)
