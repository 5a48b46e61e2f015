"""Plan an apply without doing it (what would be created, configured, re-chunked, embedded, pruned), and prune."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import psycopg
from psycopg.pq import TransactionStatus
from pydantic import BaseModel, ConfigDict, computed_field

from kbctl.embedding import Embedder
from kbctl.engine.plan import SourcePlan, apply_would_fetch, changed_sources, plan_sources, sha256_json, text_sha256
from kbctl.manifest import KnowledgeBase
from kbctl.manifest.changes import field_changes, source_changes
from kbctl.manifest.selectors import Selector
from kbctl.store.database import Database, VersionSourceRow, store_error

__all__ = [
    "DiffReport",
    "FieldDiff",
    "KnowledgeBaseDiff",
    "SourceDiff",
    "diff_knowledge_bases",
    "prune_knowledge_bases",
]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class FieldDiff(_Frozen):
    """One manifest field (outside spec.sources) whose value would change; None stands for "not set"."""

    path: str
    old: Any
    new: Any


class SourceDiff(_Frozen):
    """What apply would do to one source.

    `fetch` is True for a URL source that apply would fetch (new, its spec changed, or it never had
    content). Diff never fetches, so the chunk and token counts of such a source are None (unknown).
    Chunks are compared by the sha256 of the text embedded for them: `chunks_added` are chunks of the
    new content absent from the content served now, `chunks_removed` the reverse. `tokens_to_embed`
    counts (with the model's tokenizer, as ingest does) the text of the new chunks whose vectors the
    cache lacks: an estimate of the embedding bill.
    """

    name: str
    kind: Literal["text", "url"]
    change: Literal["added", "changed", "removed", "unchanged"]
    fetch: bool = False
    chunks_added: int | None = 0
    chunks_removed: int | None = 0
    tokens_to_embed: int | None = 0

    @property
    def differs(self) -> bool:
        """Apply would change this source or has to fetch it to find out."""
        return self.change != "unchanged" or self.fetch


class KnowledgeBaseDiff(_Frozen):
    """What apply would do to one knowledge base; `version` is the one serving now (None when created)."""

    name: str
    action: Literal["created", "configured", "unchanged", "pruned"]
    version: int | None
    fields: list[FieldDiff] = []
    sources: list[SourceDiff] = []

    @property
    def differs(self) -> bool:
        """Apply would change this knowledge base, or has to fetch some URL source to find out."""
        return self.action != "unchanged" or any(s.fetch for s in self.sources)


class DiffReport(_Frozen):
    """The plan of one apply: one entry per manifest in order, then the knowledge bases prune would delete."""

    results: list[KnowledgeBaseDiff]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def differs(self) -> bool:
        """True when apply would change something (`kbctl diff` exits 1)."""
        return any(r.differs for r in self.results)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def tokens_to_embed(self) -> int:
        """Tokens of the text apply would embed, over every source whose content is known."""
        return sum(s.tokens_to_embed or 0 for r in self.results for s in r.sources)


@contextmanager
def _read_only(db: Database) -> Iterator[None]:
    """One read-only, repeatable-read transaction: every read sees one snapshot, and no write can slip in."""
    conn = db.connection
    if conn.info.transaction_status != TransactionStatus.IDLE:  # the caller's own transaction: read in it
        yield
        return
    try:
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield
    except psycopg.Error as exc:
        raise store_error(exc) from exc


class _Planner:
    """Diffs knowledge bases one by one; remembers the texts already counted, so each is billed once."""

    def __init__(self, db: Database, embedder_for: Callable[[str], Embedder]) -> None:
        self.db = db
        self.embedder_for = embedder_for
        self.counted: set[tuple[str, bytes]] = set()

    def diff(self, kb: KnowledgeBase) -> KnowledgeBaseDiff:
        db, manifest = self.db, kb.to_manifest()
        embedder = self.embedder_for(kb.spec.embedding.ref)
        row = db.get_kb(kb.name)
        current = db.get_version(row.id, row.current_version) if row and row.current_version else None
        previous = {s.source_name: s for s in db.version_sources(current.id)} if current else {}
        statuses = db.source_statuses(row.id) if row else {}
        # Planned as apply would, except that no URL is fetched (each keeps what the store serves).
        kb_id = row.id if row else None
        plans = plan_sources(db, kb, kb_id, previous, statuses, model_id=embedder.model_id, fetch=False)
        old = current.manifest if current else None
        added, removed, respec = source_changes(old, manifest)
        tokens = self._tokens(embedder, [p for p in plans if p.ingest], kb)
        sources = [self._source(p, previous.get(p.source.name), added, respec, tokens) for p in plans]
        sources += [
            SourceDiff(
                name=n,
                kind="url" if old and _old_source(old, n).get("url") else "text",
                change="removed",
                chunks_removed=previous[n].chunk_count if n in previous else 0,
            )
            for n in removed
        ]
        if current is None:
            return KnowledgeBaseDiff(name=kb.name, action="created", version=None, sources=sources)
        unchanged = current.manifest_sha256 == sha256_json(manifest) and not changed_sources(plans, previous)
        return KnowledgeBaseDiff(
            name=kb.name,
            action="unchanged" if unchanged else "configured",
            version=current.number,
            fields=[FieldDiff(path=c.path, old=c.old, new=c.new) for c in field_changes(old, manifest)],
            sources=sources,
        )

    def _chunks(self, plan: SourcePlan, kb: KnowledgeBase) -> list[tuple[bytes, str]]:
        """(sha256 of the text to embed, the chunk's text) of new content, chunked exactly as ingest does."""
        chunks = plan.split(kb)
        plan.hashes = [text_sha256(c.embed_text) for c in chunks]
        return [(h, c.text) for h, c in zip(plan.hashes, chunks, strict=True)]

    def _tokens(self, embedder: Embedder, plans: Sequence[SourcePlan], kb: KnowledgeBase) -> dict[str, int]:
        """Tokens to embed per source: texts neither cached nor already counted (for an earlier source)."""
        chunked = {p.source.name: self._chunks(p, kb) for p in plans}
        texts = {h: t for pairs in chunked.values() for h, t in pairs}
        cached = self.db.cached_embeddings(embedder.model_id, list(texts))
        missing = [h for h in texts if h not in cached and (embedder.model_id, h) not in self.counted]
        found = embedder.count_tokens([texts[h] for h in missing]) if missing else []
        counts = dict(zip(missing, found, strict=True))
        tokens: dict[str, int] = {}
        for name, pairs in chunked.items():
            mine = {h for h, _ in pairs if h in counts}
            tokens[name] = sum(counts.pop(h) for h in mine)
        self.counted |= {(embedder.model_id, h) for h in missing}
        return tokens

    def _source(
        self,
        plan: SourcePlan,
        prev: VersionSourceRow | None,
        added: list[str],
        respec: list[str],
        tokens: dict[str, int],
    ) -> SourceDiff:
        name, kind = plan.source.name, plan.source.kind
        before = prev.revision_id if prev else None
        moved = plan.ingest or plan.revision != before
        change: Literal["added", "changed", "unchanged"] = (
            "added" if name in added else "changed" if name in respec or moved else "unchanged"
        )
        if apply_would_fetch(plan, prev):
            return SourceDiff(
                name=name,
                kind=kind,
                change=change,
                fetch=True,
                chunks_added=None,
                chunks_removed=None,
                tokens_to_embed=None,
            )
        if not moved:
            return SourceDiff(name=name, kind=kind, change=change)
        new = plan.hashes if plan.ingest else self._revision_hashes(plan.revision)
        old = self._revision_hashes(before)
        return SourceDiff(
            name=name,
            kind=kind,
            change=change,
            chunks_added=(Counter(new) - Counter(old)).total(),
            chunks_removed=(Counter(old) - Counter(new)).total(),
            tokens_to_embed=tokens.get(name, 0),
        )

    def _revision_hashes(self, revision_id: int | None) -> list[bytes]:
        return [h for h, _ in self.db.revision_chunks(revision_id)] if revision_id is not None else []


def _old_source(manifest: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in manifest["spec"]["sources"] if s["name"] == name)


def diff_knowledge_bases(
    db: Database,
    knowledge_bases: Sequence[KnowledgeBase],
    embedder_for: Callable[[str], Embedder],
    *,
    prune_selector: Selector | None = None,
) -> DiffReport:
    """What applying these knowledge bases would do, writing nothing, fetching nothing, embedding nothing.

    Each knowledge base is compared with the manifest and content of its current version: changed
    fields, sources added / changed / removed, chunks added and removed, and the tokens the vector
    cache lacks (only the tokenizer is loaded, and only when some text is new). With
    `prune_selector`, stored knowledge bases whose labels match it and that are not among
    `knowledge_bases` are listed as "pruned". Errors (an unknown model, the store) raise KbctlError.
    """
    planner = _Planner(db, embedder_for)
    with _read_only(db):
        results = [planner.diff(kb) for kb in knowledge_bases]
        if prune_selector is not None:
            keep = {kb.name for kb in knowledge_bases}
            results += [
                KnowledgeBaseDiff(name=row.name, action="pruned", version=row.current_version)
                for row in db.list_kbs()
                if row.name not in keep and prune_selector.matches(row.labels)
            ]
    return DiffReport(results=results)


def prune_knowledge_bases(db: Database, keep: Collection[str], selector: Selector) -> list[str]:
    """Delete the knowledge bases whose labels match `selector` and whose names are not in `keep`.

    Each one is checked again and deleted under its advisory lock (an apply running meanwhile either
    finishes first or waits). Returns the names deleted, in name order.
    """
    if isinstance(keep, str):
        raise TypeError("keep must be a collection of names, not a single string")
    pruned: list[str] = []
    for row in db.list_kbs():
        if row.name in keep or not selector.matches(row.labels):
            continue
        with db.kb_lock(row.name):
            latest = db.get_kb(row.name)
            if latest is not None and selector.matches(latest.labels) and db.delete_kb(row.name) is not None:
                pruned.append(row.name)
    return pruned
