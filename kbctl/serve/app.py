"""The HTTP API of `kbctl serve`: routes, and the middleware that authenticates, bounds, logs and counts.

Every route but the health checks and the API's own description needs a valid bearer token when tokens are
configured; a knowledge base outside the token's scope answers 404, as one that does not exist.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, TypeVar

import anyio
from fastapi import FastAPI, Path, Request, Response
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import AfterValidator, BaseModel

from kbctl import (
    AskResult,
    FederatedResult,
    GroundedContext,
    KnowledgeBaseDetail,
    KnowledgeBaseSummary,
    QueryResult,
    Readiness,
)
from kbctl._version import __version__
from kbctl.manifest import check_dns_label
from kbctl.serve.auth import Principal, Tokens
from kbctl.serve.limits import DEFAULT_BODY_TIMEOUT, BodyLimit
from kbctl.serve.logs import log_request
from kbctl.serve.mcp import build_mcp
from kbctl.serve.metrics import CONTENT_TYPE_LATEST, Metrics
from kbctl.serve.problems import BadRequest, install_handlers, internal_error, problem
from kbctl.serve.requests import (
    MAX_BODY_BYTES,
    NAME_SCHEMA,
    AskRequest,
    MultiQueryRequest,
    QueryRequest,
)
from kbctl.serve.service import RetrievalService
from kbctl.serve.tracing import trace_query

__all__ = ["PUBLIC_PATHS", "create_app"]

PUBLIC_PATHS = frozenset({"/healthz", "/readyz", "/docs", "/openapi.json"})
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
T = TypeVar("T")
Name = Annotated[
    str,
    Path(description="The knowledge base's name.", json_schema_extra=NAME_SCHEMA),
    AfterValidator(check_dns_label),  # a name no knowledge base can have is a 422, before the store
]


class _Json(Response):
    """A pydantic result serialized once, camelCase, by pydantic-core (no second validation by the framework)."""

    media_type = "application/json"

    def __init__(self, model: BaseModel, status_code: int = 200) -> None:
        super().__init__(model.model_dump_json(by_alias=True), status_code=status_code)


def create_app(
    service: RetrievalService,
    tokens: Tokens,
    *,
    host: str = "127.0.0.1",
    request_timeout: float = 30.0,
    ask_timeout: float = 120.0,
    body_timeout: float = DEFAULT_BODY_TIMEOUT,
    threads: int | None = None,
    mcp: bool = True,
) -> FastAPI:
    """The ASGI app over `service`; `host` is the address served (the MCP endpoint checks Host headers against it
    on loopback); `request_timeout` bounds every request's work (504 after it), `ask_timeout` that of an answer
    (its chat model call included), `body_timeout` the arrival of a request's body (408 after it); `threads`
    caps the worker threads that run requests' blocking work (anyio's default, 40, when None)."""
    metrics = Metrics()
    mcp_server = build_mcp(service, ask_timeout=ask_timeout) if mcp else None
    mcp_app = None
    if mcp_server is not None:
        security = None if host in LOOPBACK_HOSTS else TransportSecuritySettings(enable_dns_rebinding_protection=False)
        mcp_app = mcp_server.streamable_http_app(
            streamable_http_path="/mcp",
            stateless_http=True,
            json_response=True,
            max_request_body_size=MAX_BODY_BYTES,
            transport_security=security,
            host=host,
        )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if threads is not None:
            anyio.to_thread.current_default_thread_limiter().total_tokens = threads
        if mcp_server is None:
            yield
            return
        async with mcp_server.session_manager.run():
            yield

    app = FastAPI(
        title="kbctl",
        version=__version__,
        summary="Retrieval from kbctl knowledge bases: grounded context for agents.",
        lifespan=lifespan,
        redoc_url=None,
    )
    install_handlers(app)

    async def run(request: Request, fn: Callable[[], T], timeout: float = request_timeout) -> T:
        """`fn` on a worker thread, bounded by the request timeout; a ValueError of the options is a 400."""
        try:
            with anyio.fail_after(timeout):
                return await anyio.to_thread.run_sync(fn, abandon_on_cancel=True)
        except TimeoutError:
            raise TimeoutError(f"the request took longer than {timeout:g} s") from None
        except ValueError as exc:
            raise BadRequest(str(exc)) from exc

    def caller(request: Request) -> Principal:
        principal: Principal = request.state.principal
        return principal

    async def answer(name: str, body: QueryRequest, request: Request) -> QueryResult:
        """The query of `name` the body asks for, logged, counted and traced (for /query and /context)."""
        principal = caller(request)
        result = await run(request, lambda: service.query(principal, name, body.question, body.options()))
        observed(request, result, principal)
        return result

    def observed(request: Request, result: QueryResult, principal: Principal, **extra: Any) -> None:
        """What the request's log line and metrics say of a query (and `extra`), and its trace."""
        request.state.outcome = {
            "knowledgeBase": result.knowledge_base,
            "version": result.version,
            "hits": len(result.hits),
            "bestScore": result.best_score,
            **extra,
        }
        trace_query(result, route=request.url.path, principal=principal.name)

    @app.get("/healthz", tags=["health"], summary="The process is up.")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get(
        "/readyz",
        tags=["health"],
        summary="The database answers, its schema is current, the model is loaded.",
        response_model=Readiness,
    )
    async def readyz(request: Request) -> Response:
        ready: Readiness = await run(request, service.readiness)
        return _Json(ready, status_code=200 if ready.ready else 503)

    @app.get("/metrics", tags=["health"], summary="Prometheus metrics (a token with metrics: true).")
    async def prometheus(request: Request) -> Response:
        if not caller(request).metrics:  # its labels name knowledge bases outside the caller's scope
            return problem(403, "forbidden", "this token may not read /metrics (give it metrics: true)")
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/knowledgebases", tags=["knowledge bases"], summary="The knowledge bases in the caller's scope.")
    async def list_kbs(request: Request) -> dict[str, list[KnowledgeBaseSummary]]:
        principal = caller(request)
        return {"items": await run(request, lambda: service.knowledge_bases(principal))}

    @app.get(
        "/v1/knowledgebases/{name}",
        tags=["knowledge bases"],
        summary="One knowledge base in detail.",
        response_model=KnowledgeBaseDetail,
    )
    async def get_kb(name: Name, request: Request) -> Response:
        principal = caller(request)
        detail = await run(request, lambda: service.describe(principal, name))
        request.state.outcome = {"knowledgeBase": detail.name, "version": detail.version}
        return _Json(detail)

    @app.post(
        "/v1/knowledgebases/{name}/query",
        tags=["retrieval"],
        summary="The chunks most relevant to a question, ranked, within threshold and token budget.",
        response_model=QueryResult,
    )
    async def query(name: Name, body: QueryRequest, request: Request) -> Response:
        return _Json(await answer(name, body, request))

    @app.post(
        "/v1/knowledgebases/{name}/context",
        tags=["retrieval"],
        summary="The grounded context block for a question (or an explicit 'nothing relevant' block).",
        response_model=GroundedContext,
    )
    async def context(name: Name, body: QueryRequest, request: Request) -> Response:
        return _Json(GroundedContext.of(await answer(name, body, request)))

    @app.post(
        "/v1/knowledgebases/{name}/ask",
        tags=["answers"],
        summary="An answer from the knowledge base only, citing its passages; no model call when nothing is relevant.",
        response_model=AskResult,
    )
    async def ask(name: Name, body: AskRequest, request: Request) -> Response:
        principal = caller(request)
        result = await run(
            request, lambda: service.ask(principal, name, body.question, body.options()), timeout=ask_timeout
        )
        observed(request, result.retrieval, principal, reason=result.reason, chatModel=result.model)
        return _Json(result)

    @app.post(
        "/v1/query",
        tags=["retrieval"],
        summary="One question to several knowledge bases, one fused ranking.",
        response_model=FederatedResult,
    )
    async def query_many(body: MultiQueryRequest, request: Request) -> Response:
        principal = caller(request)
        if body.knowledge_bases and body.selector is not None:
            raise BadRequest("give knowledgeBases or selector, not both")
        selector = body.label_selector()
        result = await run(
            request,
            lambda: service.query_many(
                principal, body.question, body.options(), names=body.knowledge_bases, selector=selector
            ),
        )
        request.state.outcome = {
            "knowledgeBase": ",".join(result.knowledge_bases),
            "hits": len(result.hits),
            "bestScore": max((h.score for h in result.hits), default=None),
        }
        return _Json(result)

    if mcp_app is not None:
        app.router.routes.extend(mcp_app.routes)  # /mcp itself, without a mount's redirect to /mcp/

    @app.middleware("http")
    async def observe(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        start = time.perf_counter()
        request_id = request.headers.get("x-request-id", "")[:64] or secrets.token_hex(8)
        principal = tokens.authenticate(request.headers.get("authorization"))
        if principal is None and request.url.path not in PUBLIC_PATHS:
            response: Response = problem(
                401, "unauthorized", "a valid bearer token is required", {"WWW-Authenticate": "Bearer"}
            )
        else:
            request.state.principal = principal
            try:
                response = await call_next(request)
            except Exception as exc:  # what no handler took: still a problem body, a log line and a count
                response = internal_error(exc)
        route = request.scope.get("route")
        path = getattr(route, "path", None) or "unmatched"
        outcome: dict[str, Any] = getattr(request.state, "outcome", {})
        seconds = time.perf_counter() - start
        error = response.headers.get("x-kbctl-error")
        metrics.observe(
            route=path,
            status=response.status_code,
            seconds=seconds,
            knowledge_base=str(outcome.get("knowledgeBase", "")),
            hits=outcome.get("hits") if path.endswith(("/query", "/context", "/ask")) else None,
            error=error,
        )
        response.headers["x-request-id"] = request_id
        if path not in ("/healthz", "/metrics"):
            log_request(
                requestId=request_id,
                method=request.method,
                route=path,
                status=response.status_code,
                ms=round(seconds * 1000, 2),
                token=principal.name if principal is not None else None,
                error=error,
                **outcome,
            )
        return response

    app.add_middleware(BodyLimit, limit=MAX_BODY_BYTES, timeout=body_timeout)
    return app
