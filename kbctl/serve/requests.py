"""The bodies the HTTP API accepts: bounded, camelCase like the manifests, and nothing unknown."""

from __future__ import annotations

from typing import Final

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from kbctl.query.options import Mode, QueryOptions

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_KNOWLEDGE_BASES",
    "MAX_QUESTION_CHARS",
    "MAX_TOP_K",
    "AskRequest",
    "MultiQueryRequest",
    "QueryRequest",
]

MAX_QUESTION_CHARS: Final = 4_000  # a question, not a document
MAX_TOP_K: Final = 100
MAX_TOKENS: Final = 100_000
MAX_KNOWLEDGE_BASES: Final = 50  # names of one cross-knowledge-base query
MAX_BODY_BYTES: Final = 64 * 1024  # any request body (the MCP endpoint's too)


class QueryRequest(BaseModel):
    """`POST /v1/knowledgebases/{name}/query` and `.../context`: the options of `kbctl query`."""

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, hide_input_in_errors=True
    )

    question: str = Field(min_length=1, max_length=MAX_QUESTION_CHARS, description="The question, in natural language.")
    top_k: int | None = Field(None, ge=1, le=MAX_TOP_K, description="Chunks to return at most (spec.retrieval.topK).")
    threshold: float | None = Field(
        None, ge=-1.0, le=1.0, description="Minimum cosine similarity (spec.retrieval.similarityThreshold)."
    )
    max_tokens: int | None = Field(
        None, ge=1, le=MAX_TOKENS, description="Token budget of the chunks returned (spec.retrieval.maxContextTokens)."
    )
    mode: Mode | None = Field(None, description="hybrid, vector or keyword (spec.retrieval.mode).")
    explain: bool = Field(False, description="Add each stage's candidates, ranks, scores, cuts and timings.")
    rerank: bool | None = Field(None, description="false skips the spec's reranker, true requires one.")

    @field_validator("question")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value

    def options(self) -> QueryOptions:
        return QueryOptions(
            top_k=self.top_k,
            threshold=self.threshold,
            max_tokens=self.max_tokens,
            mode=self.mode,
            explain=self.explain,
            rerank=self.rerank,
        )


class AskRequest(QueryRequest):
    """`POST /v1/knowledgebases/{name}/ask`: a question and the retrieval options; the chat model is the
    knowledge base's (spec.answer) or the server's configuration's, never the caller's choice."""


class MultiQueryRequest(QueryRequest):
    """`POST /v1/query`: one question to several knowledge bases (names, or a label selector, or all in scope)."""

    knowledge_bases: list[str] = Field(
        default_factory=list, max_length=MAX_KNOWLEDGE_BASES, description="Knowledge bases to query by name."
    )
    selector: str | None = Field(
        None, max_length=1_000, description="A label selector (team=support,tier!=draft) instead of names."
    )
