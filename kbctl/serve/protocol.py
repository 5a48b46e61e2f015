"""uvicorn's HTTP/1.1 protocol (h11) with a deadline on a request's headers, so slow clients cannot hold connections.

uvicorn bounds an idle kept-alive connection (`timeout_keep_alive`) but not a connection that sends nothing nor
headers arriving a byte at a time (slowloris). Here a request's line and headers must arrive within
`header_timeout` seconds of the connection's opening (or of the request's first byte on a kept-alive connection),
else a partial request is answered 408 and the connection closed. The body's deadline is `BodyLimit`'s.

uvicorn offers no setting for this, so the class below subclasses its private `H11Protocol`. An upgrade fails
loudly, not silently: pyproject.toml bounds uvicorn to the versions checked (`CHECKED_UVICORN`), importing this
module checks the private surface it relies on (`private_surface_problems`), and tests/test_serve_protocol.py
exercises the deadline (docs/serve.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import cast

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from kbctl.errors import KbctlError
from kbctl.serve.limits import DEFAULT_HEADER_TIMEOUT
from kbctl.serve.problems import problem_body

__all__ = ["CHECKED_UVICORN", "HeaderDeadlineProtocol", "private_surface_problems", "with_header_timeout"]

log = logging.getLogger("kbctl.serve")

# The uvicorn versions whose H11Protocol this module was checked against (pyproject.toml's bound says the same).
CHECKED_UVICORN = ">=0.30,<0.55"

# What of H11Protocol the subclass relies on: each method it overrides, and the attributes it reads (set there).
_PRIVATE_SURFACE: dict[str, tuple[str, ...]] = {
    "__init__": ("conn", "loop"),  # self.conn: the h11.Connection; self.loop: the event loop
    "connection_made": ("transport", "client"),
    "data_received": (),
    "connection_lost": (),
}


def private_surface_problems(protocol: type = H11Protocol) -> list[str]:
    """What `protocol` (uvicorn's H11Protocol) lacks of what HeaderDeadlineProtocol relies on (empty: nothing)."""
    problems: list[str] = []
    for method, attributes in _PRIVATE_SURFACE.items():
        code = getattr(getattr(protocol, method, None), "__code__", None)
        if code is None:
            problems.append(f"H11Protocol.{method} is gone")
            continue
        missing = [f"self.{name}" for name in attributes if name not in code.co_names]
        if missing:
            problems.append(f"H11Protocol.{method} no longer sets {', '.join(missing)}")
    return problems


def _check_private_surface() -> None:
    problems = private_surface_problems()
    if problems:
        raise KbctlError(
            f"kbctl serve's header deadline extends uvicorn's private H11Protocol, checked with uvicorn "
            f"{CHECKED_UVICORN}, but uvicorn {uvicorn.__version__} is installed and {'; '.join(problems)}: install "
            f"a uvicorn the constraints allow"
        )


_check_private_surface()


class HeaderDeadlineProtocol(H11Protocol):
    """H11Protocol that closes a connection whose request line and headers take longer than `header_timeout`."""

    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    _header_deadline: asyncio.TimerHandle | None = None
    _request_started = False  # some bytes of the awaited request came (else the connection is silent)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE:
            if self._header_deadline is None:  # the first bytes of the next request on a kept-alive connection
                self._arm()
            self._request_started = True
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # the headers are in (or the request was refused as malformed)
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._header_deadline = self.loop.call_later(self.header_timeout, self._headers_too_slow)

    def _disarm(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None
        self._request_started = False

    def _headers_too_slow(self) -> None:
        self._header_deadline = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if self._request_started:
            client = f"{self.client[0]}:{self.client[1]}" if self.client else None
            log.info(
                "request headers not received within %g s: answered 408",
                self.header_timeout,
                extra={"fields": {"client": client}},
            )
            self._send_408()
        self.transport.close()

    def _send_408(self) -> None:
        detail = f"the request headers were not received within {self.header_timeout:g} s"
        body = json.dumps(problem_body(408, "request-timeout", detail)).encode()
        headers = [
            (b"content-type", b"application/problem+json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        try:
            output = self.conn.send(h11.Response(status_code=408, headers=headers, reason=b"Request Timeout"))
            output = (output or b"") + (self.conn.send(h11.Data(data=body)) or b"")
            output += self.conn.send(h11.EndOfMessage()) or b""
        except h11.LocalProtocolError:  # not a state h11 can answer from: just close
            return
        self.transport.write(output)


def with_header_timeout(seconds: float) -> type[HeaderDeadlineProtocol]:
    """The protocol class for uvicorn's `http=` with a header deadline of `seconds`."""
    return cast(
        type[HeaderDeadlineProtocol],
        type("HeaderDeadlineProtocol", (HeaderDeadlineProtocol,), {"header_timeout": seconds}),
    )
