"""LangChain retrievers over kbctl: a `KnowledgeBaseStore` in this process, or `kbctl serve` over HTTP.

    from kbctl.integrations.langchain import KnowledgeBaseRetriever, HTTPKnowledgeBaseRetriever

    retriever = KnowledgeBaseRetriever(store=store, knowledge_base="client-service-policy", top_k=3)
    remote = HTTPKnowledgeBaseRetriever(url="http://127.0.0.1:8080", token=token, knowledge_base="team-handbook")
    docs = retriever.invoke("how long do we keep invoices?")     # langchain_core Documents, best first

Each `Document` holds a chunk's text, and in its metadata the knowledge base and version, source, title, origin,
section (heading path), rank, score (what ranks the hit: it never rises from one document to the next), similarity
(its cosine similarity to the question), character range and `citation` ("source | section | chars a-b"). Nothing
relevant is an empty list. Needs langchain-core: pip install 'kbctl[langchain]'.
"""

from __future__ import annotations

from typing import Any

try:
    from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
except ImportError as exc:  # the extra is not installed
    raise ImportError(
        "kbctl.integrations.langchain needs langchain-core, which is not installed: pip install 'kbctl[langchain]'"
    ) from exc
from pydantic import PrivateAttr, SecretStr

from kbctl import KnowledgeBaseStore, Mode, QueryOptions, QueryResult, Reader
from kbctl.integrations._common import ServeClient, hit_id, hit_metadata

__all__ = ["HTTPKnowledgeBaseRetriever", "KnowledgeBaseRetriever", "documents_of"]


def documents_of(result: QueryResult) -> list[Document]:
    """A kbctl query result as LangChain documents, in rank order, with kbctl's metadata and citation."""
    return [
        Document(page_content=hit.text, metadata=hit_metadata(result, hit), id=hit_id(result, hit))
        for hit in result.hits
    ]


class _Options(BaseRetriever):
    """The query options both retrievers take; unset ones are the knowledge base's spec.retrieval."""

    knowledge_base: str
    """The knowledge base to retrieve from."""
    top_k: int | None = None
    """How many chunks to return at most (spec.retrieval.topK)."""
    threshold: float | None = None
    """Minimum cosine similarity (spec.retrieval.similarityThreshold)."""
    max_tokens: int | None = None
    """Token budget of the chunks returned (spec.retrieval.maxContextTokens)."""
    mode: Mode | None = None
    """hybrid, vector or keyword (spec.retrieval.mode)."""
    _options: QueryOptions = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        # Checked when the retriever is made: a ValidationError (a ValueError) with kbctl's message.
        self._options = QueryOptions(
            top_k=self.top_k, threshold=self.threshold, max_tokens=self.max_tokens, mode=self.mode
        )


class KnowledgeBaseRetriever(_Options):
    """Retrieve from a knowledge base of a `KnowledgeBaseStore` in this process, as `reader` may read it (None: a
    caller without groups, who reads only documents without an access rule). A store opened with `pool_size` may
    serve several threads (and `ainvoke`, which runs the query on one)."""

    store: KnowledgeBaseStore
    """The store to query (kept open by its owner)."""
    reader: Reader | None = None
    """Who is asking: `Reader.of(groups, claims)`, for documents behind an access rule."""

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return documents_of(self.store.query(self.knowledge_base, query, self._options, reader=self.reader))


class HTTPKnowledgeBaseRetriever(_Options):
    """Retrieve from a knowledge base through `kbctl serve` at `url` (`POST /v1/knowledgebases/NAME/query`), with a
    bearer `token`, whose scope, groups and claims the server applies. Async calls (`ainvoke`) do not block the event
    loop. Errors are kbctl's: NotFoundError (absent or out of the token's scope), AuthError (a token refused),
    UsageError (a request the server refused), KbctlError (no answer)."""

    url: str
    """The server's base address, such as http://127.0.0.1:8080."""
    token: SecretStr | None = None
    """The bearer token (None for a server without tokens, on loopback)."""
    timeout: float = 30.0
    """Seconds to wait for the server."""
    _client: ServeClient = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        super().model_post_init(context)
        self._client = ServeClient(
            self.url, self.token.get_secret_value() if self.token else None, timeout=self.timeout
        )

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return documents_of(self._client.query(self.knowledge_base, query, self._options))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        return documents_of(await self._client.aquery(self.knowledge_base, query, self._options))
