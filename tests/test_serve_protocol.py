"""kbctl serve's header deadline on the installed uvicorn: the private H11Protocol surface it extends is there, and
the deadline works (a slow request is answered 408 and closed, a silent connection closed, a prompt one served)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from importlib.metadata import version
from typing import Any

import pytest
import uvicorn
from packaging.specifiers import SpecifierSet

from kbctl.serve.protocol import CHECKED_UVICORN, private_surface_problems, with_header_timeout

DEADLINE = 0.5


def test_the_private_surface_is_there() -> None:
    """uvicorn's H11Protocol still has what HeaderDeadlineProtocol relies on, and the installed uvicorn is one the
    module was checked with; a class without it is reported by name."""
    assert private_surface_problems() == []
    assert version("uvicorn") in SpecifierSet(CHECKED_UVICORN)

    class Bare:
        def __init__(self) -> None:
            self.loop = None

        def data_received(self, data: bytes) -> None: ...

    problems = private_surface_problems(Bare)
    assert "H11Protocol.__init__ no longer sets self.conn" in problems
    assert "H11Protocol.connection_made is gone" in problems
    assert "H11Protocol.connection_lost is gone" in problems


def test_pyproject_bounds_uvicorn_as_the_module_says() -> None:
    import tomllib
    from pathlib import Path

    pyproject = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())
    assert f"uvicorn{CHECKED_UVICORN}" in pyproject["project"]["dependencies"]


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    assert scope["type"] == "http"
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    """A uvicorn server with kbctl's protocol and a header deadline of DEADLINE seconds, on a loopback port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(_app, http=with_header_timeout(DEADLINE), lifespan="off", log_config=None)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    for _ in range(200):
        if server.started:
            break
        time.sleep(0.02)
    assert server.started
    yield sock.getsockname()[1]
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()


def _read_all(conn: socket.socket) -> bytes:
    conn.settimeout(DEADLINE * 6)
    data = b""
    while chunk := conn.recv(4096):
        data += chunk
    return data


def test_slow_headers_are_answered_408_and_closed(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as conn:
        started = time.monotonic()
        conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # the headers never end
        answer = _read_all(conn)
        took = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert b"request-timeout" in answer and b"connection: close" in answer.lower()
    assert DEADLINE * 0.8 <= took < DEADLINE * 5


def test_a_silent_connection_is_closed_without_an_answer(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as conn:
        started = time.monotonic()
        assert _read_all(conn) == b""
        assert DEADLINE * 0.8 <= time.monotonic() - started < DEADLINE * 5


def test_a_prompt_request_is_served_and_its_kept_alive_connection_gets_a_new_deadline(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.settimeout(DEADLINE * 6)
        conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        first = b""
        while not first.endswith(b"\r\n\r\nok"):
            first += conn.recv(4096)
        assert first.startswith(b"HTTP/1.1 200 ")
        time.sleep(DEADLINE * 1.5)  # idle between requests: the keep-alive bound applies, not the header deadline
        conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
        assert _read_all(conn).startswith(b"HTTP/1.1 408 ")
