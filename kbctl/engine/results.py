"""What apply and refresh report: per source, per knowledge base, and for the whole run (the public results)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ApplyReport", "KnowledgeBaseResult", "PendingResult", "RecordedSync", "SourceResult"]


class SourceResult(BaseModel):
    """What apply or refresh did with one source."""

    model_config = ConfigDict(frozen=True)

    name: str
    state: Literal["ready", "stale", "failed"]
    fetched: bool
    ingested: bool
    chunks: int
    embedded: int
    reused: int
    message: str | None = None
    truncated: int = Field(
        default=0, description="Chunks longer than the embedding model reads: their ends reach no vector."
    )

    @property
    def failed(self) -> bool:
        """The source could not be read this time (stale ones still serve their last good content)."""
        return self.state != "ready"


class KnowledgeBaseResult(BaseModel):
    """What apply or refresh did with one knowledge base."""

    model_config = ConfigDict(frozen=True)

    name: str
    action: Literal["created", "configured", "refreshed", "unchanged", "failed"]
    version: int | None
    sources: list[SourceResult]
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

    model_config = ConfigDict(frozen=True)

    results: list[KnowledgeBaseResult]
    recorded: list[PendingResult] = Field(
        default_factory=list, description="Left to a controller (apply without waiting), in manifest order."
    )
    pruned: list[str] = Field(default_factory=list, description="Knowledge bases a prune deleted, by name.")
    syncs: list[RecordedSync] = Field(default_factory=list, description="Sync manifests recorded, in file order.")
    failed_syncs: list[str] = Field(
        default_factory=list, description="Syncs whose pass (a controller's) failed to fetch, to validate or to apply."
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
