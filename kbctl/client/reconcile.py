"""Changing what the store serves (`Reconciling`): `apply` (and `apply_paths`, `load_settled`), `refresh`, `diff`,
the `controller` and waiting on it (`wait`, `rollout_status`), `rollback`, `collect_garbage` and `delete`
(`DeleteResult`). Each hands the work to kbctl.engine, imported when called."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from kbctl import telemetry
from kbctl.client._base import StoreBase
from kbctl.defaults import APPLY_WAIT_SECONDS, WAIT_SECONDS
from kbctl.errors import NotFoundError

if TYPE_CHECKING:
    from kbctl.engine.controller import Controller, RolloutStatus
    from kbctl.engine.diff import DiffReport
    from kbctl.engine.events import Reporter
    from kbctl.engine.prune import PruneScope
    from kbctl.engine.results import ApplyReport, PendingResult
    from kbctl.engine.settled import ManifestsToApply
    from kbctl.manifest import KnowledgeBase, LoadedManifest, ManifestFile
    from kbctl.manifest.load import ManifestFiles
    from kbctl.sources.url import FetchPolicy
    from kbctl.store.applied import SettledKnowledgeBase
    from kbctl.store.history import GcResult, RollbackResult

__all__ = ["DeleteResult", "Reconciling"]


class DeleteResult(BaseModel):
    """What `delete` removed."""

    name: str
    chunks: int
    vectors: int
    warnings: list[str] = Field(
        default_factory=list, exclude=True, description="A forced delete of a knowledge base a Sync manages warns."
    )


def _knowledge_bases(items: Sequence[KnowledgeBase | LoadedManifest]) -> list[KnowledgeBase]:
    """The knowledge bases of loaded manifests (or of knowledge bases given as they are)."""
    from kbctl.manifest import LoadedManifest

    return [k.kb if isinstance(k, LoadedManifest) else k for k in items]


class Reconciling(StoreBase):
    """Changing what the store serves: apply, refresh, diff, the controller and waiting on it, rollback, garbage
    collection, delete."""

    def apply(
        self,
        manifests: Sequence[KnowledgeBase | LoadedManifest] | ManifestsToApply,
        *,
        wait: bool = True,
        controller: bool = False,
        timeout: float = APPLY_WAIT_SECONDS,
        applyset: str | None = None,
        prune: PruneScope | None = None,
        reporter: Reporter | None = None,
        on_recorded: Callable[[list[PendingResult]], None] | None = None,
        force: bool = False,
    ) -> ApplyReport:
        """Make the store match these knowledge bases; each publishes a new version if anything changed.

        By default the work is done here, before returning. `controller=True` hands it to a running
        `kbctl controller` and waits for it up to `timeout` seconds (`kbctl apply --wait`; done here all the same
        when none runs, or when a knowledge base reads files that only this process has). `wait=False` records
        the desired state for a controller and returns (`report.recorded`; `on_recorded` hears it first), except
        for knowledge bases of path: sources, applied here. `applyset` records the knowledge bases as members of
        that apply set (one that belongs to another set is refused before anything is written); `prune` then
        deletes what its scope covers and the manifests no longer name (`report.pruned`). What `load_settled`
        gave is applied without parsing the settled files again. `report.exit_code()` is `kbctl apply`'s.

        A knowledge base a Sync manages (one it applied, while the Sync exists and is not suspended) is refused
        with ManagedError, before anything is written, when this apply would change it: the Sync would undo it.
        `force=True` applies it all the same (`report.warnings` says so).
        """
        from kbctl.engine.orchestrate import ApplyOptions, run_apply
        from kbctl.engine.settled import ManifestsToApply

        chosen = manifests if isinstance(manifests, ManifestsToApply) else _knowledge_bases(manifests)
        options = ApplyOptions(
            wait=wait, controller=controller, timeout=timeout, applyset=applyset, prune=prune, force=force
        )
        with telemetry.apply_spans("kbctl.apply", reporter) as spans:
            report = run_apply(
                self.db,
                chosen,
                self.embedder,
                options,
                reporter=spans.reporter,
                policy=self.fetch_policy,
                on_recorded=on_recorded,
            )
            spans.finished(report)
        return report

    def apply_paths(
        self, paths: Sequence[str], *, recursive: bool = False, reporter: Reporter | None = None
    ) -> ApplyReport:
        """Load manifests like `kubectl apply -f` (all validated before anything is written), then `apply` them."""
        from kbctl.manifest import load_manifests

        return self.apply(load_manifests(paths, recursive=recursive), reporter=reporter)

    def refresh(
        self,
        names: Sequence[str] | None = None,
        *,
        sources: Sequence[str] = (),
        reporter: Reporter | None = None,
        policy: FetchPolicy | None = None,
    ) -> ApplyReport:
        """Re-fetch URL sources (of `names`, or of every knowledge base) and republish only what changed.

        A page answering 304 Not Modified, or whose extracted text is unchanged, is not re-chunked or
        re-embedded; a page that fails keeps serving its last good content and is reported stale.
        """
        from kbctl.engine.apply import refresh_knowledge_bases

        with telemetry.apply_spans("kbctl.refresh", reporter) as spans:
            report = refresh_knowledge_bases(
                self.db,
                names,
                self.embedder,
                spans.reporter,
                sources=sources,
                policy=self._with_cache(policy) if policy is not None else self.fetch_policy,
            )
            spans.finished(report)
        return report

    def load_settled(self, files: ManifestFiles) -> ManifestsToApply:
        """Parse manifest files read for `apply`, except those the store applied byte for byte and still serves
        (kbctl.engine.settled): those are known by name only, and `apply` and `diff` report them unchanged.
        Raises ManifestError for the problems of the files parsed."""
        from kbctl.engine.settled import ManifestsToApply, file_key, settled
        from kbctl.manifest import load_manifest_set

        keys: dict[str, str] = {}
        found: dict[str, list[SettledKnowledgeBase]] = {}

        def lookup(readable: list[ManifestFile]) -> dict[int, tuple[str, list[tuple[str, int]]]]:
            keys.update((f.path, file_key(f.path, f.text or "")) for f in readable)
            found.update(settled(self.db, list(keys.values()), self.embedder))
            return {
                i: (keys[f.path], [(kb.name, kb.line) for kb in found[keys[f.path]]])
                for i, f in enumerate(readable)
                if keys[f.path] in found
            }

        loaded = load_manifest_set(files, settled=lookup)
        rows = tuple(kb for s in loaded.settled for kb in found[s.key] if kb.name == s.name)
        return ManifestsToApply(loaded, rows, keys)

    def diff(
        self,
        manifests: Sequence[KnowledgeBase | LoadedManifest] | ManifestsToApply,
        *,
        prune: PruneScope | None = None,
    ) -> DiffReport:
        """What `apply` would do (and, with a prune scope, prune), without writing or fetching anything; the
        knowledge bases of settled files (`load_settled`) are unchanged."""
        from kbctl.engine.diff import diff_knowledge_bases
        from kbctl.engine.settled import ManifestsToApply

        if not isinstance(manifests, ManifestsToApply):
            return diff_knowledge_bases(self.db, _knowledge_bases(manifests), self.embedder, prune=prune)
        kbs = [m.kb for m in manifests.manifests.manifests]
        return diff_knowledge_bases(
            self.db, kbs, self.embedder, prune=prune, settled=manifests.settled, order=manifests.manifests.names
        )

    def controller(self, *, reporter: Reporter | None = None) -> Controller:
        """A controller over this store (use `run_once()` or `run(stop_event)`); each reconcile is a
        `kbctl.reconcile` span when tracing (kbctl.telemetry)."""
        from kbctl.engine.controller import Controller

        return Controller(self.db, self.embedder, reporter=telemetry.span_reporter(reporter), policy=self.fetch_policy)

    def controller_alive(self) -> bool:
        """Whether a controller has announced itself recently."""
        from kbctl.engine.controller import controller_alive

        return controller_alive(self.db)

    def wait(
        self,
        name: str | Sequence[str],
        *,
        condition: str = "Ready",
        value: bool = True,
        generation: int | None = None,
        deleted: bool = False,
        timeout: float = WAIT_SECONDS,
        on_met: Callable[[str], None] | None = None,
    ) -> bool:
        """Wait until a knowledge base (or each of several) has a condition (default Ready=True, for the latest
        generation), or with `deleted` until it no longer exists; False when `timeout` seconds pass first (one
        deadline for all). `on_met` hears each name as soon as it is met. A name that does not exist is
        NotFoundError, except with `deleted` (met at once).

        >>> store.wait(["a", "b"], timeout=300, on_met=print)    # doctest: +SKIP
        """
        from kbctl.engine.controller import wait_for_all, wait_for_deletion

        names = [name] if isinstance(name, str) else list(name)
        if deleted:
            return not wait_for_deletion(self.db, names, timeout=timeout, on_deleted=on_met)
        left = wait_for_all(
            self.db, names, condition=condition, value=value, generation=generation, timeout=timeout, on_met=on_met
        )
        return not left

    def rollout_status(
        self,
        name: str,
        *,
        watch: bool = True,
        timeout: float | None = WAIT_SECONDS,
        progress_deadline: float | None = None,
        on_progress: Callable[[RolloutStatus], None] | None = None,
    ) -> RolloutStatus:
        """Where the rollout of a knowledge base's latest generation stands (`kbctl rollout status`): with `watch`,
        wait until it is done (reconciled and Ready) or failed, up to `timeout` seconds (None: no limit), or until it
        made no progress for `progress_deadline` seconds (then the result is `stalled`; `on_progress` hears each new
        waiting status); without, the status now. The result's `state` is "done", "failed" or "waiting"."""
        from kbctl.engine.controller import rollout_status, wait_for_rollout

        if not watch:
            return rollout_status(self.db, name)
        return wait_for_rollout(
            self.db, name, timeout=timeout, progress_deadline=progress_deadline, on_progress=on_progress
        )

    def rollback(
        self,
        name: str,
        to_version: int | None = None,
        *,
        timeout: float | None = 60.0,
        on_wait: Callable[[], None] | None = None,
        force: bool = False,
    ) -> RollbackResult:
        """Serve an earlier retained version again (default: the one before the current); nothing is re-embedded.

        Waits (calling `on_wait`) at most `timeout` seconds for an apply of the knowledge base to finish. A knowledge
        base a Sync manages is refused (ManagedError: its next pass would undo it) unless `force` (then
        `result.warnings` says so)."""
        from kbctl.engine.conditions import observe
        from kbctl.engine.eventlog import record, rolled_back
        from kbctl.engine.ownership import check_hand_change

        warnings = check_hand_change(self.db, [name], "rollback", force=force)
        result = self.db.rollback_kb(name, to_version, timeout=timeout, on_wait=on_wait)
        row = self.db.get_kb(name)
        if row is not None:
            observe(self.db, row)
        record(self.db, [rolled_back(name, result.from_version, result.to_version)])
        return result.model_copy(update={"warnings": warnings})

    def collect_garbage(self, batch: int = 1000) -> GcResult:
        """Delete cached vectors no chunk references, in batches (skipped while an apply runs)."""

        return self.db.collect_garbage(batch)

    def delete(
        self,
        name: str,
        *,
        timeout: float | None = 60.0,
        on_wait: Callable[[], None] | None = None,
        force: bool = False,
    ) -> DeleteResult:
        """Delete a knowledge base with everything only it used (versions, chunks, cached vectors).

        Takes the knowledge base's lock, so a running apply finishes first (it is not recreated half
        way); `on_wait` is called when that means waiting, `timeout` bounds the wait (StoreError). A knowledge
        base a Sync manages is refused (ManagedError: its next pass would create it again) unless `force` (then
        `result.warnings` says so).
        """
        from kbctl.engine.eventlog import deleted, record
        from kbctl.engine.ownership import check_hand_change

        warnings = check_hand_change(self.db, [name], "delete", force=force)
        with self.db.kb_lock(name, timeout=timeout, on_wait=on_wait):
            removed = self.db.delete_kb(name)
        if removed is None:
            raise NotFoundError(f'knowledgebase "{name}" not found')
        record(self.db, [deleted(name, "delete")])
        return DeleteResult(name=name, chunks=removed[0], vectors=removed[1], warnings=warnings)
