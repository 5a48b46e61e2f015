"""Agent access: the HTTP API of `kbctl serve` and the MCP server of `kbctl mcp`, over one retrieval service.

    from kbctl.serve import RetrievalService, Tokens, create_app
    app = create_app(RetrievalService(settings), Tokens(settings.config.serve, os.environ))

The retrieval itself is `kbctl.query`'s; this package adds the pool and shared models (`service`), who may see
what (`auth`), the routes and middleware (`app`), MCP (`mcp`), the bounds on what a client sends and how slowly
(`limits`, `protocol`), and the server's log, metrics and traces.
"""

from __future__ import annotations

from kbctl import FederatedResult
from kbctl.serve.app import create_app
from kbctl.serve.auth import ANONYMOUS, Principal, Tokens
from kbctl.serve.service import RetrievalService

__all__ = ["ANONYMOUS", "FederatedResult", "Principal", "RetrievalService", "Tokens", "create_app"]
