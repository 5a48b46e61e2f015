"""kbctl/_http.py, the one HTTP client policy: every httpx failure becomes a retry or a kbctl error, never a secret."""

from __future__ import annotations

import re
import socket
import ssl
import struct
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest
from tenacity import RetryCallState, Retrying

import kbctl
from kbctl._http import (
    API_WORDING,
    EMBEDDING_POLICY,
    FETCH_WORDING,
    RERANK_POLICY,
    RETRY_STATUSES,
    BearerAuth,
    Retryable,
    TransportWording,
    bearer_auth,
    retry_after,
    retry_wait,
    retryable_response,
    status_line,
    transport_failure,
    user_agent,
)
from kbctl.embedding.http import HttpEmbedder, HttpEmbeddingConfig
from kbctl.errors import EmbeddingError, KbctlError, RerankError, SourceError
from kbctl.rerank.http import HttpRerankConfig, HttpReranker
from kbctl.sources.url import FetchPolicy, FetchRequest, fetch_urls
from tests.support.httpserver import loopback_only

KEY = "sk-kbctl-http-SECRET-5b1e2d90"
VAR = "KBCTL_TEST_API_KEY"
PASSWORD = "url-SECRET-91c4e7"  # in the userinfo of fetched URLs (httpx sends it as Basic auth)
SECRETS = (KEY, PASSWORD, "SECRET")


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """No environment proxy in the way of the API clients, and no connection leaves the machine."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("KBCTL_ALLOW_PRIVATE_NETWORKS", raising=False)
    return loopback_only(monkeypatch)


# ---- retry decisions, waits, status text, user agent ----


def test_retry_after_forms() -> None:
    """Retry-After is read as seconds or an HTTP date; retry-after-ms wins; garbage is ignored."""
    in_30s = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    from_date = retry_after(httpx.Headers({"Retry-After": in_30s}))
    assert from_date is not None and 28 <= from_date <= 30
    assert retry_after(httpx.Headers({"Retry-After": "2"})) == 2.0
    assert retry_after(httpx.Headers({"Retry-After": "2", "retry-after-ms": "250"})) == 0.25
    assert retry_after(httpx.Headers({"Retry-After": "soon"})) is None
    assert retry_after(httpx.Headers({})) is None


def test_retryable_statuses_are_429_and_5xx_gateway_kinds() -> None:
    """429, 500, 502, 503 and 504 are retried (with the server's Retry-After); no other status is."""
    assert {429, 500, 502, 503, 504} == RETRY_STATUSES
    for status in range(200, 600):
        retry = retryable_response(httpx.Response(status, headers={"Retry-After": "3"}))
        assert (retry is not None) is (status in RETRY_STATUSES), status
    retry = retryable_response(httpx.Response(503, headers={"Retry-After": "3"}))
    assert retry is not None and (retry.reason, retry.retry_after) == ("HTTP 503 Service Unavailable", 3.0)


def test_status_line_and_user_agent() -> None:
    """Status text uses the standard phrase, else the server's; every client sends kbctl/<version>."""
    assert status_line(404) == "HTTP 404 Not Found"
    assert status_line(404, "Nope") == "HTTP 404 Not Found"
    assert status_line(599, "Custom Phrase") == "HTTP 599 Custom Phrase"
    assert status_line(599) == "HTTP 599"
    assert user_agent() == f"kbctl/{kbctl.__version__}" == FetchPolicy().user_agent


def _wait_after(failure: BaseException, attempt: int, wait: Callable[[RetryCallState], float]) -> float:
    state = RetryCallState(Retrying(), None, (), {})
    state.attempt_number = attempt
    state.set_exception((type(failure), failure, None))
    return wait(state)


def test_retry_wait_honours_retry_after_else_backs_off_with_jitter() -> None:
    """The server's wish wins (capped); without one: base * 2^(n-1), capped, plus up to base of jitter."""
    wait = retry_wait(backoff_base=0.5, max_retry_after=4.0)
    assert _wait_after(Retryable("HTTP 429 Too Many Requests", retry_after=2.0), 1, wait) == 2.0
    assert _wait_after(Retryable("HTTP 429 Too Many Requests", retry_after=60.0), 1, wait) == 4.0
    for attempt, base in ((1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (9, 4.0)):
        waits = [_wait_after(Retryable("HTTP 503 Service Unavailable"), attempt, wait) for _ in range(20)]
        assert all(base <= w <= base + 0.5 for w in waits), (attempt, waits)
        assert len(set(waits)) > 1  # jittered


# ---- every httpx exception maps to a retry or a kbctl error ----


def _httpx_errors() -> list[type[httpx.HTTPError]]:
    """Every exception class httpx defines under HTTPError, found by walking the hierarchy (new ones included)."""
    found: set[type[httpx.HTTPError]] = set()
    stack: list[type[httpx.HTTPError]] = [httpx.HTTPError]
    while stack:
        cls = stack.pop()
        if cls.__module__.split(".")[0] == "httpx" and cls not in found:
            found.add(cls)
            stack.extend(cls.__subclasses__())
    return sorted(found, key=lambda cls: cls.__name__)


HTTPX_ERRORS = _httpx_errors()
# A request raises these (or their subclasses) when trying again may help; anything else is reported at once.
RETRIED = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError, httpx.ProxyError)
WHERE = {"fetcher": "example.test:8443", "embedder": "https://api.example.test/v1/embeddings"}
WHERE["reranker"] = "https://api.example.test/v2/rerank"
TIMEOUT = httpx.Timeout(connect=2.0, read=3.0, write=4.0, pool=5.0)
CALLERS: dict[str, tuple[type[KbctlError], TransportWording, str]] = {
    "fetcher": (SourceError, FETCH_WORDING, ""),
    "embedder": (EmbeddingError, API_WORDING, "embedding"),
    "reranker": (RerankError, API_WORDING, "rerank"),
}


def _instance(cls: type[httpx.HTTPError], message: str) -> httpx.HTTPError:
    request = httpx.Request("POST", "https://api.example.test/v1/embeddings")
    if issubclass(cls, httpx.HTTPStatusError):
        return cls(message, request=request, response=httpx.Response(500, request=request))
    if issubclass(cls, httpx.RequestError):
        return cls(message, request=request)
    return cls(message)


def _map(caller: str, exc: httpx.HTTPError) -> Exception:
    error, wording, what = CALLERS[caller]
    auth = BearerAuth(KEY, VAR) if what else None
    return transport_failure(exc, WHERE[caller], TIMEOUT, error, what=what, wording=wording, auth=auth)


def _text(outcome: Exception) -> str:
    return outcome.reason if isinstance(outcome, Retryable) else str(outcome)


def test_the_walk_finds_every_kind_of_request_failure() -> None:
    """The hierarchy walk reaches every failure httpx documents for a request (so none is left untested)."""
    expected = {
        httpx.ConnectTimeout, httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout, httpx.ConnectError,
        httpx.ReadError, httpx.WriteError, httpx.CloseError, httpx.RemoteProtocolError, httpx.LocalProtocolError,
        httpx.ProxyError, httpx.UnsupportedProtocol, httpx.TooManyRedirects, httpx.DecodingError,
        httpx.HTTPStatusError,
    }  # fmt: skip
    assert expected <= set(HTTPX_ERRORS)


@pytest.mark.parametrize("cls", HTTPX_ERRORS, ids=lambda cls: cls.__name__)
@pytest.mark.parametrize("caller", CALLERS)
def test_every_httpx_error_maps_to_a_retry_or_a_kbctl_error(caller: str, cls: type[httpx.HTTPError]) -> None:
    """Each class becomes Retryable (timeouts, connection errors) or the caller's own KbctlError, never itself,
    with a non-empty message naming no key, even when httpx's text echoes it (h11 does, for a bad header)."""
    error = CALLERS[caller][0]
    echo = f"Illegal header value b'Bearer {KEY}'" if caller != "fetcher" else "Illegal header value b'x'"
    for message in (echo, ""):
        outcome = _map(caller, _instance(cls, message))
        assert type(outcome) in (Retryable, error)
        assert isinstance(outcome, Retryable) is issubclass(cls, RETRIED)
        text = _text(outcome)
        assert text and not any(secret in text for secret in SECRETS)
        if not message:
            assert text.endswith(cls.__name__) or "timed out" in text or "no free connection" in text


EXPECTED_WORDS = {  # (class, message) -> each caller's exact words; a "!" marks a failure that is not retried
    (httpx.ConnectTimeout, "x"): ("connect timed out after 2 s", "connect timed out after 2 s"),
    (httpx.ReadTimeout, "x"): ("read timed out after 3 s", "read timed out after 3 s"),
    (httpx.WriteTimeout, "x"): ("timed out talking to {where}", "write timed out after 4 s"),
    (httpx.PoolTimeout, "x"): ("timed out talking to {where}", "no free connection after 5 s"),
    (httpx.ConnectError, "connection refused"): (
        "cannot connect to {where}: connection refused",
        "cannot connect: connection refused",
    ),
    (httpx.RemoteProtocolError, "Server disconnected"): (
        "{where} broke the HTTP exchange: Server disconnected",
        "connection error: Server disconnected",
    ),
    (httpx.ReadError, ""): ("connection to {where} failed: ReadError", "connection error: ReadError"),
    (httpx.DecodingError, "bad gzip"): (
        "!request to {where} failed: bad gzip",
        "!{what} request to {where} failed: bad gzip",
    ),
    (httpx.LocalProtocolError, "bad header"): (
        "!request to {where} failed: bad header",
        "!{what} request to {where} failed: bad header",
    ),
}


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize(("cls", "message"), list(EXPECTED_WORDS), ids=lambda v: getattr(v, "__name__", v))
def test_each_caller_keeps_its_words(caller: str, cls: type[httpx.HTTPError], message: str) -> None:
    """The fetcher names host:port and its own timeouts; the API clients name the endpoint (their exact words)."""
    fetch_words, api_words = EXPECTED_WORDS[(cls, message)]
    words = (fetch_words if caller == "fetcher" else api_words).format(where=WHERE[caller], what=CALLERS[caller][2])
    outcome = _map(caller, _instance(cls, message))
    assert isinstance(outcome, Retryable) is (not words.startswith("!"))
    assert _text(outcome) == words.removeprefix("!")


@pytest.mark.parametrize("caller", CALLERS)
def test_tls_failures_are_errors_not_retries(caller: str) -> None:
    """A refused certificate or a failed handshake is reported at once, naming the endpoint."""
    where = WHERE[caller]
    unverified = ssl.SSLCertVerificationError(1, "certificate verify failed")
    unverified.verify_message = "self-signed certificate"
    handshake = ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number")
    handshake.reason = "WRONG_VERSION_NUMBER"
    bare = ssl.SSLError("no reason attribute")  # as raised from Python code rather than by OpenSSL
    for cause, words in (
        (unverified, f"TLS certificate of {where} not accepted: self-signed certificate"),
        (handshake, f"TLS handshake with {where} failed: WRONG_VERSION_NUMBER"),
        (bare, f"TLS handshake with {where} failed: {bare}"),
    ):
        exc = httpx.ConnectError(str(cause))
        exc.__cause__ = httpx.ConnectError(str(cause))
        exc.__cause__.__cause__ = cause
        outcome = _map(caller, exc)
        assert type(outcome) is CALLERS[caller][0]
        assert str(outcome) == words


def test_a_key_with_line_breaks_is_refused_before_the_http_stack_echoes_it() -> None:
    """h11 quotes an illegal header value in its error, so a key holding a line break never reaches it."""
    with pytest.raises(EmbeddingError) as info:
        bearer_auth(VAR, {VAR: f"{KEY}\nsecond line"}, "t/m", EmbeddingError)
    assert str(info.value) == (
        f"environment variable {VAR} holds control characters (line breaks?) that an HTTP header cannot carry "
        "(it holds the API key for t/m)"
    )
    auth = BearerAuth(KEY + "\\", VAR)  # escaped in a bytes repr (b'...\\\\'): redacted in that form too
    assert auth.redact(f"Illegal header value {(KEY + chr(92)).encode()!r}") == f"Illegal header value b'${VAR}'"


# ---- real failures on loopback servers ----


class RawServer:
    """A TCP server on 127.0.0.1 that reads one request per connection, then misbehaves as `behaviour` says.

    silent: never answers; hangup: closes; garbage: answers something that is not HTTP; reset: starts an
    answer, then resets the connection; bad-gzip: a 200 whose gzip body is not gzip; greet: at once (before
    any request) sends a line that is not TLS.
    """

    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour
        self.connections = 0
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.port: int = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            if self.behaviour == "greet":
                conn.sendall(b"hello, this is not TLS\r\n")
                return
            if not self._read_request(conn):
                return
            if self.behaviour == "silent":
                self._stop.wait()
            elif self.behaviour == "garbage":
                conn.sendall(b"NOT HTTP AT ALL\r\n\r\n")
            elif self.behaviour == "reset":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\nab")
                time.sleep(0.05)
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            elif self.behaviour == "bad-gzip":
                body = b"this is not gzip"
                head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Encoding: gzip\r\n"
                conn.sendall(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)

    @staticmethod
    def _read_request(conn: socket.socket) -> bool:
        """Read the head and the whole body (a close with unread bytes would reset the connection instead)."""
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return False
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
        missing = int(length.group(1)) - len(body) if length else 0
        while missing > 0:
            chunk = conn.recv(missing)
            if not chunk:
                return False
            missing -= len(chunk)
        return True

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        self._thread.join(timeout=5)


@pytest.fixture
def raw() -> Iterator[Callable[[str], RawServer]]:
    """Start RawServers with a behaviour; all are closed after the test."""
    started: list[RawServer] = []

    def start(behaviour: str) -> RawServer:
        started.append(RawServer(behaviour))
        return started[-1]

    yield start
    for server in started:
        server.close()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fetch_failure(
    port: int, *, scheme: str = "http", host: str = "127.0.0.1", timeout: float = 0.3, **policy: Any
) -> KbctlError:
    """The SourceError of fetching a URL (with a password in it) from 127.0.0.1:port; one retry."""
    fields: dict[str, Any] = {
        "allowed_addresses": frozenset({("127.0.0.1", port)}),
        "retries": 1,
        "backoff_base": 0.01,
        "read_timeout": timeout,
    }
    fields.update(policy)
    outcome = fetch_urls([FetchRequest("s", f"{scheme}://kbctl:{PASSWORD}@{host}:{port}/page")], FetchPolicy(**fields))
    assert isinstance(outcome["s"], SourceError), outcome
    return outcome["s"]


def embed_failure(port: int, *, scheme: str = "http", key: str = KEY, timeout: float = 0.3) -> KbctlError:
    """The EmbeddingError of embedding through 127.0.0.1:port; one retry."""
    config = HttpEmbeddingConfig(
        base_url=f"{scheme}://127.0.0.1:{port}/v1", model="m", model_id="t/m", api_key_env=VAR,
        http=EMBEDDING_POLICY.with_(retries=1, backoff_base=0.01, timeout=timeout),
    )  # fmt: skip
    with pytest.raises(EmbeddingError) as info:
        HttpEmbedder(config, environ={VAR: key}).embed(["some text"])
    return info.value


def rerank_failure(port: int, *, scheme: str = "http", key: str = KEY, timeout: float = 0.3) -> KbctlError:
    """The RerankError of reranking through 127.0.0.1:port; one retry."""
    config = HttpRerankConfig(
        base_url=f"{scheme}://127.0.0.1:{port}/v2", model="m", model_id="t/m", api_key_env=VAR,
        http=RERANK_POLICY.with_(retries=1, backoff_base=0.01, timeout=timeout),
    )  # fmt: skip
    with pytest.raises(RerankError) as info:
        HttpReranker(config, environ={VAR: key}).rerank("question", ["a passage"])
    return info.value


FAIL = {"fetcher": fetch_failure, "embedder": embed_failure, "reranker": rerank_failure}


def _endpoint(caller: str, port: int, scheme: str = "http") -> str:
    """What a caller's messages name: host:port (the fetcher) or the endpoint's URL (the API clients)."""
    if caller == "fetcher":
        return f"127.0.0.1:{port}"
    path = "/v1/embeddings" if caller == "embedder" else "/v2/rerank"
    return f"{scheme}://127.0.0.1:{port}{path}"


def _api_prefix(caller: str, port: int) -> str:
    what = "embedding" if caller == "embedder" else "rerank"
    return f"{what} request to {_endpoint(caller, port)} failed: "


def assert_secret_free(error: BaseException) -> None:
    """Neither the key nor the URL's password is in the message, the repr or the chained traceback."""
    seen = str(error) + repr(error) + "".join(traceback.format_exception(error))
    assert not any(secret in seen for secret in SECRETS), seen


# (behaviour, the fetcher's words, the API clients' words after their prefix, attempts); {where}: 127.0.0.1:port,
# {errno}: an OS error as httpx shows it ("[Errno 104] Connection reset by peer", worded per platform; anyio's
# async streams give none, and the class name stands in).
REAL_FAILURES = [
    ("silent", "read timed out after 0.3 s", "read timed out after 0.3 s", 2),  # ReadTimeout
    (
        "hangup",  # RemoteProtocolError
        "{where} broke the HTTP exchange: Server disconnected without sending a response.",
        "connection error: Server disconnected without sending a response.",
        2,
    ),
    (
        "garbage",  # RemoteProtocolError
        "{where} broke the HTTP exchange: illegal status line: bytearray(b'NOT HTTP AT ALL')",
        "connection error: illegal status line: bytearray(b'NOT HTTP AT ALL')",
        2,
    ),
    ("reset", "connection to {where} failed: {errno}", "connection error: {errno}", 2),  # ReadError
    (
        "bad-gzip",  # DecodingError in httpx; the fetcher inflates bodies itself
        "cannot decompress the gzip body: Error -3 while decompressing data: incorrect header check",
        "Error -3 while decompressing data: incorrect header check",
        1,
    ),
]


@pytest.mark.parametrize("caller", FAIL)
@pytest.mark.parametrize(("behaviour", "fetch_words", "api_words", "attempts"), REAL_FAILURES, ids=lambda v: str(v))
def test_real_failures_become_kbctl_errors(
    raw: Callable[[str], RawServer], caller: str, behaviour: str, fetch_words: str, api_words: str, attempts: int
) -> None:
    """A misbehaving server fails each client with its own error type and words, retried when worth it."""
    server = raw(behaviour)
    # Only the silent server needs the short timeout; the others fail on their own, however loaded the machine.
    error = FAIL[caller](server.port, timeout=0.3 if behaviour == "silent" else 10.0)
    words = fetch_words if caller == "fetcher" else _api_prefix(caller, server.port) + api_words
    words = words.replace("{where}", f"127.0.0.1:{server.port}")
    words += " (after 2 attempts)" if attempts == 2 else ""
    pattern = re.escape(words).replace(re.escape("{errno}"), r"(\[Errno \d+\] .+|ReadError)")
    assert re.fullmatch(pattern, str(error)), str(error)
    assert server.connections == attempts
    assert_secret_free(error)


@pytest.mark.parametrize("caller", FAIL)
def test_connection_refused(caller: str) -> None:
    """Nothing listening (ConnectError): retried, then reported naming where it tried to connect."""
    port = _closed_port()
    error = FAIL[caller](port)
    if caller == "fetcher":
        assert str(error) == f"cannot connect to 127.0.0.1:{port}: connection refused (after 2 attempts)"
    else:
        assert str(error).startswith(_api_prefix(caller, port) + "cannot connect: ")
        assert str(error).endswith(" (after 2 attempts)")
    assert_secret_free(error)


@pytest.mark.parametrize("caller", FAIL)
def test_tls_handshake_failure_is_not_retried(raw: Callable[[str], RawServer], caller: str) -> None:
    """https:// to a server that does not speak TLS (ConnectError from ssl.SSLError): one attempt, clear words."""
    server = raw("greet")
    error = FAIL[caller](server.port, scheme="https")
    assert str(error).startswith(f"TLS handshake with {_endpoint(caller, server.port, 'https')} failed: ")
    assert server.connections == 1
    assert_secret_free(error)


def test_connect_timeout_while_resolving() -> None:
    """The fetcher's guard resolves inside the connect timeout: a slow resolver is a ConnectTimeout, retried."""

    def slow(host: str, port: int) -> list[str]:
        time.sleep(0.3)
        return ["127.0.0.1"]

    port = _closed_port()
    error = fetch_failure(port, host="slow.example.test", connect_timeout=0.05, resolver=slow)
    assert str(error) == "connect timed out after 0.05 s (after 2 attempts)"
    assert_secret_free(error)


@pytest.mark.parametrize("caller", ["embedder", "reranker"])
def test_a_key_with_a_line_break_fails_before_any_request(raw: Callable[[str], RawServer], caller: str) -> None:
    """Such a key would make h11 raise LocalProtocolError quoting it; kbctl refuses it first, naming the variable."""
    server = raw("silent")
    error = FAIL[caller](server.port, key=f"{KEY}\nnext")
    assert str(error).startswith(f"environment variable {VAR} holds control characters")
    assert server.connections == 0
    assert_secret_free(error)


# ---- one policy type for every client ----


def test_each_clients_policy_is_built_from_the_defaults() -> None:
    """Every HTTP client's timeouts, retries and backoff are kbctl.defaults' (read through its HttpPolicy)."""
    from kbctl import defaults
    from kbctl._http import CHAT_POLICY, URL_POLICY, HttpPolicy
    from kbctl.chat.http import HttpChatConfig
    from kbctl.rerank.http import HttpRerankConfig

    expected = {
        EMBEDDING_POLICY: (
            defaults.EMBEDDING_HTTP_TIMEOUT,
            defaults.EMBEDDING_HTTP_RETRIES,
            defaults.EMBEDDING_MAX_RETRY_AFTER,
        ),
        RERANK_POLICY: (defaults.RERANK_HTTP_TIMEOUT, defaults.RERANK_HTTP_RETRIES, defaults.RERANK_MAX_RETRY_AFTER),
        CHAT_POLICY: (defaults.CHAT_HTTP_TIMEOUT, defaults.CHAT_HTTP_RETRIES, defaults.CHAT_MAX_RETRY_AFTER),
    }
    for policy, (timeout, retries, cap) in expected.items():
        assert policy.timeout == httpx.Timeout(timeout)
        assert (policy.retries, policy.backoff_base, policy.max_retry_after) == (
            retries,
            defaults.HTTP_BACKOFF_BASE,
            cap,
        )
    assert FetchPolicy().http == URL_POLICY
    assert URL_POLICY.timeout == httpx.Timeout(
        connect=defaults.URL_CONNECT_TIMEOUT,
        read=defaults.URL_READ_TIMEOUT,
        write=defaults.URL_READ_TIMEOUT,
        pool=defaults.URL_TOTAL_TIMEOUT,
    )
    assert (URL_POLICY.retries, URL_POLICY.max_retry_after) == (defaults.URL_RETRIES, defaults.URL_MAX_RETRY_AFTER)
    assert HttpEmbeddingConfig("https://e.example/v1", "m", "p/m").http is EMBEDDING_POLICY
    assert HttpRerankConfig("https://e.example/v1", "m", "p/m").http is RERANK_POLICY
    assert HttpChatConfig("https://e.example/v1", "m", "p/m").http is CHAT_POLICY
    assert isinstance(FetchPolicy(retries=0).http, HttpPolicy) and FetchPolicy(retries=0).http.retries == 0


def test_a_policy_is_validated_and_changed_by_name() -> None:
    """`with_` sets one timeout for every phase or single fields; nonsense values are UsageErrors naming them."""
    policy = EMBEDDING_POLICY.with_(timeout=2, retries=0)
    assert policy.timeout == httpx.Timeout(2) and policy.retries == 0
    assert policy.backoff_base == EMBEDDING_POLICY.backoff_base
    assert EMBEDDING_POLICY.with_(read_timeout=5).timeout.read == 5
    with pytest.raises(kbctl.UsageError, match="timeout must be positive"):
        EMBEDDING_POLICY.with_(timeout=0)
    with pytest.raises(kbctl.UsageError, match="retries must not be negative"):
        EMBEDDING_POLICY.with_(retries=-1)
    only_429 = EMBEDDING_POLICY.with_(retry_statuses=frozenset({429}))
    assert only_429.retryable(httpx.Response(503)) is None
    assert only_429.retryable(httpx.Response(429)) is not None
    args = EMBEDDING_POLICY.with_(retries=2).retrying()
    assert args["reraise"] is True and set(args) == {"stop", "wait", "retry", "reraise"}
