"""Retrieval from kbctl inside agent frameworks, and kbctl's tools for models that call tools themselves.

    from kbctl.integrations.langchain import KnowledgeBaseRetriever      # pip install 'kbctl[langchain]'
    from kbctl.integrations.llamaindex import KnowledgeBaseRetriever     # pip install 'kbctl[llamaindex]'
    from kbctl.integrations import tool_definitions                      # the MCP tools as OpenAI / Anthropic tools

Each framework module offers a retriever over a `KnowledgeBaseStore` in this process and one over the HTTP API of
`kbctl serve` (`HTTPKnowledgeBaseRetriever`, with a bearer token), returning the framework's own types with the
hit's source, section, score, knowledge base version and citation in their metadata. Importing a framework module
without its framework installed is an ImportError naming the extra to install. Nothing in kbctl imports this package.
"""

from __future__ import annotations

from typing import Any

__all__ = ["tool_definitions"]


def tool_definitions(style: str = "mcp") -> list[dict[str, Any]]:
    """The MCP server's tools (list_knowledge_bases, search, get_context, ask) for another tool-calling API, made from
    the names, descriptions and input schemas the server itself registers: "openai" (function tools), "anthropic",
    or "mcp" (as tools/list gives them); UsageError for another. What `kbctl serve --print-tools` prints."""
    from kbctl.serve.mcp import tool_definitions as definitions  # the MCP SDK only when asked

    return definitions(style)
