"""What the engine reports: per source one type per command (apply and refresh, describe, diff); per knowledge base
and for the whole run, what apply and refresh did (the public results)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from kbctl.store.rows import SourceState, VersionSourceRow

__all__ = [
    "APPLIED",
    "DESCRIBED",
    "DIFFED",
    "AppliedSource",
    "ApplyReport",
    "DescribedSource",
    "DiffedSource",
    "KnowledgeBaseResult",
    "PendingResult",
    "RecordedSync",
    "SourceChange",
    "SourceReport",
    "SourceStatus",
    "reported",
]


SourceChange = Literal["added", "changed", "removed", "unchanged"]
TRUNCATED: Final = "Chunks longer than the embedding model reads: their ends reach no vector."


class SourceReport(BaseModel):
    """One source (or one document SOURCE/ID of a path, git or crawl source) in a report of kbctl: each command
    has its own type, with only the fields it shows, in the order it shows them. `state` (where there is one) is
    `ready`, `stale` (the last read failed; the last good content still serves, see message) or `failed`
    (nothing serves); `failed` says "not ready" (stale or failed)."""

    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)

    name: str


class AppliedSource(SourceReport):
    """What apply or refresh did with one source (`KnowledgeBaseResult.sources`)."""

    state: SourceState = "ready"
    fetched: bool = False  # fetched this time
    ingested: bool = False  # new content chunked and embedded
    chunks: int = 0
    embedded: int = 0
    reused: int = 0
    message: str | None = None
    truncated: int | None = Field(default=0, description=TRUNCATED)

    @property
    def failed(self) -> bool:
        """Not ready: the source could not be read this time (stale ones still serve their last good content)."""
        return self.state != "ready"


class DescribedSource(SourceReport):
    """One source as `describe` shows it (`KnowledgeBaseDetail.source_status`): what the serving version holds,
    with the live state of its last read."""

    kind: str | None = None  # text, url, path, git or crawl (a document SOURCE/ID has its source's)
    state: SourceState = "ready"
    message: str | None = None
    origin: str | None = None
    title: str | None = None
    chunks: int = 0
    embedded: int = 0
    reused: int = 0
    content_sha256: str | None = None
    updated_at: datetime | None = None  # when the content it serves was published
    fetched_at: datetime | None = None
    checked_at: datetime | None = None

    @property
    def failed(self) -> bool:
        """Not ready: the last read failed (stale ones still serve their last good content)."""
        return self.state != "ready"


class DiffedSource(SourceReport):
    """What apply would do to one source (`KnowledgeBaseDiff.sources`).

    `fetch` is True for a URL source that apply would fetch (new, its spec changed, or it never had content); diff
    never fetches, so the chunk and token counts of such a source are None (unknown). Chunks are compared by the
    sha256 of the text embedded for them: `chunks_added` are chunks of the new content absent from the content
    served now, `chunks_removed` the reverse. `tokens_to_embed` counts (with the model's tokenizer, as ingest does)
    the text of the new chunks whose vectors the cache lacks: an estimate of the embedding bill.
    """

    kind: str | None = None  # text, url, path, git or crawl (a document SOURCE/ID has its source's)
    change: SourceChange | None = None
    fetch: bool = False
    chunks_added: int | None = 0
    chunks_removed: int | None = 0
    tokens_to_embed: int | None = 0
    truncated: int | None = Field(default=0, description=TRUNCATED)

    @property
    def differs(self) -> bool:
        """Apply would change this source or has to fetch it to find out."""
        return self.change not in (None, "unchanged") or self.fetch


SourceStatus = DescribedSource
"""Deprecated: the name of the one report type of a source before each command had its own; `describe`'s."""

APPLIED: Final = tuple(AppliedSource.model_fields)
"""The fields of a source in what apply and refresh report (`KnowledgeBaseResult.sources`), in that order."""
DESCRIBED: Final = tuple(DescribedSource.model_fields)
"""The fields of a source in `describe` (`KnowledgeBaseDetail.source_status`), in that order."""
DIFFED: Final = tuple(DiffedSource.model_fields)
"""The fields of a source in `diff` (`KnowledgeBaseDiff.sources`), in that order."""


def reported(row: VersionSourceRow, *, ingested: bool = False) -> AppliedSource:
    """What apply reports for a source from its stored row (a version a controller published, a settled file's
    source): its state as stored, by the one rule. `fetched` is not recorded per version; no line depends on it."""
    return AppliedSource(
        name=row.source_name,
        state=row.state,
        ingested=ingested,
        chunks=row.chunk_count,
        embedded=row.embedded_count,
        reused=row.reused_count,
        message=row.message,
    )


class KnowledgeBaseResult(BaseModel):
    """What apply or refresh did with one knowledge base."""

    model_config = ConfigDict(frozen=True)

    name: str
    action: Literal["created", "configured", "refreshed", "unchanged", "failed"]
    version: int | None
    sources: list[AppliedSource]
    message: str | None = None
    removed: list[str] = Field(
        default_factory=list,
        description="Documents (SOURCE/ID) of a path, git or crawl source that this version no longer serves: "
        "gone from the folder, the repository or the site.",
    )

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
