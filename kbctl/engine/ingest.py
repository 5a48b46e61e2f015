"""Chunk new documents and embed only the texts whose vectors the content-addressed cache lacks."""

from __future__ import annotations

from collections.abc import Sequence

from kbctl.embedding import Embedder
from kbctl.engine.events import Reporter
from kbctl.engine.plan import SourcePlan, text_sha256
from kbctl.manifest import KnowledgeBase
from kbctl.store.database import Database

__all__ = ["EMBED_BATCH", "ingest"]

EMBED_BATCH = 64


def _chunk(plan: SourcePlan, kb: KnowledgeBase, embedder: Embedder) -> list[tuple[bytes, str]]:
    """Chunk a source to ingest; return its (sha256 of the text to embed, that text) pairs."""
    chunks = plan.split(kb)
    if not chunks:
        plan.message = "no text extracted"
        return []
    texts = [c.embed_text for c in chunks]
    limit: int | None = getattr(embedder, "max_input_tokens", None)
    if limit is not None:  # refuse at plan time rather than let the provider truncate or reject
        worst, at = max((n, i) for i, n in enumerate(embedder.count_tokens(texts)))
        if worst > limit:
            plan.message = (
                f"chunk {at} has ~{worst} tokens, over the {limit}-token input limit of {embedder.model_id}; "
                "lower spec.chunking.maxChars"
            )
            return []
    plan.chunks, plan.chunk_count = chunks, len(chunks)
    plan.hashes = [text_sha256(t) for t in texts]
    plan.tokens = embedder.count_tokens([c.text for c in chunks])
    return list(zip(plan.hashes, texts, strict=True))


def ingest(
    db: Database, kb: KnowledgeBase, plans: Sequence[SourcePlan], embedder: Embedder, reporter: Reporter
) -> dict[bytes, int]:
    """Chunk every plan that ingests and make sure each chunk's vector is cached; return vector ids by hash.

    Vectors are committed to the cache batch by batch as they are computed, so a failure later on
    loses no embedding work. Each plan's `embedded` counts the texts embedded for it in this run (a
    text shared by two sources counts once, for the first).
    """
    items = [pair for p in plans if p.ingest for pair in _chunk(p, kb, embedder)]
    unique = dict(items)
    ids = db.cached_embeddings(embedder.model_id, list(unique))
    missing = [h for h in unique if h not in ids]
    for start in range(0, len(missing), EMBED_BATCH):
        batch = missing[start : start + EMBED_BATCH]
        vectors = embedder.embed([unique[h] for h in batch])
        ids.update(db.store_embeddings(embedder.model_id, list(zip(batch, vectors, strict=True))))
        reporter.embedding_progress(start + len(batch), len(missing))
    fresh, claimed = set(missing), set[bytes]()
    for p in plans:
        if p.ingest:
            p.embedded = len((set(p.hashes) & fresh) - claimed)
            claimed |= set(p.hashes)
    return ids
