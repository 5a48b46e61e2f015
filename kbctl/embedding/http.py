"""An embedder for any OpenAI-compatible `/v1/embeddings` endpoint (OpenAI, LiteLLM, Voyage, Ollama, vLLM, TEI)."""

from __future__ import annotations

import binascii
import json
import os
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import httpx
import numpy as np
import numpy.typing as npt
from tenacity import Retrying

from kbctl._http import (
    EMBEDDING_POLICY,
    BearerAuth,
    HttpPolicy,
    Retryable,
    bearer_auth,
    check_response,
    plural,
    tls_context,
    transport_failure,
    user_agent,
)
from kbctl.embedding import Purpose, Vector
from kbctl.errors import EmbeddingError, UsageError
from kbctl.userconfig import redact

__all__ = ["CHARS_PER_TOKEN", "Encoding", "HttpEmbedder", "HttpEmbeddingConfig", "estimate_tokens"]

# Characters per token assumed by `estimate_tokens`. OpenAI's rule of thumb is ~4 characters per token for
# English; 3 over-counts English prose a little, which keeps batches and the input limit on the safe side for
# code, numbers and most other languages. No tokenizer can be downloaded offline, so this is an estimate.
CHARS_PER_TOKEN = 3

_RESERVED_FIELDS = frozenset({"model", "input", "encoding_format", "dimensions"})
# How vectors come back: "base64" (little-endian float32, as OpenAI's own SDK asks by default) is a quarter of the
# bytes of "float" and needs no number parsing: parsing 64 vectors of 384 JSON numbers costs ~17 ms of CPU.
Encoding = Literal["base64", "float"]
_REFUSALS = frozenset({400, 422})  # what a server that does not know base64 answers it with


def estimate_tokens(text: str) -> int:
    """Estimated tokens of `text`: ceil(len(text) / 3) (see CHARS_PER_TOKEN), conservative for English prose."""
    return -(-len(text) // CHARS_PER_TOKEN)


@dataclass(frozen=True)
class HttpEmbeddingConfig:
    """Where and how to embed over HTTP; it holds the NAME of the API key's environment variable, never the key."""

    base_url: str  # e.g. "https://api.openai.com/v1"; requests go to f"{base_url.rstrip('/')}/embeddings"
    model: str  # sent as "model" in the request body, e.g. "text-embedding-3-small"
    model_id: str  # provider-qualified id stored with every vector, e.g. "openai/text-embedding-3-small"
    api_key_env: str | None = None  # the environment variable holding the key (None: no Authorization header)
    dimensions: int | None = None  # sent as "dimensions" when set; every returned vector must have this length
    batch_size: int = 64  # max inputs per request
    max_batch_tokens: int = 100_000  # max estimated tokens per request
    max_concurrency: int = 4  # requests in flight at once
    max_input_tokens: int = 8191  # estimated tokens of one input; longer inputs fail before any request
    document_fields: Mapping[str, Any] = field(default_factory=dict, hash=False)  # extra body fields, documents
    query_fields: Mapping[str, Any] = field(default_factory=dict, hash=False)  # extra body fields, queries
    http: HttpPolicy = EMBEDDING_POLICY  # timeouts, retries and backoff (a provider's timeout and retries set them)
    # Asked of the server; a response may use either. A server that refuses base64 (400/422) is asked again in
    # float, and float is kept for the embedder's lifetime.
    encoding_format: Encoding = "base64"

    def __post_init__(self) -> None:
        try:
            url = httpx.URL(self.base_url)
        except httpx.InvalidURL as exc:
            raise UsageError(f"base_url {redact(self.base_url)!r} is not a valid URL: {exc}") from exc
        if url.scheme not in ("http", "https") or not url.host:
            raise UsageError(f"base_url {redact(self.base_url)!r} must be an http:// or https:// URL")
        if url.userinfo or url.query or url.fragment:
            raise UsageError("base_url must not hold credentials, a query or a fragment (the key goes in api_key_env)")
        for name in ("model", "model_id"):
            if not getattr(self, name):
                raise UsageError(f"{name} must not be empty")
        if self.api_key_env is not None and not self.api_key_env:
            raise UsageError("api_key_env must be a variable name or None")
        if self.dimensions is not None and self.dimensions < 1:
            raise UsageError("dimensions must be at least 1")
        for name in ("batch_size", "max_batch_tokens", "max_concurrency", "max_input_tokens"):
            if getattr(self, name) < 1:
                raise UsageError(f"{name} must be at least 1")
        if self.encoding_format not in ("base64", "float"):
            raise UsageError("encoding_format must be 'base64' or 'float'")
        for name in ("document_fields", "query_fields"):
            reserved = sorted(_RESERVED_FIELDS & set(getattr(self, name)))
            if reserved:
                raise UsageError(f"{name} must not set {', '.join(reserved)} (kbctl sets them)")

    @property
    def url(self) -> str:
        """The embeddings endpoint."""
        return f"{self.base_url.rstrip('/')}/embeddings"


class _Base64Refused(Exception):
    """The server answered a request for base64 vectors with 400/422: it is asked again in float."""


class _Stopped(Exception):
    """Another batch of the same call failed (or the caller was interrupted): this one sends nothing more."""


def _waiter(stop: threading.Event) -> Callable[[float], None]:
    """A tenacity `sleep` that ends early when `stop` is set."""

    def wait(seconds: float) -> None:
        stop.wait(seconds)

    return wait


class _Work:
    """The batches of one `embed` call, shared by its request threads: the next batch to send, the first failure,
    and how many threads are still running."""

    def __init__(self, batches: int) -> None:
        self.stop = threading.Event()  # set on the first failure: no thread starts another request
        self._batches = iter(range(batches))
        self._lock = threading.Lock()
        self._events: queue.SimpleQueue[BaseException | None] = queue.SimpleQueue()

    def take(self) -> int | None:
        """The next batch to send, or None when all are taken or the call has failed."""
        with self._lock:
            return None if self.stop.is_set() else next(self._batches, None)

    def fail(self, failure: BaseException) -> None:
        if not isinstance(failure, _Stopped):
            self._events.put(failure)
        self.stop.set()

    def leave(self) -> None:
        self._events.put(None)

    def wait(self, threads: int) -> BaseException | None:
        """The first failure as soon as it happens (requests still in flight are left to finish on their own), or
        None once all `threads` have left with every batch answered."""
        left = 0
        while left < threads:
            event = self._events.get()
            if event is not None:
                return event
            left += 1
        return None


class HttpEmbedder:
    """Embeds through an OpenAI-compatible `/embeddings` endpoint; satisfies `kbctl.embedding.Embedder`.

    `dimensions` is the configured size, or 0 until the first response tells it (then every later response
    must agree). Token counts are estimates (`estimate_tokens`): no provider tokenizer is available offline.
    Decisions the callers can rely on:
    - Inputs are cut into batches in input order, by count (`batch_size`) and by estimated size (`max_batch_tokens`);
      an input larger than `max_batch_tokens` (but within `max_input_tokens`) goes alone. Batches are sent with at
      most `max_concurrency` requests in flight, and the vectors come back in input order.
    - Every check that needs no network happens before the first request: the purpose, each input's estimated
      size against `max_input_tokens`, and the API key's environment variable.
    - The API key is read from the environment at each `embed` call and lives only inside an httpx auth object
      whose repr is masked; it is never put into a message (a server's or httpx's text that echoes it is redacted,
      and a key with control characters, which the HTTP stack would quote back, is refused before any request).
    - 429 / 500 / 502 / 503 / 504, timeouts and connection errors are retried with jittered exponential backoff,
      or after the server's `Retry-After` / `retry-after-ms` (capped at `config.http.max_retry_after`); everything
      else fails at once. When one batch fails for good, the call fails at once and no further batch is sent (a
      request already in flight finishes in the background, and its answer is dropped).
    - Vectors are asked for as base64 float32 (`encoding_format`), which a server may ignore (lists of numbers are
      read too); a server that refuses base64 with 400/422 is asked again in float, and float is kept.
    - Every response is validated (shape, count, `index` order, dimensions, finite numbers) and every vector is
      returned as L2-normalized float32.
    - Environment proxy settings and SSL_CERT_FILE are honoured (httpx's `trust_env`); redirects are not followed.
    """

    def __init__(self, config: HttpEmbeddingConfig, *, environ: Mapping[str, str] | None = None) -> None:
        self.config = config
        self.model_id = config.model_id
        self.dimensions = config.dimensions or 0
        self.url = config.url
        self._environ: Mapping[str, str] = os.environ if environ is None else environ
        self._lock = threading.Lock()
        self._client_lock = threading.Lock()
        self._client: httpx.Client | None = None
        self._encoding: Encoding = config.encoding_format  # float once a server refused base64
        # Texts the engine hands over per call: enough batches for every request slot, twice over.
        self.texts_per_call = config.batch_size * config.max_concurrency * 2
        self._wait = config.http.wait()

    def __repr__(self) -> str:
        return f"HttpEmbedder(model_id={self.model_id!r}, url={self.url!r}, api_key_env={self.config.api_key_env!r})"

    # ---- the Embedder protocol ----

    def embed(self, texts: Sequence[str], purpose: Purpose = "document") -> list[Vector]:
        """Embed texts in batches over HTTP; one L2-normalized float32 vector per text, in input order."""
        if purpose not in ("document", "query"):
            raise UsageError(f"purpose must be 'document' or 'query', not {purpose!r}")
        if isinstance(texts, str):
            raise TypeError("embed: texts must be a sequence of strings, not one string")
        items = list(texts)
        for i, text in enumerate(items):
            if not isinstance(text, str):
                raise TypeError(f"embed: texts[{i}] is {type(text).__name__}, not str")
        if not items:
            return []
        sizes = [estimate_tokens(text) for text in items]
        limit = self.config.max_input_tokens
        for i, size in enumerate(sizes):
            if size > limit:
                raise EmbeddingError(
                    f"input {i} is too long for {self.model_id}: about {size} tokens "
                    f"({len(items[i])} characters / {CHARS_PER_TOKEN}), the limit is {limit}"
                )
        auth = self._auth()
        batches = self._batches(sizes)
        return self._embed_all(items, batches, purpose, auth)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Estimated tokens per text (`estimate_tokens`: ceil(characters / 3)), no tokenizer involved."""
        return [estimate_tokens(text) for text in texts]

    # ---- planning ----

    def _auth(self) -> BearerAuth | None:
        return bearer_auth(self.config.api_key_env, self._environ, self.model_id, EmbeddingError)

    def _batches(self, sizes: list[int]) -> list[range]:
        """Consecutive index ranges, each within batch_size inputs and max_batch_tokens (unless one input)."""
        batches: list[range] = []
        start = tokens = 0
        for i, size in enumerate(sizes):
            if i > start and (i - start >= self.config.batch_size or tokens + size > self.config.max_batch_tokens):
                batches.append(range(start, i))
                start, tokens = i, 0
            tokens += size
        batches.append(range(start, len(sizes)))
        return batches

    def _body(self, inputs: list[str], purpose: Purpose, encoding: Encoding) -> dict[str, Any]:
        config = self.config
        body: dict[str, Any] = {"model": config.model, "input": inputs, "encoding_format": encoding}
        if config.dimensions is not None:
            body["dimensions"] = config.dimensions
        body.update(config.document_fields if purpose == "document" else config.query_fields)
        return body

    # ---- requests ----

    def _sync_client(self) -> httpx.Client:
        """The one client of this embedder, shared by its request threads (httpx clients are thread-safe): its
        keep-alive connections, up to `max_concurrency`, serve every call. The key goes with each request, read from
        the environment at each call."""
        with self._client_lock:
            if self._client is None:
                config = self.config
                self._client = httpx.Client(
                    headers={"User-Agent": user_agent(), "Accept": "application/json"},
                    timeout=config.http.timeout,
                    limits=httpx.Limits(
                        max_connections=config.max_concurrency, max_keepalive_connections=config.max_concurrency
                    ),
                    follow_redirects=False,
                    verify=tls_context(),
                )
            return self._client

    def _embed_all(
        self, texts: list[str], batches: list[range], purpose: Purpose, auth: BearerAuth | None
    ) -> list[Vector]:
        """Every batch's vectors, in input order. One batch is sent from the caller's thread; more go through up to
        `max_concurrency` request threads, each sending the next unsent batch as soon as its last answer is read.
        Synchronous requests in threads cost a fraction of the CPU of an event loop's per request (~0.7 ms against
        ~2.6 ms for 64 texts), which decides how close four overlapping requests come to a quarter of the wall time."""
        client = self._sync_client()
        if len(batches) == 1:
            return self._embed_batch(client, texts, batches[0], purpose, auth, threading.Event())
        work = _Work(len(batches))
        results: list[list[Vector] | None] = [None] * len(batches)

        def slot() -> None:
            try:
                while (n := work.take()) is not None:
                    results[n] = self._embed_batch(client, texts, batches[n], purpose, auth, work.stop)
            except BaseException as failure:  # the call reports it; the other slots stop before their next request
                work.fail(failure)
            finally:
                work.leave()

        slots = min(self.config.max_concurrency, len(batches))
        for _ in range(slots):  # daemon threads: a request still in flight when the call fails never holds up exit
            threading.Thread(target=slot, name="kbctl-embed", daemon=True).start()
        try:
            failure = work.wait(slots)
        except BaseException:  # e.g. KeyboardInterrupt in the caller: no slot starts another request
            work.stop.set()
            raise
        if failure is not None:
            raise failure
        vectors = [vector for answered in results if answered is not None for vector in answered]
        assert len(vectors) == len(texts), "every batch was answered"
        return vectors

    def _embed_batch(
        self,
        client: httpx.Client,
        texts: list[str],
        batch: range,
        purpose: Purpose,
        auth: BearerAuth | None,
        stop: threading.Event,
    ) -> list[Vector]:
        """One batch's validated vectors: its POST with its retries (asked again in float when base64 is refused).
        A set `stop` ends the retries' waits and prevents another attempt."""
        inputs = [texts[i] for i in batch]
        while True:
            encoding = self._encoding
            body = self._body(inputs, purpose, encoding)
            attempts = 0
            retrying = Retrying(**self.config.http.retrying(self._wait, sleep=_waiter(stop)))
            try:
                for attempt in retrying:
                    with attempt:
                        if stop.is_set():
                            raise _Stopped
                        attempts = attempt.retry_state.attempt_number
                        response = self._post(client, body, auth)
            except Retryable as failure:
                raise EmbeddingError(
                    f"embedding request to {self.url} failed: {failure.reason} (after {plural(attempts, 'attempt')})"
                ) from failure.__cause__
            except _Base64Refused:
                self._encoding = "float"
                continue
            return self._vectors(response, len(batch), batch.start)

    def _post(self, client: httpx.Client, body: dict[str, Any], auth: BearerAuth | None) -> httpx.Response:
        """One attempt; a retryable failure raises Retryable, a refusal of base64 _Base64Refused, any other
        EmbeddingError."""
        try:
            response = client.post(self.url, json=body, auth=auth if auth is not None else httpx.USE_CLIENT_DEFAULT)
        except httpx.HTTPError as exc:
            raise transport_failure(exc, self.url, client.timeout, EmbeddingError, what="embedding", auth=auth) from exc
        if response.status_code in _REFUSALS and body["encoding_format"] == "base64":
            raise _Base64Refused
        return check_response(
            response,
            self.url,
            auth,
            EmbeddingError,
            what="embedding",
            model=self.config.model,
            retry_statuses=self.config.http.retry_statuses,
        )

    # ---- responses ----

    def _vectors(self, response: httpx.Response, expected: int, offset: int) -> list[Vector]:
        """The validated, normalized vectors of one response, in input order."""
        url = self.url
        try:
            payload = json.loads(response.content)
        except (ValueError, RecursionError) as exc:
            raise EmbeddingError(f"invalid JSON from {url}") from exc
        data = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(data, list):
            raise EmbeddingError(f"{url} returned no 'data' list")
        if len(data) != expected:
            raise EmbeddingError(f"{url} returned {len(data)} embeddings for {plural(expected, 'input')}")
        for n, entry in enumerate(data):
            if not isinstance(entry, dict) or not isinstance(entry.get("embedding"), (list, str)):
                raise EmbeddingError(f"{url} returned an entry without an 'embedding' list (data[{n}])")
        if any("index" in entry for entry in data):
            indexes = [entry.get("index") for entry in data]
            numbers = [i for i in indexes if type(i) is int]  # JSON true/false are not indexes
            if len(numbers) != expected or sorted(numbers) != list(range(expected)):
                raise EmbeddingError(f"{url} returned 'index' values that do not number the inputs 0..{expected - 1}")
            data = sorted(data, key=lambda entry: entry["index"])
        raw = [self._decoded(entry["embedding"], offset + n) for n, entry in enumerate(data)]
        sizes = list(dict.fromkeys(len(r) // 4 if isinstance(r, bytes) else len(r) for r in raw))
        if len(sizes) > 1:
            raise EmbeddingError(
                f"{url} returned vectors of mixed dimensions ({' and '.join(map(str, sizes[:2]))}) in one response"
            )
        self._check_dimensions(sizes[0])
        if all(isinstance(r, bytes) for r in raw):  # base64: every vector read in one pass
            packed = np.frombuffer(b"".join(cast(list[bytes], raw)), dtype="<f4")
            return self._normalized(packed.reshape(len(raw), sizes[0]).astype(np.float64), offset)
        return self._normalized(np.stack([self._values(r, offset + n) for n, r in enumerate(raw)]), offset)

    def _check_dimensions(self, size: int) -> None:
        url = self.url
        if size == 0:
            raise EmbeddingError(f"{url} returned empty vectors")
        with self._lock:
            if self.dimensions == 0:
                self.dimensions = size  # learned from the first response
                return
            if size != self.dimensions:
                learned = "" if self.config.dimensions else " (as in its earlier responses)"
                raise EmbeddingError(
                    f"{url} returned vectors of {size} dimensions, expected {self.dimensions}{learned}"
                )

    def _decoded(self, embedding: list[Any] | str, position: int) -> list[Any] | bytes:
        """An entry's vector as sent: a list of numbers, or the float32 bytes of its base64."""
        if isinstance(embedding, list):
            return embedding
        try:
            packed = binascii.a2b_base64(embedding.encode("ascii"), strict_mode=True)
        except (binascii.Error, ValueError):
            raise EmbeddingError(f"{self.url} returned an embedding that is not base64 for input {position}") from None
        if len(packed) % 4:
            raise EmbeddingError(
                f"{self.url} returned a base64 embedding of {len(packed)} bytes for input {position}, "
                "not float32 values (4 bytes each)"
            )
        return packed

    def _values(self, raw: list[Any] | bytes, position: int) -> npt.NDArray[np.float64]:
        """One vector's values as float64 (inf where a number overflows)."""
        if isinstance(raw, bytes):
            return np.frombuffer(raw, dtype="<f4").astype(np.float64)
        if not set(map(type, raw)) <= {float, int}:
            raise EmbeddingError(f"{self.url} returned non-numeric values in the vector of input {position}")
        try:
            return np.asarray(raw, dtype=np.float64)
        except OverflowError:
            return np.full(len(raw), np.inf)

    def _normalized(self, matrix: npt.NDArray[np.float64], offset: int) -> list[Vector]:
        """The rows of one response, checked (finite, not zero) and L2-normalized as float32, in one pass each."""
        url = self.url
        finite = np.isfinite(matrix).all(axis=1)
        if not finite.all():
            position = offset + int(np.argmin(finite))
            raise EmbeddingError(f"{url} returned NaN or infinite values in the vector of input {position}")
        scale = np.abs(matrix).max(axis=1)
        if not scale.all():
            raise EmbeddingError(f"{url} returned a zero vector for input {offset + int(np.argmin(scale != 0))}")
        scaled = matrix / scale[:, None]  # no overflow in the norm, whatever the magnitude
        normalized = (scaled / np.linalg.norm(scaled, axis=1)[:, None]).astype(np.float32)
        return list(normalized)
