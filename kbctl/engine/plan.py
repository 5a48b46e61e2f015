"""Plan one knowledge base: for each source, decide from the store (and a fetch) what it will serve.

A source's plan ends in one of: reuse a stored revision (nothing to chunk or embed), ingest a new
document, or fail (keeping the last good revision while the source's spec is unchanged: "stale").
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from kbctl.chunking import Chunk, chunk_document
from kbctl.errors import SourceError
from kbctl.manifest import KnowledgeBase, Source
from kbctl.sources import Document, read_inline
from kbctl.sources.url import FetchPolicy, FetchRequest, FetchResult, Validators, fetch_urls
from kbctl.store.database import ChunkRow, Database, NewRevision, SourceStatusRow, VersionSourceRow

__all__ = ["CHUNKER_VERSION", "SourcePlan", "apply_would_fetch", "plan_sources", "sha256_json", "text_sha256"]

# Bump when the chunker's output for the same input changes, so stored revisions are rebuilt.
CHUNKER_VERSION = 1

FetchMode = Literal["apply", "refresh"]


def text_sha256(text: str) -> bytes:
    """The vector cache key of a text (with the model id): sha256 of exactly the text sent to the model."""
    return hashlib.sha256(text.encode()).digest()


def sha256_json(data: object) -> str:
    """sha256 of the canonical JSON of `data` (sorted keys, no spaces)."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass
class SourcePlan:
    """What one source will serve in the next version, and the work needed to get there."""

    source: Source
    source_sha256: str
    revision: int | None = None  # a stored revision to serve as is
    chunk_count: int = 0
    document: Document | None = None  # new content to chunk and embed
    revision_key: str | None = None
    message: str | None = None  # why the source failed
    fetched: bool = False
    validators: Validators = field(default_factory=Validators)
    fetched_at: datetime | None = None
    origin: str | None = None
    chunks: list[Chunk] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    hashes: list[bytes] = field(default_factory=list)
    embedded: int = 0
    language: str = "english"  # the KB's text search configuration, for the chunks' tsvector
    untouched_status: SourceStatusRow | None = None  # a URL source not fetched this run keeps its live status

    @property
    def failed(self) -> bool:
        """The source could not be read (it may still serve its last good content)."""
        return self.message is not None

    @property
    def ingest(self) -> bool:
        """New content must be chunked and embedded."""
        return self.document is not None and not self.failed

    @property
    def serves(self) -> bool:
        """The next version serves some content for this source."""
        return self.ingest or self.revision is not None

    @property
    def state(self) -> Literal["ready", "stale", "failed"]:
        """ready; stale when failing but serving its last good content; failed when serving nothing."""
        if not self.failed:
            return "ready"
        return "stale" if self.revision is not None else "failed"

    def split(self, kb: KnowledgeBase) -> list[Chunk]:
        """The chunks of this plan's new document under the knowledge base's chunking settings."""
        assert self.document is not None
        return chunk_document(
            self.document.text,
            max_chars=kb.spec.chunking.max_chars,
            overlap_chars=kb.spec.chunking.overlap_chars,
            markdown=self.source.url is not None or self.source.format == "markdown",
        )

    def new_revision(self, ids: dict[bytes, int]) -> NewRevision:
        """The chunked source as a revision to publish, its chunks pointing at their cached vectors."""
        assert self.document is not None and self.revision_key is not None
        return NewRevision(
            source_name=self.source.name,
            revision_key=self.revision_key,
            content_sha256=self.document.content_sha256,
            origin=self.document.origin,
            title=self.document.title,
            char_count=len(self.document.text),
            language=self.language,
            chunks=[
                ChunkRow(c.ordinal, c.text, c.start, c.end, c.heading_path, n, ids[h])
                for c, n, h in zip(self.chunks, self.tokens, self.hashes, strict=True)
            ],
        )

    def status(self, now: datetime) -> SourceStatusRow:
        """The live status row this plan leaves behind (a URL source not fetched this time keeps its own)."""
        if self.untouched_status is not None:
            return self.untouched_status
        return SourceStatusRow(
            source_name=self.source.name,
            state=self.state,
            message=self.message,
            origin=self.origin,
            etag=self.validators.etag,
            last_modified=self.validators.last_modified,
            fetched_at=self.fetched_at,
            checked_at=now,
        )


def _revision_key(kb: KnowledgeBase, source: Source, doc: Document, model_id: str) -> str:
    c = kb.spec.chunking
    return sha256_json(
        {
            "content": doc.content_sha256,
            "format": "markdown" if source.url else source.format,
            "maxChars": c.max_chars,
            "overlapChars": c.overlap_chars,
            "model": model_id,
            "language": kb.spec.retrieval.language,
            "chunker": CHUNKER_VERSION,
        }
    )


def _use_document(
    db: Database, kb_id: int | None, kb: KnowledgeBase, plan: SourcePlan, doc: Document, model_id: str
) -> None:
    plan.revision_key = _revision_key(kb, plan.source, doc, model_id)
    plan.origin = doc.origin
    stored = db.find_revision(kb_id, plan.source.name, plan.revision_key) if kb_id is not None else None
    if stored is not None:
        plan.revision, plan.chunk_count = stored
    else:
        plan.document = doc


def _keep_previous(plan: SourcePlan, prev: VersionSourceRow | None) -> bool:
    """Serve the previous version's content for this source, if its spec is unchanged and it had some."""
    if prev is None or prev.source_sha256 != plan.source_sha256 or prev.revision_id is None:
        return False
    plan.revision, plan.chunk_count = prev.revision_id, prev.chunk_count
    return True


def apply_would_fetch(plan: SourcePlan, prev: VersionSourceRow | None) -> bool:
    """apply fetches a URL source only when it is new, its spec changed, or it never had content."""
    if plan.source.url is None:
        return False
    return prev is None or prev.source_sha256 != plan.source_sha256 or prev.revision_id is None


def _wants_fetch(plan: SourcePlan, prev: VersionSourceRow | None, mode: FetchMode, only: Collection[str]) -> bool:
    if plan.source.url is None:
        return False
    if mode == "refresh":
        return not only or plan.source.name in only
    return apply_would_fetch(plan, prev)


def plan_sources(
    db: Database,
    kb: KnowledgeBase,
    kb_id: int | None,
    previous: dict[str, VersionSourceRow],
    statuses: dict[str, SourceStatusRow],
    *,
    mode: FetchMode = "apply",
    only: Collection[str] = (),
    model_id: str,
    policy: FetchPolicy | None = None,
    fetch: bool = True,
) -> list[SourcePlan]:
    """Plan every source of `kb` in manifest order, fetching the URL sources `mode` asks for.

    `model_id` is the id of the embedder the knowledge base uses (part of every revision key). With
    fetch=False nothing is fetched: every URL source keeps what the store serves (for diff).
    """
    plans = [
        SourcePlan(s, sha256_json(s.model_dump(by_alias=True, mode="json")), language=kb.spec.retrieval.language)
        for s in kb.spec.sources
    ]
    requests: list[FetchRequest] = []
    for plan in plans:
        prev, status = previous.get(plan.source.name), statuses.get(plan.source.name)
        if fetch and _wants_fetch(plan, prev, mode, only):
            # Validators only make sense when a 304 lets us keep content we still serve.
            keep = prev is not None and prev.source_sha256 == plan.source_sha256 and prev.revision_id is not None
            validators = Validators(status.etag, status.last_modified) if keep and status else None
            requests.append(FetchRequest(plan.source.name, str(plan.source.url), validators))
    fetched = fetch_urls(requests, policy or FetchPolicy.from_env()) if requests else {}
    now = datetime.now(UTC)
    for plan in plans:
        prev, status = previous.get(plan.source.name), statuses.get(plan.source.name)
        name = plan.source.name
        if plan.source.url is None:
            _use_document(db, kb_id, kb, plan, read_inline(plan.source), model_id)
        elif name not in fetched:  # not fetched this time: carry what the store has
            _keep_previous(plan, prev)
            plan.untouched_status = status
        else:
            _apply_fetch(db, kb_id, kb, plan, prev, status, fetched[name], now, model_id)
    return plans


def _apply_fetch(
    db: Database,
    kb_id: int | None,
    kb: KnowledgeBase,
    plan: SourcePlan,
    prev: VersionSourceRow | None,
    status: SourceStatusRow | None,
    outcome: FetchResult | SourceError,
    now: datetime,
    model_id: str,
) -> None:
    plan.fetched = True
    if isinstance(outcome, SourceError):
        plan.message = str(outcome)
        if _keep_previous(plan, prev) and status is not None:
            # Still serving the old content: keep the validators and fetch time that describe it.
            plan.validators = Validators(status.etag, status.last_modified)
            plan.fetched_at, plan.origin = status.fetched_at, status.origin
        return
    plan.validators, plan.fetched_at = outcome.validators, now
    if outcome.not_modified:
        _keep_previous(plan, prev)
        plan.origin = status.origin if status else outcome.final_url
        return
    assert outcome.document is not None
    _use_document(db, kb_id, kb, plan, outcome.document, model_id)


def changed_sources(plans: Sequence[SourcePlan], previous: dict[str, VersionSourceRow]) -> bool:
    """True when the next version would serve different content from the current one."""
    now = [(p.source.name, p.source_sha256, p.revision) for p in plans]
    before = [(s.source_name, s.source_sha256, s.revision_id) for s in previous.values()]
    return any(p.ingest for p in plans) or now != before
