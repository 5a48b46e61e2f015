"""A real OpenAI-compatible `/v1/embeddings` server on 127.0.0.1, backed by the local model (or pseudo-vectors)."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

import numpy as np

from kbctl.embedding import Embedder

__all__ = ["EmbedRequest", "EmbeddingServer", "serve_embeddings"]

MODEL_NAME = "all-MiniLM-L6-v2"
PSEUDO_DIMENSIONS = 384


@dataclass(frozen=True)
class EmbedRequest:
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
    mangle: Callable[[dict[str, Any]], Any] | None = None


def _error_body(message: str, kind: str = "invalid_request_error", code: str | None = None) -> bytes:
    error = {"message": message, "type": kind, "param": None, "code": code}
    return json.dumps({"error": error}).encode()


def pseudo_vector(text: str, dimensions: int = PSEUDO_DIMENSIONS) -> np.ndarray[Any, np.dtype[np.float32]]:
    """A deterministic unit vector for `text` (what `model="none"` returns), seeded by a hash of the text."""
    seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
    values = np.random.default_rng(seed).standard_normal(dimensions)
    return (values / np.linalg.norm(values)).astype(np.float32)


def _resize(vector: np.ndarray[Any, Any], size: int) -> np.ndarray[Any, Any]:
    """Cut to `size` and renormalize, or pad with zeros (the norm stays 1)."""
    if size <= len(vector):
        cut = vector[:size].astype(np.float64)
        norm = float(np.linalg.norm(cut))
        return cut / norm if norm else cut
    return np.concatenate([vector, np.zeros(size - len(vector))])


class EmbeddingServer:
    """The server, its knobs and what it saw; use `serve_embeddings()` to start and stop it.

        with serve_embeddings() as server:             # the real all-MiniLM-L6-v2 behind the endpoint
            config = HttpEmbeddingConfig(base_url=server.url, model=server.model_name, model_id="x/y")
            server.fail_next(429, headers={"Retry-After": "1"})
            HttpEmbedder(config).embed(["hello"])      # retried once, then the model's own vector
            assert server.request_count == 2

    It answers POST /v1/embeddings in OpenAI's format ({"object": "list", "data": [{"object": "embedding",
    "index": i, "embedding": [...]}], "model": ..., "usage": {...}}), accepts "input" as a string or a list of
    strings, honours "dimensions" by truncating and renormalizing (like text-embedding-3) and "encoding_format"
    float or base64, and records every request (parsed JSON body + lower-cased headers), including the ones it
    fails on purpose. GET /v1/models lists the model; GET /_stats answers {"request_count", "max_in_flight"} for a
    client in another process (it is not recorded itself; `?clear=1` then forgets both).

    Knobs a test may change at any time: `latency` (seconds, or a function of the request), `require_key`,
    `dimensions_override`, `unknown_models`, `model_name`, `strict_model`, and the one-shot queue `fail_next`,
    `bad_json_next`, `mangle_next`, `disconnect_next` (consumed in order, one entry per request). `reset()`
    restores the knobs and forgets the requests, so one server (and one loaded model) can serve a whole module.

    `model="local"` embeds with the real local model: pass `embedder=` to share one already loaded (e.g.
    `get_embedder("local/all-MiniLM-L6-v2", settings)`), else one is built in `home` (a temporary folder by
    default). `model="none"` returns deterministic pseudo-vectors (a hash of each text seeds them) without running
    any model. `python -m tests.embedserver [--model none] [--latency S] [--require-key K]` serves until
    interrupted (SIGINT or SIGTERM) and prints its URL once the model is loaded.
    """

    def __init__(
        self,
        *,
        model: Literal["local", "none"] = "local",
        embedder: Embedder | None = None,
        home: Path | None = None,
        model_name: str = MODEL_NAME,
        host: str = "127.0.0.1",
    ) -> None:
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

        self.mode = model
        self._temp_home: Path | None = None
        if model == "local" and embedder is None:
            from kbctl.config import Settings
            from kbctl.embedding.local import LocalEmbedder

            if home is None:
                home = self._temp_home = Path(tempfile.mkdtemp(prefix="kbctl-embedserver-"))
            embedder = LocalEmbedder(MODEL_NAME, Settings(home=home))
        self._embedder = embedder if model == "local" else None
        self.native_dimensions = self._embedder.dimensions if self._embedder is not None else PSEUDO_DIMENSIONS
        self._initial_model_name = model_name
        self._lock = threading.Lock()
        self._load_lock = threading.Lock()
        self._loaded = False
        self._stopping = threading.Event()
        self._actions: deque[_Action] = deque()
        self.requests: list[EmbedRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._defaults()
        self._httpd = _Server((host, 0), _Handler)
        self.port: int = self._httpd.server_address[1]
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{self.port}/v1"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"embedserver-{self.port}",
            daemon=True,
        )

    def _defaults(self) -> None:
        # Seconds added to every request, or a function of the request (e.g. to make one batch slower).
        self.latency: float | Callable[[EmbedRequest], float] = 0.0
        self.require_key: str | None = None  # the expected bearer token; 401 for anything else
        self.dimensions_override: int | None = None  # return vectors cut (renormalized) or zero-padded to this
        self.unknown_models: set[str] = set()  # these model names get 404
        self.model_name = self._initial_model_name  # reported in responses; the only one accepted when strict
        self.strict_model = False

    # ---- knobs ----

    def fail_next(
        self,
        status: int,
        times: int = 1,
        headers: Mapping[str, str] | None = None,
        body: bytes | str | Mapping[str, Any] | None = None,
    ) -> None:
        """Answer the next `times` requests with `status` (body: OpenAI-style error JSON unless given)."""
        self._queue(_Action("fail", status=status, headers=headers, body=body), times)

    def bad_json_next(self, times: int = 1) -> None:
        """Answer the next `times` requests 200 with a body that is not JSON."""
        self._queue(_Action("bad_json"), times)

    def mangle_next(self, fn: Callable[[dict[str, Any]], Any], times: int = 1) -> None:
        """Embed the next `times` requests as usual, then send `fn(payload)` instead of the payload (NaN allowed)."""
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
            self.requests.clear()
            self.max_in_flight = self.in_flight

    # ---- what the server saw ----

    @property
    def request_count(self) -> int:
        """Requests received on any path, including the ones failed on purpose."""
        with self._lock:
            return len(self.requests)

    @property
    def embedding_requests(self) -> list[EmbedRequest]:
        """The POST /v1/embeddings requests, oldest first."""
        with self._lock:
            return [r for r in self.requests if r.method == "POST" and r.path == "/v1/embeddings"]

    def expected(self, texts: Sequence[str], dimensions: int | None = None) -> list[np.ndarray[Any, Any]]:
        """What the server embeds for `texts` (before any dimensions_override), computed directly."""
        vectors = self._embed(list(texts))
        return [_resize(v, dimensions) if dimensions else v for v in vectors]

    # ---- lifecycle ----

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stopping.set()  # wakes handlers sleeping in `latency`
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
        if self._temp_home is not None:
            shutil.rmtree(self._temp_home, ignore_errors=True)

    # ---- serving ----

    def _embed(self, texts: list[str]) -> list[np.ndarray[Any, Any]]:
        if self._embedder is None:
            return [pseudo_vector(t, self.native_dimensions) for t in texts]
        if not self._loaded:  # load the model once, not once per concurrent first request
            with self._load_lock:
                if not self._loaded:
                    self._embedder.embed(["warm up"])
                    self._loaded = True
        return list(self._embedder.embed(texts))

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        if h.command == "GET" and h.path.split("?")[0] == "/_stats":  # not recorded: the remote control
            self._stats(h)
            return
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        request = EmbedRequest(
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
            status, headers, payload = self._answer(request, action)
            self._write(h, status, headers, payload)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            h.close_connection = True  # the client went away (e.g. it gave up on a slow answer)
        finally:
            with self._lock:
                self.in_flight -= 1

    def _stats(self, h: BaseHTTPRequestHandler) -> None:
        with self._lock:
            stats = {"request_count": len(self.requests), "max_in_flight": self.max_in_flight}
            if h.path.endswith("?clear=1"):
                self.requests.clear()
                self.max_in_flight = self.in_flight
        self._write(h, 200, {}, json.dumps(stats).encode())

    def _answer(self, request: EmbedRequest, action: _Action | None) -> tuple[int, dict[str, str], bytes]:
        """(status, headers, body) of one request."""
        headers: dict[str, str] = {}
        if action is not None and action.kind == "fail":
            given = action.body
            if given is None:
                data = _error_body(HTTPStatus(action.status).phrase, "server_error")
            elif isinstance(given, Mapping):
                data = json.dumps(given).encode()
            else:
                data = given.encode() if isinstance(given, str) else given
            return action.status, dict(action.headers or {}), data
        if action is not None and action.kind == "bad_json":
            return 200, headers, b'{"object": "list", "data": [{"embedding": [0.1, 0.2'
        if request.method == "GET" and request.path == "/v1/models":
            listed = {"id": self.model_name, "object": "model", "owned_by": "kbctl-tests"}
            return 200, headers, json.dumps({"object": "list", "data": [listed]}).encode()
        if request.method != "POST" or request.path != "/v1/embeddings":
            return 404, headers, _error_body(f"Unknown request URL: {request.method} {request.path}")
        token = request.headers.get("authorization", "").removeprefix("Bearer ")
        if self.require_key is not None and token != self.require_key:
            # Like some providers, echo what was sent: a client must never copy this text into its own errors.
            return 401, headers, _error_body(f"Incorrect API key provided: {token}", code="invalid_api_key")
        body = request.body
        if not isinstance(body, dict):
            return 400, headers, _error_body("We could not parse the JSON body of your request.")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            return 400, headers, _error_body("you must provide a model parameter")
        if model in self.unknown_models or (self.strict_model and model != self.model_name):
            message = f"The model `{model}` does not exist or you do not have access to it."
            return 404, headers, _error_body(message, code="model_not_found")
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            return 400, headers, _error_body("'input' must be a string or a non-empty list of strings")
        dimensions = body.get("dimensions")
        if dimensions is not None and (type(dimensions) is not int or not 1 <= dimensions <= self.native_dimensions):
            message = f"'dimensions' must be an integer from 1 to {self.native_dimensions}, got {dimensions!r}"
            return 400, headers, _error_body(message)
        encoding = body.get("encoding_format", "float")
        if encoding not in ("float", "base64"):
            return 400, headers, _error_body("'encoding_format' must be 'float' or 'base64'")
        vectors = self._embed(texts)
        with self._lock:
            size = self.dimensions_override
        if dimensions is not None:
            vectors = [_resize(v, dimensions) for v in vectors]
        if size is not None:
            vectors = [_resize(v, size) for v in vectors]
        entries = [
            {
                "object": "embedding",
                "index": i,
                "embedding": (
                    base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode()
                    if encoding == "base64"
                    else np.asarray(v, dtype=np.float32).tolist()
                ),
            }
            for i, v in enumerate(vectors)
        ]
        tokens = sum(math.ceil(len(t) / 4) for t in texts)
        payload: Any = {
            "object": "list",
            "data": entries,
            "model": self.model_name,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        if action is not None and action.kind == "mangle" and action.mangle is not None:
            payload = action.mangle(payload)
        return 200, headers, json.dumps(payload).encode()

    def _write(self, h: BaseHTTPRequestHandler, status: int, headers: dict[str, str], body: bytes) -> None:
        h.send_response(status)
        if not any(k.lower() == "content-type" for k in headers):
            h.send_header("Content-Type", "application/json")
        for name, value in headers.items():
            h.send_header(name, value)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)
        h.wfile.flush()


@contextmanager
def serve_embeddings(
    *,
    model: Literal["local", "none"] = "local",
    embedder: Embedder | None = None,
    home: Path | None = None,
    model_name: str = MODEL_NAME,
    host: str = "127.0.0.1",
) -> Iterator[EmbeddingServer]:
    """Start an embeddings server on `host` (an ephemeral port), yield it, stop it; `server.url` ends in /v1."""
    server = EmbeddingServer(model=model, embedder=embedder, home=home, model_name=model_name, host=host)
    server.start()
    try:
        yield server
    finally:
        server.close()


def main() -> None:
    """Serve until interrupted: `python -m tests.embedserver [--model none] [--latency 0.05]` prints the URL first."""
    import argparse

    parser = argparse.ArgumentParser(description="A loopback OpenAI-compatible /v1/embeddings server for kbctl tests.")
    parser.add_argument("--model", choices=("local", "none"), default="local")
    parser.add_argument("--model-name", default=MODEL_NAME)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every request")
    parser.add_argument("--require-key", default=None, help="the bearer token to expect (401 otherwise)")
    args = parser.parse_args()

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(0)  # leave the `with` below, so the server closes and its temporary home is removed

    signal.signal(signal.SIGTERM, stop)
    with serve_embeddings(model=args.model, model_name=args.model_name) as server:
        server.latency = args.latency
        server.require_key = args.require_key
        server.expected(["warm up"])  # load the model before announcing the URL
        print(server.url, flush=True)
        with suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
