"""What apply and refresh report: per source, per knowledge base, and for the whole run (the public results)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ApplyReport", "KnowledgeBaseResult", "SourceResult"]


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

    @property
    def failed(self) -> bool:
        """True when the knowledge base or any of its sources failed."""
        return self.action == "failed" or any(s.failed for s in self.sources)


class ApplyReport(BaseModel):
    """The outcome of one apply or refresh: one result per knowledge base, in order."""

    model_config = ConfigDict(frozen=True)

    results: list[KnowledgeBaseResult]

    @property
    def failed(self) -> bool:
        """True when anything failed (the CLI exits 1)."""
        return any(r.failed for r in self.results)

    @property
    def embedded(self) -> int:
        """Texts sent to an embedding model."""
        return sum(s.embedded for r in self.results for s in r.sources)

    @property
    def fetched(self) -> int:
        """URL sources fetched (including 304 Not Modified answers)."""
        return sum(s.fetched for r in self.results for s in r.sources)
