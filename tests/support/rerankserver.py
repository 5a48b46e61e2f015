"""A real rerank server on 127.0.0.1 (Cohere/Jina or text-embeddings-inference format), scored by the local model."""

from __future__ import annotations

import json
import math
import threading
import uuid
from collections.abc import Callable, Sequence
from http import HTTPStatus
from pathlib import Path
from typing import Any, Literal

import numpy as np

from kbctl.embedding import Embedder
from tests.support.loopback import Answer, LoopbackRequest, LoopbackServer, Payload

__all__ = ["RerankRequest", "RerankServer", "ScoreFn", "keyword_scores", "serve_rerank"]

MODEL_NAME = "rerank-test-v1"
EMBEDDING_MODEL = "all-MiniLM-L6-v2"

Api = Literal["cohere", "tei"]
ScoreFn = Callable[[str, Sequence[str]], Sequence[float]]

RerankRequest = LoopbackRequest  # one request the server received


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def keyword_scores(word: str) -> ScoreFn:
    """A `score_fn` that ranks documents containing `word` (case-insensitive) first, in their given order:
    1.0, 0.9, ... for those, then 0.0, -0.1, ... for the rest, whatever the query says."""

    def score(query: str, documents: Sequence[str]) -> list[float]:
        hits = [i for i, d in enumerate(documents) if word.lower() in d.lower()]
        misses = [i for i, d in enumerate(documents) if word.lower() not in d.lower()]
        scores = [0.0] * len(documents)
        for rank, i in enumerate(hits):
            scores[i] = 1.0 - rank / 10
        for rank, i in enumerate(misses):
            scores[i] = -rank / 10
        return scores

    return score


class RerankServer(LoopbackServer):
    """The server, its knobs and what it saw; use `serve_rerank()` to start and stop it.

        with serve_rerank(embedder=local) as server:            # api="cohere": POST {server.url}/rerank
            server.fail_next(429, headers={"Retry-After": "0"})
            httpx.post(f"{server.url}/rerank", json={"model": server.model_name, "query": "q", "documents": [...]})

    Scores are real: the query and each document are embedded with the local all-MiniLM-L6-v2 and a document
    scores its cosine similarity to the query, unless `score_fn(query, documents) -> scores` replaces that (e.g.
    `keyword_scores("pgvector")` to make the reranker disagree with vector order on purpose).

    `api="cohere"` (Cohere v1/v2 and Jina): POST {prefix}/rerank with {"model", "query", "documents": [str],
    "top_n"?, "return_documents"?} answers {"id", "results": [{"index", "relevance_score", "document"?: {"text"}}],
    "meta"}, best first, cut to top_n. A model other than `model_name` gets 404 {"message": "model 'x' not found"};
    a malformed body gets 400 {"message": ...}. `server.url` is the base URL including `prefix` (default /v1).

    `api="tei"` (text-embeddings-inference): POST /rerank with {"query", "texts": [str], "raw_scores"?,
    "return_text"?} answers [{"index", "score", "text"?}], best first. Like TEI, scores go through a sigmoid
    unless raw_scores is true (then they are the cosines, or score_fn's values, unchanged); a malformed body gets
    422 {"error", "error_type": "Validation"} (400 when it is not JSON, 415 without a JSON Content-Type) and a
    batch larger than `max_documents` gets 413. GET /info and GET /health answer like TEI. `server.url` is the
    bare origin (TEI serves at the root).

    `api_key` makes every request need `Authorization: Bearer <key>` (401 otherwise: Cohere's {"message"} body,
    an empty body for TEI). Knobs a test may change at any time: `latency` (seconds, or a function of the
    request), `api_key`, `score_fn`, `max_documents`, `model_name`, and the one-shot queue `fail_next`,
    `bad_json_next`, `mangle_next`, `disconnect_next` (consumed in order, one entry per request). `reset()`
    restores the knobs and forgets the requests, so one server (and one loaded model) can serve a whole module.
    `mangle_next(fn)` gets the payload as a dict for Cohere, a list for TEI.
    """

    bad_json_body = b'{"results": [{"index": 0, "relevance_score": 0.9'

    def __init__(
        self,
        *,
        api: Api = "cohere",
        embedder: Embedder | None = None,
        home: Path | None = None,
        score_fn: ScoreFn | None = None,
        api_key: str | None = None,
        model_name: str = MODEL_NAME,
        prefix: str = "/v1",
        max_documents: int | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        if api not in ("cohere", "tei"):
            raise ValueError(f"api must be 'cohere' or 'tei', not {api!r}")
        self._initial = (score_fn, api_key, model_name, max_documents)
        super().__init__(name="rerankserver", host=host)
        self.api: Api = api
        stripped = prefix.strip("/")
        self.prefix = f"/{stripped}" if api == "cohere" and stripped else ""  # TEI serves at the root
        self.rerank_path = f"{self.prefix}/rerank"
        self.url = self.origin + self.prefix
        self._embedder_home = home
        self._embedder = embedder
        self._load_lock = threading.Lock()
        self._loaded = False

    def _defaults(self) -> None:
        super()._defaults()
        self.score_fn: ScoreFn | None
        self.api_key: str | None  # the expected bearer token; 401 for anything else
        self.model_name: str  # the only model accepted (Cohere format)
        self.max_documents: int | None  # more documents in one request: rejected (Cohere 400, TEI 413)
        self.score_fn, self.api_key, self.model_name, self.max_documents = self._initial

    # ---- what the server saw ----

    @property
    def rerank_requests(self) -> list[RerankRequest]:
        """The POST .../rerank requests, oldest first."""
        return self._requests_to("POST", self.rerank_path)

    def expected_scores(self, query: str, documents: Sequence[str]) -> list[float]:
        """The raw score of each document in its given order (cosine, or score_fn's), computed directly."""
        return self._scores(query, list(documents))

    def expected_order(self, query: str, documents: Sequence[str]) -> list[int]:
        """Document indexes, best first, as the server ranks them."""
        scores = self._scores(query, list(documents))
        return sorted(range(len(documents)), key=lambda i: -scores[i])

    # ---- scoring ----

    def _model(self) -> Embedder:
        if not self._loaded:  # build and load the model once, not once per concurrent first request
            with self._load_lock:
                if not self._loaded:
                    if self._embedder is None:
                        from kbctl.config import Settings
                        from kbctl.embedding.local import LocalEmbedder

                        home = self._embedder_home
                        if home is None:
                            home = self._temporary_folder()
                        self._embedder = LocalEmbedder(EMBEDDING_MODEL, Settings(home=home))
                    self._embedder.embed(["warm up"])
                    self._loaded = True
        assert self._embedder is not None
        return self._embedder

    def _scores(self, query: str, documents: list[str]) -> list[float]:
        with self._lock:
            score_fn = self.score_fn
        if score_fn is not None:
            scores = [float(s) for s in score_fn(query, documents)]
            if len(scores) != len(documents):
                raise ValueError(f"score_fn returned {len(scores)} scores for {len(documents)} documents")
            return scores
        model = self._model()
        q = np.asarray(model.embed([query], purpose="query")[0], dtype=np.float64)
        docs = [np.asarray(v, dtype=np.float64) for v in model.embed(documents, purpose="document")]
        norms = [float(np.linalg.norm(q)) * float(np.linalg.norm(d)) for d in docs]
        return [float(np.dot(q, d)) / norm if norm else 0.0 for d, norm in zip(docs, norms, strict=True)]

    # ---- serving ----

    def _error(self, status: int, message: str) -> Answer:
        if self.api == "tei":
            kinds = {413: "Validation", 422: "Validation", 429: "Overloaded", 424: "Backend", 400: "Validation"}
            data = {"error": message, "error_type": kinds.get(status, "Unhealthy" if status == 503 else "Backend")}
        else:
            data = {"message": message}
        return status, {}, json.dumps(data).encode()

    def _fail_body(self, status: int) -> bytes:
        _, _, data = self._error(status, HTTPStatus(status).phrase)
        return data

    def _answer(self, request: RerankRequest, parsed: bool) -> Answer | Payload:
        with self._lock:
            api_key, model_name, max_documents = self.api_key, self.model_name, self.max_documents
        token = request.headers.get("authorization", "").removeprefix("Bearer ")
        if api_key is not None and token != api_key:
            if self.api == "tei":
                return 401, {}, b""
            return 401, {}, json.dumps({"message": "invalid api token"}).encode()
        if self.api == "tei" and request.method == "GET" and request.path == "/health":
            return 200, {}, b""
        if self.api == "tei" and request.method == "GET" and request.path == "/info":
            return 200, {}, json.dumps(self._tei_info(model_name, max_documents)).encode()
        if request.path != self.rerank_path:
            return self._error(404, f"Unknown request URL: {request.method} {request.path}")
        if request.method != "POST":
            status, headers, data = self._error(405, f"Method {request.method} not allowed on {request.path}")
            return status, {**headers, "Allow": "POST"}, data
        if self.api == "tei":
            return self._tei(request, parsed, max_documents)
        return self._cohere(request, parsed, model_name, max_documents)

    def _ranked(self, query: str, documents: list[str]) -> list[tuple[int, float]]:
        scores = self._scores(query, documents)
        return sorted(enumerate(scores), key=lambda pair: -pair[1])  # stable: ties keep the given order

    def _cohere(
        self, request: RerankRequest, parsed: bool, model_name: str, max_documents: int | None
    ) -> Answer | Payload:
        body = request.body
        if not parsed or not isinstance(body, dict):
            return self._error(400, "invalid request: the body must be a JSON object")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            return self._error(400, "invalid request: model is required")
        if model != model_name:
            return self._error(404, f"model '{model}' not found")
        query = body.get("query")
        if not isinstance(query, str):
            return self._error(400, "invalid request: query must be a string")
        documents = body.get("documents")
        if not isinstance(documents, list) or not documents or not all(isinstance(d, str) for d in documents):
            return self._error(400, "invalid request: documents must be a non-empty list of strings")
        if max_documents is not None and len(documents) > max_documents:
            return self._error(400, f"invalid request: too many documents ({len(documents)} > {max_documents})")
        top_n = body.get("top_n")
        if top_n is not None and (type(top_n) is not int or top_n < 1):
            return self._error(400, "invalid request: top_n must be a positive integer")
        return_documents = body.get("return_documents", False)
        if not isinstance(return_documents, bool):
            return self._error(400, "invalid request: return_documents must be a boolean")
        ranked = self._ranked(query, documents)
        if top_n is not None:
            ranked = ranked[:top_n]
        results: list[dict[str, Any]] = []
        for index, score in ranked:
            entry: dict[str, Any] = {"index": index, "relevance_score": score}
            if return_documents:
                entry["document"] = {"text": documents[index]}
            results.append(entry)
        return {
            "id": str(uuid.uuid4()),
            "results": results,
            "meta": {"api_version": {"version": "1"}, "billed_units": {"search_units": 1}},
        }

    def _tei(self, request: RerankRequest, parsed: bool, max_documents: int | None) -> Answer | Payload:
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != "application/json":  # like TEI's JSON extractor, answered in plain text
            message = b"Expected request with `Content-Type: application/json`"
            return 415, {"Content-Type": "text/plain; charset=utf-8"}, message
        if not parsed:
            return self._error(400, "Failed to parse the request body as JSON")
        body = request.body
        if not isinstance(body, dict):
            return self._error(422, "Failed to deserialize the JSON body: expected a JSON object")
        query = body.get("query")
        texts = body.get("texts")
        if not isinstance(query, str):
            return self._error(422, "Failed to deserialize the JSON body: `query` must be a string")
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            return self._error(422, "Failed to deserialize the JSON body: `texts` must be a list of strings")
        if not texts:
            return self._error(422, "`texts` cannot be empty")
        if max_documents is not None and len(texts) > max_documents:
            return self._error(413, f"batch size {len(texts)} > maximum allowed batch size {max_documents}")
        raw_scores = body.get("raw_scores", False)
        return_text = body.get("return_text", False)
        if not isinstance(raw_scores, bool) or not isinstance(return_text, bool):
            return self._error(422, "Failed to deserialize the JSON body: `raw_scores` and `return_text` are booleans")
        results: list[dict[str, Any]] = []
        for index, score in self._ranked(query, texts):
            entry: dict[str, Any] = {"index": index, "score": score if raw_scores else _sigmoid(score)}
            if return_text:
                entry["text"] = texts[index]
            results.append(entry)
        return results

    @staticmethod
    def _tei_info(model_name: str, max_documents: int | None) -> dict[str, Any]:
        return {
            "model_id": model_name,
            "model_sha": None,
            "model_dtype": "float32",
            "model_type": {"reranker": {"id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}}},
            "max_concurrent_requests": 512,
            "max_input_length": 512,
            "max_batch_tokens": 16384,
            "max_client_batch_size": max_documents if max_documents is not None else 32,
            "tokenization_workers": 1,
            "version": "1.5.0",
        }


# The server is its own context manager: `with serve_rerank(...) as server:` starts it and stops it on the way out.
serve_rerank = RerankServer
