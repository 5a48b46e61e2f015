"""Every error the HTTP API returns: a JSON problem body (RFC 9457: type, title, status, detail), never a traceback."""

from __future__ import annotations

import logging
import secrets
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from kbctl.errors import ChatError, EmbeddingError, KbctlError, NotFoundError, RerankError, StoreError
from kbctl.userconfig import redact

__all__ = ["BadRequest", "install_handlers", "internal_error", "problem", "problem_body"]

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


class BadRequest(Exception):
    """A request the API understood but cannot serve as asked (an option the knowledge base cannot honour)."""


def problem_body(status: int, kind: str, detail: str) -> dict[str, Any]:
    """The JSON of a problem: its type (`/problems/<kind>`), title, status and detail."""
    return {"type": f"/problems/{kind}", "title": _TITLES.get(status, "Error"), "status": status, "detail": detail}


def problem(status: int, kind: str, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """A problem response; `kind` becomes its type (`/problems/<kind>`) and the `errors` metric's label."""
    body = problem_body(status, kind, detail)
    response = JSONResponse(body, status_code=status, headers=headers, media_type="application/problem+json")
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


def internal_error(exc: BaseException) -> JSONResponse:
    """A 500 whose detail carries an id that the log line of the error also has; never the internals."""
    error_id = secrets.token_hex(6)
    log.error("internal error %s: %s", error_id, redact(f"{type(exc).__name__}: {exc}"), exc_info=exc)
    return problem(500, "internal", f"internal error (id {error_id}, in the server's log)")
