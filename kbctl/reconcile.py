"""The engine: plan each KnowledgeBase against the store, ingest what changed, publish a new version.

plan (desired vs stored) → read sources → chunk → hash → embed only what the cache lacks → publish
the version in one transaction. A source whose content, chunking and model are unchanged reuses its
stored revision as is (no chunking, no embedding, no copying).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel

from kbctl.chunking import Chunk, chunk_document
from kbctl.embedding import Embedder
from kbctl.errors import KbctlError, SourceError
from kbctl.manifest import KnowledgeBase, Source
from kbctl.reporting import NullReporter, Reporter
from kbctl.sources import Document, read_source
from kbctl.store.database import ChunkRow, Database, NewRevision, SourceEntry, VersionSourceRow

__all__ = ["ApplyReport", "KnowledgeBaseResult", "SourceResult", "apply_knowledge_bases"]

# Bump when the chunker's output for the same input changes, so stored revisions are rebuilt.
CHUNKER_VERSION = 1
EMBED_BATCH = 64


class SourceResult(BaseModel):
    """What apply did with one source."""

    name: str
    state: Literal["ready", "failed"]
    ingested: bool
    chunks: int
    embedded: int
    reused: int
    message: str | None = None


class KnowledgeBaseResult(BaseModel):
    """What apply did with one knowledge base."""

    name: str
    action: Literal["created", "configured", "unchanged", "failed"]
    version: int | None
    sources: list[SourceResult]
    message: str | None = None

    @property
    def failed(self) -> bool:
        """True when the knowledge base or any of its sources failed."""
        return self.action == "failed" or any(s.state == "failed" for s in self.sources)


class ApplyReport(BaseModel):
    """The outcome of one apply: one result per knowledge base, in manifest order."""

    results: list[KnowledgeBaseResult]

    @property
    def failed(self) -> bool:
        """True when anything failed (the CLI exits 1)."""
        return any(r.failed for r in self.results)

    @property
    def embedded(self) -> int:
        """Texts sent to an embedding model in this apply."""
        return sum(s.embedded for r in self.results for s in r.sources)


def _sha256_json(data: object) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass
class _SourcePlan:
    source: Source
    source_sha256: str
    revision: int | None = None
    chunk_count: int = 0
    document: Document | None = None
    revision_key: str | None = None
    message: str | None = None
    chunks: list[Chunk] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    hashes: list[bytes] = field(default_factory=list)
    embedded: int = 0

    @property
    def failed(self) -> bool:
        return self.message is not None

    @property
    def ingest(self) -> bool:
        return self.document is not None and not self.failed

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
            chunks=[
                ChunkRow(c.ordinal, c.text, c.start, c.end, c.heading_path, n, ids[h])
                for c, n, h in zip(self.chunks, self.tokens, self.hashes, strict=True)
            ],
        )


def _revision_key(kb: KnowledgeBase, source: Source, doc: Document) -> str:
    c = kb.spec.chunking
    return _sha256_json(
        {
            "content": doc.content_sha256,
            "format": source.format,
            "maxChars": c.max_chars,
            "overlapChars": c.overlap_chars,
            "model": kb.spec.embedding.model,
            "chunker": CHUNKER_VERSION,
        }
    )


def _plan_source(
    db: Database, kb_id: int | None, kb: KnowledgeBase, source: Source, previous: dict[str, VersionSourceRow]
) -> _SourcePlan:
    plan = _SourcePlan(source, _sha256_json(source.model_dump(by_alias=True, mode="json")))
    try:
        doc = read_source(source)
    except SourceError as exc:
        plan.message = str(exc)
        # A failing source keeps serving its last good content while its spec is unchanged.
        prev = previous.get(source.name)
        if prev is not None and prev.source_sha256 == plan.source_sha256 and prev.revision_id is not None:
            plan.revision, plan.chunk_count = prev.revision_id, prev.chunk_count
        return plan
    plan.revision_key = _revision_key(kb, source, doc)
    stored = db.find_revision(kb_id, source.name, plan.revision_key) if kb_id is not None else None
    if stored is not None:
        plan.revision, plan.chunk_count = stored
    else:
        plan.document = doc
    return plan


def _chunk(plan: _SourcePlan, kb: KnowledgeBase, embedder: Embedder) -> list[tuple[bytes, str]]:
    """Chunk a source to ingest; return its (text hash, text to embed) pairs."""
    assert plan.document is not None and plan.revision_key is not None
    doc = plan.document
    chunks = chunk_document(
        doc.text,
        max_chars=kb.spec.chunking.max_chars,
        overlap_chars=kb.spec.chunking.overlap_chars,
        markdown=plan.source.format == "markdown",
    )
    if not chunks:
        plan.message = "no text extracted"
        return []
    texts = [c.embed_text for c in chunks]
    plan.chunks, plan.chunk_count = chunks, len(chunks)
    plan.hashes = [hashlib.sha256(t.encode()).digest() for t in texts]
    plan.tokens = embedder.count_tokens([c.text for c in chunks])
    return list(zip(plan.hashes, texts, strict=True))


def _embed_missing(
    db: Database, embedder: Embedder, items: list[tuple[bytes, str]], reporter: Reporter
) -> tuple[dict[bytes, int], set[bytes]]:
    """Ids of the vectors of all `items`, embedding (in batches) only the texts the cache lacks."""
    unique = dict(items)
    ids = db.cached_embeddings(embedder.model_id, list(unique))
    missing = [h for h in unique if h not in ids]
    for start in range(0, len(missing), EMBED_BATCH):
        batch = missing[start : start + EMBED_BATCH]
        vectors = embedder.embed([unique[h] for h in batch])
        ids.update(db.store_embeddings(embedder.model_id, list(zip(batch, vectors, strict=True))))
        reporter.embedding_progress(start + len(batch), len(missing))
    return ids, set(missing)


def _apply_one(db: Database, kb: KnowledgeBase, embedder: Embedder, reporter: Reporter) -> KnowledgeBaseResult:
    name = kb.name
    manifest = kb.to_manifest()
    manifest_sha256 = _sha256_json(manifest)
    row = db.get_kb(name)
    current = db.get_version(row.id, row.current_version) if row and row.current_version else None
    previous = {s.source_name: s for s in db.version_sources(current.id)} if current else {}
    plans = [_plan_source(db, row.id if row else None, kb, s, previous) for s in kb.spec.sources]

    def entry(p: _SourcePlan) -> tuple[object, ...]:
        return (p.source.name, p.source_sha256, p.revision, p.message)

    old = [(s.source_name, s.source_sha256, s.revision_id, s.message) for s in previous.values()]
    unchanged = (
        current is not None
        and current.manifest_sha256 == manifest_sha256
        and not any(p.ingest for p in plans)
        and [entry(p) for p in plans] == old
    )
    if unchanged:
        assert current is not None
        reporter.line(f"KnowledgeBase/{name} unchanged (version {current.number})")
        results = [_result(p, ingested=False) for p in plans]
        _report_failures(reporter, name, results)
        return KnowledgeBaseResult(name=name, action="unchanged", version=current.number, sources=results)

    number = db.next_version_number(row.id if row else None)
    action: Literal["created", "configured"] = "created" if row is None else "configured"
    to_ingest = [p for p in plans if p.ingest or p.failed]
    noun = "source" if len(to_ingest) == 1 else "sources"
    reporter.line(
        f"KnowledgeBase/{name} {action} (version {number}); waiting for the ingestion of {len(to_ingest)} {noun}"
    )
    items = [pair for p in plans if p.ingest for pair in _chunk(p, kb, embedder)]
    ids, fresh = _embed_missing(db, embedder, items, reporter)
    claimed: set[bytes] = set()
    for p in plans:
        if p.ingest:  # a text embedded in this apply counts once, for the first source that has it
            p.embedded = len((set(p.hashes) & fresh) - claimed)
            claimed |= set(p.hashes)
    db.publish(
        name=name,
        manifest=manifest,
        manifest_sha256=manifest_sha256,
        model=embedder.model_id,
        number=number,
        new_revisions=[p.new_revision(ids) for p in plans if p.ingest],
        sources=[
            SourceEntry(
                name=p.source.name,
                source_sha256=p.source_sha256,
                revision=p.revision_key if p.ingest else p.revision,
                state="failed" if p.failed else "ready",
                message=p.message,
                chunk_count=p.chunk_count,
                embedded=p.embedded,
            )
            for p in plans
        ],
    )
    results = [_result(p, ingested=p.ingest) for p in plans]
    for r in results:
        if r.ingested:
            noun = "chunk" if r.chunks == 1 else "chunks"
            reporter.line(f"KnowledgeBase/{name} source {r.name} ready: {r.chunks} {noun} ({embedder.model_id})")
    _report_failures(reporter, name, results)
    return KnowledgeBaseResult(name=name, action=action, version=number, sources=results)


def _result(p: _SourcePlan, *, ingested: bool) -> SourceResult:
    return SourceResult(
        name=p.source.name,
        state="failed" if p.failed else "ready",
        ingested=ingested,
        chunks=p.chunk_count,
        embedded=p.embedded,
        reused=p.chunk_count - p.embedded if p.revision is not None or p.ingest else 0,
        message=p.message,
    )


def _report_failures(reporter: Reporter, name: str, results: Sequence[SourceResult]) -> None:
    for r in results:
        if r.state == "failed":
            reporter.line(f"KnowledgeBase/{name} source {r.name} failed: {r.message}")


def apply_knowledge_bases(
    db: Database,
    knowledge_bases: Sequence[KnowledgeBase],
    embedder_for: Callable[[str], Embedder],
    reporter: Reporter | None = None,
) -> ApplyReport:
    """Reconcile the store to match each knowledge base, one at a time under its advisory lock.

    A knowledge base that fails as a whole (its model cannot load, the store refuses a write) is
    reported as failed and leaves its current version serving; the others still apply.
    """
    reporter = reporter or NullReporter()
    results: list[KnowledgeBaseResult] = []
    for kb in knowledge_bases:
        try:
            embedder = embedder_for(kb.spec.embedding.model)
            with db.kb_lock(kb.name):
                results.append(_apply_one(db, kb, embedder, reporter))
        except KbctlError as exc:
            reporter.line(f"KnowledgeBase/{kb.name} failed: {exc}")
            results.append(
                KnowledgeBaseResult(name=kb.name, action="failed", version=None, sources=[], message=str(exc))
            )
    return ApplyReport(results=results)
