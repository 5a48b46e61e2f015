"""The rows the store reads and writes, as frozen dataclasses (psycopg's class_row builds the ones it reads)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

from kbctl.defaults import LANGUAGE

__all__ = [
    "LIVE_STATE",
    "SOURCE_STATES",
    "ChunkHit",
    "ChunkRow",
    "KnowledgeBaseRow",
    "LiveSourceRow",
    "NewRevision",
    "QueryTarget",
    "SourceRow",
    "SourceState",
    "SummaryRow",
    "VersionRow",
    "VersionSourceRow",
    "WrittenRevision",
    "live_join",
    "shown_row",
    "source_state",
]

SourceState = Literal["ready", "stale", "failed"]
SOURCE_STATES: tuple[SourceState, ...] = ("ready", "stale", "failed")


def source_state(*, read: bool, serving: bool) -> SourceState:
    """The one rule for a source's state, wherever it is decided (plan, ingest, publish) and stored (the live
    kb_source_status and each version's kb_version_sources, whose CHECK holds the same rule):

        ready   its last read (fetch, listing, extraction, ingestion) succeeded
        stale   its last read failed, and the content of an earlier good read still serves
        failed  its last read failed, and nothing of it serves
    """
    if read:
        return "ready"
    return "stale" if serving else "failed"


# The live row wins over the version's row: a source's state (and message) is that of its live row (the last
# read) when it has one, else that of the row the serving version holds. Said here once, for SQL (`LIVE_STATE`
# over `live_join`, `vs` a kb_version_sources row) and for Python (`shown_row`); every query and report uses them.
LIVE_STATE: Final = "coalesce(ss.state, vs.state)"


def live_join(kb: str) -> str:
    """SQL: the live row `ss` of the version's source `vs`, if any, for the knowledge base whose id is `kb`."""
    return f" LEFT JOIN kb_source_status ss ON ss.kb_id = {kb} AND ss.source_name = vs.source_name"


def shown_row(served: VersionSourceRow | None, live: LiveSourceRow | None) -> SourceRow | None:
    """The row whose state and message a source shows: its live row when it has one, else the serving version's
    (None: neither; the SQL of the same rule is LIVE_STATE)."""
    return live if live is not None else served


@dataclass(frozen=True)
class KnowledgeBaseRow:
    """A stored knowledge base and the number of the version that serves queries.

    Its manifests (the last applied, the desired one waiting) are not part of the row: with inline sources they
    hold all the text, so they are read only where needed (`Database.last_manifest`, `Database.desired_manifest`).
    """

    id: int
    name: str
    labels: dict[str, str]
    current_version: int | None
    created_at: datetime
    updated_at: datetime
    generation: int
    observed_generation: int
    conditions: list[dict[str, Any]]
    pending: bool  # a desired manifest waits to be reconciled
    applyset: str | None  # the apply set it belongs to (`apply --applyset`), which alone may prune it


@dataclass(frozen=True)
class SummaryRow(KnowledgeBaseRow):
    """A knowledge base with what `kbctl get` lists, counted in SQL (no manifest leaves the server)."""

    description: str  # spec.description of the serving version (else of the last applied manifest)
    model: str  # the serving version's embedding model (else the last applied manifest's)
    chunks: int
    sources: int  # served units (a document of a path, git or crawl source is one)
    ready_sources: int


@dataclass(frozen=True)
class VersionRow:
    """One immutable version of a knowledge base."""

    id: int
    number: int
    manifest: dict[str, Any]
    manifest_sha256: str
    model: str
    chunk_count: int
    embedded_count: int
    reused_count: int
    created_at: datetime
    background_similarity: float | None = None  # calibrated at publish (kbctl.embedding.background); None: before
    background_keyword: float | None = None  # likewise, the keyword share's; None: before, or a restricted version
    restricted_chunks: int = 0  # chunks behind an access rule (kbctl.store.access)
    background_parts: bool = True  # what its background similarity is made of is kept (kbctl.store.access)

    @property
    def calibrated(self) -> bool:
        """Whether the version has the calibration a publish now gives it: a background similarity and, restricting
        no source, a background keyword share (one published before migration 22 or 28 lacks them); restricting
        some, the parts its callers' lines are made of (which migration 24 could not always compute)."""
        if self.background_similarity is None:
            return False
        return self.background_parts if self.restricted_chunks > 0 else self.background_keyword is not None


@dataclass(frozen=True)
class QueryTarget:
    """What a query reads of a knowledge base: its conditions, and its serving version with the retrieval spec."""

    kb_id: int
    labels: dict[str, str]
    conditions: list[dict[str, Any]]
    version_id: int | None
    number: int | None
    model: str | None
    chunk_count: int | None
    retrieval: dict[str, Any] | None  # the version's spec.retrieval, as stored
    restricted_chunks: int | None = None  # chunks behind an access rule (kbctl.store.access); 0: none
    background_similarity: float | None = None  # calibrated at publish (kbctl.embedding.background); None: before
    background_keyword: float | None = None  # likewise, the keyword share's; None: before, or a restricted version


@dataclass(frozen=True, kw_only=True)
class SourceRow:
    """One source of a knowledge base as the store keeps it: what its two rows share. A version's row
    (`VersionSourceRow`, kb_version_sources) says what the version serves; the live row (`LiveSourceRow`,
    kb_source_status) says how the source's last read went. The state is decided by one rule, `source_state`, in
    both, and where both exist the live one is shown (`shown_row`)."""

    source_name: str
    state: SourceState
    message: str | None = None
    origin: str | None = None


@dataclass(frozen=True, kw_only=True)
class VersionSourceRow(SourceRow):
    """A source in a version (kb_version_sources, read with the revision it serves): its place, spec hash, state
    when the version was published and the revision (content) it serves; a version being published names a new
    revision by `revision_key` instead of `revision_id`."""

    position: int = 0
    source_sha256: str = ""
    revision_id: int | None = None
    revision_key: str | None = None  # a new revision published with the version (written, never read back)
    embedded_count: int = 0
    reused_count: int = 0
    title: str | None = None
    chunk_count: int = 0
    content_sha256: str | None = None
    revision_created_at: datetime | None = None
    readers: Sequence[str] | None = None  # who may read it (kbctl.store.access): groups, any one; None: any caller
    reader_labels: Sequence[str] | None = None  # and `key=value` claims, all of them; None: no claim needed

    @property
    def restricted(self) -> bool:
        """Whether an access rule stands before this row's documents."""
        return self.readers is not None or self.reader_labels is not None

    @property
    def serves(self) -> bool:
        """A version row pointing at content (a stored revision, or a new one published with it)."""
        return self.revision_id is not None or self.revision_key is not None


@dataclass(frozen=True, kw_only=True)
class LiveSourceRow(SourceRow):
    """A source's live status (kb_source_status): its state now, with the HTTP validators of what it serves and
    when it was fetched and checked."""

    etag: str | None = None
    last_modified: str | None = None
    fetched_at: datetime | None = None
    checked_at: datetime | None = None


@dataclass(frozen=True)
class ChunkRow:
    """A chunk to store: its text, place in the source, tokens and the cached vector it points at."""

    ordinal: int
    content: str
    char_start: int
    char_end: int
    heading_path: tuple[str, ...]
    token_count: int
    embedding_id: int


@dataclass(frozen=True)
class NewRevision:
    """A source's new content chunked and embedded, ready to be published: what ingest gives for a source."""

    source_name: str
    revision_key: str
    content_sha256: str
    origin: str
    title: str | None
    char_count: int
    chunks: Sequence[ChunkRow]
    language: str = LANGUAGE  # text search configuration of the chunks' tsvector
    embedded: int = 0  # texts embedded for it in the run that made it (the rest were in the vector cache)
    truncated: int = 0  # chunks longer than the model reads: their ends reach no vector (reported, not stored)

    @property
    def chunk_count(self) -> int:
        return len(self.chunks)


@dataclass(frozen=True)
class WrittenRevision:
    """A source's new revision already stored, ahead of the version that will serve it (a slice of a large ingest,
    kbctl.engine.ingest): no version points at it yet, so nothing serves it, and an apply that fails before it
    publishes leaves it for the next one to reuse by its key."""

    source_name: str
    revision_key: str
    revision_id: int
    chunk_count: int
    embedded: int = 0
    truncated: int = 0


@dataclass(frozen=True)
class ChunkHit:
    """A chunk found by a search, with its cosine similarity to the question (and BM25 score, by keyword)."""

    chunk_id: int
    source_name: str
    origin: str
    title: str | None
    ordinal: int
    char_start: int
    char_end: int
    heading_path: list[str]
    content: str
    token_count: int
    score: float
    vector: Any  # the chunk's embedding (numpy float32), for near-duplicate checks
    keyword_score: float | None = None  # its BM25 score, when a keyword search found it
