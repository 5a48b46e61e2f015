"""The KnowledgeBase manifest as pydantic models: the single source of truth of fields and the JSON Schema, their
defaults read from kbctl.defaults (with why each has its value)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import (
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    Strict,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import ErrorDetails, InitErrorDetails

from kbctl.defaults import DEFAULT_MODEL
from kbctl.manifest.base import (
    API_VERSION,
    JSON_SCHEMA_DIALECT,
    ApiVersion,
    Metadata,
    _Model,
    _StrictInt,
    _without_unset,
    read_stored,
)
from kbctl.manifest.settings import (
    MAX_INSTRUCTIONS_CHARS,
    Answer,
    Chunking,
    Embedding,
    Fusion,
    Limits,
    Refresh,
    Rerank,
    Retrieval,
)
from kbctl.manifest.sources import Access, Crawl, GitRepository, Source, SourceKind

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
    "Fusion",
    "GitRepository",
    "KnowledgeBase",
    "Limits",
    "Metadata",
    "Refresh",
    "Rerank",
    "Retrieval",
    "Source",
    "SourceKind",
    "Spec",
    "json_schema",
    "read_stored",
    "write_schema",
]

Kind = Literal["KnowledgeBase"]
KIND: Final[Kind] = "KnowledgeBase"


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
