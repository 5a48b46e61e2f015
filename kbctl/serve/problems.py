"""Every error the HTTP API returns: a JSON problem body (RFC 9457: type, title, status, detail), never a traceback.

`Problem` is that body's model, and `problem_responses` what a route declares of it in the OpenAPI document: the
error statuses it can return, each as `application/problem+json` with an example.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any, Final

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from kbctl.errors import ChatError, EmbeddingError, KbctlError, NotFoundError, RerankError, StoreError, UsageError
from kbctl.userconfig import redact

__all__ = [
    "PROBLEM_MEDIA_TYPE",
    "BadRequest",
    "Problem",
    "install_handlers",
    "internal_error",
    "problem",
    "problem_body",
    "problem_kind",
    "problem_responses",
]

log = logging.getLogger("kbctl.serve")

_TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}
PROBLEM_MEDIA_TYPE: Final = "application/problem+json"

# What each status a route may declare means, and an example of its body: (kind, when, example detail).
_DECLARED: Final[dict[int, tuple[str, str, str]]] = {
    400: (
        "invalid-request",
        "The body is not valid JSON, or asks for what cannot be served (`rerank: true` without a reranker;"
        " `knowledgeBases` and `selector` together).",
        "the body is not valid JSON",
    ),
    401: (
        "unauthorized",
        "No bearer token, or not a valid one (with `WWW-Authenticate: Bearer`).",
        "a valid bearer token is required",
    ),
    403: (
        "forbidden",
        "The token may not read this route.",
        "this token may not read /metrics (give it metrics: true)",
    ),
    404: (
        "not-found",
        "No such knowledge base, one outside the token's scope (the same answer), or none published yet.",
        'knowledgebase "client-service-policy" not found',
    ),
    408: (
        "request-timeout",
        "The body did not arrive within the server's body timeout; the connection is closed.",
        "the request body was not received within 30 s",
    ),
    413: ("body-too-large", "The body is over 64 KiB, announced or not.", "the request body is over 65536 bytes"),
    415: (
        "unsupported-media-type",
        "The body is not `application/json`.",
        "send the body as JSON (Content-Type: application/json)",
    ),
    422: (
        "invalid-request",
        "A field is missing, unknown, of the wrong JSON type or out of bounds, or a knowledge-base name is one no "
        "knowledge base can have; `detail` names the field, never the value.",
        "topK: Input should be less than or equal to 100",
    ),
    500: (
        "internal",
        "A bug: `detail` carries an id that the server's log line of the error also has.",
        "internal error (id 3f2a9c01b7d4, in the server's log)",
    ),
    502: (
        "model-unavailable",
        "A model provider failed: embedding or rerank (`/problems/model-unavailable`), or for answers the chat "
        "model, or none is configured (`/problems/chat-unavailable`).",
        "the embedding provider did not answer",
    ),
    503: (
        "store-unavailable",
        "The database is unreachable, or no pooled connection became free in time.",
        "the knowledge base store is unavailable; try again",
    ),
    504: ("timeout", "The request took longer than the server's request timeout.", "the request took longer than 30 s"),
}


class Problem(BaseModel):
    """An error body (RFC 9457), the only one the API sends."""

    model_config = ConfigDict(
        title="Problem",
        json_schema_extra={
            "examples": [
                {
                    "type": "/problems/not-found",
                    "title": "Not Found",
                    "status": 404,
                    "detail": 'knowledgebase "client-service-policy" not found',
                }
            ]
        },
    )

    type: str = Field(description="What went wrong, as `/problems/<kind>` (relative to the server).")
    title: str = Field(description="The status's reason phrase.")
    status: int = Field(ge=400, le=599, description="The HTTP status of the response.")
    detail: str = Field(description="What went wrong with this request; never a value it sent, nor internals.")


class BadRequest(Exception):
    """A request the API understood but cannot serve as asked (an option the knowledge base cannot honour)."""


def problem_body(status: int, kind: str, detail: str) -> dict[str, Any]:
    """The JSON of a problem: its type (`/problems/<kind>`), title, status and detail."""
    return Problem(
        type=f"/problems/{kind}", title=_TITLES.get(status, "Error"), status=status, detail=detail
    ).model_dump()


def problem(status: int, kind: str, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """A problem response; `kind` becomes its type (`/problems/<kind>`) and the `errors` metric's label."""
    body = problem_body(status, kind, detail)
    response = JSONResponse(body, status_code=status, headers=headers, media_type=PROBLEM_MEDIA_TYPE)
    response.headers["x-kbctl-error"] = kind
    return response


def _validation_detail(errors: Any) -> str:
    """The first validation error as `field: message`, never quoting the input."""
    first = errors[0] if errors else {}
    if first.get("type") == "json_invalid":
        return "the body is not valid JSON"
    where = ".".join(str(p) for p in first.get("loc", ())[1:]) or "body"  # without "body", "path"...
    message = str(first.get("msg", "invalid"))
    if first.get("type") == "extra_forbidden":
        message = "unknown field"
    return f"{where}: {message}"


def install_handlers(app: FastAPI) -> None:
    """Turn every exception into a problem response."""

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if request.method == "POST" and media != "application/json" and not media.endswith("+json"):
            return problem(415, "unsupported-media-type", "send the body as JSON (Content-Type: application/json)")
        status = 400 if errors and errors[0].get("type") == "json_invalid" else 422
        return problem(status, "invalid-request", _validation_detail(errors))

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        kinds = {404: "not-found", 405: "method-not-allowed", 401: "unauthorized"}
        return problem(exc.status_code, kinds.get(exc.status_code, "http"), str(exc.detail), dict(exc.headers or {}))

    @app.exception_handler(BadRequest)
    async def _bad(request: Request, exc: BadRequest) -> JSONResponse:
        return problem(400, "invalid-request", redact(str(exc)))

    @app.exception_handler(NotFoundError)
    async def _missing(request: Request, exc: NotFoundError) -> JSONResponse:
        return problem(404, "not-found", redact(str(exc)))

    @app.exception_handler(TimeoutError)
    async def _slow(request: Request, exc: TimeoutError) -> JSONResponse:
        return problem(504, "timeout", str(exc) or "the request took too long")

    @app.exception_handler(KbctlError)
    async def _ours(request: Request, exc: KbctlError) -> JSONResponse:
        if isinstance(exc, StoreError):
            log.warning("store unavailable: %s", redact(str(exc)))
            return problem(503, "store-unavailable", "the knowledge base store is unavailable; try again")
        if isinstance(exc, EmbeddingError | RerankError):
            return problem(502, "model-unavailable", redact(str(exc)))
        if isinstance(exc, ChatError):  # the chat model failed, or none is configured for the knowledge base
            return problem(502, "chat-unavailable", redact(str(exc)))
        return internal_error(exc)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        return internal_error(exc)


def problem_kind(exc: BaseException) -> str:
    """The kind of problem an exception of a route becomes (`/problems/<kind>`), as the handlers above answer it:
    what the retrieval log records of a failure."""
    if isinstance(exc, BadRequest | ValueError | UsageError):
        return "invalid-request"
    if isinstance(exc, NotFoundError):
        return "not-found"
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, StoreError):
        return "store-unavailable"
    if isinstance(exc, EmbeddingError | RerankError):
        return "model-unavailable"
    if isinstance(exc, ChatError):
        return "chat-unavailable"
    return "internal"


def internal_error(exc: BaseException) -> JSONResponse:
    """A 500 whose detail carries an id that the log line of the error also has; never the internals."""
    error_id = secrets.token_hex(6)
    log.error("internal error %s: %s", error_id, redact(f"{type(exc).__name__}: {exc}"), exc_info=exc)
    return problem(500, "internal", f"internal error (id {error_id}, in the server's log)")


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI `responses` of these error statuses (for a route's `responses=`): a Problem body each, as
    `application/problem+json`, with what the status means and an example."""
    declared: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        kind, when, detail = _DECLARED[status]
        media: dict[str, Any] = {
            "schema": {"$ref": "#/components/schemas/Problem"},
            "example": problem_body(status, kind, detail),
        }
        declared[status] = {"description": when, "content": {PROBLEM_MEDIA_TYPE: media}}
        if status == 401:
            declared[status]["headers"] = {
                "WWW-Authenticate": {
                    "description": "The scheme to authenticate with.",
                    "schema": {"type": "string", "const": "Bearer"},
                }
            }
    return declared
