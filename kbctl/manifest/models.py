"""The KnowledgeBase manifest as pydantic models: the single source of truth of fields and the JSON Schema, their
defaults read from kbctl.defaults (with why each has its value)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Final, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    Strict,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import ErrorDetails, InitErrorDetails

from kbctl import defaults
from kbctl.defaults import DEFAULT_MODEL
from kbctl.errors import StoreError
from kbctl.inputs.access import ACCESS_GROUPS_MAX, ACCESS_LABELS_MAX, check_group, label_terms
from kbctl.manifest._field_checks import (
    CONTEXT_TOKENS_MAX,
    DNS_LABEL,
    NAME_MAX,
    SOURCE_NAME,
    TOP_K_MAX,
    check_dns_label,
    check_git_ref,
    check_git_url,
    check_label_key,
    check_label_value,
    check_name,
    check_relative_path,
    check_text,
    check_url,
    duration_seconds,
)

__all__ = [
    "API_VERSION",
    "DEFAULT_MODEL",
    "KIND",
    "MAX_INSTRUCTIONS_CHARS",
    "Access",
    "Answer",
    "Chunking",
    "Crawl",
    "Embedding",
    "GitRepository",
    "KnowledgeBase",
    "Limits",
    "Metadata",
    "Rerank",
    "Retrieval",
    "Source",
    "Spec",
    "json_schema",
    "read_stored",
    "write_schema",
]

ApiVersion = Literal["kbctl.dev/v1alpha1"]
Kind = Literal["KnowledgeBase"]
API_VERSION: Final[ApiVersion] = "kbctl.dev/v1alpha1"  # mypy checks these two stay in step with the types
KIND: Final[Kind] = "KnowledgeBase"

MAX_INSTRUCTIONS_CHARS: Final = 8000  # spec.answer.instructions: a system prompt, not a document

JSON_SCHEMA_DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"

_StrictInt = Annotated[int, Strict()]
Fusion = Literal["rrf", "convex"]  # how hybrid retrieval fuses its vector and keyword lists
_StrictFloat = Annotated[float, Strict()]  # strict still takes ints; it refuses strings and booleans
_LabelKey = Annotated[str, AfterValidator(check_label_key)]
_LabelValue = Annotated[str, AfterValidator(check_label_value)]


_Stored = TypeVar("_Stored", bound=BaseModel)


def read_stored(model: type[_Stored], data: Any, what: str) -> _Stored:
    """A model read back from what the store holds (a manifest, a version's spec.retrieval or spec.answer). Data this
    kbctl cannot read (written by another version of it, or edited by hand) is a StoreError naming `what`, never
    pydantic's ValidationError."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise StoreError(
            f"{what} in the store is not readable by this kbctl ({where}: {first['msg']}): apply its manifest again"
        ) from None


class _Model(BaseModel):
    """Shared configuration: strict keys, snake_case in Python, camelCase in YAML, immutable; strings without
    NUL or lone surrogates."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, alias_generator=to_camel, frozen=True)

    @field_validator("*", mode="after")
    @classmethod
    def _valid_characters(cls, value: Any) -> Any:
        # Every string field, and the keys and values of string mappings (labels), hold only storable text.
        if isinstance(value, str):
            check_text(value)
        elif isinstance(value, dict):
            for item in (*value.keys(), *value.values()):
                if isinstance(item, str):
                    check_text(item)
        return value


class Metadata(_Model):
    """Identity of an object (a knowledge base, a Sync): its name and labels."""

    name: str = Field(
        description="DNS-1123 label: lowercase letters, digits and '-', at most 63 characters.",
        json_schema_extra={"pattern": DNS_LABEL, "maxLength": NAME_MAX},
    )
    labels: dict[_LabelKey, _LabelValue] = Field(
        default_factory=dict, description="Kubernetes-style labels (string keys and values)."
    )

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        return check_dns_label(value)


Format = Literal["markdown", "text", "html", "pdf", "docx", "json", "jsonl", "csv", "auto"]
SourceKind = Literal["text", "url", "path", "git", "crawl"]
FILE_FORMATS: Final = ("html", "pdf", "docx", "json", "jsonl", "csv", "auto")  # path: and git: sources only


class GitRef(_Model):
    """A branch or tag of a git repository, checked before git ever sees it (a git source's, a Sync's)."""

    url: str = Field(
        description="https://host/org/repo(.git), ssh://git@host/org/repo or git@host:org/repo (an absolute folder "
        "or file:/// URL only with KBCTL_ALLOW_LOCAL_GIT=1); no part may start with '-' and no 'transport::' form "
        "is read. Credentials come from the environment (SSH agent, credential helpers), never from the manifest.",
    )
    ref: str | None = Field(default=None, description="A branch or tag (default: the repository's default branch).")

    @field_validator("url")
    @classmethod
    def _valid_url(cls, value: str) -> str:
        return check_git_url(value)

    @field_validator("ref")
    @classmethod
    def _valid_ref(cls, value: str | None) -> str | None:
        return None if value is None else check_git_ref(value)


class GitRepository(GitRef):
    """A ref of a git repository whose files are the documents (`spec.sources[].git`)."""

    paths: list[str] = Field(
        default_factory=lambda: ["."],
        min_length=1,
        max_length=50,
        description="Folders, files or globs in the repository to read (default: all of it).",
    )

    @field_validator("paths")
    @classmethod
    def _valid_paths(cls, value: list[str]) -> list[str]:
        for path in value:
            check_relative_path(path)
            if path.startswith("-") or "/-" in path:
                raise ValueError("must not hold a path part starting with '-'")
        return value


class Crawl(_Model):
    """A site crawled from one page (`spec.sources[].crawl`): same-site links followed breadth-first."""

    url: str = Field(description="The page to start from (http or https, no credentials).")
    max_pages: _StrictInt = Field(default=100, ge=1, le=5000, description="Pages fetched at most.")
    max_depth: _StrictInt = Field(default=3, ge=0, le=20, description="Links followed from the start page at most.")
    sitemap: bool = Field(default=True, description="Also start from the pages of the site's sitemap.xml.")

    @field_validator("url")
    @classmethod
    def _valid_url(cls, value: str) -> str:
        return check_url(value)


def _group(value: str) -> str:
    return check_group(value)


_Group = Annotated[str, AfterValidator(_group)]


class Access(_Model):
    """Who may retrieve documents (`spec.access`, `spec.sources[].access`): callers in one of `groups`, holding
    every label of `labels` among their claims. A source without access has its knowledge base's; with neither,
    every caller that may see the knowledge base reads it."""

    groups: list[_Group] = Field(
        default_factory=list,
        max_length=ACCESS_GROUPS_MAX,
        description="Callers in any one of these groups may read (a token's `groups`, a JWT's groups claim, "
        "`--as-group`).",
    )
    labels: dict[_LabelKey, _LabelValue] = Field(
        default_factory=dict,
        max_length=ACCESS_LABELS_MAX,
        description="Claims the caller must all hold (`department: hr`: a claim `department` with value `hr`).",
    )

    @model_validator(mode="after")
    def _names_someone(self) -> Access:
        if not self.groups and not self.labels:
            raise ValueError("name at least one group or label (leave access out to let every caller read)")
        return self

    def columns(self) -> tuple[list[str] | None, list[str] | None]:
        """The rule as the store keeps it: its groups and its label terms (`key=value`), each None when empty."""
        return (sorted(set(self.groups)) or None, label_terms(self.labels) or None)


class Source(_Model):
    """Documents to index: fetched from a URL, given inline as text, read from files next to the manifest, from a
    git repository, or crawled from a site (exactly one of them)."""

    name: str = Field(
        description="Unique within the knowledge base: lowercase letters, digits, '-', '_' and '.'.",
        json_schema_extra={"pattern": SOURCE_NAME, "maxLength": NAME_MAX},
    )
    url: str | None = Field(
        default=None, description="An http(s) URL without credentials.", json_schema_extra={"format": "uri"}
    )
    text: str | None = Field(default=None, description="The document inline.")
    path: str | None = Field(
        default=None,
        description="A file, a folder (every file of a known format below it) or a glob (docs/**/*.md), relative "
        "to the manifest's folder; each file is one document.",
    )
    git: GitRepository | None = Field(
        default=None, description="A git repository ref whose files are the documents, read as path files are."
    )
    crawl: Crawl | None = Field(default=None, description="A site whose pages are the documents, crawled from a page.")
    include: list[str] | None = Field(
        default=None, description="With path or git: only files matching one of these globs (relative to the path)."
    )
    exclude: list[str] | None = Field(
        default=None, description="With path or git: leave out files matching one of these globs."
    )
    format: Format = Field(
        default="markdown",
        description="How to read the text: markdown or text (inline and URL sources); for path sources also html, "
        "pdf, docx, json, jsonl, csv, or auto (the default there: by each file's extension).",
    )
    title_field: str | None = Field(
        default=None, description="json / jsonl: the field whose value titles each entry (default: none)."
    )
    text_fields: list[str] | None = Field(
        default=None, description="json / jsonl: the fields an entry's text is made of, in order (default: all)."
    )
    access: Access | None = Field(
        default=None,
        description="Who may retrieve this source's documents (default: the knowledge base's spec.access). Changing "
        "it publishes a new version without fetching or embedding anything.",
    )

    @model_validator(mode="before")
    @classmethod
    def _auto_format(cls, data: Any) -> Any:
        if isinstance(data, dict) and (data.get("path") or data.get("git")) is not None and "format" not in data:
            return {**data, "format": "auto"}
        return data

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        return check_name(value, SOURCE_NAME, "lowercase letters, digits, '-', '_' and '.'")

    @field_validator("url")
    @classmethod
    def _valid_url(cls, value: str | None) -> str | None:
        return None if value is None else check_url(value)

    @field_validator("path")
    @classmethod
    def _valid_path(cls, value: str | None) -> str | None:
        return None if value is None else check_relative_path(value)

    @field_validator("include", "exclude")
    @classmethod
    def _valid_globs(cls, value: list[str] | None) -> list[str] | None:
        for glob in value or []:
            check_relative_path(glob)
        return value

    @field_validator("text")
    @classmethod
    def _valid_text(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be empty or whitespace-only")
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> Source:
        if sum(v is not None for v in (self.url, self.text, self.path, self.git, self.crawl)) != 1:
            raise ValueError("set exactly one of url, text, path, git or crawl")
        errors = []
        if self.path is None and self.git is None:
            if self.crawl is None:
                for field in ("include", "exclude"):
                    if getattr(self, field) is not None:
                        errors.append(_field_error(field, "goes with path, git or crawl"))
            if self.format in FILE_FORMATS:
                errors.append(_field_error("format", "must be one of: markdown, text (the others go with path or git)"))
        if self.format not in ("json", "jsonl", "auto"):
            for field, alias in (("title_field", "titleField"), ("text_fields", "textFields")):
                if getattr(self, field) is not None:
                    errors.append(_field_error(alias, "goes with format json, jsonl or auto"))
        if errors:
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self

    @property
    def kind(self) -> SourceKind:
        """Whether this source is inline text, a URL to fetch, files to read, a repository or a site to crawl."""
        if self.crawl is not None:
            return "crawl"
        if self.git is not None:
            return "git"
        if self.path is not None:
            return "path"
        return "text" if self.text is not None else "url"

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_unset(
            handler(self),
            "path",
            "git",
            "crawl",
            "include",
            "exclude",
            "title_field",
            "titleField",
            "text_fields",
            "textFields",
            "access",
        )


def _field_error(field: str, message: str) -> InitErrorDetails:
    """An error located at `field` of the model being validated (raised together from a model validator)."""
    return InitErrorDetails(type="value_error", loc=(field,), input=None, ctx={"error": ValueError(message)})


def _without_unset(data: dict[str, Any], *keys: str) -> dict[str, Any]:
    """A dump without an optional field left unset: a field added later must not change the dump (and so every
    spec hash and stored manifest) of the manifests that do not use it, or every knowledge base would get a new
    version."""
    for key in keys:
        if data.get(key, ...) is None:
            del data[key]
    return data


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
        description="Minimum cosine similarity (in questions of up to "
        f"{defaults.EXACT_TERMS_MAX_WORDS} words, exact identifiers and all-question-word matches pass down to "
        f"{defaults.EXACT_TERMS_MARGIN} below it, and "
        f"in hybrid mode the chunk first in both lists down to {defaults.AGREEMENT_MARGIN} below it). "
        f"Unset: the model's threshold ({defaults.DEFAULT_THRESHOLD} for local/all-MiniLM-L6-v2, "
        f"{defaults.BGE_SMALL_THRESHOLD} for local/bge-small-en-v1.5, {defaults.DEFAULT_THRESHOLD} for any other "
        "model), and nothing is returned unless a candidate reaches the version's own line, calibrated when it is "
        "published from how high 99 background questions score in it (their "
        f"{defaults.BACKGROUND_QUANTILE} quantile plus {defaults.BACKGROUND_MARGIN}), never below the model's "
        f"threshold nor more than {defaults.BACKGROUND_CEILING} above it; kbctl describe shows it.",
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


class Spec(_Model):
    """The desired state of a knowledge base."""

    description: str = Field(default="", description="Free text for humans.")
    sources: list[Source] = Field(min_length=1, description="The documents to index; names must be unique.")
    chunking: Chunking = Field(default_factory=Chunking)
    retrieval: Retrieval = Field(default_factory=Retrieval)
    embedding: Embedding = Field(default_factory=Embedding)
    version_history: _StrictInt = Field(
        default=5,
        ge=1,
        le=100,
        description="How many versions to keep for rollback (the current one always stays).",
    )
    limits: Limits | None = Field(default=None, description="Bounds on the work of one apply (defaults apply).")
    answer: Answer | None = Field(default=None, description="How `kbctl ask` answers questions from it.")
    refresh: Refresh | None = Field(
        default=None, description="A schedule on which `kbctl controller` refreshes it (none: only `kbctl refresh`)."
    )
    access: Access | None = Field(
        default=None,
        description="Who may retrieve the documents of every source that sets no access of its own (default: "
        "every caller that may see the knowledge base).",
    )
    suspend: Annotated[bool, Strict()] | None = Field(
        default=None,
        description="true: `kbctl controller` leaves it as it is: no scheduled refresh, and a version that drifted "
        "from the applied manifest (a manual `rollout undo`) is reported, not reverted. `apply` and `refresh` "
        "still work.",
    )

    @property
    def suspended(self) -> bool:
        """Whether the controller is to leave this knowledge base alone (spec.suspend)."""
        return bool(self.suspend)

    def access_of(self, source: Source) -> Access | None:
        """Who may read `source`: its own access, else the knowledge base's, else None (every caller)."""
        return source.access if source.access is not None else self.access

    @property
    def effective_limits(self) -> Limits:
        """The limits in force: those set, else the defaults."""
        return self.limits or Limits()

    @model_serializer(mode="wrap")
    def _omit_unset_limits(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_unset(handler(self), "limits", "answer", "refresh", "suspend", "access")

    @field_validator("sources", mode="wrap")
    @classmethod
    def _unique_names(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> list[Source]:
        # Wrapping (not "after") so duplicates are reported even when some source is invalid too.
        errors = _duplicate_source_names(value)
        try:
            sources: list[Source] = handler(value)
        except ValidationError as invalid:
            errors = [*errors, *(_reraisable(error) for error in invalid.errors())]
        if errors:  # a ValidationError raised here keeps each error's own location, under spec.sources
            raise ValidationError.from_exception_data(cls.__name__, errors)
        return sources


def _duplicate_source_names(sources: Any) -> list[InitErrorDetails]:
    """An error at spec.sources[i].name for each source reusing an earlier source's name."""
    first: dict[str, int] = {}
    errors: list[InitErrorDetails] = []
    for index, source in enumerate(sources if isinstance(sources, list) else []):
        name = source.name if isinstance(source, Source) else None
        if isinstance(source, dict):
            name = source.get("name")
        if not isinstance(name, str):
            continue
        if name in first:
            message = f"duplicate source name {name!r} (also spec.sources[{first[name]}])"
            errors.append(
                InitErrorDetails(
                    type="value_error", loc=(index, "name"), input=name, ctx={"error": ValueError(message)}
                )
            )
        first.setdefault(name, index)
    return errors


def _reraisable(error: ErrorDetails) -> InitErrorDetails:
    """An error caught from pydantic, in the form ValidationError.from_exception_data takes back."""
    details = InitErrorDetails(type=error["type"], loc=error["loc"], input=error["input"])
    if "ctx" in error:
        details["ctx"] = error["ctx"]
    return details


SERVER_METADATA: Final = {
    "generation": "integer",
    "creationTimestamp": "string",
    "uid": "string",
    "resourceVersion": "string",
}
"""Metadata kbctl writes in `get -o yaml` and ignores on input, so its output can be applied again (JSON types)."""


def _without_derived(data: dict[str, Any]) -> dict[str, Any]:
    """A dumped manifest as a user may write it: `embedding.model`, which to_manifest fills in beside a `profile`
    (a user may not write both), dropped."""
    embedding = data.get("spec", {}).get("embedding", {})
    if isinstance(embedding, dict) and embedding.get("profile") is not None and "model" in embedding:
        spec = {**data["spec"], "embedding": {k: v for k, v in embedding.items() if k != "model"}}
        return {**data, "spec": spec}
    return data


APPLIED_FROM_MAX: Final = 4096  # characters of a status.appliedFrom hint (PATH_MAX); a longer one is ignored


def _hint(folder: object) -> Path | None:
    """An absolute folder of at most APPLIED_FROM_MAX characters without control characters, or None."""
    if not isinstance(folder, str) or not folder or len(folder) > APPLIED_FROM_MAX:
        return None
    if any(ord(c) < 32 or ord(c) == 127 for c in folder) or not Path(folder).is_absolute():
        return None
    return Path(folder)


class KnowledgeBase(_Model):
    """A retrieval knowledge base, declared like a Kubernetes object."""

    api_version: ApiVersion
    kind: Kind
    metadata: Metadata
    spec: Spec
    _base_dir: Path | None = PrivateAttr(default=None)
    _applied_from: Path | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _ignore_server_fields(cls, data: Any) -> Any:
        """`status` and server-written metadata (what `kbctl get -o yaml` prints besides the manifest) are read
        and dropped, as kubectl does, so that output can be applied again unchanged."""
        if not isinstance(data, dict) or not ("status" in data or isinstance(data.get("metadata"), dict)):
            return data
        data = {k: v for k, v in data.items() if k != "status"}
        if isinstance(data.get("metadata"), dict):
            data["metadata"] = {k: v for k, v in data["metadata"].items() if k not in SERVER_METADATA}
        return data

    @property
    def name(self) -> str:
        """The knowledge base's name (metadata.name)."""
        return self.metadata.name

    @property
    def base_dir(self) -> Path | None:
        """The folder `path:` sources are relative to (the manifest file's; the working directory for stdin), or
        None for a knowledge base read back from the store, whose files are not here."""
        return self._base_dir

    def __eq__(self, other: object) -> bool:
        # Where a manifest was read from is not part of what it says: equal manifests are equal wherever they are.
        if not isinstance(other, KnowledgeBase):
            return NotImplemented
        return self.__dict__ == other.__dict__

    @property
    def applied_from(self) -> Path | None:
        """The folder that `status.appliedFrom` of `kbctl get -o yaml` output names: where the store last read this
        knowledge base's `path:` sources. Only a hint: kbctl.engine.located honours it when the store recorded that
        very folder and the path sources are the ones it read there; a manifest cannot name a folder of its own."""
        return self._applied_from

    def located(self, base_dir: str | Path, *, applied_from: str | None = None) -> KnowledgeBase:
        """This knowledge base with its `path:` sources relative to `base_dir` (not part of the manifest), and the
        `status.appliedFrom` hint its document carried (an absolute folder; anything else is ignored)."""
        copy = self.model_copy()
        copy._base_dir = Path(base_dir).resolve()
        copy._applied_from = _hint(applied_from)
        return copy

    @property
    def reads_files(self) -> bool:
        """Whether a source reads files (`path:`), which only a process that has them can do."""
        return any(s.path is not None for s in self.spec.sources)

    def to_manifest(self) -> dict[str, Any]:
        """The full manifest as plain JSON-able data, camelCase keys, defaults filled in."""
        return self.model_dump(by_alias=True, mode="json")

    def applicable_manifest(self) -> dict[str, Any]:
        """The full manifest as a user could apply it again: defaults filled in, unset (None) fields left out
        (no field's None differs from its default) and nothing derived."""
        return _without_derived(self.model_dump(by_alias=True, mode="json", exclude_none=True))

    @classmethod
    def from_manifest(cls, data: dict[str, Any]) -> KnowledgeBase:
        """Read back what `to_manifest` wrote (a stored manifest): the inverse of to_manifest.

        to_manifest fills in every default, including `embedding.model` beside a `profile`, which a
        user may not write; it is dropped here so the stored manifest validates as what was applied.
        """
        return read_stored(cls, _without_derived(data), "a stored manifest")

    def spec_hash(self) -> str:
        """SHA-256 (hex) of the spec as canonical JSON, defaults filled in: equal specs hash equal."""
        spec = self.spec.model_dump(by_alias=True, mode="json")
        canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------- JSON schema


def json_schema() -> dict[str, Any]:
    """The JSON schema of a KnowledgeBase manifest (for editors and CI), deterministic."""
    schema = KnowledgeBase.model_json_schema(by_alias=True)
    schema.pop("title", None)
    # What `kbctl get -o yaml` adds and apply ignores (see KnowledgeBase._ignore_server_fields).
    schema["properties"]["status"] = {"type": "object", "description": "Written by kbctl; ignored on apply."}
    written = {"description": "Written by kbctl; ignored on apply."}
    schema["$defs"]["Metadata"]["properties"].update({k: {"type": t, **written} for k, t in SERVER_METADATA.items()})
    return {"$schema": JSON_SCHEMA_DIALECT, "title": f"{KIND} ({API_VERSION})", **schema}


def _schema_text() -> str:
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"


def write_schema(path: str | Path) -> None:
    """Write json_schema() to path as indented JSON with a trailing newline."""
    Path(path).write_text(_schema_text(), encoding="utf-8")
