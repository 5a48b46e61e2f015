"""One apply, end to end: what `kbctl apply` (and `KnowledgeBaseStore.apply`) does with a set of manifests.

    settled files   reported unchanged from the store, not parsed or planned (kbctl.engine.settled)
    wait            reconciled before returning: here, or by a running controller when asked to use one
    no wait         recorded as desired state for a controller; knowledge bases of path: sources are applied
                    here all the same, since only this process has their files
    ownership       knowledge bases a Sync manages are refused before anything is written, unless forced
    apply set       checked before anything is written, joined after
    prune           the apply set's members (narrowed by a selector) that the manifests no longer name

Every route returns one ApplyReport, whose `exit_code` is the command's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kbctl.defaults import APPLY_WAIT_SECONDS
from kbctl.embedding import Embedder
from kbctl.engine.apply import apply_knowledge_bases
from kbctl.engine.controller import controller_alive, record_pending, wait_for_controller
from kbctl.engine.events import NullReporter, Reporter
from kbctl.engine.located import honour_applied_from
from kbctl.engine.ownership import check_hand_change
from kbctl.engine.prune import PruneScope, check_applyset, prune_knowledge_bases
from kbctl.engine.results import ApplyReport, KnowledgeBaseResult, PendingResult, RecordedSync
from kbctl.engine.settled import ManifestsToApply, in_file_order, record_applied, report_settled
from kbctl.manifest import KnowledgeBase
from kbctl.manifest.digest import manifest_digests
from kbctl.sources.url import FetchPolicy
from kbctl.store.database import Database

__all__ = ["ApplyOptions", "run_apply"]


@dataclass(frozen=True)
class ApplyOptions:
    """How one apply runs (the flags of `kbctl apply`)."""

    wait: bool = True
    """Reconcile before returning; False records the desired state for a controller (`apply` without --wait)."""
    controller: bool = False
    """With `wait`: hand the work to a running controller and wait for it (reconciling here when none runs, or
    when a knowledge base reads files); False reconciles here."""
    timeout: float = APPLY_WAIT_SECONDS
    """With `wait` and a controller: how long to wait for it, in seconds."""
    applyset: str | None = None
    """Record the knowledge bases as members of this apply set (one that belongs to another is refused first)."""
    prune: PruneScope | None = None
    """Then delete what this scope covers and the manifests no longer name."""
    force: bool = False
    """Apply knowledge bases a Sync manages all the same (with a warning); without it, such an apply is refused."""


def run_apply(
    db: Database,
    manifests: Sequence[KnowledgeBase] | ManifestsToApply,
    embedder_for: Callable[[str], Embedder],
    options: ApplyOptions,
    *,
    reporter: Reporter | None = None,
    policy: FetchPolicy | None = None,
    on_recorded: Callable[[list[PendingResult]], None] | None = None,
) -> ApplyReport:
    """Apply `manifests` as `options` say. `on_recorded` (no wait) hears what was left to a controller before
    the knowledge bases of path: sources are applied here."""
    reporter = reporter or NullReporter()
    to_apply = manifests if isinstance(manifests, ManifestsToApply) else None
    if isinstance(manifests, ManifestsToApply):
        kbs, names = [m.kb for m in manifests.manifests.manifests], manifests.manifests.names
    else:
        kbs = list(manifests)
        names = [kb.name for kb in kbs]
    kbs = honour_applied_from(db, kbs)  # output of `get -o yaml` saved elsewhere reads its files where they are
    by_name = {kb.name: kb for kb in kbs}
    warnings = check_hand_change(
        db,
        list(by_name),
        "apply",
        force=options.force,
        applyset=options.applyset,
        digest_of=lambda name: manifest_digests(by_name[name].to_manifest()).manifest,
    )
    if options.applyset is not None:
        check_applyset(db, set(names), options.applyset)

    def here(chosen: Sequence[KnowledgeBase]) -> ApplyReport:
        return apply_knowledge_bases(db, chosen, embedder_for, reporter, policy=policy)

    recorded: list[PendingResult] = []
    if options.wait:
        unchanged = report_settled(db, to_apply.settled, reporter) if to_apply else []
        done = _wait(db, kbs, here, options, reporter).results if kbs else []
        results = in_file_order(names, [*unchanged, *done]) if to_apply else done
        serving = {r.name: r.version for r in results if r.version is not None and not r.failed}
    else:
        rows = to_apply.settled if to_apply else ()
        settled = [PendingResult(kb.name, "unchanged", kb.version, kb.generation, False) for kb in rows]
        pending = [record_pending(db, kb) for kb in kbs if not kb.reads_files]
        recorded = in_file_order(names, [*settled, *pending])
        if on_recorded is not None:
            on_recorded(recorded)
        local = [kb for kb in kbs if kb.reads_files]
        results = here(local).results if local else []
        serving = {p.name: p.version for p in recorded if not p.pending and p.version is not None}
    if to_apply is not None:
        record_applied(db, to_apply, serving)
    if options.applyset is not None:
        db.join_applyset(names, options.applyset)
    pruned = prune_knowledge_bases(db, names, options.prune) if options.prune is not None else []
    syncs = (
        [RecordedSync(name=s.sync.name, action=db.record_sync(s.sync)) for s in to_apply.manifests.syncs]
        if to_apply
        else []
    )
    return ApplyReport(results=results, recorded=recorded, pruned=pruned, syncs=syncs, warnings=warnings)


def _wait(
    db: Database,
    kbs: list[KnowledgeBase],
    here: Callable[[Sequence[KnowledgeBase]], ApplyReport],
    options: ApplyOptions,
    reporter: Reporter,
) -> ApplyReport:
    """Reconcile here, or through a running controller when asked to (here all the same when none runs, or when
    a knowledge base reads files that only this process has)."""
    if not options.controller or not controller_alive(db) or any(kb.reads_files for kb in kbs):
        return here(kbs)
    by_name = {kb.name: kb for kb in kbs}

    def in_process(p: PendingResult) -> KnowledgeBaseResult:
        return here([by_name[p.name]]).results[0]

    pending = [record_pending(db, kb) for kb in kbs]
    return wait_for_controller(db, pending, reporter=reporter, timeout=options.timeout, in_process=in_process)
