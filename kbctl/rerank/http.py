"""A reranker behind an HTTP `/rerank` endpoint: Cohere-compatible (Cohere, Jina, vLLM, LiteLLM) or TEI.

Cohere-compatible: POST `{base}/rerank` `{"model", "query", "documents", "top_n"}` answers
`{"results": [{"index", "relevance_score"}, ...]}`. Text Embeddings Inference: POST `{base}/rerank`
`{"query", "texts"}` answers `[{"index", "score"}, ...]`. Either way every document must come back
exactly once with a finite score; the scores are returned in input order.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import httpx
from tenacity import Retrying

from kbctl._http import (
    RERANK_POLICY,
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
from kbctl.errors import RerankError

__all__ = ["HttpRerankConfig", "HttpReranker"]


@dataclass(frozen=True)
class HttpRerankConfig:
    """Where and how to rerank over HTTP; it holds the NAME of the API key's variable, never the key."""

    base_url: str  # requests go to f"{base_url.rstrip('/')}/rerank"
    model: str  # sent as "model" (Cohere-compatible APIs); TEI serves one model and takes none
    model_id: str  # e.g. "cohere/rerank-v3.5", for messages
    api: Literal["cohere", "tei"] = "cohere"
    api_key_env: str | None = None
    http: HttpPolicy = RERANK_POLICY  # timeouts, retries and backoff (a provider's timeout and retries set them)

    @property
    def url(self) -> str:
        """The rerank endpoint."""
        return f"{self.base_url.rstrip('/')}/rerank"


class HttpReranker:
    """Reranks through a `/rerank` endpoint; satisfies `kbctl.rerank.Reranker`.

    The key is read from the environment at each call and never appears in a message; 429, 5xx, timeouts
    and connection errors are retried (jittered backoff, or the server's Retry-After up to
    the policy's `max_retry_after`); every response is validated before its scores are used.
    """

    def __init__(self, config: HttpRerankConfig, *, environ: Mapping[str, str] | None = None) -> None:
        self.config = config
        self.model_id = config.model_id
        self.url = config.url
        self._environ: Mapping[str, str] = os.environ if environ is None else environ
        self._wait = config.http.wait()

    def __repr__(self) -> str:
        return f"HttpReranker(model_id={self.model_id!r}, url={self.url!r}, api={self.config.api!r})"

    def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        """One score per document, in input order."""
        items = list(documents)
        if not items:
            return []
        auth = bearer_auth(self.config.api_key_env, self._environ, self.model_id, RerankError)
        if self.config.api == "tei":
            body: dict[str, Any] = {"query": query, "texts": items}
        else:
            body = {"model": self.config.model, "query": query, "documents": items, "top_n": len(items)}
        headers = {"User-Agent": user_agent(), "Accept": "application/json"}
        attempts = 0
        retrying = Retrying(**self.config.http.retrying(self._wait))
        with httpx.Client(
            auth=auth,
            headers=headers,
            timeout=self.config.http.timeout,
            follow_redirects=False,
            verify=tls_context(),
        ) as client:
            try:
                for attempt in retrying:
                    with attempt:
                        attempts = attempt.retry_state.attempt_number
                        response = self._post(client, body, auth)
            except Retryable as failure:
                raise RerankError(
                    f"rerank request to {self.url} failed: {failure.reason} (after {plural(attempts, 'attempt')})"
                ) from failure.__cause__
        return self._scores(response, len(items))

    def _post(self, client: httpx.Client, body: dict[str, Any], auth: BearerAuth | None) -> httpx.Response:
        try:
            response = client.post(self.url, json=body)
        except httpx.HTTPError as exc:
            raise transport_failure(exc, self.url, client.timeout, RerankError, what="rerank", auth=auth) from exc
        return check_response(
            response,
            self.url,
            auth,
            RerankError,
            what="rerank",
            model=self.config.model,
            retry_statuses=self.config.http.retry_statuses,
        )

    def _scores(self, response: httpx.Response, expected: int) -> list[float]:
        """The validated scores of a response, in input order."""
        try:
            payload = json.loads(response.content)
        except (ValueError, RecursionError) as exc:
            raise RerankError(f"invalid JSON from {self.url}") from exc
        if self.config.api == "tei":
            results, score_key = payload, "score"
        else:
            results = payload.get("results") if isinstance(payload, dict) else None
            score_key = "relevance_score"
        if not isinstance(results, list):
            shape = "a list" if self.config.api == "tei" else "an object with a 'results' list"
            raise RerankError(f"unexpected response from {self.url}: expected {shape}")
        scores: list[float | None] = [None] * expected
        for item in results:
            index = item.get("index") if isinstance(item, dict) else None
            score = item.get(score_key) if isinstance(item, dict) else None
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < expected:
                raise RerankError(f"unexpected response from {self.url}: result index {index!r} out of range")
            if not isinstance(score, int | float) or isinstance(score, bool) or not math.isfinite(score):
                raise RerankError(f"unexpected response from {self.url}: {score_key} {score!r} is not a finite number")
            if scores[index] is not None:
                raise RerankError(f"unexpected response from {self.url}: document {index} scored twice")
            scores[index] = float(score)
        missing = [i for i, s in enumerate(scores) if s is None]
        if missing:
            raise RerankError(
                f"unexpected response from {self.url}: {plural(len(missing), 'document')} of {expected} not scored"
            )
        return [s for s in scores if s is not None]
