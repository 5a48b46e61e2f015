"""A real threaded HTTP server on 127.0.0.1 (or ::1) with a route table tests can change while it runs.

Usage (a context manager, so it also makes a one-line pytest fixture):

    from tests.support.httpserver import Reply, serve

    with serve() as srv:
        srv.route("/a", body="<h1>Hi</h1>", content_type="text/html; charset=utf-8", etag=True)
        srv.redirect("/old", "/a", status=301)
        srv.sequence("/flaky", [Reply(status=503), Reply(body="ok", content_type="text/plain")])
        url = srv.url("/a")              # http://127.0.0.1:<port>/a
        ...                              # fetch it
        srv.hits["/a"]                   # requests seen per path (query string ignored)
        srv.requests_for("/a")[-1].headers["if-none-match"]   # header names are lower-cased
        srv.route("/a", body="<h1>Changed</h1>", etag=True)   # a new page (and a new ETag) for the next fetch
        srv.max_in_flight                # most requests the server was handling at once

`serve(tls=context)` serves HTTPS with a server-side ssl.SSLContext (see tests/test_ssrf.py for a throwaway CA).
Every reply is built per request, so a `body` callable (or a route replaced between fetches) serves changing
content. Conditional requests are answered 304 when the reply has `etag` / `last_modified` and the request's
If-None-Match / If-Modified-Since matches. Unknown paths get 404. Only GET and HEAD are served.
"""

from __future__ import annotations

import gzip as gzip_module
import hashlib
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from email.utils import format_datetime, parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

__all__ = ["HTTPTestServer", "Reply", "Request", "fetch_policy_for", "serve"]

Body = bytes | str | Callable[[], bytes | str]


@dataclass(frozen=True)
class Reply:
    """How the server answers one request to a path.

    body:           bytes, str (encoded with `encoding`), or a callable returning either, called per request.
    content_type:   the Content-Type header; None sends none.
    headers:        extra headers (e.g. {"Retry-After": "1"}, {"Location": "/x"}, {"Content-Encoding": "gzip"}
                    for a body the test compressed itself).
    delay:          seconds to wait before the status line (past a client's read timeout to make one time out).
    chunk_size, chunk_delay: the body is written in chunks with this pause between them (a trickling server).
    gzip:           compress the body and send Content-Encoding: gzip.
    etag:           an ETag value, or True for one derived from the body's sha256 (changes when the body does).
    last_modified:  a Last-Modified value (HTTP date string or aware datetime).
    content_length: False sends no Content-Length and ends the body by closing the connection.
    """

    body: Body = b""
    status: int = 200
    content_type: str | None = "text/html; charset=utf-8"
    headers: Mapping[str, str] = field(default_factory=dict)
    encoding: str = "utf-8"
    delay: float = 0.0
    chunk_size: int = 64 * 1024
    chunk_delay: float = 0.0
    gzip: bool = False
    etag: str | bool | None = None
    last_modified: str | datetime | None = None
    content_length: bool = True


@dataclass(frozen=True)
class Request:
    """One request the server received."""

    method: str
    path: str
    query: str
    headers: dict[str, str]  # lower-cased names
    time: float  # time.monotonic() when it arrived


Handler = Callable[[Request], Reply]


def _etag_matches(header: str, etag: str) -> bool:
    """Weak comparison, as If-None-Match requires."""
    wanted = etag.removeprefix("W/")
    for candidate in header.split(","):
        candidate = candidate.strip()
        if candidate == "*" or candidate.removeprefix("W/") == wanted:
            return True
    return False


def _not_modified_since(header: str, last_modified: str) -> bool:
    try:
        return parsedate_to_datetime(last_modified) <= parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return False


class HTTPTestServer:
    """The server and its route table; use `serve()` to start and stop it."""

    def __init__(self, host: str = "127.0.0.1", tls: ssl.SSLContext | None = None) -> None:
        owner = self

        class _Server(ThreadingHTTPServer):
            address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
            daemon_threads = True

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out in separate writes: avoid 40 ms delayed ACKs
            timeout = 30  # an idle keep-alive connection is dropped after this many seconds

            def do_GET(self) -> None:
                owner._serve(self, head=False)

            def do_HEAD(self) -> None:
                owner._serve(self, head=True)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._lock = threading.Lock()
        self._routes: dict[str, Handler] = {}
        self._stopping = threading.Event()
        self.hits: Counter[str] = Counter()
        self.requests: list[Request] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._httpd = _Server((host, 0), _Handler)
        if tls is not None:  # the handshake runs on accept; a failed one is dropped by socketserver
            self._httpd.socket = tls.wrap_socket(self._httpd.socket, server_side=True)
        self.host = host
        self.port: int = self._httpd.server_address[1]
        bracketed = f"[{host}]" if ":" in host else host
        self.base_url = f"{'https' if tls else 'http'}://{bracketed}:{self.port}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"httpserver-{self.port}",
            daemon=True,
        )

    # ---- route table ----

    def url(self, path: str = "/") -> str:
        """The absolute URL of a path on this server."""
        return self.base_url + path

    def route(self, path: str, reply: Reply | None = None, /, **fields: Any) -> Reply:
        """Serve `reply` (or Reply(**fields)) at `path`, replacing what was there."""
        if reply is None:
            reply = Reply(**fields)
        elif fields:
            reply = replace(reply, **fields)
        fixed = reply
        self.handle(path, lambda _request: fixed)
        return reply

    def sequence(self, path: str, replies: Sequence[Reply]) -> None:
        """Serve the replies in order, one per request; the last one repeats."""
        if not replies:
            raise ValueError("sequence needs at least one reply")
        remaining = list(replies)

        def next_reply(_request: Request) -> Reply:
            return remaining.pop(0) if len(remaining) > 1 else remaining[0]

        self.handle(path, next_reply)

    def redirect(self, path: str, location: str, status: int = 302) -> None:
        """Redirect `path` to `location` (absolute, or relative to this server)."""
        self.route(path, Reply(status=status, content_type=None, headers={"Location": location}))

    def handle(self, path: str, handler: Handler) -> None:
        """Answer `path` with whatever `handler(request)` returns (called on the server's thread, per request)."""
        with self._lock:
            self._routes[path] = handler

    def remove(self, path: str) -> None:
        """Stop serving `path` (it answers 404 again)."""
        with self._lock:
            self._routes.pop(path, None)

    # ---- what the server saw ----

    def requests_for(self, path: str) -> list[Request]:
        """The requests received for one path, oldest first."""
        with self._lock:
            return [r for r in self.requests if r.path == path]

    def reset_counts(self) -> None:
        """Forget hits, recorded requests and the in-flight maximum."""
        with self._lock:
            self.hits.clear()
            self.requests.clear()
            self.max_in_flight = self.in_flight

    @property
    def total_hits(self) -> int:
        """Requests received on any path."""
        with self._lock:
            return sum(self.hits.values())

    # ---- lifecycle ----

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stopping.set()  # wakes handlers sleeping in `delay` / `chunk_delay`
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    # ---- serving ----

    def _sleep(self, seconds: float) -> bool:
        """Sleep unless the server is stopping; False when it is."""
        return seconds <= 0 or not self._stopping.wait(seconds)

    def _serve(self, h: BaseHTTPRequestHandler, *, head: bool) -> None:
        parts = urlsplit(h.path)
        request = Request(
            method=h.command,
            path=parts.path,
            query=parts.query,
            headers={k.lower(): v for k, v in h.headers.items()},
            time=time.monotonic(),
        )
        with self._lock:
            self.hits[request.path] += 1
            self.requests.append(request)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            handler = self._routes.get(request.path)
        try:
            reply = handler(request) if handler else Reply(status=404, body="not found", content_type="text/plain")
            self._write(h, request, reply, head=head)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            h.close_connection = True  # the client went away (e.g. it stopped reading past its size cap)
        finally:
            with self._lock:
                self.in_flight -= 1

    def _write(self, h: BaseHTTPRequestHandler, request: Request, reply: Reply, *, head: bool) -> None:
        if not self._sleep(reply.delay):
            h.close_connection = True
            return
        raw = reply.body() if callable(reply.body) else reply.body
        body = raw.encode(reply.encoding) if isinstance(raw, str) else raw
        headers: list[tuple[str, str]] = []
        if reply.content_type is not None:
            headers.append(("Content-Type", reply.content_type))
        etag = reply.etag
        if etag is True:
            etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
        last_modified = reply.last_modified
        if isinstance(last_modified, datetime):
            last_modified = format_datetime(last_modified, usegmt=True)
        if isinstance(etag, str):
            headers.append(("ETag", etag))
        if last_modified:
            headers.append(("Last-Modified", last_modified))
        headers.extend(reply.headers.items())
        status = reply.status
        inm, ims = request.headers.get("if-none-match"), request.headers.get("if-modified-since")
        if status == 200 and isinstance(etag, str) and inm is not None:
            not_modified = _etag_matches(inm, etag)
        elif status == 200 and last_modified and ims is not None:
            not_modified = _not_modified_since(ims, last_modified)
        else:
            not_modified = False
        if not_modified:
            status, body = 304, b""
            headers = [(k, v) for k, v in headers if k.lower() in ("etag", "last-modified", "cache-control")]
        elif reply.gzip:
            body = gzip_module.compress(body)
            headers.append(("Content-Encoding", "gzip"))
        h.send_response(status)
        for name, value in headers:
            h.send_header(name, value)
        if reply.content_length or status == 304:
            h.send_header("Content-Length", str(len(body)))
        else:
            h.send_header("Connection", "close")
            h.close_connection = True
        h.end_headers()
        if head or status == 304:
            return
        for start in range(0, len(body), max(1, reply.chunk_size)):
            if start and not self._sleep(reply.chunk_delay):
                h.close_connection = True
                return
            h.wfile.write(body[start : start + reply.chunk_size])
            h.wfile.flush()


@contextmanager
def serve(host: str = "127.0.0.1", tls: ssl.SSLContext | None = None) -> Iterator[HTTPTestServer]:
    """Start a server on `host` (an ephemeral port; HTTPS with a server-side `tls` context), yield it, stop it."""
    server = HTTPTestServer(host, tls)
    server.start()
    try:
        yield server
    finally:
        server.close()


def loopback_only(monkeypatch: Any) -> list[tuple[str, int]]:
    """Make every TCP connect httpcore opens fail the test unless it goes to 127.0.0.1 or ::1; returns the log.

    Call it from a fixture with pytest's `monkeypatch`. The log holds (host, port) as httpcore's backend was
    asked to connect, so a test can also check that kbctl connected to a checked IP, never to a host name.
    """
    import httpcore

    calls: list[tuple[str, int]] = []
    original = httpcore.AnyIOBackend.connect_tcp

    async def connect_tcp(self: Any, host: str, port: int, *args: Any, **kwargs: Any) -> Any:
        calls.append((host, port))
        if host not in ("127.0.0.1", "::1"):
            raise AssertionError(f"the test tried to connect to {host}:{port}")
        return await original(self, host, port, *args, **kwargs)

    monkeypatch.setattr(httpcore.AnyIOBackend, "connect_tcp", connect_tcp)
    return calls


def fetch_policy_for(srv: HTTPTestServer, **fields: Any) -> Any:
    """A FetchPolicy allowed to reach this server only (the SSRF guard stays on for everything else);
    quick retries by default, other FetchPolicy fields as given."""
    from kbctl.sources.url import FetchPolicy

    settings: dict[str, Any] = {"backoff_base": 0.01, "retries": 1, "read_timeout": 5, **fields}
    return FetchPolicy(allowed_addresses=frozenset({("127.0.0.1", srv.port)}), **settings)
