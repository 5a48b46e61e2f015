"""`kbctl diff`: a plan shown without carrying it out: what apply would create, configure, re-chunk, embed, prune."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, computed_field
from pydantic.alias_generators import to_camel

from kbctl.embedding import Embedder
from kbctl.engine.fetch import fetch_sources, kind_of
from kbctl.engine.ingest import Chunked, TokenCounts, chunk_source
from kbctl.engine.located import honour_applied_from
from kbctl.engine.plan import Fail, Ingest, SourcePlan, build_plan
from kbctl.engine.prune import PruneScope
from kbctl.engine.results import DiffedSource
from kbctl.engine.settled import in_file_order
from kbctl.manifest import KnowledgeBase
from kbctl.manifest.changes import access_changes, field_changes
from kbctl.sources import source_of
from kbctl.store.applied import SettledKnowledgeBase
from kbctl.store.database import Database
from kbctl.store.state import StoredState

__all__ = [
    "DiffReport",
    "FieldDiff",
    "KnowledgeBaseDiff",
    "diff_knowledge_bases",
]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)


class FieldDiff(_Frozen):
    """One manifest field (outside spec.sources) whose value would change; None stands for "not set"."""

    path: str
    old: Any
    new: Any


class KnowledgeBaseDiff(_Frozen):
    """What apply would do to one knowledge base; `version` is the one serving now (None when created)."""

    name: str
    action: Literal["created", "configured", "unchanged", "pruned"]
    version: int | None
    fields: list[FieldDiff] = []
    sources: list[DiffedSource] = []
    over_limits: list[str] = []  # the spec.limits apply would exceed (it would fail), one sentence each
    unreadable: list[str] = []  # the sources and documents apply could not read (each would fail alone)
    calibrates: bool = False  # unchanged, apply would calibrate the serving version (published before it was)

    @property
    def differs(self) -> bool:
        """Apply would change this knowledge base, or has to fetch some URL source to find out."""
        return self.action != "unchanged" or any(s.fetch for s in self.sources)

    @property
    def fails(self) -> list[str]:
        """Why apply would fail here (a source or document it could not read, a spec.limits exceeded), one
        sentence each; empty when it would not."""
        return [*self.unreadable, *self.over_limits]


class DiffReport(_Frozen):
    """The plan of one apply: one entry per manifest in order, then the knowledge bases prune would delete."""

    results: list[KnowledgeBaseDiff]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def differs(self) -> bool:
        """True when apply would change something (`kbctl diff` exits 1)."""
        return any(r.differs for r in self.results)

    @property
    def fails(self) -> bool:
        """True when apply would fail for some knowledge base (`kbctl diff` exits 2, as kubectl's >1 is an error)."""
        return any(r.fails for r in self.results)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def tokens_to_embed(self) -> int:
        """Tokens of the text apply would embed, over every source whose content is known."""
        return sum(s.tokens_to_embed or 0 for r in self.results for s in r.sources)


class _Differ:
    """Explains knowledge bases one by one; remembers the texts already counted, so each is billed once."""

    def __init__(self, db: Database, embedder_for: Callable[[str], Embedder]) -> None:
        self.db = db
        self.embedder_for = embedder_for
        self.counted: set[tuple[str, bytes]] = set()

    def diff(self, kb: KnowledgeBase) -> KnowledgeBaseDiff:
        embedder = self.embedder_for(kb.spec.embedding.ref)
        state = self.db.read_state(kb.name)
        # The plan apply would build, except that nothing is fetched (each URL, git or crawl source keeps what the
        # store serves); local files are read.
        fetched = fetch_sources(kb, state, model_id=embedder.model_id, trigger="diff")
        plan = build_plan(kb, state, fetched.records, model_id=embedder.model_id, trigger="diff", now=datetime.now(UTC))
        old = plan.previous_manifest
        added, removed, respec = plan.source_changes()
        chunked = {p.name: chunk_source(p, kb) for p in plan.to_ingest}
        sizes = TokenCounts.of(embedder, chunked.values())
        tokens = self._tokens(embedder, chunked, sizes)
        cut = _truncated(embedder, chunked, sizes)
        sources = [self._source(p, state, added, respec, chunked, tokens, cut) for p in plan.sources]
        sources += [
            DiffedSource(
                name=n,
                kind=kind_of(_old_source(old, n) if old else {}),
                change="removed",
                # A path source serves its documents as units named SOURCE/ID.
                chunks_removed=sum(r.chunk_count for u, r in state.served.items() if u == n or u.startswith(n + "/")),
            )
            for n in removed
        ]
        kinds = {s.name: s.kind for s in kb.spec.sources}
        sources += [  # documents gone from a path or git source that stays (a file deleted)
            DiffedSource(
                name=n,
                kind=kinds.get(source_of(n), "path"),
                change="removed",
                chunks_removed=state.served[n].chunk_count,
            )
            for n in plan.removed
            if source_of(n) != n and source_of(n) not in removed
        ]
        over = _over_limits(kb, chunked, tokens)
        unreadable = [f"source {p.name}: {p.decision.message}" for p in plan.sources if isinstance(p.decision, Fail)]
        if plan.current_version is None:
            return KnowledgeBaseDiff(
                name=kb.name, action="created", version=None, sources=sources, over_limits=over, unreadable=unreadable
            )
        return KnowledgeBaseDiff(
            name=kb.name,
            action="unchanged" if plan.unchanged else "configured",
            version=plan.current_version,
            fields=[
                FieldDiff(path=c.path, old=c.old, new=c.new)
                for c in [*field_changes(old, plan.manifest), *access_changes(old, plan.manifest)]
            ],
            sources=sources,
            over_limits=over,
            unreadable=unreadable,
            calibrates=plan.calibrates,
        )

    def _tokens(self, embedder: Embedder, chunked: dict[str, Chunked], sizes: TokenCounts) -> dict[str, int]:
        """Tokens to embed per source (as ingest bills them): texts neither cached nor already counted (for an
        earlier source)."""
        chunks = {h: c for pieces in chunked.values() for h, c in zip(pieces.hashes, pieces.chunks, strict=True)}
        cached = self.db.cached_embeddings(embedder.model_id, list(chunks))
        missing = [h for h in chunks if h not in cached and (embedder.model_id, h) not in self.counted]
        counts = {h: sizes.embedded(chunks[h]) for h in missing}
        tokens: dict[str, int] = {}
        for name, pieces in chunked.items():
            mine = {h for h in pieces.hashes if h in counts}
            tokens[name] = sum(counts.pop(h) for h in mine)
        self.counted |= {(embedder.model_id, h) for h in missing}
        return tokens

    def _source(
        self,
        plan: SourcePlan,
        state: StoredState,
        added: list[str],
        respec: list[str],
        chunked: dict[str, Chunked],
        tokens: dict[str, int],
        cut: set[bytes],
    ) -> DiffedSource:
        name, kind = plan.name, plan.source.kind
        prev = state.served.get(name)
        before = prev.revision_id if prev else None
        serving = plan.serving
        moved = isinstance(plan.decision, Ingest) or (serving.revision_id if serving else None) != before
        new_unit = plan.unit is not None and prev is None  # a document new to its path source
        change: Literal["added", "changed", "unchanged"] = (
            "added" if name in added or new_unit else "changed" if name in respec or moved else "unchanged"
        )
        if plan.fetch:
            return DiffedSource(
                name=name,
                kind=kind,
                change=change,
                fetch=True,
                chunks_added=None,
                chunks_removed=None,
                tokens_to_embed=None,
            )
        if not moved:
            return DiffedSource(name=name, kind=kind, change=change)
        new = (
            list(chunked[name].hashes)
            if name in chunked
            else self._revision_hashes(serving.revision_id if serving else None)
        )
        old = self._revision_hashes(before)
        fresh = Counter(new) - Counter(old)
        return DiffedSource(
            name=name,
            kind=kind,
            change=change,
            chunks_added=fresh.total(),
            chunks_removed=(Counter(old) - Counter(new)).total(),
            tokens_to_embed=tokens.get(name, 0),
            truncated=sum(n for h, n in fresh.items() if h in cut),
        )

    def _revision_hashes(self, revision_id: int | None) -> list[bytes]:
        return [h for h, _ in self.db.revision_chunks(revision_id)] if revision_id is not None else []


def _truncated(embedder: Embedder, chunked: dict[str, Chunked], sizes: TokenCounts) -> set[bytes]:
    """The hashes of the chunks whose embedded text is longer than the model's window (none without a window)."""
    window: int | None = getattr(embedder, "window_tokens", None)
    if window is None:
        return set()
    return {
        h
        for pieces in chunked.values()
        for h, c in zip(pieces.hashes, pieces.chunks, strict=True)
        if sizes.embedded(c) > window
    }


def _over_limits(kb: KnowledgeBase, chunked: dict[str, Chunked], tokens: dict[str, int]) -> list[str]:
    """The spec.limits an apply of this plan would exceed, as ingest enforces them."""
    limits, over = kb.spec.effective_limits, []
    for name, pieces in chunked.items():
        if len(pieces.chunks) > limits.max_chunks_per_source:
            over.append(
                f"source {name}: {len(pieces.chunks)} chunks, over spec.limits.maxChunksPerSource "
                f"({limits.max_chunks_per_source})"
            )
    total = sum(tokens.values())
    if total > limits.max_tokens_to_embed:
        over.append(f"~{total} tokens to embed, over spec.limits.maxTokensToEmbed ({limits.max_tokens_to_embed})")
    return over


def _old_source(manifest: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in manifest["spec"]["sources"] if s["name"] == name)


def _settled_diff(kb: SettledKnowledgeBase) -> KnowledgeBaseDiff:
    """The diff of a knowledge base of a settled file: unchanged, and so is each of its (inline) sources."""
    sources = [DiffedSource(name=name, kind="text", change="unchanged") for name, _ in kb.sources]
    return KnowledgeBaseDiff(name=kb.name, action="unchanged", version=kb.version, sources=sources)


def diff_knowledge_bases(
    db: Database,
    knowledge_bases: Sequence[KnowledgeBase],
    embedder_for: Callable[[str], Embedder],
    *,
    prune: PruneScope | None = None,
    settled: Sequence[SettledKnowledgeBase] = (),
    order: Sequence[str] = (),
) -> DiffReport:
    """What applying these knowledge bases would do, writing nothing, fetching nothing, embedding nothing.

    Each knowledge base is compared with the manifest and content of its current version: changed
    fields, sources added / changed / removed, chunks added and removed, and the tokens the vector
    cache lacks (only the tokenizer is loaded, and only when some text is new). The knowledge bases of
    settled files (kbctl.engine.settled) are unchanged; `order` names every knowledge base in the order of the
    results. With `prune`, the stored knowledge bases it covers that are not among them are listed as
    "pruned". Errors (an unknown model, the store) raise KbctlError.
    """
    differ = _Differ(db, embedder_for)
    with db.read_only():
        results = [differ.diff(kb) for kb in honour_applied_from(db, knowledge_bases)]
        results += [_settled_diff(kb) for kb in settled]
        if order:
            results = in_file_order(order, results)
        if prune is not None:
            keep = {r.name for r in results}
            results += [
                KnowledgeBaseDiff(name=row.name, action="pruned", version=row.current_version)
                for row in db.list_kbs()
                if row.name not in keep and prune.covers(row)
            ]
    return DiffReport(results=results)
