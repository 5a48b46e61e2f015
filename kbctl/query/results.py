"""What a query returns: the chunks kept, in rank order, with why the others were not, and its trace."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, PrivateAttr
from pydantic.alias_generators import to_camel

__all__ = ["API_MODEL", "QueryHit", "QueryResult", "Relevant", "RerankInfo", "StageTiming", "TraceEntry", "TraceStage"]

# Field names are snake_case in Python and camelCase in the HTTP API (`model_dump(by_alias=True)`), like manifests.
API_MODEL = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class QueryHit(BaseModel):
    """One chunk of context, in rank order.

    `score` is what the hits are ordered by, so it never increases from one rank to the next: the reranker's score
    when a reranker reordered them; else the fused score in hybrid mode, the cosine similarity in vector mode and
    the BM25 score in keyword mode. `similarity` is always the cosine similarity to the question, the number the
    similarity threshold is compared with; it may rise from one rank to the next when anything but the cosine
    orders the hits."""

    model_config = API_MODEL

    rank: int
    source: str
    title: str | None
    origin: str
    heading_path: list[str]
    position: int
    char_start: int
    char_end: int
    score: float  # what ranks the hits (see above): non-increasing with rank, in every mode
    similarity: float  # cosine similarity to the question (the threshold's measure)
    vector_rank: int | None = None  # 1-based rank among the vector candidates, None if not one
    keyword_rank: int | None = None  # 1-based rank among the full-text candidates, None if not one
    fused_score: float = 0.0  # its fused score (spec.retrieval.fusion): of both lists in hybrid mode, else of one
    rerank_score: float | None = None  # the reranker's score, None when no reranker ran
    matched_identifiers: list[str] = []
    all_words: bool = False  # the chunk contains every word of the question (full-text reading)
    tokens: int
    text: str


class TraceEntry(BaseModel):
    """One candidate as a stage saw it."""

    model_config = API_MODEL

    chunk_id: int
    source: str
    position: int
    rank: int
    score: float
    detail: str = ""


class TraceStage(BaseModel):
    """What one stage of a query did and how long it took."""

    model_config = API_MODEL

    stage: str
    ms: float
    entries: list[TraceEntry] = []


class StageTiming(BaseModel):
    """When one stage of a query ran (always recorded, never serialized): what a tracing span is made of."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    stage: str
    start_ns: int  # time.time_ns() at its start
    end_ns: int
    count: int  # candidates (or hits) it produced


class RerankInfo(BaseModel):
    """What the reranker did for one query."""

    model_config = API_MODEL

    model: str
    candidates: int  # how many candidates were sent to it
    min_score: float | None
    applied: bool  # False when it failed and the fused order was kept
    below_min_score: int = 0
    best_score: float | None = None
    error: str | None = None


Relevant = Literal["similarity", "keyword"] | None  # by which signal a question passed the relevance gate


class QueryResult(BaseModel):
    """The answer to a query: the chunks kept, and why the others were not."""

    model_config = API_MODEL

    knowledge_base: str
    version: int
    model: str
    question: str
    mode: str
    identifiers: list[str]
    top_k: int
    similarity_threshold: float  # the chunks'
    # What the best candidate had to reach for any chunk to be returned: the version's calibrated threshold when
    # neither the spec nor the query set one (kbctl.embedding.background), else the similarity threshold.
    relevance_threshold: float | None = None
    # The gate's second signal (hybrid mode): the question's keyword share (its best BM25 score over the sum of its
    # words' idf) and the version's keyword line it may pass by instead (None: the version has none).
    keyword_share: float | None = None
    keyword_threshold: float | None = None
    relevant_by: Relevant = None  # the signal that passed the gate; None: none did
    max_context_tokens: int
    hits: list[QueryHit]
    candidates: int
    below_threshold: int
    over_budget: int
    tokens: int
    best_score: float | None  # the best candidate's cosine similarity (hit or not): what the threshold reads
    duplicates: int = 0
    rerank: RerankInfo | None = None
    trace: list[TraceStage] | None = None
    _timings: list[StageTiming] = PrivateAttr(default_factory=list)

    @property
    def timings(self) -> list[StageTiming]:
        """When each stage ran, explain or not (for tracing spans; not part of the JSON)."""
        return self._timings

    @property
    def message(self) -> str:
        """A plain sentence on the outcome, honest when nothing relevant was found."""
        kb = f"KnowledgeBase/{self.knowledge_base}"
        if self.hits:
            noun = "chunk" if len(self.hits) == 1 else "chunks"
            return f"{len(self.hits)} {noun} from {kb} (version {self.version}), {self.tokens} tokens"
        if self.candidates == 0:
            if self.mode == "keyword":
                return f"nothing relevant found in {kb}: no chunk contains a word of the question"
            return f"nothing relevant found: {kb} has no chunks"
        if self.rerank is not None and self.rerank.candidates and self.rerank.below_min_score == self.rerank.candidates:
            best = self.rerank.best_score
            return (
                f"nothing relevant found in {kb}: the best rerank score is {best:.2f}, "
                f"below the rerank minScore {self.rerank.min_score:.2f}"
            )
        if self.below_threshold == self.candidates and (self.relevance_threshold or -1.0) > self.similarity_threshold:
            lexical = (
                f", and the question's keyword share {self.keyword_share or 0.0:.2f} is below its keyword line"
                f" {self.keyword_threshold:.2f}"
                if self.keyword_threshold is not None
                else ""
            )
            return (
                f"nothing relevant found in {kb}: the best match scores {self.best_score:.2f}, below version "
                f"{self.version}'s relevance line {self.relevance_threshold:.2f}{lexical}"
            )
        if self.below_threshold == self.candidates:
            return (
                f"nothing relevant found in {kb}: the best match scores {self.best_score:.2f}, "
                f"below the similarity threshold {self.similarity_threshold:.2f}"
            )
        return f"nothing fits the token budget of {self.max_context_tokens} tokens in {kb}"
