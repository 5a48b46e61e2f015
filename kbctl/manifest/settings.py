"""The settings blocks of a KnowledgeBase's spec, each with its defaults from kbctl.defaults: `Chunking`,
`Retrieval` (with `Rerank`), `Embedding`, `Refresh`, `Answer` and `Limits`."""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import (
    AfterValidator,
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from kbctl import defaults
from kbctl.defaults import DEFAULT_MODEL
from kbctl.manifest._field_checks import (
    CONTEXT_TOKENS_MAX,
    TOP_K_MAX,
    duration_seconds,
)
from kbctl.manifest.base import _Model, _StrictFloat, _StrictInt, _without_unset

MAX_INSTRUCTIONS_CHARS: Final = 8000  # spec.answer.instructions: a system prompt, not a document

Fusion = Literal["rrf", "convex"]  # how hybrid retrieval fuses its vector and keyword lists


class Chunking(_Model):
    """How documents are split into chunks before embedding."""

    max_chars: _StrictInt = Field(
        default=defaults.CHUNK_MAX_CHARS, ge=100, le=100_000, description="Maximum characters per chunk."
    )
    overlap_chars: _StrictInt = Field(
        default=defaults.CHUNK_OVERLAP_CHARS,
        ge=0,
        validate_default=True,
        description="Characters shared by neighbouring chunks.",
    )

    @field_validator("overlap_chars")
    @classmethod
    def _overlap_below_max(cls, value: int, info: ValidationInfo) -> int:
        max_chars = info.data.get("max_chars")
        if max_chars is not None and value >= max_chars:
            raise ValueError(f"must be less than maxChars ({max_chars})")
        return value


def _provider_slash_name(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    provider, slash, name = value.partition("/")
    if not slash or not provider or not name or any(ch.isspace() for ch in value):
        raise ValueError(f"must be of the form provider/name, got {value!r}")
    return value


class Rerank(_Model):
    """A second-stage reranker that reorders the best candidates before topK, threshold and budget apply."""

    model: Annotated[str, AfterValidator(_provider_slash_name)] = Field(
        description="'provider/name': a rerank provider of the kbctl configuration (cohere/rerank-v3.5, "
        "jina/jina-reranker-v2-base-multilingual, or one of your own), or local/NAME for a local cross-encoder.",
    )
    candidates: _StrictInt = Field(
        default=defaults.RERANK_CANDIDATES,
        ge=1,
        le=200,
        description="How many of the best candidates (after the threshold) to rerank.",
    )
    min_score: _StrictFloat | None = Field(
        default=None, allow_inf_nan=False, description="Drop reranked chunks scoring below this (the model's scale)."
    )


def _choice(value: str, default: str) -> str:
    """A choice as a field's description names it: `rrf (default)` when it is the default."""
    return f"{value} (default)" if value == default else value


class Retrieval(_Model):
    """How chunks are retrieved for a query."""

    # Every default below, and what it was chosen on, is in kbctl.defaults.
    top_k: _StrictInt = Field(
        default=defaults.TOP_K, ge=1, le=TOP_K_MAX, description="How many chunks to return at most."
    )
    # Unset, a query takes its version's threshold, calibrated when it was published (kbctl.embedding.background):
    # models score on scales of their own (the default model's 0.35 cuts nothing with bge-small-en-v1.5), and how
    # high a question without an answer scores depends on the knowledge base too.
    similarity_threshold: _StrictFloat | None = Field(
        default=None,
        ge=-1.0,
        le=1.0,
        allow_inf_nan=False,
        description=(
            "Minimum cosine similarity of a returned chunk, and of the best one for anything to be returned (in "
            f"questions of up to {defaults.EXACT_TERMS_MAX_WORDS} words, exact identifiers and all-question-word "
            f"matches pass down to {defaults.EXACT_TERMS_MARGIN} below it, and in hybrid mode the chunk first in "
            f"both lists down to {defaults.AGREEMENT_MARGIN} below it). Unset: a relevance gate calibrated when "
            "each version is published decides whether anything is returned: a candidate reaching its similarity "
            f"line (the {defaults.BACKGROUND_QUANTILE} quantile of 99 background questions' best similarities in it "
            f"plus {defaults.BACKGROUND_MARGIN}, never below the model's threshold, {defaults.DEFAULT_THRESHOLD} "
            f"for local/all-MiniLM-L6-v2 and {defaults.BGE_SMALL_THRESHOLD} for local/bge-small-en-v1.5, nor more "
            f"than {defaults.BACKGROUND_CEILING} above it), or in hybrid mode the question's keyword share reaching "
            f"its keyword line (their {defaults.KEYWORD_QUANTILE} quantile plus {defaults.KEYWORD_MARGIN}, at least "
            f"{defaults.KEYWORD_FLOOR}); an answer's chunks are then those down to {defaults.ANSWER_FLOOR_MARGIN} "
            "below the model's threshold; kbctl describe shows the lines."
        ),
    )
    max_context_tokens: _StrictInt = Field(
        default=defaults.MAX_CONTEXT_TOKENS,
        ge=1,
        le=CONTEXT_TOKENS_MAX,
        description="Token budget for the returned context.",
    )
    mode: Literal["hybrid", "vector", "keyword"] = Field(
        default=defaults.MODE,
        description="hybrid: BM25 keyword and vector candidates fused (see fusion); or one of them alone.",
    )
    language: str = Field(
        default=defaults.LANGUAGE,
        pattern=r"^[a-z_]+$",
        description="PostgreSQL text search configuration for keyword search ('simple' for codes and mixed text).",
    )
    rerank: Rerank | None = Field(default=None, description="Optional reranker applied to the fused candidates.")
    ef_search: _StrictInt | None = Field(
        default=None,
        ge=10,
        le=1000,
        description=f"HNSW candidates per layer of a vector search through the index (default {defaults.EF_SEARCH}): "
        "higher finds the exact nearest chunks more often and costs more time. "
        f"Versions of up to {defaults.EXACT_SCAN_MAX:,} chunks are searched exactly.",
    )

    candidates: _StrictInt | None = Field(
        default=None,
        ge=1,
        le=1000,
        description="How many of the best chunks of each list (vector, keyword) a query gathers and hybrid fuses "
        f"(default {defaults.CANDIDATES}; at least topK). Vector mode reads {defaults.FIRST_READ} x topK first, and "
        "the rest only when those leave the answer short.",
    )
    fusion: Fusion | None = Field(
        default=None,
        description=f"How hybrid fuses the two lists: {_choice('rrf', defaults.FUSION)}: reciprocal rank fusion, "
        f"weight/({defaults.RRF_K} + rank) summed over the lists; {_choice('convex', defaults.FUSION)}: each list's "
        "scores scaled to 0-1 within the list, summed with weights.",
    )
    keyword_weight: _StrictFloat | None = Field(
        default=None,
        ge=0.0,
        le=10.0,
        allow_inf_nan=False,
        description=f"The keyword list's weight in hybrid fusion, the vector list's being 1 (default "
        f"{defaults.KEYWORD_WEIGHT:g}).",
    )

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_unset(
            handler(self),
            "rerank",
            "ef_search",
            "efSearch",
            "candidates",
            "fusion",
            "keyword_weight",
            "keywordWeight",
        )


class Embedding(_Model):
    """Which embedding model turns chunks into vectors."""

    model: str = Field(
        default=DEFAULT_MODEL,
        description="'provider/name', e.g. local/all-MiniLM-L6-v2 or openai/text-embedding-3-small.",
    )
    profile: str | None = Field(
        default=None,
        description="A named embedding profile of the kbctl configuration (instead of model).",
    )

    @model_validator(mode="after")
    def _model_or_profile(self) -> Embedding:
        if self.profile is not None and "model" in self.model_fields_set:
            raise ValueError("set either model or profile, not both")
        if self.profile is not None and not self.profile.strip():
            raise ValueError("profile must not be empty")
        return self

    @property
    def ref(self) -> str:
        """What names the embedder: `profile:NAME`, or the model id."""
        return f"profile:{self.profile}" if self.profile else self.model

    @field_validator("model")
    @classmethod
    def _valid_model(cls, value: str) -> str:
        return _provider_slash_name(value)


def _chat_model(value: str) -> str:
    if value.startswith("profile:"):
        raise ValueError("use profile: NAME for a chat profile, not model: profile:NAME")
    return _provider_slash_name(value)


REFRESH_MIN_SECONDS: Final = 60.0
REFRESH_MAX_SECONDS: Final = 31 * 86400.0


class Refresh(_Model):
    """When `kbctl controller` re-fetches the knowledge base's sources by itself (as `kbctl refresh` does)."""

    interval: str = Field(
        description="How often, as a duration: 30m, 6h, 1d (1 minute to 31 days); each run is jittered by up to "
        "10% so many knowledge bases do not refresh at once, and two runs of one never overlap.",
    )

    @field_validator("interval")
    @classmethod
    def _valid_interval(cls, value: str) -> str:
        seconds = duration_seconds(value)
        if not REFRESH_MIN_SECONDS <= seconds <= REFRESH_MAX_SECONDS:
            raise ValueError(f"must be between 1m and 31d, got {value!r}")
        return value

    @property
    def seconds(self) -> float:
        """The interval in seconds."""
        return duration_seconds(self.interval)


class Answer(_Model):
    """How `kbctl ask` answers from this knowledge base: which chat model, and the rules it is given."""

    model: Annotated[str, AfterValidator(_chat_model)] | None = Field(
        default=None,
        description="'provider/name': a chat provider of the kbctl configuration (openai/gpt-4o-mini, "
        "litellm/NAME...). `kbctl ask --model` overrides it.",
    )
    profile: str | None = Field(
        default=None,
        min_length=1,
        description="A named chat profile of the kbctl configuration (instead of model).",
    )
    instructions: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_INSTRUCTIONS_CHARS,
        description="The system prompt, in place of kbctl's default (answer only from the passages, cite them "
        "as [1], say when the knowledge base does not cover the question). The passages still arrive marked as "
        "data, never as instructions.",
    )
    temperature: _StrictFloat | None = Field(
        default=None, ge=0.0, le=2.0, allow_inf_nan=False, description="Sampling temperature (default: the model's)."
    )
    max_tokens: _StrictInt | None = Field(
        default=None, ge=1, le=32_768, description="Most tokens the answer may have (default: the model's)."
    )

    @model_validator(mode="after")
    def _model_or_profile(self) -> Answer:
        if self.model is not None and self.profile is not None:
            raise ValueError("set either model or profile, not both")
        if self.instructions is not None and not self.instructions.strip():
            raise ValueError("instructions must not be blank")
        return self

    @property
    def ref(self) -> str | None:
        """What names the chat model: `profile:NAME`, the model id, or None when neither is set."""
        return f"profile:{self.profile}" if self.profile else self.model

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_unset(
            handler(self), "model", "profile", "instructions", "temperature", "max_tokens", "maxTokens"
        )


class Limits(_Model):
    """Bounds on the work one apply or refresh may do for a knowledge base (a runaway page, a runaway bill)."""

    max_chunks_per_source: _StrictInt = Field(
        default=5000,
        ge=1,
        le=1_000_000,
        description="A source whose content splits into more chunks fails alone (about 6 MB of text by default).",
    )
    max_tokens_to_embed: _StrictInt = Field(
        default=5_000_000,
        ge=1,
        le=1_000_000_000,
        description="An apply or refresh that would send more tokens to the embedding model (texts missing from "
        "the vector cache) fails before sending any.",
    )
