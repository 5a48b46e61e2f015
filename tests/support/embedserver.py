"""A real OpenAI-compatible `/v1/embeddings` server on 127.0.0.1, backed by the local model (or pseudo-vectors)."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import signal
import threading
from collections.abc import Sequence
from contextlib import suppress
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Literal

import numpy as np

from kbctl.embedding import Embedder
from tests.support.loopback import Answer, LoopbackRequest, LoopbackServer, Payload

__all__ = ["EmbedRequest", "EmbeddingServer", "serve_embeddings"]

MODEL_NAME = "all-MiniLM-L6-v2"
PSEUDO_DIMENSIONS = 384

EmbedRequest = LoopbackRequest  # one request the server received


def _error_body(message: str, kind: str = "invalid_request_error", code: str | None = None) -> bytes:
    error = {"message": message, "type": kind, "param": None, "code": code}
    return json.dumps({"error": error}).encode()


def _inputs(body: Any) -> list[str]:
    """The texts of an embedding request's body (one string or a list)."""
    found = body.get("input") if isinstance(body, dict) else None
    return [found] if isinstance(found, str) else [t for t in found or [] if isinstance(t, str)]


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


class EmbeddingServer(LoopbackServer):
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
    `dimensions_override`, `unknown_models`, `model_name`, `strict_model`, `encodings` (the accepted
    "encoding_format" values), `refused_inputs` (texts answered with 400), and the one-shot queue `fail_next`,
    `bad_json_next`, `mangle_next`, `disconnect_next` (consumed in order, one entry per request). `reset()`
    restores the knobs and forgets the requests, so one server (and one loaded model) can serve a whole module.

    `model="local"` embeds with the real local model: pass `embedder=` to share one already loaded (e.g.
    `get_embedder("local/all-MiniLM-L6-v2", settings)`), else one is built in `home` (a temporary folder by
    default). `model="none"` returns deterministic pseudo-vectors (a hash of each text seeds them) without running
    any model. `python -m tests.support.embedserver [--model none] [--latency S] [--require-key K]` serves until
    interrupted (SIGINT or SIGTERM) and prints its URL once the model is loaded.
    """

    bad_json_body = b'{"object": "list", "data": [{"embedding": [0.1, 0.2'

    def __init__(
        self,
        *,
        model: Literal["local", "none"] = "local",
        embedder: Embedder | None = None,
        home: Path | None = None,
        model_name: str = MODEL_NAME,
        host: str = "127.0.0.1",
    ) -> None:
        self._initial_model_name = model_name
        super().__init__(name="embedserver", host=host)
        self.mode = model
        if model == "local" and embedder is None:
            from kbctl.config import Settings
            from kbctl.embedding.local import LocalEmbedder

            if home is None:
                home = self._temporary_folder()
            embedder = LocalEmbedder(MODEL_NAME, Settings(home=home))
        self._embedder = embedder if model == "local" else None
        self.native_dimensions = self._embedder.dimensions if self._embedder is not None else PSEUDO_DIMENSIONS
        self._load_lock = threading.Lock()
        self._loaded = False
        self.url = f"{self.origin}/v1"

    def _defaults(self) -> None:
        super()._defaults()
        self.require_key: str | None = None  # the expected bearer token; 401 for anything else
        self.dimensions_override: int | None = None  # return vectors cut (renormalized) or zero-padded to this
        self.unknown_models: set[str] = set()  # these model names get 404
        self.model_name = self._initial_model_name  # reported in responses; the only one accepted when strict
        self.strict_model = False
        self.encodings = {"float", "base64"}  # the encoding_format values accepted; others get 400
        self.refused_inputs: set[str] = set()  # a request holding any of these texts gets 400

    # ---- what the server saw ----

    @property
    def embedding_requests(self) -> list[EmbedRequest]:
        """The POST /v1/embeddings requests, oldest first."""
        return self._requests_to("POST", "/v1/embeddings")

    @property
    def content_request_count(self) -> int:
        """The embedding requests for anything but kbctl's background questions, which a store embeds once per model
        when it first publishes a version with it (kbctl.embedding.background)."""
        from kbctl.embedding.background import background_questions

        background = set(background_questions())
        return sum(1 for r in self.embedding_requests if not set(_inputs(r.body)) <= background)

    def expected(self, texts: Sequence[str], dimensions: int | None = None) -> list[np.ndarray[Any, Any]]:
        """What the server embeds for `texts` (before any dimensions_override), computed directly."""
        vectors = self._embed(list(texts))
        return [_resize(v, dimensions) if dimensions else v for v in vectors]

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
        super()._serve(h)

    def _stats(self, h: BaseHTTPRequestHandler) -> None:
        with self._lock:
            stats = {"request_count": len(self.requests), "max_in_flight": self.max_in_flight}
            if h.path.endswith("?clear=1"):
                self._forget_requests()
        self._write(h, 200, {}, json.dumps(stats).encode())

    def _fail_body(self, status: int) -> bytes:
        return _error_body(HTTPStatus(status).phrase, "server_error")

    def _answer(self, request: EmbedRequest, parsed: bool) -> Answer | Payload:
        if request.method == "GET" and request.path == "/v1/models":
            listed = {"id": self.model_name, "object": "model", "owned_by": "kbctl-tests"}
            return 200, {}, json.dumps({"object": "list", "data": [listed]}).encode()
        if request.method != "POST" or request.path != "/v1/embeddings":
            return 404, {}, _error_body(f"Unknown request URL: {request.method} {request.path}")
        token = request.headers.get("authorization", "").removeprefix("Bearer ")
        if self.require_key is not None and token != self.require_key:
            # Like some providers, echo what was sent: a client must never copy this text into its own errors.
            return 401, {}, _error_body(f"Incorrect API key provided: {token}", code="invalid_api_key")
        body = request.body
        if not isinstance(body, dict):
            return 400, {}, _error_body("We could not parse the JSON body of your request.")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            return 400, {}, _error_body("you must provide a model parameter")
        if model in self.unknown_models or (self.strict_model and model != self.model_name):
            message = f"The model `{model}` does not exist or you do not have access to it."
            return 404, {}, _error_body(message, code="model_not_found")
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            return 400, {}, _error_body("'input' must be a string or a non-empty list of strings")
        refused = sorted(self.refused_inputs.intersection(texts))
        if refused:
            return 400, {}, _error_body(f"input {refused[0]!r} is refused")
        dimensions = body.get("dimensions")
        if dimensions is not None and (type(dimensions) is not int or not 1 <= dimensions <= self.native_dimensions):
            message = f"'dimensions' must be an integer from 1 to {self.native_dimensions}, got {dimensions!r}"
            return 400, {}, _error_body(message)
        encoding = body.get("encoding_format", "float")
        if encoding not in self.encodings:
            return 400, {}, _error_body(f"'encoding_format' must be one of {sorted(self.encodings)}")
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
        return {
            "object": "list",
            "data": entries,
            "model": self.model_name,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }


# The server is its own context manager: `with serve_embeddings(...) as server:` starts it and stops it on the way out.
serve_embeddings = EmbeddingServer


def main() -> None:
    """Serve until interrupted (`python -m tests.support.embedserver [--model none] [--latency 0.05]`)."""
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
