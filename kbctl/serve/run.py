"""Start `kbctl serve` (uvicorn) and `kbctl mcp` (stdio), refusing an open bind without tokens; their queries are
traced by the routes and tools (with route and caller), not a second time by the store."""

from __future__ import annotations

import ipaddress
import logging
import os
from dataclasses import replace

from kbctl.config import Settings
from kbctl.errors import KbctlError
from kbctl.inputs.access import Reader
from kbctl.inputs.redaction import Redactor
from kbctl.serve.app import LOOPBACK_HOSTS
from kbctl.serve.auth import ANONYMOUS, Tokens
from kbctl.serve.limits import DEFAULT_BODY_TIMEOUT, DEFAULT_HEADER_TIMEOUT
from kbctl.serve.logs import configure_logging
from kbctl.serve.tracing import server_traces

__all__ = ["check_bind", "is_loopback", "serve", "serve_mcp_stdio"]

log = logging.getLogger("kbctl.serve")


def is_loopback(host: str) -> bool:
    """Whether `host` is a loopback address (or localhost)."""
    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, tokens: Tokens, *, insecure: bool) -> str:
    """What the server says at start about who can reach it; KbctlError for a non-loopback bind without tokens
    (unless `insecure`)."""
    if tokens.configured:
        return f"bearer tokens required ({tokens.count} configured{', and JWTs of serve.oidc' if tokens.oidc else ''})"
    if is_loopback(host):
        return "no tokens configured: serving loopback only, every knowledge base readable by local callers"
    if not insecure:
        raise KbctlError(
            f"refusing to serve {host} without tokens: anyone who reaches it could read every knowledge base. "
            "Configure serve.tokens in kbctl's configuration, bind 127.0.0.1, or pass --insecure"
        )
    return f"WARNING: --insecure: serving {host} without tokens, every knowledge base readable by anyone who reaches it"


def serve(
    settings: Settings,
    *,
    host: str,
    port: int,
    insecure: bool = False,
    pool_size: int = 10,
    request_timeout: float = 30.0,
    ask_timeout: float = 120.0,
    header_timeout: float = DEFAULT_HEADER_TIMEOUT,
    body_timeout: float = DEFAULT_BODY_TIMEOUT,
    threads: int = 40,
    anonymous: Reader | None = None,
) -> None:
    """Run the HTTP API (and MCP at /mcp) until interrupted. A request's headers must arrive within
    `header_timeout` seconds and its body within `body_timeout` more, or the connection is cut (408). `anonymous`
    is who a caller is when no token is configured (loopback): its groups and claims; None, neither."""
    import uvicorn

    from kbctl.serve.app import create_app
    from kbctl.serve.protocol import with_header_timeout
    from kbctl.serve.retrievals import RetrievalLog
    from kbctl.serve.service import RetrievalService

    configure_logging()
    local = replace(ANONYMOUS, reader=anonymous) if anonymous is not None else ANONYMOUS
    tokens = Tokens(settings.config.serve, os.environ, config_file=str(settings.config_file), anonymous=local)
    if tokens.configured and not local.reader.anonymous:
        raise KbctlError("--as-group and --as-claim are for a server without tokens: give each token its groups")
    access = check_bind(host, tokens, insecure=insecure)
    service = RetrievalService(settings, pool_size=pool_size)
    retrieval_log = None
    try:
        service.warm_up()
        config = settings.config.serve.retrieval_log
        retrieval_log = RetrievalLog.configured(service.store, config)
        app = create_app(
            service,
            tokens,
            host=host,
            request_timeout=request_timeout,
            ask_timeout=ask_timeout,
            body_timeout=body_timeout,
            threads=threads,
            retrieval_log=retrieval_log,
        )
        if retrieval_log is not None:
            log.info(
                f"retrieval log on: each query, context and ask kept {config.days} days, {config.max_rows} runs at most"
            )
        log.info(f"kbctl serve listening on http://{host}:{port} ({access}); API docs at /docs, MCP at /mcp")
        # the routes trace their queries, with the route and the caller, the question redacted as the log's
        with server_traces(redact=Redactor(settings.config.serve.retrieval_log.redact)):
            uvicorn.run(
                app,
                host=host,
                port=port,
                access_log=False,
                log_config=None,
                http=with_header_timeout(header_timeout),  # h11, whose request headers have a deadline
                timeout_keep_alive=5,
                timeout_graceful_shutdown=10,
                h11_max_incomplete_event_size=16 * 1024,
            )
    finally:
        if retrieval_log is not None:  # closed by the app's shutdown already, unless it never started
            retrieval_log.close()
        service.close()


def serve_mcp_stdio(settings: Settings, reader: Reader | None = None) -> None:
    """Run the MCP server over stdin/stdout until the client closes it (logs go to stderr); the local caller
    reads as `reader` (None: only documents without an access rule)."""
    from kbctl.serve.mcp import build_mcp
    from kbctl.serve.service import RetrievalService

    configure_logging(logging.WARNING)
    service = RetrievalService(settings, pool_size=4)
    try:
        service.warm_up()
        local = replace(ANONYMOUS, reader=reader) if reader is not None else ANONYMOUS
        # the tools trace their queries, with the tool and the caller, the question redacted as the log's
        with server_traces(redact=Redactor(settings.config.serve.retrieval_log.redact)):
            build_mcp(service, local=local).run("stdio")
    finally:
        service.close()
