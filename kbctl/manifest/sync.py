"""The `Sync` manifest: a git repository, ref and folder whose KnowledgeBase manifests `kbctl controller` applies
by itself every `interval` (pull mode, as Flux does), as one apply set, pruning what left the folder.

    apiVersion: kbctl.dev/v1alpha1
    kind: Sync
    metadata: {name: knowledge}
    spec:
      url: https://git.example.com/org/knowledge.git
      ref: main
      path: kb
      interval: 5m
      prune: true
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import Field, Strict, field_validator

from kbctl.manifest._field_checks import check_relative_path, duration_seconds
from kbctl.manifest.base import API_VERSION, JSON_SCHEMA_DIALECT, ApiVersion, Metadata, _Model
from kbctl.manifest.sources import GitRef

__all__ = ["SYNC_APPLYSET_PREFIX", "SYNC_KIND", "Sync", "SyncSpec", "sync_json_schema", "write_sync_schema"]

SYNC_KIND: Final = "Sync"
SYNC_APPLYSET_PREFIX: Final = "sync-"  # a Sync's apply set is `sync-NAME`
SYNC_MIN_SECONDS: Final = 10.0
SYNC_MAX_SECONDS: Final = 31 * 86400.0


class SyncSpec(GitRef):
    """Where the manifests are (`url`, `ref` as a git source's), and how often and how they are applied."""

    path: str = Field(default=".", description="The folder of the manifests in the repository (read with subfolders).")
    interval: str = Field(default="5m", description="How often the controller fetches it: 10s to 31d.")
    prune: Annotated[bool, Strict()] = Field(
        default=True, description="Delete the knowledge bases this Sync applied that have left the folder."
    )
    suspend: Annotated[bool, Strict()] = Field(default=False, description="true: the controller leaves it alone.")

    @field_validator("path")
    @classmethod
    def _valid_path(cls, value: str) -> str:
        check_relative_path(value)
        if value.startswith("-") or "/-" in value or ".." in value.split("/") or "*" in value:
            raise ValueError("must be a folder of the repository: no '..', no '*', no part starting with '-'")
        return value

    @field_validator("interval")
    @classmethod
    def _valid_interval(cls, value: str) -> str:
        if not SYNC_MIN_SECONDS <= duration_seconds(value) <= SYNC_MAX_SECONDS:
            raise ValueError(f"must be between 10s and 31d, got {value!r}")
        return value

    @property
    def seconds(self) -> float:
        return duration_seconds(self.interval)


class Sync(_Model):
    """A git folder of manifests that `kbctl controller` keeps applied (pull mode)."""

    api_version: ApiVersion
    kind: Literal["Sync"]
    metadata: Metadata
    spec: SyncSpec

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def applyset(self) -> str:
        """The apply set its knowledge bases belong to (so its prune touches only what it applied)."""
        return f"{SYNC_APPLYSET_PREFIX}{self.name}"


# ---------------------------------------------------------------- JSON schema


def sync_json_schema() -> dict[str, Any]:
    """The JSON schema of a Sync manifest (for editors and CI), deterministic. Unlike a KnowledgeBase, a Sync reads
    no `status` or server-written metadata, so the schema is the model's as it is."""
    schema = Sync.model_json_schema(by_alias=True)
    schema.pop("title", None)
    return {"$schema": JSON_SCHEMA_DIALECT, "title": f"{SYNC_KIND} ({API_VERSION})", **schema}


def _sync_schema_text() -> str:
    return json.dumps(sync_json_schema(), indent=2, ensure_ascii=False) + "\n"


def write_sync_schema(path: str | Path) -> None:
    """Write sync_json_schema() to path as indented JSON with a trailing newline."""
    Path(path).write_text(_sync_schema_text(), encoding="utf-8")
