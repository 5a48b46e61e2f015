"""Bounds on what a client sends: a request body over 64 KiB is refused (413), one arriving too slowly is cut (408).

The deadline of a request's headers is the HTTP protocol's (`kbctl.serve.protocol`); this is the body's, in ASGI.
"""

from __future__ import annotations

import logging
from typing import Final

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kbctl.serve.problems import problem
from kbctl.serve.requests import MAX_BODY_BYTES

__all__ = ["DEFAULT_BODY_TIMEOUT", "DEFAULT_HEADER_TIMEOUT", "BodyLimit"]

DEFAULT_HEADER_TIMEOUT: Final = 10.0  # s from a connection's opening (or a request's first byte) to its last header
DEFAULT_BODY_TIMEOUT: Final = 30.0  # s from a request's last header to the last byte of its body

log = logging.getLogger("kbctl.serve")


class BodyLimit:
    """Read a request's body before the app does: over `limit` bytes, announced or not, is a 413; not complete
    within `timeout` seconds of the headers is a 408 that closes the connection, so a client trickling its
    body (or announcing more than it sends) holds no connection and no worker for longer. A client that goes
    away while sending is not answered."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY_BYTES, timeout: float = DEFAULT_BODY_TIMEOUT) -> None:
        self.app, self.limit, self.timeout = app, limit, timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "DELETE", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        too_large = problem(413, "body-too-large", f"the request body is over {self.limit} bytes")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            await too_large(scope, receive, send)
            return
        body, more = b"", True
        with anyio.move_on_after(self.timeout) as deadline:
            while more:
                message = await receive()
                if message["type"] != "http.request":
                    return  # the client disconnected: nobody to answer
                body += message.get("body", b"")
                more = message.get("more_body", False)
                if len(body) > self.limit:
                    await too_large(scope, receive, send)
                    return
        if deadline.cancelled_caught:
            peer = scope.get("client")
            client = f"{peer[0]}:{peer[1]}" if peer else None
            log.info(
                "request body not received within %g s (%d bytes came): answered 408",
                self.timeout,
                len(body),
                extra={"fields": {"client": client}},
            )
            detail = f"the request body was not received within {self.timeout:g} s"
            await problem(408, "request-timeout", detail, {"Connection": "close"})(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
