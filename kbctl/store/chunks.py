"""Searching a version's chunks: by vector (exact, or through a model's HNSW index; kbctl.store.search), by BM25
(kbctl.store.bm25), and what a reader may read of them (kbctl.store.access)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING

from psycopg.pq import TransactionStatus

from kbctl.defaults import INDEX_LOOKUP_SECONDS
from kbctl.inputs.access import Reader
from kbctl.store.access import Rule, readable_counts, readable_size
from kbctl.store.bm25 import KeywordRanking, containing_all_words, keyword_ranking
from kbctl.store.connection import Connected, advisory_key
from kbctl.store.rows import ChunkHit
from kbctl.store.search import (
    EF_SEARCH,
    EXACT_SCAN_MAX,
    VectorIndex,
    build_vector_index,
    exact_search,
    indexed_search,
    pgvector_version,
    vector_index,
)

if TYPE_CHECKING:
    from kbctl.embedding import Vector

__all__ = ["Chunks"]


class Chunks(Connected):
    """Searches of a version's chunks (kb_chunks), and the vector indexes and statistics they use."""

    def search(
        self,
        version_id: int,
        vector: Vector,
        limit: int,
        *,
        model: str | None = None,
        version_chunks: int | None = None,
        ef_search: int = EF_SEARCH,
        reader: Reader | Rule | None = None,
    ) -> list[ChunkHit]:
        """The `limit` chunks of a version nearest to `vector` by cosine similarity, best first.

        With the version's `model` and chunk count, a version of more than EXACT_SCAN_MAX chunks is searched
        through the model's HNSW index (`ef_search` candidates per layer), else every chunk is compared. With a
        `reader`, only the chunks it may read, `version_chunks` of them (a `Rule`: those behind it; kbctl.store.access).
        """
        if self._exact or model is None or version_chunks is None or version_chunks <= EXACT_SCAN_MAX:
            return exact_search(self._conn, version_id, vector, limit, reader)
        index = self._vector_index(model)
        hits = None
        if index is not None:
            if self._pgvector is None:
                self._pgvector = pgvector_version(self._conn)
            # The index settings last until the end of the transaction: the caller's (a query's snapshot; a
            # savepoint would not end them sooner, RELEASE keeps them), or else one opened here.
            inside = self._conn.info.transaction_status != TransactionStatus.IDLE
            with nullcontext() if inside else self._conn.transaction():
                hits = indexed_search(
                    self._conn,
                    index,
                    model,
                    version_id,
                    version_chunks,
                    vector,
                    limit,
                    ef_search=ef_search,
                    pgvector=self._pgvector,
                    reader=reader,
                )
        return hits if hits is not None else exact_search(self._conn, version_id, vector, limit, reader)

    def _vector_index(self, model: str) -> VectorIndex | None:
        """The HNSW index of `model`, as looked up at most INDEX_LOOKUP_SECONDS ago (a catalog query per search
        costs ~0.4 ms). Only a found index is remembered: one built meanwhile is used by the next search. An index
        remembered after it was dropped costs nothing wrong: the search names its expression, not the index."""
        now = time.monotonic()
        known = self._indexes.get(model)
        if known is not None and now - known[0] < INDEX_LOOKUP_SECONDS:
            return known[1]
        index = vector_index(self._conn, model)
        if index is None:
            self._indexes.pop(model, None)
        else:
            self._indexes[model] = (now, index)
        return index

    @contextmanager
    def exact_searches(self) -> Iterator[None]:
        """Every vector search in this block compares every chunk (the reference the index is measured against)."""
        self._exact = True
        try:
            yield
        finally:
            self._exact = False

    def build_vector_index(self, model: str) -> VectorIndex | None:
        """Build the HNSW index of a model's vectors once it has enough of them (see kbctl.store.search). One
        process builds it at a time: while another holds the model's build lock, nothing is built here (never waited
        on)."""
        key = advisory_key(f"kbctl:index:{model}")
        if not self._try_lock(key):
            return None
        try:
            return build_vector_index(self._conn, model)
        finally:
            self._conn.execute("SELECT pg_advisory_unlock(%s)", (key,))

    def vector_index(self, model: str) -> VectorIndex | None:
        """The HNSW index of a model's vectors, or None."""
        return vector_index(self._conn, model)

    def estimated_chunks(self) -> int:
        """How many chunk rows PostgreSQL's statistics say the store holds (0 before they were ever gathered)."""
        row = self._conn.execute(
            "SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = 'kb_chunks'::regclass"
        ).fetchone()
        return int(row[0]) if row is not None else 0

    def analyze_chunks(self) -> None:
        """Refresh PostgreSQL's statistics of the chunks (the planner's estimates of full-text matches)."""
        self._conn.execute("ANALYZE kb_chunks")

    def keyword_ranking(
        self,
        version_id: int,
        language: str,
        question: str,
        vector: Vector,
        limit: int,
        among: Sequence[ChunkHit] = (),
        reader: Reader | None = None,
    ) -> KeywordRanking:
        """The `limit` chunks of a version with the best BM25 score for `question` (full text in `language`), best
        first, each with its cosine similarity to `vector`, and the sum of the question's words' idf; `among`:
        chunks already read (the vector list), the ones scored when every word of the question is common (see
        kbctl.store.bm25). With a `reader`, only the chunks it may read, scored by their statistics alone
        (kbctl.store.access)."""
        return keyword_ranking(self._conn, version_id, language, question, vector, limit, among, reader)

    def readable_counts(self, reader: Reader) -> dict[str, tuple[int, int, int, int]]:
        """Per knowledge base that restricts sources: (sources, ready, chunks) `reader` may read, and sources it may
        not (kbctl.store.access.readable_counts)."""
        return readable_counts(self._conn, reader)

    def readable_chunks(self, version_id: int, reader: Reader) -> int:
        """How many chunks of a version `reader` may read."""
        return readable_size(self._conn, version_id, reader)[0]

    def containing_all_words(self, chunk_ids: Sequence[int], language: str, question: str) -> set[int]:
        """Those of `chunk_ids` whose full text holds every word of `question` (stemmed, stop words dropped);
        none when the question has fewer than two such words."""
        return containing_all_words(self._conn, chunk_ids, language, question)

    def has_text_search_config(self, name: str) -> bool:
        """Whether PostgreSQL has a text search configuration called `name` (english, simple, german...)."""
        row = self._conn.execute("SELECT count(*) FROM pg_ts_config WHERE cfgname = %s", (name,)).fetchone()
        return bool(row and row[0])
