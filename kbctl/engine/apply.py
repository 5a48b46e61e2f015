"""Apply manifests and refresh sources: read the stored state, fetch, plan, ingest, publish one new version.

Per knowledge base, under its advisory lock: record the desired manifest (apply), read the stored state
once, fetch what the trigger asks for (kbctl.engine.fetch), build the frozen plan (kbctl.engine.plan), then
either record "unchanged" or ingest the new content (kbctl.engine.ingest) and publish the version and the live
source statuses in one transaction (kbctl.engine.publish). A version in which no source serves any content is
not published. Progress goes out as typed events.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime

from kbctl.defaults import ANALYZE_AFTER_CHUNKS, ANALYZE_CHUNK_SHARE
from kbctl.embedding import Embedder
from kbctl.embedding.background import keyword_threshold, version_threshold
from kbctl.engine.conditions import PublishedNothing, observe
from kbctl.engine.eventlog import calibrated, record, result_events
from kbctl.engine.events import (
    NullReporter,
    ReconcileFailed,
    ReconcileStarted,
    Reporter,
    Trigger,
    VectorIndexBuilt,
    VersionCalibrated,
    WorkProgress,
    failure_reason,
    report_sources,
)
from kbctl.engine.fetch import fetch_sources
from kbctl.engine.ingest import IngestRun, background_vectors, ingest
from kbctl.engine.plan import Fail, KnowledgeBasePlan, Reuse, SourcePlan, build_plan
from kbctl.engine.publish import Outcome, live_status, publish_version, write_live_statuses
from kbctl.engine.results import AppliedSource, ApplyReport, KnowledgeBaseResult
from kbctl.errors import KbctlError, NotFoundError, StoreError, UsageError
from kbctl.manifest import KnowledgeBase
from kbctl.manifest.digest import manifest_digests
from kbctl.sources.url import FetchPolicy
from kbctl.store.database import Database, KnowledgeBaseRow, LiveSourceRow, NewRevision, WrittenRevision
from kbctl.store.events import NewEvent
from kbctl.store.rows import source_state
from kbctl.store.state import StoredState
from kbctl.store.texts import packing

__all__ = [
    "ApplyReport",
    "KnowledgeBaseResult",
    "apply_knowledge_bases",
    "refresh_knowledge_bases",
]

EmbedderFor = Callable[[str], Embedder]

# How this process names itself when it marks the generation it reconciles in-process (kbctl.store.claims).
_HOLDER = f"{socket.gethostname()}-{os.getpid()}"


def source_result(p: SourcePlan, outcome: Outcome | None = None) -> AppliedSource:
    """What happened to one source: its plan, and for new content what ingesting it gave."""
    decision = outcome if isinstance(outcome, Fail) else p.decision
    chunks = embedded = truncated = 0
    message = None
    if isinstance(decision, Fail):
        chunks, message = (decision.keep.chunk_count if decision.keep else 0), decision.message
    elif isinstance(outcome, NewRevision | WrittenRevision):
        chunks, embedded, truncated = outcome.chunk_count, outcome.embedded, outcome.truncated
    elif isinstance(decision, Reuse):
        chunks = decision.chunk_count
    kept = decision.keep if isinstance(decision, Fail) else None
    return AppliedSource(
        name=p.name,
        state=source_state(read=not isinstance(decision, Fail), serving=kept is not None),
        fetched=p.fetch,
        ingested=isinstance(outcome, NewRevision | WrittenRevision),
        chunks=chunks,
        embedded=embedded,
        reused=chunks - embedded,
        message=message,
        truncated=truncated,
    )


class _Reconciler:
    """Reconciles one knowledge base at a time against one database, reporting events."""

    def __init__(
        self,
        db: Database,
        embedder_for: EmbedderFor,
        reporter: Reporter,
        trigger: Trigger,
        *,
        only: Collection[str] = (),
        policy: FetchPolicy | None = None,
        generation: int | None = None,
        component: str | None = None,
    ) -> None:
        self.db, self.embedder_for, self.reporter, self.trigger = db, embedder_for, reporter, trigger
        self.only, self.policy, self.generation = only, policy, generation
        self.component = component or trigger  # who the events name: apply, refresh or controller
        self._marked: set[str] = set()  # knowledge bases whose pending generation this apply marked as its own

    def run(self, knowledge_bases: Sequence[KnowledgeBase]) -> ApplyReport:
        results: list[KnowledgeBaseResult] = []
        for kb in knowledge_bases:
            try:
                embedder = self.embedder_for(kb.spec.embedding.ref)
                with self.db.applying(), self.db.kb_lock(kb.name):
                    result = self.reconcile(kb, embedder)
            except UsageError:
                raise  # a bad argument is the caller's to fix, not a failed reconcile to record
            except KbctlError as exc:
                self._record_failure(kb.name, PublishedNothing("ReconcileFailed", str(exc)))
                self.reporter.report(ReconcileFailed(kb.name, str(exc), failure_reason(exc)))
                result = KnowledgeBaseResult(name=kb.name, action="failed", version=None, sources=[], message=str(exc))
            finally:
                if kb.name in self._marked:
                    self._marked.discard(kb.name)
                    with contextlib.suppress(KbctlError):  # the store is gone: the mark stays, for the controller
                        self.db.mark_applying(kb.name, None)
            record(self.db, result_events(result, self.component))
            results.append(result)
        return ApplyReport(results=results)

    def _record_failure(self, name: str, failure: PublishedNothing) -> None:
        """Mark a knowledge base not Ready after a failed reconcile (its current version, if any, still serves)."""
        try:
            row = self.db.get_kb(name)
            if row is not None:
                observe(self.db, row, failure=failure)
        except KbctlError:
            pass  # the store itself is failing: the reason was already reported

    def reconcile(self, kb: KnowledgeBase, embedder: Embedder) -> KnowledgeBaseResult:
        db, name = self.db, kb.name
        if not db.has_text_search_config(kb.spec.retrieval.language):
            raise StoreError(
                f"spec.retrieval.language '{kb.spec.retrieval.language}' is not a text search configuration of this "
                "PostgreSQL (english and simple always exist)"
            )
        # In-process apply records the manifest as desired first; a controller (`generation` given) works
        # on a desired state recorded earlier and must not record it again.
        manifest = kb.to_manifest()
        digests = manifest_digests(manifest)  # the manifest's and each source's, from one encoding of their text
        known, packed = (digests.manifest, manifest), packing(manifest)  # inline texts hashed once, when needed
        in_process = self.trigger == "apply" and self.generation is None
        if in_process:
            self._pending(db.record_desired(name, manifest, digest=known[0], packed=packed))
        state = db.read_state(name, known)
        if state.row is None:
            raise NotFoundError(f'knowledgebase "{name}" not found')
        done = self.generation if self.generation is not None else state.row.generation
        fetched = fetch_sources(
            kb,
            state,
            model_id=embedder.model_id,
            trigger=self.trigger,
            only=self.only,
            policy=self.policy,
            on_progress=lambda done, total: self.reporter.report(WorkProgress(name, "fetching", done, total)),
        )
        if fetched.read_from is not None:
            db.record_applied_from(state.row.id, str(fetched.read_from))  # every path source listed there: vouch
        now = datetime.now(UTC)
        plan = build_plan(
            kb,
            state,
            fetched.records,
            model_id=embedder.model_id,
            trigger=self.trigger,
            now=now,
            known=known,
            source_sha256s=digests.sources,
            packed=packed,
        )
        if in_process and name not in self._marked and kb.reads_files and not plan.unchanged:
            # The files changed under the same manifest: that is a new desired state too, recorded before any work,
            # so that a controller finishes it if this apply is interrupted (it reads them where this one did).
            done = self._pending(db.record_desired(name, manifest, digest=known[0], packed=packed, files_changed=True))
        action = plan.action
        version = plan.current_version if action == "unchanged" else plan.next_version
        assert version is not None
        self.reporter.report(ReconcileStarted(name, self.trigger, action, version, plan.waiting))
        run = IngestRun({}) if plan.unchanged else ingest(db, plan, embedder, self.reporter, state.row.id)
        outcomes: Mapping[str, Outcome] = run.outcomes
        results = [source_result(p, outcomes.get(p.name)) for p in plan.sources]
        statuses = [live_status(p, outcomes.get(p.name), state, now) for p in plan.sources]
        if plan.unchanged:
            write_live_statuses(db, state.row.id, statuses, state.statuses)
            if plan.calibrates and state.current is not None:
                self._calibrate(plan, state.current.id, embedder)
            observe(db, state.row, finished=done)
        elif not any(r.chunks for r in results):
            return self._nothing_to_serve(plan, state, results, statuses, embedder.model_id, done)
        else:
            publish_version(db, plan, run, results, statuses, state.statuses)
            db.prune_history(state.row.id, kb.spec.version_history)
            observe(db, state.row, finished=done)
        refresh = kb.spec.refresh
        seconds = refresh.seconds if refresh and not kb.spec.suspended else None  # suspended: no scheduled refresh
        db.set_schedule(state.row.id, seconds, refreshed=self.trigger == "refresh")
        gone = [] if plan.unchanged else plan.documents_removed
        report_sources(
            self.reporter, name, self.trigger, results, embedder.model_id, finished=(action, version), removed=gone
        )
        self._after(plan, run.chunks, embedder.model_id)
        return KnowledgeBaseResult(name=name, action=action, version=version, sources=results, removed=gone)

    def _after(self, plan: KnowledgeBasePlan, new_chunks: int, model: str) -> None:
        """What a reconcile leaves the store after its version: the model's vector index, when content was ingested
        (new vectors may give the model enough for one), and the planner's statistics."""
        if new_chunks:
            self._index(plan.name, model)
        if new_chunks >= ANALYZE_AFTER_CHUNKS and new_chunks >= ANALYZE_CHUNK_SHARE * self.db.estimated_chunks():
            # The planner's estimates of full-text matches in a much larger table. A share of a large one changes
            # them little, and ANALYZE of 900,000 chunks (their tsvectors) took 66 s after a 1% change.
            self.db.analyze_chunks()
        if not plan.unchanged:
            self.db.analyze_versions()  # the planner's estimate of the new version's size (~10 ms at 18,000 rows)

    def _pending(self, recorded: KnowledgeBaseRow) -> int:
        """After an in-process apply recorded its desired state: while a generation is pending, the knowledge base
        says so and is marked as this apply's, which stays true if the apply is killed or loses its database, so a
        controller then finishes it (kbctl.store.claims.mark_applying). The recorded generation."""
        if recorded.generation > recorded.observed_generation:
            observe(self.db, recorded)
            self.db.mark_applying(recorded.name, _HOLDER)
            self._marked.add(recorded.name)
        return recorded.generation

    def _calibrate(self, plan: KnowledgeBasePlan, version_id: int, embedder: Embedder) -> None:
        """Calibrate the version that keeps serving, published before versions were calibrated as they now are (its
        content untouched). One that fails keeps the lines it had and does not fail the apply: it is an event, and
        the next apply or refresh tries again."""
        assert plan.current_version is not None
        try:
            vectors = background_vectors(self.db, embedder)
            similarity, keyword = self.db.calibrate(version_id, vectors, plan.kb.spec.retrieval.language)
        except KbctlError as exc:
            message = (
                f"version {plan.current_version} was not calibrated ({exc}); the next apply or refresh tries again"
            )
            record(self.db, [NewEvent(plan.name, "Warning", "CalibrationFailed", message, self.component)])
            return
        event = VersionCalibrated(
            plan.name, plan.current_version, version_threshold(plan.model_id, similarity), keyword_threshold(keyword)
        )
        self.reporter.report(event)
        record(self.db, [calibrated(event, self.component)])

    def _index(self, name: str, model: str) -> None:
        """Build the model's vector index once it has enough vectors; the published version serves meanwhile. A build
        that fails leaves no index (queries search exactly) and does not fail the apply, whose version is published:
        it is an event, and the next apply that adds vectors builds it."""
        started = time.perf_counter()
        try:
            index = self.db.build_vector_index(model)
        except StoreError as exc:
            message = (
                f"the vector index of {model} was not built ({exc}); queries search exactly until an apply builds it"
            )
            record(self.db, [NewEvent(name, "Warning", "VectorIndexFailed", message, self.component)])
            return
        if index is not None:
            self.reporter.report(VectorIndexBuilt(name, model, index.vectors, time.perf_counter() - started))

    def _nothing_to_serve(
        self,
        plan: KnowledgeBasePlan,
        state: StoredState,
        results: Sequence[AppliedSource],
        statuses: list[LiveSourceRow],
        model: str,
        done: int,
    ) -> KnowledgeBaseResult:
        """No source would serve any content: publish nothing, keep what serves, say which sources failed."""
        assert state.row is not None
        write_live_statuses(self.db, state.row.id, statuses)
        failed = [f"{r.name}: {r.message}" for r in results if r.message] or [r.name for r in results]
        message = "no source could be read (" + "; ".join(failed) + ")"
        # The generation `done` is reconciled (its outcome is known); the controller does not retry it.
        observe(self.db, state.row, finished=done, failure=PublishedNothing("NoContent", message))
        report_sources(self.reporter, plan.name, self.trigger, results, model, failed=message)
        return KnowledgeBaseResult(
            name=plan.name, action="failed", version=None, sources=list(results), message=message
        )


def apply_knowledge_bases(
    db: Database,
    knowledge_bases: Sequence[KnowledgeBase],
    embedder_for: EmbedderFor,
    reporter: Reporter | None = None,
    *,
    policy: FetchPolicy | None = None,
    generation: int | None = None,
    component: str | None = None,
) -> ApplyReport:
    """Reconcile the store to match each knowledge base, one at a time under its advisory lock.

    URL sources are fetched only when new, changed in the spec, or never fetched successfully. A
    knowledge base that fails as a whole (its model cannot load, the store refuses a write, no source can
    be read) is reported as failed and leaves its current version serving; the others still apply.
    `generation` is for the controller: reconcile that recorded generation instead of recording these
    manifests as desired. `component` names who did it in the events recorded (default "apply").
    """
    reconciler = _Reconciler(
        db, embedder_for, reporter or NullReporter(), "apply", policy=policy, generation=generation, component=component
    )
    return reconciler.run(knowledge_bases)


def refresh_knowledge_bases(
    db: Database,
    names: Sequence[str] | None,
    embedder_for: EmbedderFor,
    reporter: Reporter | None = None,
    *,
    sources: Collection[str] = (),
    policy: FetchPolicy | None = None,
    component: str | None = None,
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
        kb = KnowledgeBase.from_manifest(version.manifest)
        unknown = sorted(set(sources) - {s.name for s in kb.spec.sources})
        if unknown and len(names) == 1:
            raise NotFoundError(f'knowledgebase "{name}" has no source {", ".join(repr(u) for u in unknown)}')
        kbs.append(kb)
    reconciler = _Reconciler(
        db, embedder_for, reporter or NullReporter(), "refresh", only=sources, policy=policy, component=component
    )
    return reconciler.run(kbs)
