"""What apply and refresh report: per source, per knowledge base, and for the whole run (the public results)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel

from kbctl.store.rows import SourceRow, SourceState

__all__ = [
    "APPLIED",
    "DESCRIBED",
    "DIFFED",
    "ApplyReport",
    "KnowledgeBaseResult",
    "PendingResult",
    "RecordedSync",
    "SourceChange",
    "SourceStatus",
    "reported",
]


SourceChange = Literal["added", "changed", "removed", "unchanged"]
APPLIED: Final = ("name", "state", "fetched", "ingested", "chunks", "embedded", "reused", "message", "truncated")
"""The fields of a source in what apply and refresh report (`KnowledgeBaseResult.sources`), in that order."""
DESCRIBED: Final = (
    "name",
    "kind",
    "state",
    "message",
    "origin",
    "title",
    "chunks",
    "embedded",
    "reused",
    "content_sha256",
    "updated_at",
    "fetched_at",
    "checked_at",
)
"""The fields of a source in `describe` (`KnowledgeBaseDetail.source_status`), in that order."""
DIFFED: Final = ("name", "kind", "change", "fetch", "chunks_added", "chunks_removed", "tokens_to_embed", "truncated")
"""The fields of a source in `diff` (`KnowledgeBaseDiff.sources`), in that order."""


class SourceStatus(BaseModel):
    """One source as kbctl reports it: what apply or refresh did with it, what serves now (`describe`), or what
    apply would do (`diff`). Each report fills its own fields and shows only those (`APPLIED`, `DESCRIBED`,
    `DIFFED`: `shown_as`), so each keeps its JSON shape; the others keep their defaults.

    state is `ready`, `stale` (the last read failed; the last good content still serves, see message) or `failed`
    (nothing serves). In a diff, `fetch` is True for a URL source that apply would fetch (new, its spec changed, or
    it never had content); diff never fetches, so the chunk and token counts of such a source are None (unknown).
    Chunks are compared by the sha256 of the text embedded for them: `chunks_added` are chunks of the new content
    absent from the content served now, `chunks_removed` the reverse. `tokens_to_embed` counts (with the model's
    tokenizer, as ingest does) the text of the new chunks whose vectors the cache lacks: an estimate of the
    embedding bill.
    """

    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)

    name: str
    kind: str | None = None  # text, url, path, git or crawl (a document SOURCE/ID has its source's)
    state: SourceState = "ready"
    message: str | None = None
    origin: str | None = None
    title: str | None = None
    fetched: bool = False  # apply/refresh: fetched this time
    ingested: bool = False  # apply/refresh: new content chunked and embedded
    chunks: int = 0
    embedded: int = 0
    reused: int = 0
    truncated: int | None = Field(
        default=0, description="Chunks longer than the embedding model reads: their ends reach no vector."
    )
    content_sha256: str | None = None
    updated_at: datetime | None = None  # when the content it serves was published
    fetched_at: datetime | None = None
    checked_at: datetime | None = None
    change: SourceChange | None = None  # diff: what apply would do to it
    fetch: bool = False  # diff: apply would fetch it
    chunks_added: int | None = 0
    chunks_removed: int | None = 0
    tokens_to_embed: int | None = 0
    _shown: tuple[str, ...] | None = PrivateAttr(default=None)

    def shown_as(self, fields: tuple[str, ...]) -> SourceStatus:
        """This source as a report shows it: only `fields`, in that order (`APPLIED`, `DESCRIBED`, `DIFFED`)."""
        self._shown = fields
        return self

    @model_serializer(mode="wrap")
    def _only_shown(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        data = handler(self)
        if self._shown is None or not isinstance(data, dict):
            return data
        keys = [to_camel(f) if info.by_alias else f for f in self._shown]
        return {key: data[key] for key in keys if key in data}

    @property
    def failed(self) -> bool:
        """The source could not be read this time (stale ones still serve their last good content)."""
        return self.state != "ready"

    @property
    def differs(self) -> bool:
        """In a diff: apply would change this source or has to fetch it to find out."""
        return self.change not in (None, "unchanged") or self.fetch


def reported(row: SourceRow, *, ingested: bool = False) -> SourceStatus:
    """What apply reports for a source from its stored row (a version a controller published, a settled file's
    source): its state as stored, by the one rule. `fetched` is not recorded per version; no line depends on it."""
    return SourceStatus(
        name=row.source_name,
        state=row.state,
        ingested=ingested,
        chunks=row.chunk_count,
        embedded=row.embedded_count,
        reused=row.reused_count,
        message=row.message,
    ).shown_as(APPLIED)


class KnowledgeBaseResult(BaseModel):
    """What apply or refresh did with one knowledge base."""

    model_config = ConfigDict(frozen=True)

    name: str
    action: Literal["created", "configured", "refreshed", "unchanged", "failed"]
    version: int | None
    sources: list[SourceStatus]
    message: str | None = None
    removed: list[str] = Field(
        default_factory=list,
        description="Documents (SOURCE/ID) of a path, git or crawl source that this version no longer serves: "
        "gone from the folder, the repository or the site.",
    )

    @model_validator(mode="after")
    def _applied_fields(self) -> KnowledgeBaseResult:
        for source in self.sources:
            source.shown_as(APPLIED)
        return self

    @property
    def failed(self) -> bool:
        """True when the knowledge base or any of its sources failed."""
        return self.action == "failed" or any(s.failed for s in self.sources)


@dataclass(frozen=True)
class PendingResult:
    """What an apply that does not wait recorded for one knowledge base, for a controller to reconcile."""

    name: str
    action: str  # created | configured | unchanged
    version: int | None  # the version that will be published (pending) or that serves (unchanged)
    generation: int
    pending: bool


class RecordedSync(BaseModel):
    """A Sync manifest `apply` recorded for the controllers (kbctl.engine.sync)."""

    model_config = ConfigDict(frozen=True)

    name: str
    action: Literal["created", "configured", "unchanged"]


class ApplyReport(BaseModel):
    """The outcome of one apply or refresh: one result per knowledge base reconciled, in manifest order; what an
    apply that does not wait left to a controller; what a prune deleted."""

    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)

    results: list[KnowledgeBaseResult]
    recorded: list[PendingResult] = Field(
        default_factory=list, description="Left to a controller (apply without waiting), in manifest order."
    )
    pruned: list[str] = Field(default_factory=list, description="Knowledge bases a prune deleted, by name.")
    syncs: list[RecordedSync] = Field(default_factory=list, description="Sync manifests recorded, in file order.")
    failed_syncs: list[str] = Field(
        default_factory=list, description="Syncs whose pass (a controller's) failed to fetch, to validate or to apply."
    )
    warnings: list[str] = Field(
        default_factory=list,
        exclude=True,
        description="What a forced change by hand of knowledge bases a Sync manages warns of (`apply --force`).",
    )

    def exit_code(self, *, changes: bool = False) -> int:
        """The command's exit code: 1 when anything failed; with `changes` (`--exit-code`), 2 when something was
        created, configured, refreshed, recorded for a controller or pruned, else 0."""
        if self.failed:
            return 1
        changed = (
            bool(self.pruned)
            or any(r.action != "unchanged" for r in self.results)
            or any(s.action != "unchanged" for s in self.syncs)
            or any(p.pending for p in self.recorded)
        )
        return 2 if changes and changed else 0

    @property
    def failed(self) -> bool:
        """True when anything failed (the CLI exits 1)."""
        return bool(self.failed_syncs) or any(r.failed for r in self.results)

    @property
    def embedded(self) -> int:
        """Texts sent to an embedding model."""
        return sum(s.embedded for r in self.results for s in r.sources)

    @property
    def fetched(self) -> int:
        """URL sources fetched (including 304 Not Modified answers)."""
        return sum(s.fetched for r in self.results for s in r.sources)
