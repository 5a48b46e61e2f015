"""LlamaIndex retrievers over kbctl: a `KnowledgeBaseStore` in this process, or `kbctl serve` over HTTP.

    from kbctl.integrations.llamaindex import KnowledgeBaseRetriever, HTTPKnowledgeBaseRetriever

    retriever = KnowledgeBaseRetriever(store, "client-service-policy", top_k=3)
    remote = HTTPKnowledgeBaseRetriever("http://127.0.0.1:8080", "client-service-policy", token=token)
    nodes = retriever.retrieve("how long do we keep invoices?")     # NodeWithScore of TextNode, best first

Each `TextNode` holds a chunk's text, character range and metadata (only its `citation` reaches an LLM's prompt);
the node's score is kbctl's score of the hit, so it never rises from one node to the next. Nothing relevant is an
empty list. Needs llama-index-core: pip install 'kbctl[llamaindex]'. The metadata and scores: docs/agents.md.
"""

from __future__ import annotations

try:
    from llama_index.core.base.base_retriever import BaseRetriever
    from llama_index.core.callbacks import CallbackManager
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
except ImportError as exc:  # the extra is not installed
    raise ImportError(
        "kbctl.integrations.llamaindex needs llama-index-core, which is not installed: pip install 'kbctl[llamaindex]'"
    ) from exc

from kbctl import KnowledgeBaseStore, Mode, QueryOptions, QueryResult, Reader
from kbctl.integrations._common import ServeClient, hit_id, hit_metadata

__all__ = ["HTTPKnowledgeBaseRetriever", "KnowledgeBaseRetriever", "nodes_of"]


def nodes_of(result: QueryResult) -> list[NodeWithScore]:
    """A kbctl query result as LlamaIndex nodes with scores, in rank order, with kbctl's metadata and citation."""
    nodes = []
    for hit in result.hits:
        metadata = hit_metadata(result, hit)
        node = TextNode(
            id_=hit_id(result, hit),
            text=hit.text,
            metadata=metadata,
            start_char_idx=hit.char_start,
            end_char_idx=hit.char_end,
            excluded_embed_metadata_keys=list(metadata),
            excluded_llm_metadata_keys=[k for k in metadata if k != "citation"],
        )
        nodes.append(NodeWithScore(node=node, score=hit.score))
    return nodes


class KnowledgeBaseRetriever(BaseRetriever):
    """Retrieve from `knowledge_base` of a `KnowledgeBaseStore` in this process, as `reader` may read it (None: a
    caller without groups, who reads only documents without an access rule). Options left None are the knowledge
    base's spec.retrieval; a bad one is UsageError (a ValueError) here."""

    def __init__(
        self,
        store: KnowledgeBaseStore,
        knowledge_base: str,
        *,
        top_k: int | None = None,
        threshold: float | None = None,
        max_tokens: int | None = None,
        mode: Mode | None = None,
        reader: Reader | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        self.store = store
        self.knowledge_base = knowledge_base
        self.reader = reader
        self.options = QueryOptions(top_k=top_k, threshold=threshold, max_tokens=max_tokens, mode=mode)
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return nodes_of(self.store.query(self.knowledge_base, query_bundle.query_str, self.options, reader=self.reader))


class HTTPKnowledgeBaseRetriever(BaseRetriever):
    """Retrieve from `knowledge_base` through `kbctl serve` at `url` (`POST /v1/knowledgebases/NAME/query`), with a
    bearer `token` whose scope, groups and claims the server applies (None for a server without tokens, on
    loopback). `aretrieve` does not block the event loop. Errors are kbctl's: NotFoundError (absent or out of the
    token's scope), AuthError (a token refused), UsageError (a request the server refused), KbctlError (no answer)."""

    def __init__(
        self,
        url: str,
        knowledge_base: str,
        *,
        token: str | None = None,
        top_k: int | None = None,
        threshold: float | None = None,
        max_tokens: int | None = None,
        mode: Mode | None = None,
        timeout: float = 30.0,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        self.client = ServeClient(url, token, timeout=timeout)
        self.knowledge_base = knowledge_base
        self.options = QueryOptions(top_k=top_k, threshold=threshold, max_tokens=max_tokens, mode=mode)
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def __repr__(self) -> str:  # never the token
        return f"HTTPKnowledgeBaseRetriever({self.client.url!r}, {self.knowledge_base!r})"

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return nodes_of(self.client.query(self.knowledge_base, query_bundle.query_str, self.options))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return nodes_of(await self.client.aquery(self.knowledge_base, query_bundle.query_str, self.options))
