"""Ingest a plan's new content: chunk it, and embed only the texts whose vectors the content-addressed cache lacks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace

from kbctl.chunking import Chunk, chunk_document
from kbctl.defaults import EMBED_BATCH
from kbctl.embedding import Embedder, Vector
from kbctl.embedding.background import background_questions, question_key
from kbctl.engine.events import Reporter, WorkProgress
from kbctl.engine.plan import Fail, Ingest, KnowledgeBasePlan, SourcePlan, text_sha256
from kbctl.errors import LimitError
from kbctl.manifest import KnowledgeBase, Limits
from kbctl.store.database import ChunkRow, Database, NewRevision, WrittenRevision

__all__ = [
    "EMBED_BATCH",
    "SLICE_CHARS",
    "Chunked",
    "IngestRun",
    "TokenCounts",
    "background_vectors",
    "chunk_source",
    "ingest",
]

# The new documents' characters chunked, embedded and written at a time: ~15,000 chunks of ~1,000 characters,
# ~100 MB of chunks, texts and rows in memory however large the apply (bench/scale.py measures the peak).
SLICE_CHARS = 16_000_000


@dataclass(frozen=True)
class Chunked:
    """A new document split into chunks, with the sha256 of the text each one sends to the model."""

    chunks: tuple[Chunk, ...]
    hashes: tuple[bytes, ...]


@dataclass(frozen=True)
class IngestRun:
    """What ingesting one plan produced: per source with new content, the revision to publish (its chunks pointing
    at their cached vectors), the revision already written for it, or why it failed; how many chunks the new
    revisions hold; and the background questions' vectors, which calibrate the version
    (kbctl.embedding.background)."""

    outcomes: Mapping[str, NewRevision | WrittenRevision | Fail]
    chunks: int = 0
    background: Sequence[Vector] = ()


def chunk_source(plan: SourcePlan, kb: KnowledgeBase) -> Chunked:
    """The chunks of a plan's new document under the knowledge base's chunking settings (ingest and diff)."""
    assert isinstance(plan.decision, Ingest)
    document = plan.decision.document
    chunks = chunk_document(
        document.text,
        max_chars=kb.spec.chunking.max_chars,
        overlap_chars=kb.spec.chunking.overlap_chars,
        markdown=plan.decision.markdown,
    )
    if document.title:
        chunks = [titled(c, document.title) for c in chunks]
    return Chunked(tuple(chunks), tuple(text_sha256(c.embed_text) for c in chunks))


def titled(chunk: Chunk, title: str) -> Chunk:
    """The chunk with its document's title (a page's <title>) first in its heading path, so that the title is
    embedded and keyword-indexed like headings are; not when the path's first heading already says it."""
    first = chunk.heading_path[0].casefold() if chunk.heading_path else None
    name = " ".join(title.split())
    if not name or (first is not None and (first in name.casefold() or name.casefold() in first)):
        return chunk
    return replace(chunk, heading_path=(name, *chunk.heading_path))


@dataclass(frozen=True)
class TokenCounts:
    """Model tokens of chunks, from one pass of the model's tokenizer over each distinct chunk text and heading
    path: a chunk's text (what a context's token budget counts) and what the model is sent (heading path,
    blank line, text), their sum: exact for a tokenizer that splits at whitespace first, as BERT's does (a
    test holds the local model to it), and within a token for a provider's estimate."""

    counts: Mapping[str, int]

    @classmethod
    def of(cls, embedder: Embedder, chunked: Iterable[Chunked]) -> TokenCounts:
        chunks = [c for pieces in chunked for c in pieces.chunks]
        strings = list(dict.fromkeys([c.text for c in chunks] + [c.heading for c in chunks if c.heading_path]))
        return cls(dict(zip(strings, embedder.count_tokens(strings), strict=True)) if strings else {})

    def text(self, chunk: Chunk) -> int:
        return self.counts[chunk.text]

    def embedded(self, chunk: Chunk) -> int:
        return self.counts[chunk.text] + (self.counts[chunk.heading] if chunk.heading_path else 0)


def _check(chunked: Chunked, embedder: Embedder, limits: Limits) -> str | None:
    """Why these chunks cannot be embedded, or None: no text, too many chunks, a chunk over the model's input limit."""
    if not chunked.chunks:
        return "no text extracted"
    if len(chunked.chunks) > limits.max_chunks_per_source:
        return (
            f"{len(chunked.chunks)} chunks, over spec.limits.maxChunksPerSource ({limits.max_chunks_per_source}); "
            "raise the limit or split the source"
        )
    limit: int | None = getattr(embedder, "max_input_tokens", None)
    if limit is not None:  # refuse before any request rather than let the provider truncate or reject
        counts = embedder.count_tokens([c.embed_text for c in chunked.chunks])
        worst, at = max((n, i) for i, n in enumerate(counts))
        if worst > limit:
            return (
                f"chunk {at} has ~{worst} tokens, over the {limit}-token input limit of {embedder.model_id}; "
                "lower spec.chunking.maxChars"
            )
    return None


def _embed_missing(
    db: Database,
    embedder: Embedder,
    missing: Sequence[tuple[bytes, str]],
    name: str,
    reporter: Reporter,
    progress: tuple[int, int] | None = None,
) -> dict[bytes, int]:
    """Embed texts call by call and cache each call's vectors as they come (committed, so a failure later loses
    none); while one call's vectors are written, the next call is already embedding on a worker thread.
    `progress`: the texts embedded before these and the run's total, for the progress events.

    The texts go shortest first: a model pads every text of a batch to its longest, so batches of texts of
    about one length waste little (measured in bench/apply.py); vectors are stored by hash, so the order the
    texts were found in needs no restoring."""
    size = max(1, int(getattr(embedder, "texts_per_call", EMBED_BATCH)))
    by_length = sorted(missing, key=lambda item: len(item[1]))
    calls = [by_length[start : start + size] for start in range(0, len(by_length), size)]
    ids: dict[bytes, int] = {}
    done, total = progress if progress is not None else (0, len(missing))
    with ThreadPoolExecutor(1, thread_name_prefix="kbctl-embed") as pool:

        def submit(call: Sequence[tuple[bytes, str]]) -> Future[list[Vector]]:
            return pool.submit(embedder.embed, [text for _, text in call])

        pending = submit(calls[0]) if calls else None
        for n, call in enumerate(calls):
            assert pending is not None
            vectors = pending.result()
            pending = submit(calls[n + 1]) if n + 1 < len(calls) else None
            try:
                ids.update(
                    db.store_embeddings(embedder.model_id, [(h, v) for (h, _), v in zip(call, vectors, strict=True)])
                )
            except BaseException:
                if pending is not None:
                    pending.cancel()
                raise
            done += len(call)
            reporter.report(WorkProgress(name, "embedding", min(done, total), total))
    return ids


@dataclass(frozen=True)
class _Slice:
    """Some of a plan's new documents, chunked: those that can be embedded, why the others cannot, and the model
    tokens of their chunks."""

    sources: tuple[SourcePlan, ...]
    chunked: Mapping[str, Chunked]
    failed: Mapping[str, Fail]
    sizes: TokenCounts

    def chunks(self) -> dict[bytes, Chunk]:
        """Each distinct text to embed (by its hash) with a chunk that sends it."""
        return {h: c for pieces in self.chunked.values() for h, c in zip(pieces.hashes, pieces.chunks, strict=True)}


def _slices(plan: KnowledgeBasePlan, limit: int) -> list[tuple[SourcePlan, ...]]:
    """The plan's new documents in manifest order, cut into runs of at most `limit` characters (a document longer
    than that is a run of its own)."""
    runs: list[tuple[SourcePlan, ...]] = []
    current: list[SourcePlan] = []
    size = 0
    for p in plan.to_ingest:
        assert isinstance(p.decision, Ingest)
        length = p.decision.document.length
        if current and size + length > limit:
            runs.append(tuple(current))
            current, size = [], 0
        current.append(p)
        size += length
    if current:
        runs.append(tuple(current))
    return runs


def _chunk_slice(sources: tuple[SourcePlan, ...], kb: KnowledgeBase, embedder: Embedder) -> _Slice:
    chunked: dict[str, Chunked] = {}
    failed: dict[str, Fail] = {}
    for p in sources:
        pieces = chunk_source(p, kb)
        problem = _check(pieces, embedder, kb.spec.effective_limits)
        if problem is not None:
            failed[p.name] = Fail(problem)
        else:
            chunked[p.name] = pieces
    return _Slice(sources, chunked, failed, TokenCounts.of(embedder, chunked.values()))


def ingest(db: Database, plan: KnowledgeBasePlan, embedder: Embedder, reporter: Reporter, kb_id: int) -> IngestRun:
    """Chunk every source the plan ingests and make sure each chunk's vector is cached.

    The new documents go in slices of SLICE_CHARS characters, so that memory holds one slice's chunks, not all:
    a first pass chunks each slice to count what is missing from the vector cache against
    spec.limits.maxTokensToEmbed (over it, nothing is embedded); the second chunks each again (a single slice
    is kept from the first), embeds what the cache lacks, and writes its new revisions to the store, not yet
    served (kbctl.store.rows.WrittenRevision). The last slice's revisions are published with the version, in
    its transaction, so an apply of one slice writes everything at once, as before.

    Vectors are committed to the cache batch by batch as they are computed, and earlier slices' revisions as
    they are written, so a failure later on loses no work: the next apply reuses both.
    """
    model, limits = embedder.model_id, plan.kb.spec.effective_limits
    runs = _slices(plan, SLICE_CHARS)
    kept: list[_Slice | None] = []
    counted: set[bytes] = set()
    tokens_to_embed = 0
    for sources in runs:
        piece = _chunk_slice(sources, plan.kb, embedder)
        chunks = piece.chunks()
        cached = db.cached_embeddings(model, list(chunks))
        for h, chunk in chunks.items():
            if h not in cached and h not in counted:
                counted.add(h)
                tokens_to_embed += piece.sizes.embedded(chunk)
        kept.append(piece if len(runs) == 1 else None)
    if tokens_to_embed > limits.max_tokens_to_embed:
        raise LimitError(
            f"would embed ~{tokens_to_embed} tokens, over spec.limits.maxTokensToEmbed "
            f"({limits.max_tokens_to_embed}); nothing was embedded: raise the limit to apply"
        )
    total, done, ingested = len(counted), 0, 0
    del counted
    outcomes: dict[str, NewRevision | WrittenRevision | Fail] = {}
    window: int | None = getattr(embedder, "window_tokens", None)
    for n, sources in enumerate(runs):
        piece = kept[n] or _chunk_slice(sources, plan.kb, embedder)
        kept[n] = None
        chunks = piece.chunks()
        ids = db.cached_embeddings(model, list(chunks))
        missing = [h for h in chunks if h not in ids]
        todo = [(h, chunks[h].embed_text) for h in missing]
        ids.update(_embed_missing(db, embedder, todo, plan.name, reporter, (done, total)))
        done += len(missing)
        fresh, claimed = set(missing), set[bytes]()
        revisions: list[NewRevision] = []
        for p in sources:
            if p.name in piece.failed:
                outcomes[p.name] = piece.failed[p.name]
                continue
            pieces = piece.chunked[p.name]
            over = sum(piece.sizes.embedded(c) > window for c in pieces.chunks) if window is not None else 0
            embedded = len((set(pieces.hashes) & fresh) - claimed)  # a text shared by two counts for the first
            revisions.append(_revision(p, pieces, piece.sizes, ids, plan.kb.spec.retrieval.language, embedded, over))
            claimed |= set(pieces.hashes)
        ingested += sum(r.chunk_count for r in revisions)
        last = n == len(runs) - 1
        written: Sequence[NewRevision | WrittenRevision] = revisions if last else db.write_revisions(kb_id, revisions)
        outcomes.update((r.source_name, r) for r in written)
    return IngestRun(outcomes, ingested, background_vectors(db, embedder))


def background_vectors(db: Database, embedder: Embedder) -> list[Vector]:
    """The background questions' vectors for the embedder's model, in order: embedded as queries the first time a
    store needs them for the model, and kept."""
    questions = background_questions()
    stored = db.background_vectors(embedder.model_id)
    missing = [q for q in questions if question_key(q) not in stored]
    if missing:
        vectors = embedder.embed(missing, purpose="query")
        new = [(question_key(q), v) for q, v in zip(missing, vectors, strict=True)]
        db.store_background_vectors(embedder.model_id, new)
        stored.update(new)
    return [stored[question_key(q)] for q in questions]


def _revision(
    p: SourcePlan,
    pieces: Chunked,
    sizes: TokenCounts,
    vector_ids: Mapping[bytes, int],
    language: str,
    embedded: int,
    truncated: int,
) -> NewRevision:
    """A source's new content, chunked and embedded: the revision to publish."""
    assert isinstance(p.decision, Ingest)
    doc = p.decision.document
    return NewRevision(
        source_name=p.name,
        revision_key=p.decision.revision_key,
        content_sha256=doc.content_sha256,
        origin=doc.origin,
        title=doc.title,
        char_count=doc.length,
        language=language,
        chunks=[
            ChunkRow(c.ordinal, c.text, c.start, c.end, c.heading_path, sizes.text(c), vector_ids[h])
            for c, h in zip(pieces.chunks, pieces.hashes, strict=True)
        ],
        embedded=embedded,
        truncated=truncated,
    )
