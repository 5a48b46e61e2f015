"""What the loopback API servers of the tests share (tests/embedserver.py, tests/rerankserver.py).

A `LoopbackServer` is a real threaded HTTP/1.1 server on an ephemeral port of 127.0.0.1 (or ::1). For every GET
or POST it records the request (parsed JSON body, lower-cased headers), counts it in flight, waits `latency`, and
then answers from the one-shot queue (`fail_next`, `bad_json_next`, `disconnect_next`) or, by default, with
whatever the subclass's `_answer()` returns: a finished (status, headers, body), or the JSON payload of a 200,
which a queued `mangle_next` may replace. A subclass supplies `_answer()` (its routes, bodies and error shapes),
`_fail_body()` and `bad_json_body`, and adds its own knobs in `_defaults()`.

Use a server as a context manager (it starts on entry and closes on exit), or call `start()` and `close()`.
"""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Literal, Self

__all__ = ["Answer", "LoopbackRequest", "LoopbackServer", "Payload"]

Answer = tuple[int, dict[str, str], bytes]  # (status, headers, body) of one response
Payload = dict[str, Any] | list[Any]  # the JSON body of a normal 200 answer, before any `mangle_next`


@dataclass(frozen=True)
class LoopbackRequest:
    """One request the server received."""

    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: Any  # the parsed JSON body; None when there was none or it was not JSON
    time: float  # time.monotonic() when it arrived


@dataclass(frozen=True)
class _Action:
    """A one-shot answer queued for the next request."""

    kind: Literal["fail", "bad_json", "mangle", "disconnect"]
    status: int = 200
    headers: Mapping[str, str] | None = None
    body: bytes | str | Mapping[str, Any] | None = None
    mangle: Callable[[Any], Any] | None = None


class LoopbackServer(ABC):
    """The server, its one-shot queue and what it saw; subclasses answer the requests.

    A subclass sets whatever its `_defaults()` reads before calling `super().__init__()`, which restores the
    knobs once; `reset()` restores them again.
    """

    # The body of a `bad_json_next` answer: the start of a plausible payload, cut off.
    bad_json_body: ClassVar[bytes]

    def __init__(self, *, name: str, host: str) -> None:
        """`name` names the serving thread and the temporary folders (e.g. "embedserver")."""
        owner = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True
            timeout = 30  # an idle keep-alive connection is dropped after this many seconds

            def do_POST(self) -> None:
                owner._serve(self)

            def do_GET(self) -> None:
                owner._serve(self)

            def log_message(self, format: str, *args: object) -> None:
                pass

        class _Server(ThreadingHTTPServer):
            address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
            daemon_threads = True
            request_queue_size = 64

        self._name = name
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._actions: deque[_Action] = deque()
        self._temporary: list[Path] = []
        self.requests: list[LoopbackRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._defaults()
        self._httpd = _Server((host, 0), _Handler)
        self.port: int = self._httpd.server_address[1]
        shown = f"[{host}]" if ":" in host else host
        self.origin = f"http://{shown}:{self.port}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"{name}-{self.port}",
            daemon=True,
        )

    def _defaults(self) -> None:
        """Set every knob to its initial value; a subclass extends this (calling super) with its own knobs."""
        # Seconds added to every request, or a function of the request (e.g. to make one batch slower).
        self.latency: float | Callable[[LoopbackRequest], float] = 0.0

    # ---- knobs ----

    def fail_next(
        self,
        status: int,
        times: int = 1,
        headers: Mapping[str, str] | None = None,
        body: bytes | str | Mapping[str, Any] | None = None,
    ) -> None:
        """Answer the next `times` requests with `status` (body: the API's own error JSON unless given)."""
        self._queue(_Action("fail", status=status, headers=headers, body=body), times)

    def bad_json_next(self, times: int = 1) -> None:
        """Answer the next `times` requests 200 with a body that is not JSON."""
        self._queue(_Action("bad_json"), times)

    def mangle_next(self, fn: Callable[[Any], Any], times: int = 1) -> None:
        """Answer the next `times` requests as usual, then send `fn(payload)` instead of the payload (NaN allowed).
        `fn` may change the payload in place and return None."""
        self._queue(_Action("mangle", mangle=fn), times)

    def disconnect_next(self, times: int = 1) -> None:
        """Close the connection of the next `times` requests without answering."""
        self._queue(_Action("disconnect"), times)

    def _queue(self, action: _Action, times: int) -> None:
        with self._lock:
            self._actions.extend([action] * times)

    def reset(self) -> None:
        """Restore every knob, drop queued one-shot answers, forget the requests and the in-flight maximum."""
        with self._lock:
            self._defaults()
            self._actions.clear()
            self._forget_requests()

    def _forget_requests(self) -> None:
        """Forget the requests and the in-flight maximum; call it holding `self._lock`."""
        self.requests.clear()
        self.max_in_flight = self.in_flight

    # ---- what the server saw ----

    @property
    def request_count(self) -> int:
        """Requests received on any path, including the ones failed on purpose."""
        with self._lock:
            return len(self.requests)

    def _requests_to(self, method: str, path: str) -> list[LoopbackRequest]:
        """The requests with this method and path, oldest first."""
        with self._lock:
            return [r for r in self.requests if r.method == method and r.path == path]

    # ---- lifecycle ----

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Stop serving (waking handlers sleeping in `latency`), then remove the temporary folders."""
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
        for folder in self._temporary:
            shutil.rmtree(folder, ignore_errors=True)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def _temporary_folder(self) -> Path:
        """A new empty folder (e.g. a throwaway kbctl home) that `close()` removes."""
        folder = Path(tempfile.mkdtemp(prefix=f"kbctl-{self._name}-"))
        self._temporary.append(folder)
        return folder

    # ---- serving ----

    @abstractmethod
    def _answer(self, request: LoopbackRequest, parsed: bool) -> Answer | Payload:
        """The normal answer to `request`: a finished (status, headers, body), or the JSON payload of a 200.

        `parsed` is False when the request had a body that is not JSON (`request.body` is then None)."""

    @abstractmethod
    def _fail_body(self, status: int) -> bytes:
        """The body of a `fail_next(status)` answer given no body: the API's own error JSON."""

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
            parsed = True
        except ValueError:
            body, parsed = None, not raw
        request = LoopbackRequest(
            method=h.command,
            path=h.path.split("?")[0],
            headers={k.lower(): v for k, v in h.headers.items()},
            body=body,
            time=time.monotonic(),
        )
        with self._lock:
            self.requests.append(request)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            action = self._actions.popleft() if self._actions else None
            latency = self.latency
        try:
            if callable(latency):
                latency = latency(request)
            if latency > 0 and self._stopping.wait(latency):
                h.close_connection = True
                return
            if action is not None and action.kind == "disconnect":
                h.close_connection = True
                return
            status, headers, payload = self._respond(request, parsed, action)
            self._write(h, status, headers, payload)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            h.close_connection = True  # the client went away (e.g. it gave up on a slow answer)
        finally:
            with self._lock:
                self.in_flight -= 1

    def _respond(self, request: LoopbackRequest, parsed: bool, action: _Action | None) -> Answer:
        """(status, headers, body) of one request: the queued one-shot answer, else the subclass's."""
        if action is not None and action.kind == "fail":
            given = action.body
            if given is None:
                data = self._fail_body(action.status)
            elif isinstance(given, Mapping):
                data = json.dumps(given).encode()
            else:
                data = given.encode() if isinstance(given, str) else given
            return action.status, dict(action.headers or {}), data
        if action is not None and action.kind == "bad_json":
            return 200, {}, self.bad_json_body
        result = self._answer(request, parsed)
        if isinstance(result, tuple):
            return result
        payload: Any = result
        if action is not None and action.mangle is not None:
            changed = action.mangle(payload)
            payload = payload if changed is None else changed
        return 200, {}, json.dumps(payload).encode()

    def _write(self, h: BaseHTTPRequestHandler, status: int, headers: dict[str, str], body: bytes) -> None:
        """Send one response; Content-Type is application/json unless `headers` name one or the body is empty."""
        h.send_response(status)
        if body and not any(k.lower() == "content-type" for k in headers):
            h.send_header("Content-Type", "application/json")
        for name, value in headers.items():
            h.send_header(name, value)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)
        h.wfile.flush()
