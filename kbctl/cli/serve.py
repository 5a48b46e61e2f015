"""`kbctl serve` (the HTTP API, with MCP at /mcp) and `kbctl mcp` (MCP over stdio)."""

from __future__ import annotations

import json
from dataclasses import replace
from enum import StrEnum
from typing import Annotated

import typer

from kbctl.cli._common import (
    AsClaimOpt,
    AsGroupOpt,
    app,
    choices,
    duration_option,
    handles_errors,
    parse_duration,
    reader_of,
    state,
)


class ToolFormat(StrEnum):
    """The tool-calling API whose format --print-tools writes (a wrong value is a usage error, exit code 2)."""

    openai = "openai"
    anthropic = "anthropic"


@app.command()
@handles_errors
def serve(
    host: Annotated[
        str,
        typer.Option("--host", metavar="ADDRESS", help="Address to listen on (loopback unless tokens are configured)."),
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", "-p", metavar="PORT", min=1, max=65535, help="Port to listen on.")
    ] = 8080,
    insecure: Annotated[
        bool, typer.Option("--insecure", help="Allow a non-loopback address without any token (anyone can read).")
    ] = False,
    pool_size: Annotated[
        int, typer.Option("--pool-size", metavar="N", min=1, max=100, help="Database connections.")
    ] = 10,
    timeout: Annotated[
        str, duration_option("--timeout", minimum=0.1, maximum=600.0, help="How long a request may take (then 504).")
    ] = "30s",
    ask_timeout: Annotated[
        str,
        duration_option(
            "--ask-timeout",
            minimum=0.1,
            maximum=600.0,
            help="How long an /ask (its chat model call included) may take.",
        ),
    ] = "2m",
    header_timeout: Annotated[
        str,
        duration_option(
            "--header-timeout",
            minimum=0.1,
            maximum=600.0,
            help="How long a request's line and headers may take to arrive (then 408, connection closed).",
        ),
    ] = "10s",
    body_timeout: Annotated[
        str,
        duration_option(
            "--body-timeout",
            minimum=0.1,
            maximum=600.0,
            help="How long a request's body may take to arrive after its headers (then 408, connection closed).",
        ),
    ] = "30s",
    threads: Annotated[
        int,
        typer.Option("--threads", metavar="N", min=1, max=256, help="Worker threads running requests' blocking work."),
    ] = 40,
    model_threads: Annotated[
        int | None,
        typer.Option(
            "--model-threads",
            metavar="N",
            min=1,
            max=256,
            help="Threads the local model uses per question (default: every core, the lowest latency; 1 gives "
            "more queries/s to many concurrent clients; KBCTL_MODEL_THREADS also sets it).",
        ),
    ] = None,
    as_group: AsGroupOpt = None,
    as_claim: AsClaimOpt = None,
    print_tools: Annotated[
        ToolFormat | None,
        typer.Option(
            "--print-tools",
            metavar=choices(ToolFormat),
            help="Print the MCP tools as OpenAI function tools or Anthropic tools (JSON) and exit, serving nothing.",
        ),
    ] = None,
) -> None:
    """Serve retrieval over HTTP for agents: a JSON API (OpenAPI at /openapi.json, docs at /docs) and MCP at /mcp.

    Routes: GET /v1/knowledgebases, GET /v1/knowledgebases/NAME, POST /v1/knowledgebases/NAME/query and
    .../context (the options of kbctl query, in camelCase: question, topK, threshold, maxTokens, mode,
    explain, rerank), POST /v1/knowledgebases/NAME/ask (an answer citing the passages, through the knowledge
    base's chat model: spec.answer, else chat.defaultModel), POST /v1/query (several knowledge bases, one fused
    ranking), /healthz, /readyz, /metrics.

    Callers authenticate with bearer tokens from serve.tokens in kbctl's configuration, each naming the
    environment variable that holds it and a scope (knowledgeBases and/or a label selector); a knowledge base
    out of scope answers 404. Each token's groups and claims (serve.tokens.NAME.groups, .claims) decide which
    documents behind an access rule it retrieves; serve.oidc also accepts JWTs of an identity provider, verified
    against its keys, their groups claim read as the caller's groups. Without tokens the server binds loopback
    only (a non-loopback --host needs --insecure), and its callers read as --as-group and --as-claim say (by
    default only documents without an access rule). Logs are JSON lines on stderr, one per request.

    A web console (Lens) is served at / on the same port, behind the same tokens: the knowledge bases, each one's
    versions and their diffs, a playground that draws a query's trace against the relevance line, and, with
    serve.retrievalLog enabled in the configuration, every retrieval served with its trace (docs/console.md).

    --print-tools openai|anthropic prints the MCP tools (same names, descriptions and input schemas) in that
    API's tool format, for agents that call tools themselves; nothing is served or opened.

    Example: SUPPORT_BOT_TOKEN=... kbctl serve --host 0.0.0.0 --port 8080
    """
    if print_tools is not None:
        from kbctl.serve.mcp import tool_definitions

        typer.echo(json.dumps(tool_definitions(print_tools.value), indent=2))
        return
    from kbctl.config import Settings
    from kbctl.serve.run import serve as run

    settings = Settings.from_env(database_url=state["database_url"])
    if model_threads is not None:
        settings = replace(settings, model_threads=model_threads)
    run(
        settings,
        host=host,
        port=port,
        insecure=insecure,
        pool_size=pool_size,
        request_timeout=parse_duration(timeout),
        ask_timeout=parse_duration(ask_timeout),
        header_timeout=parse_duration(header_timeout),
        body_timeout=parse_duration(body_timeout),
        threads=threads,
        anonymous=reader_of(as_group, as_claim),
    )


@app.command()
@handles_errors
def mcp(as_group: AsGroupOpt = None, as_claim: AsClaimOpt = None) -> None:
    """Serve the Model Context Protocol over stdio, for desktop and IDE agents.

    Tools: list_knowledge_bases (with descriptions), search (knowledge base, question, optional top_k and
    threshold), get_context (the grounded block of kbctl context) and ask (an answer citing the passages, as
    kbctl ask, through the knowledge base's chat model); each knowledge base is also an MCP
    resource (kbctl://knowledgebases/NAME). The local user sees every knowledge base, as with the CLI, and the
    documents behind an access rule as --as-group and --as-claim allow (none without them).

    Client configuration: {"mcpServers": {"kbctl": {"command": "kbctl", "args": ["mcp"]}}}
    """
    from kbctl.config import Settings
    from kbctl.serve.run import serve_mcp_stdio

    serve_mcp_stdio(Settings.from_env(database_url=state["database_url"]), reader=reader_of(as_group, as_claim))
