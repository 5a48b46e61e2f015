"""What kbctl's clients of HTTP model APIs (embeddings, rerank) share: the key, retry decisions, error text.

A client sends its request, then hands an exception to `transport_failure` or the response to
`check_response`: both raise `Retryable` for what is worth another attempt (timeouts, connection errors,
429 and 5xx) and the caller's own error type for everything else, with a message that names the endpoint
and never the key.
"""

from __future__ import annotations

import email.utils
import json
import ssl
from collections.abc import Callable, Generator, Mapping
from datetime import UTC, datetime
from typing import Any

import httpx
from tenacity import RetryCallState, wait_exponential, wait_random

from kbctl._version import __version__
from kbctl.errors import KbctlError

__all__ = [
    "BearerAuth",
    "Retryable",
    "bearer_auth",
    "check_response",
    "error_message",
    "plural",
    "retry_after",
    "retry_after_seconds",
    "retry_wait",
    "status_line",
    "transport_failure",
    "user_agent",
]

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
AUTH_STATUSES = frozenset({401, 403})
MESSAGE_LIMIT = 200
TIMEOUT_KINDS: dict[type[Exception], str] = {
    httpx.ConnectTimeout: "connect timed out",
    httpx.ReadTimeout: "read timed out",
    httpx.WriteTimeout: "write timed out",
    httpx.PoolTimeout: "no free connection",
}


class BearerAuth(httpx.Auth):
    """Adds `Authorization: Bearer <key>`; its repr names the variable, never the key."""

    def __init__(self, key: str, variable: str) -> None:
        self._key = key
        self.variable = variable

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = f"Bearer {self._key}"
        yield request

    def redact(self, text: str) -> str:
        """`text` with the key replaced by a mention of its variable."""
        return text.replace(self._key, f"${self.variable}")

    def __repr__(self) -> str:
        return f"<bearer token from ${self.variable}>"


def bearer_auth(
    variable: str | None, environ: Mapping[str, str], model_id: str, error: type[KbctlError]
) -> BearerAuth | None:
    """The auth for the key in environment variable `variable` (None: no key), read now; unset fails."""
    if variable is None:
        return None
    key = (environ.get(variable) or "").strip()
    if not key:
        raise error(f"environment variable {variable} is not set (it holds the API key for {model_id})")
    return BearerAuth(key, variable)


class Retryable(Exception):
    """One attempt failed in a way worth retrying; `retry_after` is the server's wish in seconds."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


def retry_wait(backoff_base: float, max_retry_after: float) -> Callable[[RetryCallState], float]:
    """A tenacity `wait`: the server's Retry-After when it gave one (capped at `max_retry_after`), else
    jittered exponential backoff (base, 2x base, 4x base... plus up to base at random, same cap)."""
    backoff = wait_exponential(multiplier=backoff_base, max=max_retry_after) + wait_random(0, backoff_base)

    def wait(state: RetryCallState) -> float:
        failure = state.outcome.exception() if state.outcome is not None else None
        if isinstance(failure, Retryable) and failure.retry_after is not None:
            return min(failure.retry_after, max_retry_after)
        return float(backoff(state))

    return wait


def user_agent() -> str:

    return f"kbctl/{__version__}"


def status_line(response: httpx.Response) -> str:
    phrase = httpx.codes.get_reason_phrase(response.status_code) or response.reason_phrase
    return f"HTTP {response.status_code} {phrase}".rstrip()


def retry_after(headers: httpx.Headers) -> float | None:
    """Seconds from `retry-after-ms`, else `Retry-After` (delta-seconds or HTTP date); None when absent or bad."""
    millis = headers.get("retry-after-ms", "").strip()
    try:
        if millis and float(millis) >= 0:
            return float(millis) / 1000
    except ValueError:
        pass
    return retry_after_seconds(headers.get("retry-after"))


def error_message(response: httpx.Response, auth: BearerAuth | None) -> str:
    """An error body's short message (error.message, error, detail, message or plain text), key redacted, cut."""
    message: Any = None
    try:
        payload = json.loads(response.content)
    except (ValueError, RecursionError):
        media = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if media == "text/plain":
            message = response.text
    else:
        if isinstance(payload, dict):
            error = payload.get("error")
            if isinstance(error, dict):
                error = error.get("message")
            message = next((m for m in (error, payload.get("detail"), payload.get("message")) if m), None)
    if message is None:
        return ""
    text = " ".join((message if isinstance(message, str) else json.dumps(message)).split())
    if auth is not None:
        text = auth.redact(text)
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 3] + "..."


def _tls_failure(exc: BaseException) -> ssl.SSLError | None:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def transport_failure(exc: httpx.HTTPError, url: str, timeout: float, error: type[KbctlError], what: str) -> Exception:
    """The exception to raise (from `exc`) when sending to `url` failed: Retryable for timeouts and
    connection errors, `error` for TLS failures and anything else; `what` is "embedding" or "rerank"."""
    if isinstance(exc, httpx.TimeoutException):
        return Retryable(f"{TIMEOUT_KINDS.get(type(exc), 'timed out')} after {timeout:g} s")
    if isinstance(exc, httpx.ConnectError):
        tls = _tls_failure(exc)
        if isinstance(tls, ssl.SSLCertVerificationError):
            return error(f"TLS certificate of {url} not accepted: {tls.verify_message}")
        if tls is not None:
            return error(f"TLS handshake with {url} failed: {tls.reason or tls}")
        return Retryable(f"cannot connect: {exc or type(exc).__name__}")
    if isinstance(exc, httpx.TransportError):
        return Retryable(f"connection error: {exc or type(exc).__name__}")
    return error(f"{what} request to {url} failed: {exc or type(exc).__name__}")


def check_response(
    response: httpx.Response, url: str, auth: BearerAuth | None, error: type[KbctlError], *, what: str, model: str
) -> httpx.Response:
    """`response` when it is a success; else raise Retryable (429, 5xx) or `error` naming the endpoint."""
    status = response.status_code
    if 200 <= status < 300:
        return response
    line = status_line(response)
    if status in RETRY_STATUSES:
        raise Retryable(line, retry_after=retry_after(response.headers))
    if status in AUTH_STATUSES:
        if auth is None:
            raise error(
                f"{what} endpoint {url} requires an API key ({line}); "
                "name the environment variable that holds it in api_key_env"
            )
        raise error(f"{what} endpoint {url} rejected the API key in ${auth.variable} ({line})")
    if status == 404:
        raise error(f"model '{model}' not found at {url} ({line})")
    message = error_message(response, auth)
    if not message and 300 <= status < 400 and "location" in response.headers:
        message = f"redirects to {response.headers['location']} (set base_url to the final address)"
    raise error(f"{line} from {url}: {message}" if message else f"{line} from {url}")


def retry_after_seconds(value: str | None) -> float | None:
    """Seconds from a Retry-After value (delta-seconds or HTTP date), or None when absent or unreadable."""
    value = (value or "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return seconds if seconds >= 0 else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())
