"""The bodies the HTTP API accepts: bounded, camelCase like the manifests, strictly typed, and nothing unknown.

Each comes with the examples the OpenAPI document shows (on the example knowledge bases of `examples/kb`).
"""

from __future__ import annotations

from typing import Annotated, Final

from fastapi.openapi.models import Example
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict
from pydantic_core import PydanticCustomError

from kbctl import Mode, QueryOptions
from kbctl.manifest import DNS_LABEL, NAME_MAX, check_dns_label
from kbctl.manifest.selectors import Selector, parse_selector

__all__ = [
    "ASK_EXAMPLES",
    "MAX_BODY_BYTES",
    "MAX_KNOWLEDGE_BASES",
    "MAX_QUESTION_CHARS",
    "MAX_TOP_K",
    "MULTI_QUERY_EXAMPLES",
    "NAME_EXAMPLES",
    "NAME_SCHEMA",
    "QUERY_EXAMPLES",
    "AskRequest",
    "KnowledgeBaseName",
    "MultiQueryRequest",
    "QueryRequest",
]

MAX_QUESTION_CHARS: Final = 4_000  # a question, not a document
MAX_TOP_K: Final = 100
MAX_TOKENS: Final = 100_000
MAX_KNOWLEDGE_BASES: Final = 50  # names of one cross-knowledge-base query
MAX_BODY_BYTES: Final = 64 * 1024  # any request body (the MCP endpoint's too)
NAME_SCHEMA: Final[JsonDict] = {"pattern": DNS_LABEL, "maxLength": NAME_MAX}  # a knowledge base's name, as in manifests
SELECTOR_FORMS: Final = "key=value, key!=value, key, !key, key in (a,b) or key notin (a,b), joined by commas"


# The manifests' rule for metadata.name: a name no knowledge base can have (NUL, control characters, upper case,
# too long) is refused with the request, before the store.
KnowledgeBaseName = Annotated[str, AfterValidator(check_dns_label), Field(json_schema_extra=NAME_SCHEMA)]


class QueryRequest(BaseModel):
    """`POST /v1/knowledgebases/{name}/query` and `.../context`: the options of `kbctl query`."""

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, hide_input_in_errors=True
    )

    question: str = Field(min_length=1, max_length=MAX_QUESTION_CHARS, description="The question, in natural language.")
    # strict: a string or a boolean is never read as a number ("topK": true is not 1), nor a number as a boolean
    top_k: int | None = Field(
        None, strict=True, ge=1, le=MAX_TOP_K, description="Chunks to return at most (spec.retrieval.topK)."
    )
    threshold: float | None = Field(
        None,
        strict=True,
        ge=-1.0,
        le=1.0,
        description="Minimum cosine similarity (spec.retrieval.similarityThreshold).",
    )
    max_tokens: int | None = Field(
        None,
        strict=True,
        ge=1,
        le=MAX_TOKENS,
        description="Token budget of the chunks returned (spec.retrieval.maxContextTokens).",
    )
    mode: Mode | None = Field(None, description="hybrid, vector or keyword (spec.retrieval.mode).")
    explain: bool = Field(
        False, strict=True, description="Add each stage's candidates, ranks, scores, cuts and timings."
    )
    rerank: bool | None = Field(None, strict=True, description="false skips the spec's reranker, true requires one.")

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

    knowledge_bases: list[KnowledgeBaseName] = Field(
        default_factory=list, max_length=MAX_KNOWLEDGE_BASES, description="Knowledge bases to query by name."
    )
    selector: str | None = Field(
        None, max_length=1_000, description="A label selector (team=support,tier!=draft) instead of names."
    )

    @field_validator("selector")
    @classmethod
    def _valid_selector(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                parse_selector(value)
            except ValueError:  # its message quotes the input: the detail names the field, never the value
                raise PydanticCustomError(
                    "selector", f"not a label selector (empty or malformed): use {SELECTOR_FORMS}"
                ) from None
        return value

    def label_selector(self) -> Selector | None:
        """The parsed `selector` (validated with the body), or None when the body has none."""
        return parse_selector(self.selector) if self.selector is not None else None


NAME_EXAMPLES: Final[dict[str, Example]] = {
    "example": {"summary": "An example knowledge base", "value": "client-service-policy"}
}
QUERY_EXAMPLES: Final[dict[str, Example]] = {
    "question": {
        "summary": "A question, with the knowledge base's retrieval settings",
        "value": {"question": "what happens if a client cancels two weeks before the start?"},
    },
    "options": {
        "summary": "A question with every option",
        "value": {
            "question": "how long do we keep invoices?",
            "topK": 3,
            "threshold": 0.2,
            "maxTokens": 3000,
            "mode": "hybrid",
            "explain": True,
        },
    },
}
ASK_EXAMPLES: Final[dict[str, Example]] = {
    "question": {
        "summary": "A question answered from the knowledge base only",
        "value": {"question": "how long do we keep invoices?", "topK": 3},
    },
}
MULTI_QUERY_EXAMPLES: Final[dict[str, Example]] = {
    "names": {
        "summary": "Two knowledge bases by name",
        "value": {
            "question": "how long do we keep invoices?",
            "knowledgeBases": ["client-service-policy", "data-handling-policy"],
        },
    },
    "selector": {
        "summary": "The knowledge bases whose labels match a selector",
        "value": {"question": "who approves a refund of GBP 20,000?", "selector": "team=operations", "topK": 5},
    },
    "everything": {
        "summary": "Every knowledge base in the token's scope",
        "value": {"question": "how long do we keep invoices?"},
    },
}
