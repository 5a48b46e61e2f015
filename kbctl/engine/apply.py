"""The engine: apply manifests and refresh sources, publishing a new version only when content changed.

plan (desired vs stored, fetching what must be fetched) → chunk → hash → embed only what the cache
lacks → publish the version and the live source statuses in one transaction. A source whose content,
chunking and model are unchanged reuses its stored revision as is (no chunking, embedding or copying).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel

from kbctl.embedding import Embedder
from kbctl.engine.conditions import conditions_for
from kbctl.engine.events import NullReporter, Reporter
from kbctl.engine.ingest import ingest
from kbctl.engine.plan import FetchMode, SourcePlan, changed_sources, plan_sources, sha256_json
from kbctl.errors import KbctlError, NotFoundError, StoreError
from kbctl.manifest import KnowledgeBase
from kbctl.manifest.changes import field_changes, source_changes
from kbctl.sources.url import FetchPolicy
from kbctl.store.database import Database, SourceEntry
from kbctl.store.history import applying, prune_history

__all__ = [
    "ApplyReport",
    "KnowledgeBaseResult",
    "SourceResult",
    "apply_knowledge_bases",
    "refresh_knowledge_bases",
    "source_lines",
]


class SourceResult(BaseModel):
    """What apply or refresh did with one source."""

    name: str
    state: Literal["ready", "stale", "failed"]
    fetched: bool
    ingested: bool
    chunks: int
    embedded: int
    reused: int
    message: str | None = None

    @property
    def failed(self) -> bool:
        """The source could not be read this time (stale ones still serve their last good content)."""
        return self.state != "ready"


class KnowledgeBaseResult(BaseModel):
    """What apply or refresh did with one knowledge base."""

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


def _result(p: SourcePlan) -> SourceResult:
    return SourceResult(
        name=p.source.name,
        state=p.state,
        fetched=p.fetched,
        ingested=p.ingest,
        chunks=p.chunk_count if p.serves else 0,
        embedded=p.embedded,
        reused=p.chunk_count - p.embedded if p.serves else 0,
        message=p.message,
    )


def _reconcile_one(
    db: Database,
    kb: KnowledgeBase,
    embedder: Embedder,
    reporter: Reporter,
    *,
    mode: FetchMode,
    only: Collection[str],
    policy: FetchPolicy | None,
    generation: int | None = None,
) -> KnowledgeBaseResult:
    name, manifest = kb.name, kb.to_manifest()
    manifest_sha256 = sha256_json(manifest)
    if not db.has_text_search_config(kb.spec.retrieval.language):
        raise StoreError(
            f"spec.retrieval.language '{kb.spec.retrieval.language}' is not a text search configuration of this "
            "PostgreSQL (english and simple always exist)"
        )
    # In-process apply records the manifest as desired first; a controller (`generation` given) works
    # on a desired state recorded earlier and must not record it again.
    row = db.record_desired(name, manifest) if mode == "apply" and generation is None else db.get_kb(name)
    if row is None:
        raise NotFoundError(f'knowledgebase "{name}" not found')
    current = db.get_version(row.id, row.current_version) if row.current_version else None
    previous = {s.source_name: s for s in db.version_sources(current.id)} if current else {}
    statuses = db.source_statuses(row.id)
    plans = plan_sources(
        db, kb, row.id, previous, statuses, mode=mode, only=only, model_id=embedder.model_id, policy=policy
    )
    now = datetime.now(UTC)
    prefix = f"KnowledgeBase/{name}"

    def record(serving: int) -> None:
        """Mark this generation reconciled; a newer one recorded meanwhile keeps the KB pending."""
        done = row.generation if generation is None else generation
        latest = db.get_kb(name)
        failing = [(s.source_name, s.message or s.state) for s in (p.status(now) for p in plans) if s.state != "ready"]
        conditions = conditions_for(
            row.conditions,
            now=datetime.now(UTC),
            serving=serving,
            pending=latest is not None and latest.generation > done,
            failing_sources=failing,
        )
        db.finish_generation(row.id, done, conditions)

    if current is not None and current.manifest_sha256 == manifest_sha256 and not changed_sources(plans, previous):
        db.write_statuses(row.id, [p.status(now) for p in plans])
        record(current.number)
        if mode == "apply":
            reporter.line(f"{prefix} unchanged (version {current.number})")
        results = [_result(p) for p in plans]
        for line in source_lines(prefix, results, embedder.model_id, mode):
            reporter.line(line)
        if mode == "refresh":
            reporter.line(f"{prefix} unchanged (version {current.number})")
        return KnowledgeBaseResult(name=name, action="unchanged", version=current.number, sources=results)

    number = db.next_version_number(row.id)
    action: Literal["created", "configured", "refreshed"] = (
        "created" if current is None else "refreshed" if mode == "refresh" else "configured"
    )
    if mode == "apply":
        waiting = sum(1 for p in plans if p.ingest or p.failed)
        noun = "source" if waiting == 1 else "sources"
        work = f"waiting for the ingestion of {waiting} {noun}" if waiting else "every source reuses stored content"
        reporter.line(f"{prefix} {action} (version {number}); {work}")
    ids = ingest(db, kb, plans, embedder, reporter)
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
                chunk_count=p.chunk_count if p.serves else 0,
                embedded=p.embedded,
            )
            for p in plans
        ],
        statuses=[p.status(now) for p in plans],
        change_cause=_change_cause(current.manifest if current else None, manifest, plans, mode),
    )
    prune_history(db, row.id, kb.spec.version_history)
    record(number)
    results = [_result(p) for p in plans]  # after ingest: embedded counts and failures are known
    for line in source_lines(prefix, results, embedder.model_id, mode):
        reporter.line(line)
    if mode == "refresh":
        reporter.line(f"{prefix} refreshed (version {number})")
    return KnowledgeBaseResult(name=name, action=action, version=number, sources=results)


def _change_cause(old: dict[str, Any] | None, new: dict[str, Any], plans: Sequence[SourcePlan], mode: FetchMode) -> str:
    """One line for `rollout history`: what made this version."""
    if old is None:
        return "created"
    added, removed, changed = source_changes(old, new)
    parts = [f"{p.path.removeprefix('spec.')} changed" for p in field_changes(old, new)]
    parts += [f"source {n} added" for n in added] + [f"source {n} removed" for n in removed]
    parts += [f"source {n} changed" for n in changed]
    respec = set(added) | set(changed)
    fresh = [p.source.name for p in plans if p.ingest and p.source.name not in respec]
    if fresh:
        parts.append(("refreshed: " if mode == "refresh" else "new content: ") + ", ".join(fresh))
    return "; ".join(parts) or "no content change"


def source_lines(prefix: str, sources: Sequence[SourceResult], model: str, mode: FetchMode = "apply") -> list[str]:
    """The per-source lines of apply and refresh (`KnowledgeBase/x source faq ready: 3 chunks (model)`)."""
    lines = []
    for r in sources:
        src = f"{prefix} source {r.name}"
        if r.failed:
            lines.append(f"{src} failed: {r.message}")
        elif r.ingested:
            noun = "chunk" if r.chunks == 1 else "chunks"
            new = f", {r.embedded} new" if mode == "refresh" else ""
            lines.append(f"{src} ready: {r.chunks} {noun} ({model}){new}")
        elif r.fetched and mode == "refresh":
            lines.append(f"{src} unchanged")
    return lines


def _record_failure(db: Database, name: str, reason: str) -> None:
    """Mark an existing knowledge base not Ready after a failed reconcile (its current version still serves)."""
    try:
        row = db.get_kb(name)
        if row is not None:
            now = datetime.now(UTC)
            db.set_conditions(
                row.id, conditions_for(row.conditions, now=now, serving=row.current_version, failure=reason)
            )
    except KbctlError:
        pass  # the store itself is failing: the reason was already reported


def _run(
    db: Database,
    knowledge_bases: Sequence[KnowledgeBase],
    embedder_for: Callable[[str], Embedder],
    reporter: Reporter | None,
    *,
    mode: FetchMode,
    only: Collection[str] = (),
    policy: FetchPolicy | None = None,
    generation: int | None = None,
) -> ApplyReport:
    reporter = reporter or NullReporter()
    results: list[KnowledgeBaseResult] = []
    for kb in knowledge_bases:
        try:
            embedder = embedder_for(kb.spec.embedding.ref)
            with applying(db), db.kb_lock(kb.name):
                results.append(
                    _reconcile_one(
                        db, kb, embedder, reporter, mode=mode, only=only, policy=policy, generation=generation
                    )
                )
        except KbctlError as exc:
            _record_failure(db, kb.name, str(exc))
            reporter.line(f"KnowledgeBase/{kb.name} failed: {exc}")
            results.append(
                KnowledgeBaseResult(name=kb.name, action="failed", version=None, sources=[], message=str(exc))
            )
    return ApplyReport(results=results)


def apply_knowledge_bases(
    db: Database,
    knowledge_bases: Sequence[KnowledgeBase],
    embedder_for: Callable[[str], Embedder],
    reporter: Reporter | None = None,
    *,
    policy: FetchPolicy | None = None,
    generation: int | None = None,
) -> ApplyReport:
    """Reconcile the store to match each knowledge base, one at a time under its advisory lock.

    URL sources are fetched only when new, changed in the spec, or never fetched successfully. A
    knowledge base that fails as a whole (its model cannot load, the store refuses a write) is reported
    as failed and leaves its current version serving; the others still apply. `generation` is for
    the controller: reconcile that recorded generation instead of recording these manifests as desired.
    """
    return _run(db, knowledge_bases, embedder_for, reporter, mode="apply", policy=policy, generation=generation)


def refresh_knowledge_bases(
    db: Database,
    names: Sequence[str] | None,
    embedder_for: Callable[[str], Embedder],
    reporter: Reporter | None = None,
    *,
    sources: Collection[str] = (),
    policy: FetchPolicy | None = None,
) -> ApplyReport:
    """Re-fetch the URL sources of knowledge bases (all of them when `names` is None) as their current
    version's manifest describes them; publish a new version only where some content changed.

    `sources` limits the refresh to those source names. Unknown names raise NotFoundError before any work.
    """
    if names is None:
        names = [row.name for row in db.list_kbs() if row.current_version is not None]
    kbs: list[KnowledgeBase] = []
    for name in names:
        row = db.get_kb(name)
        version = db.get_version(row.id, row.current_version) if row and row.current_version else None
        if row is None or version is None:
            raise NotFoundError(f'knowledgebase "{name}" not found')
        kb = KnowledgeBase.model_validate(version.manifest)
        unknown = sorted(set(sources) - {s.name for s in kb.spec.sources})
        if unknown and len(names) == 1:
            raise NotFoundError(f'knowledgebase "{name}" has no source {", ".join(repr(u) for u in unknown)}')
        kbs.append(kb)
    return _run(db, kbs, embedder_for, reporter, mode="refresh", only=sources, policy=policy)
