"""kbctl's one HTTP client policy (URL fetcher, embedder, reranker, chat): timeouts, retries, waits, error text.

Every client takes an `HttpPolicy` (its timeouts, retry count, backoff and the statuses it retries); each client's
own values are named in kbctl.defaults and built here (EMBEDDING_POLICY, RERANK_POLICY, CHAT_POLICY, URL_POLICY).
A client sends its request, then hands an httpx exception to `transport_failure`, or the response to
`retryable_response` / `check_response`. What is worth another attempt (timeouts, connection errors, 429 and
5xx) becomes `Retryable`, which `retry_wait` waits for (the server's Retry-After / retry-after-ms, else
jittered exponential backoff); everything else becomes the caller's own error. Messages name the endpoint,
never an API key; `TransportWording` keeps each caller's own words for transport failures.
"""

from __future__ import annotations

import email.utils
import functools
import json
import os
import ssl
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import httpx
from tenacity import RetryCallState, retry_if_exception_type, stop_after_attempt, wait_exponential, wait_random

from kbctl import defaults
from kbctl._version import __version__
from kbctl.errors import KbctlError, UsageError
from kbctl.userconfig import redact

__all__ = [
    "API_WORDING",
    "CHAT_POLICY",
    "EMBEDDING_POLICY",
    "FETCH_WORDING",
    "RERANK_POLICY",
    "RETRY_STATUSES",
    "URL_POLICY",
    "BearerAuth",
    "HttpPolicy",
    "Retryable",
    "TransportWording",
    "bearer_auth",
    "check_response",
    "error_message",
    "plural",
    "retry_after",
    "retry_policy",
    "retry_wait",
    "retryable_response",
    "status_line",
    "tls_cause",
    "tls_context",
    "transport_failure",
    "user_agent",
]

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
AUTH_STATUSES = frozenset({401, 403})
MESSAGE_LIMIT = 200


@functools.lru_cache(maxsize=4)
def _tls_context(cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext:
    return httpx.create_ssl_context(trust_env=True)


def tls_context() -> ssl.SSLContext:
    """The TLS context of kbctl's model clients (certifi's roots, or SSL_CERT_FILE / SSL_CERT_DIR when set), built
    once: building one reads the whole CA bundle, about 40 ms, which a client made per call would pay each time."""
    return _tls_context(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))


def user_agent() -> str:
    """The User-Agent of every request kbctl sends: `kbctl/<version>`."""
    return f"kbctl/{__version__}"


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


# ---- the API key ----


class BearerAuth(httpx.Auth):
    """Adds `Authorization: Bearer <key>`; its repr names the variable, never the key."""

    def __init__(self, key: str, variable: str) -> None:
        self._key = key
        self.variable = variable

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = f"Bearer {self._key}"
        yield request

    def redact(self, text: str) -> str:
        """`text` with the key (as is, or escaped as in a bytes repr) replaced by a mention of its variable."""
        for form in sorted({self._key, repr(self._key.encode())[2:-1]}, key=len, reverse=True):
            text = text.replace(form, f"${self.variable}")
        return text

    def __repr__(self) -> str:
        return f"<bearer token from ${self.variable}>"


def bearer_auth(
    variable: str | None, environ: Mapping[str, str], model_id: str, error: type[KbctlError]
) -> BearerAuth | None:
    """The auth for the key in environment variable `variable` (None: no key), read now; unset or unusable fails."""
    if variable is None:
        return None
    key = (environ.get(variable) or "").strip()
    if not key:
        raise error(f"environment variable {variable} is not set (it holds the API key for {model_id})")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in key):  # the HTTP stack would echo the key in its refusal
        raise error(
            f"environment variable {variable} holds control characters (line breaks?) that an HTTP header "
            f"cannot carry (it holds the API key for {model_id})"
        )
    return BearerAuth(key, variable)


# ---- retry decisions and waits ----


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


def retry_policy(retries: int, wait: Callable[[RetryCallState], float]) -> dict[str, Any]:
    """The arguments of a tenacity `Retrying` / `AsyncRetrying` of a model client: `retries` attempts after the
    first, on Retryable only, waiting as `wait` says, the last failure raised as it is."""
    return {
        "stop": stop_after_attempt(retries + 1),
        "wait": wait,
        "retry": retry_if_exception_type(Retryable),
        "reraise": True,
    }


@dataclass(frozen=True)
class HttpPolicy:
    """How one HTTP client waits and retries: the timeout of each request phase (seconds), how many attempts follow
    the first (`retries`), the jittered exponential backoff between them (`backoff_base`, capped with the server's
    Retry-After at `max_retry_after`) and the response statuses worth another attempt (timeouts and connection
    errors always are; see `transport_failure`)."""

    connect_timeout: float
    read_timeout: float
    write_timeout: float
    pool_timeout: float
    retries: int
    backoff_base: float
    max_retry_after: float
    retry_statuses: frozenset[int] = RETRY_STATUSES

    def __post_init__(self) -> None:
        for name in ("connect_timeout", "read_timeout", "write_timeout", "pool_timeout"):
            if not getattr(self, name) > 0:
                raise UsageError(f"{name} must be positive")
        for name in ("retries", "backoff_base", "max_retry_after"):
            if getattr(self, name) < 0:
                raise UsageError(f"{name} must not be negative")

    @classmethod
    def uniform(cls, timeout: float, *, retries: int, backoff_base: float, max_retry_after: float) -> HttpPolicy:
        """A policy with one timeout for every phase (connect, read, write, pool)."""
        if not timeout > 0:
            raise UsageError("timeout must be positive")
        return cls(timeout, timeout, timeout, timeout, retries, backoff_base, max_retry_after)

    def with_(self, *, timeout: float | None = None, retries: int | None = None, **fields: Any) -> HttpPolicy:
        """This policy with some values changed: `timeout` sets every phase's (a provider's `timeout`), other
        keywords name fields (`retries`, `backoff_base`, `read_timeout`...)."""
        if timeout is not None:
            if not timeout > 0:
                raise UsageError("timeout must be positive")
            fields |= dict.fromkeys(("connect_timeout", "read_timeout", "write_timeout", "pool_timeout"), timeout)
        if retries is not None:
            fields["retries"] = retries
        return replace(self, **fields)

    @property
    def timeout(self) -> httpx.Timeout:
        """The timeouts as httpx takes them."""
        return httpx.Timeout(
            connect=self.connect_timeout, read=self.read_timeout, write=self.write_timeout, pool=self.pool_timeout
        )

    def wait(self) -> Callable[[RetryCallState], float]:
        """The tenacity `wait` between attempts (see `retry_wait`)."""
        return retry_wait(self.backoff_base, self.max_retry_after)

    def retrying(self, wait: Callable[[RetryCallState], float] | None = None, **overrides: Any) -> dict[str, Any]:
        """The arguments of a tenacity `Retrying` / `AsyncRetrying` (see `retry_policy`); `overrides` replace some
        (e.g. `sleep`, or a `stop` that also watches a deadline)."""
        return retry_policy(self.retries, wait or self.wait()) | overrides

    def retryable(self, response: httpx.Response) -> Retryable | None:
        """A Retryable naming the status (with the server's Retry-After) when this policy retries it, else None."""
        return retryable_response(response, self.retry_statuses)


def status_line(status: int, reason_phrase: str = "") -> str:
    """The status as text, e.g. "HTTP 404 Not Found": the standard phrase of the status, else the server's."""
    phrase = httpx.codes.get_reason_phrase(status) or reason_phrase
    return f"HTTP {status} {phrase}".rstrip()


def retry_after(headers: httpx.Headers) -> float | None:
    """Seconds from `retry-after-ms`, else `Retry-After` (delta-seconds or HTTP date); None when absent or bad."""
    millis = headers.get("retry-after-ms", "").strip()
    try:
        if millis and float(millis) >= 0:
            return float(millis) / 1000
    except ValueError:
        pass
    return _retry_after_seconds(headers.get("retry-after"))


def _retry_after_seconds(value: str | None) -> float | None:
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


def retryable_response(response: httpx.Response, statuses: frozenset[int] = RETRY_STATUSES) -> Retryable | None:
    """A Retryable naming the status (with the server's Retry-After) for a status in `statuses` (429 and 5xx by
    default), else None."""
    if response.status_code not in statuses:
        return None
    return Retryable(status_line(response.status_code, response.reason_phrase), retry_after(response.headers))


# ---- transport failures ----


@dataclass(frozen=True)
class TransportWording:
    """How one caller words transport failures: `{where}` is the endpoint, `{what}` the caller's kind of request,
    `{seconds}` the timeout that ran out ("0.5 s"), `{error}` httpx's own text (or its exception's name)."""

    connect_timeout: str
    read_timeout: str
    write_timeout: str
    pool_timeout: str
    timeout: str  # any other timeout
    cannot_connect: str
    broken_exchange: str  # the server broke HTTP (e.g. closed the connection without an answer)
    connection_failed: str  # reading, writing or closing the connection failed; a proxy failed
    failed: str  # anything else: not retried


# The embedder's and the reranker's words ({what}: "embedding", "rerank"; {where}: the endpoint's URL).
API_WORDING = TransportWording(
    connect_timeout="connect timed out after {seconds}",
    read_timeout="read timed out after {seconds}",
    write_timeout="write timed out after {seconds}",
    pool_timeout="no free connection after {seconds}",
    timeout="timed out after {seconds}",
    cannot_connect="cannot connect: {error}",
    broken_exchange="connection error: {error}",
    connection_failed="connection error: {error}",
    failed="{what} request to {where} failed: {error}",
)
# The URL fetcher's words ({where}: host:port).
FETCH_WORDING = TransportWording(
    connect_timeout="connect timed out after {seconds}",
    read_timeout="read timed out after {seconds}",
    write_timeout="timed out talking to {where}",
    pool_timeout="timed out talking to {where}",
    timeout="timed out talking to {where}",
    cannot_connect="cannot connect to {where}: {error}",
    broken_exchange="{where} broke the HTTP exchange: {error}",
    connection_failed="connection to {where} failed: {error}",
    failed="request to {where} failed: {error}",
)


def tls_cause(exc: BaseException) -> ssl.SSLError | None:
    """The ssl.SSLError behind an exception (a TLS failure is not retried), if any in its chain."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, ssl.SSLError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _words(exc: httpx.HTTPError, wording: TransportWording, timeout: httpx.Timeout) -> tuple[str, float | None, bool]:
    """(template, seconds of the timeout that ran out, retryable) for one transport exception."""
    if isinstance(exc, httpx.ConnectTimeout):
        return wording.connect_timeout, timeout.connect, True
    if isinstance(exc, httpx.ReadTimeout):
        return wording.read_timeout, timeout.read, True
    if isinstance(exc, httpx.WriteTimeout):
        return wording.write_timeout, timeout.write, True
    if isinstance(exc, httpx.PoolTimeout):
        return wording.pool_timeout, timeout.pool, True
    if isinstance(exc, httpx.TimeoutException):
        return wording.timeout, timeout.read, True
    if isinstance(exc, httpx.ConnectError):
        return wording.cannot_connect, None, True
    if isinstance(exc, httpx.RemoteProtocolError):
        return wording.broken_exchange, None, True
    if isinstance(exc, httpx.NetworkError | httpx.ProxyError):
        return wording.connection_failed, None, True
    # LocalProtocolError, UnsupportedProtocol, DecodingError, TooManyRedirects...: the same request fails again.
    return wording.failed, None, False


def transport_failure(
    exc: httpx.HTTPError,
    where: str,
    timeout: httpx.Timeout,
    error: Callable[[str], Exception],
    *,
    what: str = "",
    wording: TransportWording = API_WORDING,
    auth: BearerAuth | None = None,
) -> Exception:
    """The exception to raise (from `exc`) when a request to `where` failed before a response: Retryable for
    timeouts and connection errors, else `error(message)` (TLS failures, and whatever would fail again)."""
    where = redact(where)  # an endpoint may carry credentials in its URL: they never reach a message
    tls = tls_cause(exc) if isinstance(exc, httpx.ConnectError) else None
    if isinstance(tls, ssl.SSLCertVerificationError):
        return error(f"TLS certificate of {where} not accepted: {getattr(tls, 'verify_message', None) or tls}")
    if tls is not None:
        return error(f"TLS handshake with {where} failed: {getattr(tls, 'reason', None) or tls}")
    template, seconds, retryable = _words(exc, wording, timeout)
    shown = "no limit" if seconds is None else f"{seconds:g} s"
    message = template.format(where=where, what=what, seconds=shown, error=str(exc) or type(exc).__name__)
    if auth is not None:
        message = auth.redact(message)
    return Retryable(message) if retryable else error(message)


# ---- responses of model APIs ----


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


def check_response(
    response: httpx.Response,
    url: str,
    auth: BearerAuth | None,
    error: type[KbctlError],
    *,
    what: str,
    model: str,
    retry_statuses: frozenset[int] = RETRY_STATUSES,
) -> httpx.Response:
    """`response` when it is a success; else raise Retryable (a status in `retry_statuses`: 429, 5xx) or `error`
    naming the endpoint."""
    url = redact(url)
    status = response.status_code
    if 200 <= status < 300:
        return response
    retry = retryable_response(response, retry_statuses)
    if retry is not None:
        raise retry
    line = status_line(status, response.reason_phrase)
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


# ---- each client's policy (the values are kbctl.defaults') ----

EMBEDDING_POLICY = HttpPolicy.uniform(
    defaults.EMBEDDING_HTTP_TIMEOUT,
    retries=defaults.EMBEDDING_HTTP_RETRIES,
    backoff_base=defaults.HTTP_BACKOFF_BASE,
    max_retry_after=defaults.EMBEDDING_MAX_RETRY_AFTER,
)
RERANK_POLICY = HttpPolicy.uniform(
    defaults.RERANK_HTTP_TIMEOUT,
    retries=defaults.RERANK_HTTP_RETRIES,
    backoff_base=defaults.HTTP_BACKOFF_BASE,
    max_retry_after=defaults.RERANK_MAX_RETRY_AFTER,
)
CHAT_POLICY = HttpPolicy.uniform(
    defaults.CHAT_HTTP_TIMEOUT,
    retries=defaults.CHAT_HTTP_RETRIES,
    backoff_base=defaults.HTTP_BACKOFF_BASE,
    max_retry_after=defaults.CHAT_MAX_RETRY_AFTER,
)
URL_POLICY = HttpPolicy(
    connect_timeout=defaults.URL_CONNECT_TIMEOUT,
    read_timeout=defaults.URL_READ_TIMEOUT,
    write_timeout=defaults.URL_READ_TIMEOUT,
    pool_timeout=defaults.URL_TOTAL_TIMEOUT,
    retries=defaults.URL_RETRIES,
    backoff_base=defaults.HTTP_BACKOFF_BASE,
    max_retry_after=defaults.URL_MAX_RETRY_AFTER,
)
