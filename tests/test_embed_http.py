"""HttpEmbedder against a real OpenAI-compatible server on 127.0.0.1 that runs the local model."""

from __future__ import annotations

import asyncio
import logging
import socket
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

import kbctl
from kbctl._http import EMBEDDING_POLICY
from kbctl.config import Settings
from kbctl.embedding import Vector
from kbctl.embedding.http import HttpEmbedder, HttpEmbeddingConfig, estimate_tokens
from kbctl.embedding.local import LocalEmbedder
from kbctl.errors import EmbeddingError
from tests.support.embedserver import EmbeddingServer, serve_embeddings

KEY = "sk-kbctl-test-SECRET-7f3a9c21d04e"
VAR = "OPENAI_API_KEY"
MODEL = "text-embedding-3-small"
MODEL_ID = "openai/text-embedding-3-small"


@pytest.fixture(scope="module")
def local() -> Iterator[LocalEmbedder]:
    """The real local model, loaded once for the module in a throwaway home."""
    with tempfile.TemporaryDirectory(prefix="kbctl-embed-http-") as home:
        yield LocalEmbedder("all-MiniLM-L6-v2", Settings(home=Path(home)))


@pytest.fixture(scope="module")
def module_server(local: LocalEmbedder) -> Iterator[EmbeddingServer]:
    """One embeddings server for the module, backed by the same local model."""
    with serve_embeddings(embedder=local) as server:
        yield server


@pytest.fixture
def server(module_server: EmbeddingServer) -> EmbeddingServer:
    """The module's server with its knobs restored and nothing recorded (after stragglers finish)."""
    deadline = time.monotonic() + 3
    while module_server.in_flight and time.monotonic() < deadline:
        time.sleep(0.02)
    module_server.reset()
    return module_server


HTTP_FIELDS = ("timeout", "retries", "backoff_base", "max_retry_after")


def config(**fields: Any) -> HttpEmbeddingConfig:
    """A configuration of `fields`; timeout, retries, backoff_base and max_retry_after set its HTTP policy."""
    policy = {name: fields.pop(name) for name in HTTP_FIELDS if name in fields}
    return HttpEmbeddingConfig(**fields, http=EMBEDDING_POLICY.with_(**policy))


def make(server: EmbeddingServer, environ: dict[str, str] | None = None, **overrides: Any) -> HttpEmbedder:
    """An embedder for `server` with test-friendly retries (tiny backoff) and the distinctive key. It asks for
    vectors as JSON numbers, so that `mangle_next` can edit them; the base64 tests below ask for the default."""
    fields: dict[str, Any] = {
        "base_url": server.url,
        "model": MODEL,
        "model_id": MODEL_ID,
        "api_key_env": VAR,
        "retries": 2,
        "backoff_base": 0.01,
        "encoding_format": "float",
    }
    fields.update(overrides)
    return HttpEmbedder(config(**fields), environ={VAR: KEY} if environ is None else environ)


def cosines(a: list[Vector], b: list[Vector]) -> list[float]:
    """Cosine similarity of each pair (the vectors are unit length)."""
    return [float(np.dot(x, y)) / float(np.linalg.norm(x) * np.linalg.norm(y)) for x, y in zip(a, b, strict=True)]


def batch_sizes(server: EmbeddingServer) -> list[int]:
    """How many inputs each embeddings request carried, in arrival order."""
    return [len(r.body["input"]) for r in server.embedding_requests]


def texts(n: int, prefix: str = "chunk") -> list[str]:
    """n distinct short texts."""
    return [f"{prefix} {i}: the retention policy for client records is reviewed every {i + 1} months" for i in range(n)]


# ---- batching, order, fidelity ----


def test_batches_by_count(server: EmbeddingServer) -> None:
    """10 inputs with batch_size 4 go out as 3 requests of 4, 4 and 2 inputs."""
    vectors = make(server, batch_size=4, max_concurrency=1).embed(texts(10))
    assert len(vectors) == 10
    assert server.request_count == 3
    assert batch_sizes(server) == [4, 4, 2]


def test_batches_by_estimated_size(server: EmbeddingServer) -> None:
    """Batches are also cut at max_batch_tokens; an input bigger than that goes alone."""
    inputs = [f"{i:02d}" + "x" * 28 for i in range(3)] + ["big" + "y" * 87] + [f"{i:02d}" + "z" * 28 for i in range(2)]
    assert [estimate_tokens(t) for t in inputs] == [10, 10, 10, 30, 10, 10]
    vectors = make(server, max_batch_tokens=25, max_concurrency=1).embed(inputs)
    assert len(vectors) == 6
    assert batch_sizes(server) == [2, 1, 1, 2]
    assert [r.body["input"] for r in server.embedding_requests][2] == [inputs[3]]


def test_order_and_fidelity_under_concurrency(server: EmbeddingServer, local: LocalEmbedder) -> None:
    """16 texts in 8 concurrent batches (the first answered last) come back in order, equal to the local model's."""
    inputs = texts(16)
    server.latency = lambda request: 0.5 if inputs[0] in request.body["input"] else 0.2
    vectors = make(server, batch_size=2, max_concurrency=4).embed(inputs)
    assert server.request_count == 8
    assert 1 < server.max_in_flight <= 4
    assert all(v.dtype == np.float32 and v.shape == (384,) for v in vectors)
    assert min(cosines(vectors, local.embed(inputs))) >= 0.999
    assert [abs(float(np.linalg.norm(v)) - 1) < 1e-5 for v in vectors] == [True] * 16


def test_dimensions_sent_and_honoured(server: EmbeddingServer, local: LocalEmbedder) -> None:
    """dimensions=128 is sent in the body and the vectors are the model's, truncated to 128 and renormalized."""
    inputs = texts(3)
    embedder = make(server, dimensions=128)
    assert embedder.dimensions == 128
    vectors = embedder.embed(inputs)
    assert server.embedding_requests[0].body["dimensions"] == 128
    expected = [v[:128] / np.linalg.norm(v[:128]) for v in local.embed(inputs)]
    assert [v.shape for v in vectors] == [(128,)] * 3
    assert min(cosines(vectors, expected)) >= 0.999


def test_dimensions_learned_from_first_response(server: EmbeddingServer) -> None:
    """Without configured dimensions the embedder reports 0, then the size of the first response's vectors."""
    embedder = make(server)
    assert embedder.dimensions == 0
    embedder.embed(["one"])
    assert embedder.dimensions == 384


def test_order_by_index_and_normalization(server: EmbeddingServer, local: LocalEmbedder) -> None:
    """Entries sent in reverse with their index, scaled by 3, still give the unit vectors in input order."""

    def reverse_and_scale(payload: dict[str, Any]) -> dict[str, Any]:
        for entry in payload["data"]:
            entry["embedding"] = [3 * x for x in entry["embedding"]]
        payload["data"].reverse()
        return payload

    server.mangle_next(reverse_and_scale)
    inputs = texts(4)
    vectors = make(server).embed(inputs)
    assert min(cosines(vectors, local.embed(inputs))) >= 0.999
    assert [round(float(np.linalg.norm(v)), 5) for v in vectors] == [1.0] * 4


def test_request_body_headers_and_purpose_fields(server: EmbeddingServer) -> None:
    """Documents send document_fields, queries send query_fields, with the bearer key and kbctl's User-Agent."""
    embedder = make(
        server,
        document_fields={"input_type": "document"},
        query_fields={"input_type": "query", "truncate": "END"},
    )
    embedder.embed(["a document"])
    embedder.embed(["a question?"], purpose="query")
    doc, query = server.embedding_requests
    assert doc.body == {"model": MODEL, "input": ["a document"], "encoding_format": "float", "input_type": "document"}
    assert query.body == {
        "model": MODEL,
        "input": ["a question?"],
        "encoding_format": "float",
        "input_type": "query",
        "truncate": "END",
    }
    assert doc.headers["authorization"] == f"Bearer {KEY}"
    assert doc.headers["user-agent"] == f"kbctl/{kbctl.__version__}"
    assert doc.headers["content-type"] == "application/json"


def test_no_key_variable_sends_no_authorization(server: EmbeddingServer) -> None:
    """With api_key_env None no Authorization header is sent, and a trailing slash on base_url is fine."""
    make(server, api_key_env=None, base_url=server.url + "/").embed(["x"])
    (request,) = server.embedding_requests
    assert "authorization" not in request.headers
    assert request.path == "/v1/embeddings"


def test_empty_input_and_token_estimates(server: EmbeddingServer) -> None:
    """No texts means no request; token counts are ceil(characters / 3)."""
    embedder = make(server)
    assert embedder.embed([]) == []
    assert server.request_count == 0
    assert embedder.count_tokens(["", "a", "abc", "abcd", "x" * 3000]) == [0, 1, 1, 2, 1000]


def test_works_inside_a_running_event_loop(server: EmbeddingServer) -> None:
    """Called from a coroutine, embed runs on its own loop in a worker thread and returns the vectors."""
    embedder = make(server)

    async def caller() -> list[Vector]:
        return embedder.embed(["from async code"])

    assert [v.shape for v in asyncio.run(caller())] == [(384,)]
    assert server.request_count == 1


# ---- retries ----


def test_429_retry_after_then_success(server: EmbeddingServer) -> None:
    """A 429 with Retry-After: 1 is retried after about a second, and the second request succeeds."""
    server.fail_next(429, headers={"Retry-After": "1"})
    started = time.monotonic()
    vectors = make(server, backoff_base=0.01).embed(["rate limited"])
    elapsed = time.monotonic() - started
    assert len(vectors) == 1
    assert server.request_count == 2
    assert 0.95 <= elapsed < 10  # waited the Retry-After (the upper bound only catches a runaway wait)


def test_retry_after_is_capped(server: EmbeddingServer) -> None:
    """Retry-After: 30 waits only max_retry_after (0.2 s)."""
    server.fail_next(503, headers={"Retry-After": "30"})
    started = time.monotonic()
    make(server, max_retry_after=0.2).embed(["x"])
    assert time.monotonic() - started < 10  # not the 30 s asked for
    assert server.request_count == 2


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_server_errors_retried_then_fail(server: EmbeddingServer, status: int) -> None:
    """A persistent 5xx is tried 1 + retries times and the error names the status and the attempt count."""
    server.fail_next(status, times=10)
    embedder = make(server, retries=4)
    with pytest.raises(EmbeddingError) as info:
        embedder.embed(["x"])
    phrase = httpx.codes.get_reason_phrase(status)
    assert (
        str(info.value)
        == f"embedding request to {server.url}/embeddings failed: HTTP {status} {phrase} (after 5 attempts)"
    )
    assert server.request_count == 5


def test_transient_500_then_success(server: EmbeddingServer) -> None:
    """Two 500s then a good answer: the vectors arrive after 3 requests."""
    server.fail_next(500, times=2)
    assert len(make(server, retries=2).embed(["x", "y"])) == 2
    assert server.request_count == 3


def test_dropped_connections_retried(server: EmbeddingServer) -> None:
    """A server that closes the connection without answering is retried, then reported with the attempt count."""
    server.disconnect_next(times=10)
    with pytest.raises(EmbeddingError) as info:
        make(server, retries=1).embed(["x"])
    assert str(info.value) == (
        f"embedding request to {server.url}/embeddings failed: "
        "connection error: Server disconnected without sending a response. (after 2 attempts)"
    )
    assert server.request_count == 2


def test_read_timeout_retried(server: EmbeddingServer) -> None:
    """A server slower than the timeout is retried, then reported as a read timeout."""
    server.latency = 1.0
    with pytest.raises(EmbeddingError) as info:
        make(server, timeout=0.2, retries=1).embed(["x"])
    assert str(info.value) == (
        f"embedding request to {server.url}/embeddings failed: read timed out after 0.2 s (after 2 attempts)"
    )
    # The client gave up on the second attempt after 0.2 s; on a busy machine the server's thread may record
    # that request a little later: wait for it (bounded), then count.
    deadline = time.monotonic() + 10
    while server.request_count < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.request_count == 2


def test_connection_refused(server: EmbeddingServer) -> None:
    """Nothing listening: every attempt fails to connect and the error says so."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    embedder = make(server, base_url=f"http://127.0.0.1:{port}/v1", retries=1)
    with pytest.raises(EmbeddingError) as info:
        embedder.embed(["x"])
    assert str(info.value).startswith(
        f"embedding request to http://127.0.0.1:{port}/v1/embeddings failed: cannot connect"
    )
    assert str(info.value).endswith("(after 2 attempts)")


# ---- fail fast ----


@pytest.mark.parametrize("status", [401, 403])
def test_rejected_key_fails_fast(server: EmbeddingServer, status: int) -> None:
    """401/403 is not retried and names the variable, never the key."""
    if status == 401:
        server.require_key = "sk-the-right-one"
    else:
        server.fail_next(403)
    with pytest.raises(EmbeddingError) as info:
        make(server).embed(["x"])
    phrase = httpx.codes.get_reason_phrase(status)
    assert str(info.value) == (
        f"embedding endpoint {server.url}/embeddings rejected the API key in $OPENAI_API_KEY (HTTP {status} {phrase})"
    )
    assert server.request_count == 1


def test_key_required_but_not_configured(server: EmbeddingServer) -> None:
    """A 401 to an embedder without api_key_env says a key is needed."""
    server.require_key = "sk-the-right-one"
    with pytest.raises(EmbeddingError) as info:
        make(server, api_key_env=None).embed(["x"])
    assert str(info.value) == (
        f"embedding endpoint {server.url}/embeddings requires an API key (HTTP 401 Unauthorized); "
        "name the environment variable that holds it in api_key_env"
    )
    assert server.request_count == 1


@pytest.mark.parametrize("environ", [{}, {VAR: ""}, {VAR: "  "}])
def test_missing_key_fails_before_any_request(server: EmbeddingServer, environ: dict[str, str]) -> None:
    """An unset or empty key variable is an error before any request."""
    with pytest.raises(EmbeddingError) as info:
        make(server, environ=environ).embed(["x"])
    assert str(info.value) == (
        "environment variable OPENAI_API_KEY is not set (it holds the API key for openai/text-embedding-3-small)"
    )
    assert server.request_count == 0


def test_unknown_model_404(server: EmbeddingServer) -> None:
    """A 404 names the model and the endpoint, after one request."""
    server.unknown_models = {MODEL}
    with pytest.raises(EmbeddingError) as info:
        make(server).embed(["x"])
    assert (
        str(info.value) == f"model 'text-embedding-3-small' not found at {server.url}/embeddings (HTTP 404 Not Found)"
    )
    assert server.request_count == 1


def test_bad_request_shows_server_message(server: EmbeddingServer) -> None:
    """A 400 carries the server's own error message, and no later batch is sent."""
    with pytest.raises(EmbeddingError) as info:
        make(server, dimensions=999, batch_size=1, max_concurrency=1).embed(texts(5))
    assert str(info.value) == (
        f"HTTP 400 Bad Request from {server.url}/embeddings: 'dimensions' must be an integer from 1 to 384, got 999"
    )
    assert server.request_count == 1


def test_a_refused_batch_fails_the_call_without_waiting_for_the_one_in_flight(server: EmbeddingServer) -> None:
    """Two request threads: batch "bad" is refused (400) while batch "slow" is held by the server. The call fails
    with the refusal while "slow" is still in flight, and no batch after them is sent."""
    arrived, release, answered = threading.Event(), threading.Event(), threading.Event()

    def latency(request: Any) -> float:
        if request.body["input"] == ["slow"]:
            arrived.set()
            release.wait(30)
            answered.set()
        else:
            arrived.wait(30)  # "bad" is answered only once "slow" is held, whichever thread sent first
        return 0.0

    server.refused_inputs = {"bad"}
    server.latency = latency
    try:
        with pytest.raises(EmbeddingError) as info:
            make(server, batch_size=1, max_concurrency=2).embed(["slow", "bad", "c", "d", "e", "f"])
        # "slow" was still held when the call failed (the server's count of requests in flight may still include
        # "bad", whose answer the client can read before the server's thread has counted it done)
        held = arrived.is_set() and not answered.is_set()
    finally:
        release.set()
    assert str(info.value) == f"HTTP 400 Bad Request from {server.url}/embeddings: input 'bad' is refused"
    assert held
    deadline = time.monotonic() + 10
    while server.in_flight and time.monotonic() < deadline:  # "slow" answered; its thread sends nothing more
        time.sleep(0.02)
    assert sorted(r.body["input"][0] for r in server.embedding_requests) == ["bad", "slow"]


def test_long_error_message_truncated(server: EmbeddingServer) -> None:
    """The server's message is cut to 200 characters (whitespace collapsed)."""
    message = "quota   exceeded\n" + "x" * 500
    server.fail_next(422, body={"error": {"message": message}})
    with pytest.raises(EmbeddingError) as info:
        make(server).embed(["x"])
    shown = ("quota exceeded " + "x" * 500)[:197] + "..."
    assert str(info.value) == f"HTTP 422 Unprocessable Entity from {server.url}/embeddings: {shown}"
    assert len(shown) == 200


def test_input_over_limit_fails_before_any_request(server: EmbeddingServer) -> None:
    """An input estimated over max_input_tokens is an error before any request."""
    with pytest.raises(EmbeddingError) as info:
        make(server, max_input_tokens=10).embed(["short", "y" * 31])
    assert str(info.value) == (
        "input 1 is too long for openai/text-embedding-3-small: about 11 tokens (31 characters / 3), the limit is 10"
    )
    assert server.request_count == 0


# ---- response validation ----


def _set(path: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def mangle(payload: dict[str, Any]) -> dict[str, Any]:
        path(payload)
        return payload

    return mangle


BAD_RESPONSES: dict[str, tuple[Callable[[dict[str, Any]], Any], str]] = {
    "no data": (lambda p: {"object": "list"}, "{url} returned no 'data' list"),
    "data not a list": (lambda p: {"data": "vectors"}, "{url} returned no 'data' list"),
    "wrong count": (
        _set(lambda p: p["data"].pop()),
        "{url} returned 3 embeddings for 4 inputs",
    ),
    "entry without embedding": (
        _set(lambda p: p["data"][1].pop("embedding")),
        "{url} returned an entry without an 'embedding' list (data[1])",
    ),
    "bad index": (
        _set(lambda p: p["data"][1].update(index=0)),
        "{url} returned 'index' values that do not number the inputs 0..3",
    ),
    "NaN": (
        _set(lambda p: p["data"][2]["embedding"].__setitem__(5, float("nan"))),
        "{url} returned NaN or infinite values in the vector of input 2",
    ),
    "infinity": (
        _set(lambda p: p["data"][0]["embedding"].__setitem__(0, float("inf"))),
        "{url} returned NaN or infinite values in the vector of input 0",
    ),
    "non-number": (
        _set(lambda p: p["data"][3]["embedding"].__setitem__(7, "0.5")),
        "{url} returned non-numeric values in the vector of input 3",
    ),
    "boolean": (
        _set(lambda p: p["data"][3]["embedding"].__setitem__(7, True)),
        "{url} returned non-numeric values in the vector of input 3",
    ),
    "zero vector": (
        _set(lambda p: p["data"][1].update(embedding=[0.0] * 384)),
        "{url} returned a zero vector for input 1",
    ),
    "mixed dimensions": (
        _set(lambda p: p["data"][2].update(embedding=p["data"][2]["embedding"][:100])),
        "{url} returned vectors of mixed dimensions (384 and 100) in one response",
    ),
}


def test_position_of_bad_vector_counts_across_batches(server: EmbeddingServer) -> None:
    """A NaN in the second entry of the second batch is reported as input 3."""
    server.mangle_next(lambda p: p)
    server.mangle_next(_set(lambda p: p["data"][1]["embedding"].__setitem__(0, float("nan"))))
    with pytest.raises(EmbeddingError) as info:
        make(server, batch_size=2, max_concurrency=1).embed(texts(4))
    assert str(info.value) == f"{server.url}/embeddings returned NaN or infinite values in the vector of input 3"


def test_bad_json(server: EmbeddingServer) -> None:
    """A body that is not JSON is reported as such."""
    server.bad_json_next()
    with pytest.raises(EmbeddingError) as info:
        make(server).embed(["x"])
    assert str(info.value) == f"invalid JSON from {server.url}/embeddings"


def test_wrong_dimensions(server: EmbeddingServer) -> None:
    """Vectors shorter than the configured dimensions are rejected."""
    server.dimensions_override = 64
    with pytest.raises(EmbeddingError) as info:
        make(server, dimensions=128).embed(["x"])
    assert str(info.value) == f"{server.url}/embeddings returned vectors of 64 dimensions, expected 128"


def test_dimensions_change_between_calls(server: EmbeddingServer) -> None:
    """Once 384 is learned, a later response of 256 dimensions is rejected."""
    embedder = make(server)
    embedder.embed(["first"])
    server.dimensions_override = 256
    with pytest.raises(EmbeddingError) as info:
        embedder.embed(["second"])
    assert str(info.value) == (
        f"{server.url}/embeddings returned vectors of 256 dimensions, expected 384 (as in its earlier responses)"
    )


# ---- misuse ----


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"base_url": "ftp://example.com/v1"}, "must be an http:// or https:// URL"),
        ({"base_url": "https://user:pw@example.com/v1"}, "must not hold credentials"),
        ({"batch_size": 0}, "batch_size must be at least 1"),
        ({"retries": -1}, "retries must not be negative"),
        ({"query_fields": {"model": "other"}}, "query_fields must not set model"),
    ],
)
def test_config_misuse_is_value_error(overrides: dict[str, Any], message: str) -> None:
    """An invalid configuration is a ValueError naming the field."""
    fields: dict[str, Any] = {"base_url": "https://api.example.com/v1", "model": MODEL, "model_id": MODEL_ID}
    with pytest.raises(ValueError, match=message):
        config(**{**fields, **overrides})


def test_embed_misuse(server: EmbeddingServer) -> None:
    """One string instead of a list is a TypeError, an unknown purpose a ValueError, both before any request."""
    embedder = make(server)
    with pytest.raises(TypeError, match="not one string"):
        embedder.embed("hello")
    with pytest.raises(ValueError, match="purpose must be 'document' or 'query'"):
        embedder.embed(["hello"], purpose="passage")  # type: ignore[arg-type]
    assert server.request_count == 0


# ---- the key never leaks ----


def _closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


LEAK_PATHS = [
    "401 echoing the key",
    "400 echoing the key",
    "400 key across the cut",
    "422 plain text echo",
    "500 exhausted",
    "429 exhausted",
    "404",
    "bad JSON",
    "wrong count",
    "NaN",
    "wrong dimensions",
    "dropped connection",
    "timeout",
    "connection refused",
    "input too long",
]


def arrange(server: EmbeddingServer, path: str) -> dict[str, Any]:
    """Set the server up for one error path; returns the embedder's config overrides."""
    if path == "401 echoing the key":
        server.require_key = "sk-other"
    elif path == "400 echoing the key":
        server.fail_next(400, body={"error": {"message": f"bad key {KEY} used"}})
    elif path == "400 key across the cut":  # redacted before the message is cut to 200 characters
        server.fail_next(400, body={"error": {"message": "x" * 170 + KEY}})
    elif path == "422 plain text echo":
        server.fail_next(422, headers={"Content-Type": "text/plain"}, body=f"key={KEY}")
    elif path == "500 exhausted":
        server.fail_next(500, times=10)
    elif path == "429 exhausted":
        server.fail_next(429, times=10, headers={"Retry-After": "0"})
    elif path == "404":
        server.unknown_models = {MODEL}
    elif path == "bad JSON":
        server.bad_json_next()
    elif path == "wrong count":
        server.mangle_next(_set(lambda p: p["data"].pop()))
    elif path == "NaN":
        server.mangle_next(_set(lambda p: p["data"][0]["embedding"].__setitem__(0, float("nan"))))
    elif path == "wrong dimensions":
        server.dimensions_override = 8
        return {"dimensions": 16}
    elif path == "dropped connection":
        server.disconnect_next(times=10)
    elif path == "timeout":
        server.latency = 0.5
        return {"timeout": 0.1}
    elif path == "connection refused":
        return {"base_url": _closed_port_url()}
    elif path == "input too long":
        return {"max_input_tokens": 1}
    return {}


@pytest.mark.parametrize("path", LEAK_PATHS)
def test_key_never_leaks(server: EmbeddingServer, caplog: pytest.LogCaptureFixture, path: str) -> None:
    """On every error path the key is absent from the message, repr, chained traceback, logs and reprs."""
    overrides = arrange(server, path)
    embedder = make(server, retries=1, **overrides)
    with caplog.at_level(logging.DEBUG), pytest.raises(EmbeddingError) as info:
        embedder.embed(["some text", "more text"])
    error = info.value
    seen = {
        "message": str(error),
        "repr": repr(error),
        "traceback": "".join(traceback.format_exception(error)),
        "logs": caplog.text,
        "embedder repr": repr(embedder),
        "config repr": repr(embedder.config),
    }
    assert [where for where, text in seen.items() if KEY in text or "SECRET-7f3a" in text] == []
    assert ("connect_tcp.started" in caplog.text) is (path != "input too long")  # the HTTP stack's logs were seen
    if path.startswith(("400", "422")):
        assert "$OPENAI_API_KEY" in str(error)


# ---- base64 vectors (the default) ----


def encodings(server: EmbeddingServer) -> list[str]:
    """The encoding_format of each embeddings request, in arrival order."""
    return [r.body["encoding_format"] for r in server.embedding_requests]


def test_base64_is_the_default_and_reads_exactly(server: EmbeddingServer, local: LocalEmbedder) -> None:
    """By default vectors are asked for as base64 float32: the same vectors as the model's, to float32 precision."""
    assert HttpEmbeddingConfig(base_url=server.url, model=MODEL, model_id=MODEL_ID).encoding_format == "base64"
    inputs = texts(5)
    vectors = make(server, encoding_format="base64", batch_size=2).embed(inputs)
    assert encodings(server) == ["base64"] * 3
    assert min(cosines(vectors, local.embed(inputs))) >= 0.9999
    assert all(v.dtype == np.float32 and abs(float(np.linalg.norm(v)) - 1.0) < 1e-5 for v in vectors)


def test_a_server_that_refuses_base64_is_asked_in_float_from_then_on(server: EmbeddingServer) -> None:
    """A 400 to a base64 request is asked again as float, once; the embedder keeps float for later calls."""
    server.encodings = {"float"}
    embedder = make(server, encoding_format="base64", batch_size=4, max_concurrency=1)
    assert len(embedder.embed(texts(8))) == 8
    embedder.embed(texts(2, "again"))
    assert encodings(server) == ["base64", "float", "float", "float"]


def test_another_400_is_reported_after_the_float_attempt(server: EmbeddingServer) -> None:
    """A 400 that float does not cure either is the server's own error, reported once as usual."""
    server.unknown_models = set()
    with pytest.raises(EmbeddingError) as info:
        make(server, encoding_format="base64", dimensions=100_000).embed(texts(1))
    assert "'dimensions' must be an integer from 1 to 384" in str(info.value)
    assert encodings(server) == ["base64", "float"]


def _base64(values: Any) -> str:
    import base64

    return base64.b64encode(np.asarray(values, dtype="<f4").tobytes()).decode()


BAD_BASE64: dict[str, tuple[Callable[[dict[str, Any]], Any], str]] = {
    "not base64": (
        _set(lambda p: p["data"][1].update(embedding="not base64!")),
        "{url} returned an embedding that is not base64 for input 1",
    ),
    "not float32": (
        _set(lambda p: p["data"][0].update(embedding="AAAAAAAA")),  # 6 bytes
        "{url} returned a base64 embedding of 6 bytes for input 0, not float32 values (4 bytes each)",
    ),
    "NaN": (
        _set(lambda p: p["data"][2].update(embedding=_base64([float("nan")] + [0.1] * 383))),
        "{url} returned NaN or infinite values in the vector of input 2",
    ),
    "zero vector": (
        _set(lambda p: p["data"][3].update(embedding=_base64([0.0] * 384))),
        "{url} returned a zero vector for input 3",
    ),
    "mixed dimensions": (
        _set(lambda p: p["data"][1].update(embedding=_base64([0.1] * 100))),
        "{url} returned vectors of mixed dimensions (384 and 100) in one response",
    ),
}


BAD = {("float", case): found for case, found in BAD_RESPONSES.items()} | {
    ("base64", case): found for case, found in BAD_BASE64.items()
}


@pytest.mark.parametrize(("encoding", "case"), list(BAD), ids=[f"{e}: {c}" for e, c in BAD])
def test_bad_responses(server: EmbeddingServer, encoding: str, case: str) -> None:
    """Each malformed response, vectors as JSON numbers or as base64, is a one-line EmbeddingError naming the
    endpoint, without retries."""
    mangle, message = BAD[encoding, case]
    server.mangle_next(mangle)
    with pytest.raises(EmbeddingError) as info:
        make(server, encoding_format=encoding).embed(texts(4))
    assert str(info.value) == message.format(url=f"{server.url}/embeddings")
    assert server.request_count == 1
