"""The HTTP API of `kbctl serve`: routes, and the middleware that authenticates, bounds, logs and counts.

Every route but the health checks and the API's own description needs a valid bearer token when tokens are
configured; a knowledge base outside the token's scope answers 404, as one that does not exist.

The OpenAPI document (`/openapi.json`) is fit for code generation: stable camelCase operationIds, the bearer
scheme on every route that needs it, examples of every body, and each route's error statuses as `Problem` bodies
(`application/problem+json`), the only error body the server sends.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal, TypeVar

import anyio
from fastapi import Body, FastAPI, Path, Query, Request, Response
from fastapi.responses import PlainTextResponse
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import AfterValidator, BaseModel, ConfigDict
from pydantic_core import PydanticCustomError
from starlette.applications import Starlette

from kbctl import (
    AskResult,
    FederatedResult,
    GroundedContext,
    KnowledgeBaseDetail,
    KnowledgeBaseSummary,
    QueryOptions,
    QueryResult,
    Readiness,
)
from kbctl._version import __version__
from kbctl.manifest import check_dns_label
from kbctl.manifest.selectors import parse_selector
from kbctl.serve.auth import Principal, Tokens
from kbctl.serve.console import Console
from kbctl.serve.limits import DEFAULT_BODY_TIMEOUT, BodyLimit
from kbctl.serve.logs import log_request
from kbctl.serve.mcp import build_mcp
from kbctl.serve.metrics import CONTENT_TYPE_LATEST, Metrics
from kbctl.serve.problems import BadRequest, Problem, install_handlers, internal_error, problem, problem_responses
from kbctl.serve.requests import (
    ASK_EXAMPLES,
    MAX_BODY_BYTES,
    MULTI_QUERY_EXAMPLES,
    NAME_EXAMPLES,
    NAME_SCHEMA,
    QUERY_EXAMPLES,
    SELECTOR_FORMS,
    AskRequest,
    MultiQueryRequest,
    QueryRequest,
)
from kbctl.serve.retrievals import RetrievalLog, logged, without_trace
from kbctl.serve.service import RetrievalService
from kbctl.serve.tracing import trace_members, trace_query

__all__ = ["BEARER_SCHEME", "PUBLIC_PATHS", "create_app"]

PUBLIC_PATHS = frozenset({"/healthz", "/readyz", "/docs", "/openapi.json"})
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
BEARER_SCHEME: Final = "bearerAuth"  # the OpenAPI security scheme of the token routes
BODY_ERRORS: Final = (400, 408, 413, 415, 422)  # what a route with a JSON body may answer of the body
RETRIEVAL_ERRORS: Final = (*BODY_ERRORS, 404, 502, 503, 504)
T = TypeVar("T")
Name = Annotated[
    str,
    Path(description="The knowledge base's name.", json_schema_extra=NAME_SCHEMA, openapi_examples=NAME_EXAMPLES),
    AfterValidator(check_dns_label),  # a name no knowledge base can have is a 422, before the store
]


def _valid_selector(value: str | None) -> str | None:
    """A label selector that parses (refused with a 422 naming the field, never quoting the value)."""
    if value is not None:
        try:
            parse_selector(value)
        except ValueError:
            raise PydanticCustomError(
                "selector", f"not a label selector (empty or malformed): use {SELECTOR_FORMS}"
            ) from None
    return value


SelectorQuery = Annotated[
    str | None,
    Query(max_length=1_000, description="A label selector (team=support,tier!=draft): only the matching ones."),
    AfterValidator(_valid_selector),  # a malformed selector is a 422, as /v1/query's, not ignored
]


def _declares(*statuses: int, secured: bool = True, more: dict[int | str, Any] | None = None) -> dict[str, Any]:
    """A route's OpenAPI declarations: its error statuses (and 500, which any route may answer) as problem
    bodies, `more` responses, and, unless the route is public, the bearer scheme and its 401."""
    declared = {**problem_responses(*{*statuses, 500, *((401,) if secured else ())}), **(more or {})}
    responses = dict(sorted(declared.items(), key=lambda item: str(item[0])))
    if not secured:
        return {"responses": responses}
    return {"responses": responses, "openapi_extra": {"security": [{BEARER_SCHEME: []}]}}


class Health(BaseModel):
    """`/healthz`: the process is up."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"status": "ok"}]})
    status: Literal["ok"] = "ok"


class KnowledgeBaseList(BaseModel):
    """`/v1/knowledgebases`: the knowledge bases in the caller's scope, by name."""

    items: list[KnowledgeBaseSummary]


class _Api(FastAPI):
    """FastAPI whose OpenAPI document also has what the routes' declarations refer to: the bearer scheme and the
    Problem body."""

    def openapi(self) -> dict[str, Any]:
        if self.openapi_schema is None:
            document = super().openapi()
            components = document.setdefault("components", {})
            schemas = {**components.get("schemas", {}), "Problem": Problem.model_json_schema()}
            components["schemas"] = dict(sorted(schemas.items()))
            components["securitySchemes"] = {
                BEARER_SCHEME: {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A token of the server's configuration (serve.tokens), or a JWT of its "
                    "serve.oidc issuer. A server without tokens (loopback only) does not check it.",
                }
            }
        return self.openapi_schema or {}


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
    retrieval_log: RetrievalLog | None = None,  # records each retrieval served (kbctl.serve.retrievals)
    console: bool = True,
) -> FastAPI:
    """The ASGI app over `service`; `host` is the address served (the MCP endpoint checks Host headers against it
    on loopback); `request_timeout` bounds every request's work (504 after it), `ask_timeout` that of an answer
    (its chat model call included), `body_timeout` the arrival of a request's body (408 after it); `threads`
    caps the worker threads that run requests' blocking work (anyio's default, 40, when None); `console` serves
    the web console (kbctl.serve.console) at `/`, behind the same tokens."""
    metrics = Metrics()
    lens = Console(service, tokens.authenticate, timeout=request_timeout) if console else None
    mcp_server = build_mcp(service, ask_timeout=ask_timeout, retrieval_log=retrieval_log) if mcp else None
    app = _Api(
        title="kbctl",
        version=__version__,
        summary="Retrieval from kbctl knowledge bases: grounded context for agents.",
        lifespan=_lifespan(threads, mcp_server, retrieval_log),
        redoc_url=None,
    )
    install_handlers(app)
    serving = _Serving(service, request_timeout, ask_timeout, retrieval_log)
    _health_routes(app, serving, metrics)
    _knowledge_base_routes(app, serving)
    _retrieval_routes(app, serving)
    _answer_routes(app, serving)
    _federated_routes(app, serving)
    if mcp_server is not None:  # /mcp itself, without a mount's redirect to /mcp/
        app.router.routes.extend(_mcp_app(mcp_server, host).routes)
    if lens is not None:
        lens.install(app)
    _install_middleware(app, tokens, lens, metrics)
    app.add_middleware(BodyLimit, limit=MAX_BODY_BYTES, timeout=body_timeout)
    return app


def _mcp_app(mcp_server: MCPServer[Any], host: str) -> Starlette:
    """The MCP server's streamable HTTP app (its one route, `/mcp`), checking Host headers on loopback."""
    security = None if host in LOOPBACK_HOSTS else TransportSecuritySettings(enable_dns_rebinding_protection=False)
    return mcp_server.streamable_http_app(
        streamable_http_path="/mcp",
        stateless_http=True,
        json_response=True,
        max_request_body_size=MAX_BODY_BYTES,
        transport_security=security,
        host=host,
    )


def _lifespan(
    threads: int | None, mcp_server: MCPServer[Any] | None, retrieval_log: RetrievalLog | None
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's lifespan: the worker threads' cap, the MCP session manager running, the retrieval log closed."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if threads is not None:
            anyio.to_thread.current_default_thread_limiter().total_tokens = threads
        try:
            if mcp_server is None:
                yield
                return
            async with mcp_server.session_manager.run():
                yield
        finally:
            if retrieval_log is not None:  # what it has queued is written before the process ends
                await anyio.to_thread.run_sync(retrieval_log.close)

    return lifespan


def _caller(request: Request) -> Principal:
    principal: Principal = request.state.principal
    return principal


@dataclass(frozen=True)
class _Serving:
    """What the routes share: the service, the bounds of a request's work, and the retrieval log (None: off)."""

    service: RetrievalService
    request_timeout: float
    ask_timeout: float
    retrieval_log: RetrievalLog | None

    async def run(self, request: Request, fn: Callable[[], T], timeout: float | None = None) -> T:
        """`fn` on a worker thread, bounded by the request timeout; a ValueError of the options is a 400."""
        timeout = self.request_timeout if timeout is None else timeout
        try:
            with anyio.fail_after(timeout):
                return await anyio.to_thread.run_sync(fn, abandon_on_cancel=True)
        except TimeoutError:
            raise TimeoutError(f"the request took longer than {timeout:g} s") from None
        except ValueError as exc:
            raise BadRequest(str(exc)) from exc

    def options(self, body: QueryRequest) -> QueryOptions:
        """The body's query options, explained when the retrieval log records them."""
        return body.options() if self.retrieval_log is None else RetrievalLog.explained(body.options())

    async def answer(self, name: str, body: QueryRequest, request: Request) -> QueryResult:
        """The query of `name` the body asks for, logged, counted and traced (for /query and /context), and
        recorded in the retrieval log when there is one."""
        principal = _caller(request)
        options = self.options(body)
        operation = "context" if request.url.path.endswith("/context") else "query"
        result = await logged(
            self.retrieval_log,
            lambda: self.run(request, lambda: self.service.query(principal, name, body.question, options)),
            "http",
            operation,
            principal,
            [name],
            body.question,
        )
        _observed(request, result, principal)
        return without_trace(result, body.explain)


def _observed(request: Request, result: QueryResult, principal: Principal, **extra: Any) -> None:
    """What the request's log line and metrics say of a query (and `extra`), and its trace."""
    request.state.outcome = {
        "knowledgeBase": result.knowledge_base,
        "version": result.version,
        "hits": len(result.hits),
        "bestScore": result.best_score,
        **extra,
    }
    trace_query(result, route=request.url.path, principal=principal.name)


def _health_routes(app: FastAPI, serving: _Serving, metrics: Metrics) -> None:
    """/healthz, /readyz and /metrics."""

    @app.get(
        "/healthz",
        tags=["health"],
        summary="The process is up.",
        operation_id="checkHealth",
        response_description="The process is up.",
        response_model=Health,
        **_declares(secured=False),
    )
    async def healthz() -> Response:
        return _Json(Health())

    @app.get(
        "/readyz",
        tags=["health"],
        summary="The database answers, its schema is current, the model is loaded.",
        operation_id="checkReadiness",
        response_description='Ready: every check is "ok".',
        response_model=Readiness,
        **_declares(
            504, secured=False, more={503: {"model": Readiness, "description": "Not ready: each check's reason."}}
        ),
    )
    async def readyz(request: Request) -> Response:
        ready: Readiness = await serving.run(request, serving.service.readiness)
        return _Json(ready, status_code=200 if ready.ready else 503)

    @app.get(
        "/metrics",
        tags=["health"],
        summary="Prometheus metrics (a token with metrics: true).",
        operation_id="getMetrics",
        response_description="The metrics, in the Prometheus text format.",
        response_class=PlainTextResponse,
        **_declares(403),
    )
    async def prometheus(request: Request) -> Response:
        if not _caller(request).metrics:  # its labels name knowledge bases outside the caller's scope
            return problem(403, "forbidden", "this token may not read /metrics (give it metrics: true)")
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)


def _knowledge_base_routes(app: FastAPI, serving: _Serving) -> None:
    """/v1/knowledgebases and /v1/knowledgebases/{name}."""

    @app.get(
        "/v1/knowledgebases",
        tags=["knowledge bases"],
        summary="The knowledge bases in the caller's scope.",
        operation_id="listKnowledgeBases",
        response_description="The knowledge bases in the caller's scope, by name.",
        response_model=KnowledgeBaseList,
        **_declares(422, 503, 504),
    )
    async def list_kbs(request: Request, selector: SelectorQuery = None) -> Response:
        principal = _caller(request)
        parsed = parse_selector(selector) if selector is not None else None
        listed = await serving.run(request, lambda: serving.service.knowledge_bases(principal, parsed))
        return _Json(KnowledgeBaseList(items=listed))

    @app.get(
        "/v1/knowledgebases/{name}",
        tags=["knowledge bases"],
        summary="One knowledge base in detail.",
        operation_id="getKnowledgeBase",
        response_description="The knowledge base: its spec in force and the state of each source.",
        response_model=KnowledgeBaseDetail,
        **_declares(404, 422, 503, 504),
    )
    async def get_kb(name: Name, request: Request) -> Response:
        principal = _caller(request)
        detail = await serving.run(request, lambda: serving.service.describe(principal, name))
        request.state.outcome = {"knowledgeBase": detail.name, "version": detail.version}
        return _Json(detail)


def _retrieval_routes(app: FastAPI, serving: _Serving) -> None:
    """A knowledge base's /query and /context."""

    @app.post(
        "/v1/knowledgebases/{name}/query",
        tags=["retrieval"],
        summary="The chunks most relevant to a question, ranked, within threshold and token budget.",
        operation_id="queryKnowledgeBase",
        response_description="The ranked hits (none when nothing is relevant).",
        response_model=QueryResult,
        **_declares(*RETRIEVAL_ERRORS),
    )
    async def query(
        name: Name, body: Annotated[QueryRequest, Body(openapi_examples=QUERY_EXAMPLES)], request: Request
    ) -> Response:
        return _Json(await serving.answer(name, body, request))

    @app.post(
        "/v1/knowledgebases/{name}/context",
        tags=["retrieval"],
        summary="The grounded context block for a question (or an explicit 'nothing relevant' block).",
        operation_id="getKnowledgeBaseContext",
        response_description="The grounded context block and its passages.",
        response_model=GroundedContext,
        **_declares(*RETRIEVAL_ERRORS),
    )
    async def context(
        name: Name, body: Annotated[QueryRequest, Body(openapi_examples=QUERY_EXAMPLES)], request: Request
    ) -> Response:
        return _Json(GroundedContext.of(await serving.answer(name, body, request)))


def _answer_routes(app: FastAPI, serving: _Serving) -> None:
    """A knowledge base's /ask."""

    @app.post(
        "/v1/knowledgebases/{name}/ask",
        tags=["answers"],
        summary="An answer from the knowledge base only, citing its passages; no model call when nothing is relevant.",
        operation_id="askKnowledgeBase",
        response_description="The answer and its citations, or `answer: null` with `reason: noContext`.",
        response_model=AskResult,
        **_declares(*RETRIEVAL_ERRORS),
    )
    async def ask(
        name: Name, body: Annotated[AskRequest, Body(openapi_examples=ASK_EXAMPLES)], request: Request
    ) -> Response:
        principal = _caller(request)
        options = serving.options(body)
        result = await logged(
            serving.retrieval_log,
            lambda: serving.run(
                request,
                lambda: serving.service.ask(principal, name, body.question, options),
                timeout=serving.ask_timeout,
            ),
            "http",
            "ask",
            principal,
            [name],
            body.question,
        )
        _observed(request, result.retrieval, principal, reason=result.reason, chatModel=result.model)
        return _Json(without_trace(result, body.explain))


def _federated_routes(app: FastAPI, serving: _Serving) -> None:
    """/v1/query: one question to several knowledge bases."""

    @app.post(
        "/v1/query",
        tags=["retrieval"],
        summary="One question to several knowledge bases, one fused ranking.",
        operation_id="queryAcrossKnowledgeBases",
        response_description="One fused ranking, each hit naming its knowledge base and version.",
        response_model=FederatedResult,
        **_declares(*RETRIEVAL_ERRORS),
    )
    async def query_many(
        body: Annotated[MultiQueryRequest, Body(openapi_examples=MULTI_QUERY_EXAMPLES)], request: Request
    ) -> Response:
        principal = _caller(request)
        if body.knowledge_bases and body.selector is not None:
            raise BadRequest("give knowledgeBases or selector, not both")
        selector = body.label_selector()
        options = serving.options(body)
        each: list[QueryResult] = []  # each knowledge base's own result, with its trace, for the retrieval log

        def members() -> FederatedResult:
            with trace_members(route=request.url.path, principal=principal.name):
                return serving.service.query_many(
                    principal,
                    body.question,
                    options,
                    names=body.knowledge_bases,
                    selector=selector,
                    on_member=each.append if serving.retrieval_log is not None else None,
                )

        result = await logged(
            serving.retrieval_log,
            lambda: serving.run(request, members),
            "http",
            "federated",
            principal,
            body.knowledge_bases,
            body.question,
            members=each,
        )
        request.state.outcome = {
            "knowledgeBase": ",".join(result.knowledge_bases),
            "hits": len(result.hits),
            "bestScore": max((h.similarity for h in result.hits), default=None),  # a cosine, as a single query's
        }
        return _Json(result)


def _install_middleware(app: FastAPI, tokens: Tokens, lens: Console | None, metrics: Metrics) -> None:
    """The middleware that authenticates each request (its bearer, or on the console's pages its session),
    refuses one without a caller unless its path is public, and logs and counts every answer."""

    def authenticated(request: Request) -> Principal | None:
        """The caller: its bearer header; on the console's pages without one, its session (kbctl.serve.console)."""
        header = request.headers.get("authorization")
        if lens is not None and header is None and lens.handles(request.url.path):
            return tokens.authenticate(None) or lens.principal(request)
        return tokens.authenticate(header)

    def refused(request: Request) -> Response:
        if lens is not None and lens.handles(request.url.path):
            return lens.unauthenticated(request)
        return problem(401, "unauthorized", "a valid bearer token is required", {"WWW-Authenticate": "Bearer"})

    @app.middleware("http")
    async def observe(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        start = time.perf_counter()
        request_id = request.headers.get("x-request-id", "")[:64] or secrets.token_hex(8)
        principal = authenticated(request)
        public = request.url.path in PUBLIC_PATHS or (lens is not None and lens.public(request.url.path))
        if principal is None and not public:
            response: Response = refused(request)
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
