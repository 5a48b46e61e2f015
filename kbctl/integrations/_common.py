"""What the frameworks' retrievers share: a query of a store in this process or of `kbctl serve` over HTTP, and
the metadata and citation of each hit."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from kbctl import QueryHit, QueryOptions, QueryResult
from kbctl.errors import AuthError, KbctlError, NotFoundError, UsageError

__all__ = ["ServeClient", "citation", "hit_id", "hit_metadata"]


def citation(source: str, heading_path: list[str], char_start: int, char_end: int) -> str:
    """Where a passage comes from, as kbctl context and kbctl ask name it: `source | section | chars a-b`."""
    section = " > ".join(heading_path)
    return " | ".join([source, *([section] if section else []), f"chars {char_start}-{char_end}"])


def hit_id(result: QueryResult, hit: QueryHit) -> str:
    """A stable id of a result's hit: the same chunk of the same version has the same id."""
    return f"{result.knowledge_base}@{result.version}/{hit.source}#{hit.char_start}-{hit.char_end}"


def hit_metadata(result: QueryResult, hit: QueryHit) -> dict[str, Any]:
    """The metadata of a result's hit: knowledge base and version, source, title, origin, section (the heading path
    joined by " > ") and heading path, rank, score (what ranks it: never increases with rank), cosine similarity,
    character range and citation."""
    return {
        "knowledge_base": result.knowledge_base,
        "version": result.version,
        "source": hit.source,
        "title": hit.title,
        "origin": hit.origin,
        "section": " > ".join(hit.heading_path),
        "heading_path": list(hit.heading_path),
        "rank": hit.rank,
        "score": hit.score,
        "similarity": hit.similarity,
        "char_start": hit.char_start,
        "char_end": hit.char_end,
        "citation": citation(hit.source, hit.heading_path, hit.char_start, hit.char_end),
    }


class ServeClient:
    """`POST /v1/knowledgebases/{name}/query` of a `kbctl serve` at `url`, with a bearer `token` (None: a server
    without tokens, on loopback). The caller's scope, groups and claims are the token's, decided by the server."""

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 30.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise UsageError(f"url must be the http:// or https:// address of kbctl serve, got {url!r}")
        self.url = url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.timeout = timeout

    def __repr__(self) -> str:  # never the token
        return f"ServeClient({self.url!r})"

    def _route(self, name: str) -> str:
        return f"{self.url}/v1/knowledgebases/{quote(name, safe='')}/query"

    @staticmethod
    def _body(question: str, options: QueryOptions) -> dict[str, Any]:
        body = {
            "question": question,
            "topK": options.top_k,
            "threshold": options.threshold,
            "maxTokens": options.max_tokens,
            "mode": options.mode,
        }
        return {k: v for k, v in body.items() if v is not None}

    def query(self, name: str, question: str, options: QueryOptions) -> QueryResult:
        """The query of knowledge base `name`, as the server answers it."""
        try:
            response = httpx.post(
                self._route(name), json=self._body(question, options), headers=self._headers, timeout=self.timeout
            )
        except httpx.HTTPError as exc:
            raise KbctlError(f"kbctl serve at {self.url} did not answer: {exc}") from exc
        return self._result(response)

    async def aquery(self, name: str, question: str, options: QueryOptions) -> QueryResult:
        """`query`, without blocking the event loop."""
        try:
            async with httpx.AsyncClient(headers=self._headers, timeout=self.timeout) as client:
                response = await client.post(self._route(name), json=self._body(question, options))
        except httpx.HTTPError as exc:
            raise KbctlError(f"kbctl serve at {self.url} did not answer: {exc}") from exc
        return self._result(response)

    def _result(self, response: httpx.Response) -> QueryResult:
        """The result of a response, or the kbctl error its problem body says (404 NotFoundError, 401 and 403
        AuthError, 400 and 422 UsageError, anything else KbctlError)."""
        if response.status_code == 200:
            try:
                return QueryResult.model_validate(response.json())
            except ValueError as exc:
                raise KbctlError(f"kbctl serve at {self.url} answered with an unreadable result: {exc}") from None
        detail = _detail(response)
        status = response.status_code
        if status == 404:
            raise NotFoundError(detail)
        if status in (401, 403):
            raise AuthError(f"kbctl serve at {self.url} refused the request ({status}): {detail}")
        if status in (400, 422):
            raise UsageError(detail)
        raise KbctlError(f"kbctl serve at {self.url} answered {status}: {detail}")


def _detail(response: httpx.Response) -> str:
    """The `detail` of a problem body, else the start of the body."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:200] or response.reason_phrase
    detail = body.get("detail") if isinstance(body, dict) else None
    return str(detail) if detail else response.text[:200]
