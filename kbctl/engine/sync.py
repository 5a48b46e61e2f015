"""Pull mode: a controller fetches each due Sync's git ref (through the git sources' hardened fetch), applies the
KnowledgeBase manifests of its folder as one apply set (pruning, when the Sync says so, what left the folder), and
records the commit it applied. A commit whose manifests do not validate applies nothing: the knowledge bases keep
serving what they served, and the Sync's status and a SyncFailed event name the file, line and field. A folder
with no manifest at all is refused the same way, so a wrong path never prunes everything. A folder holding a
kustomization is rendered by kustomize (kbctl.sources.kustomize), and its output read as the folder's manifests.

The knowledge bases a Sync applies are its own (kbctl.engine.ownership refuses changes by hand without force). Its
inventory records the manifest it applied to each, so a pass that finds one deleted, applied or rolled back by hand
since, and applies the repository's again, leaves a DriftReverted event saying what it reverts."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbctl.embedding import Embedder
from kbctl.engine.apply import apply_knowledge_bases
from kbctl.engine.eventlog import record
from kbctl.engine.events import Reporter, SyncFinished
from kbctl.engine.prune import PruneScope, check_applyset, prune_knowledge_bases
from kbctl.engine.results import KnowledgeBaseResult
from kbctl.errors import KbctlError, ManifestError, SourceError
from kbctl.manifest import KnowledgeBase, load_manifest_set, read_manifest_files
from kbctl.manifest.changes import field_changes, source_changes
from kbctl.manifest.load import ManifestFile, ManifestFiles
from kbctl.manifest.sync import SYNC_APPLYSET_PREFIX
from kbctl.sources.git import fetch_repository
from kbctl.sources.kustomize import kustomization_in, render_kustomization
from kbctl.sources.url import FetchPolicy
from kbctl.store.database import Database
from kbctl.store.events import NewEvent
from kbctl.store.syncs import SyncStatus

__all__ = ["SyncOutcome", "run_due_syncs", "run_sync"]

PROBLEMS_NAMED = 3  # of a bad commit's manifest problems, how many the status and the event name
CHANGES_NAMED = 4  # of a change by hand the Sync reverts, how many differences its DriftReverted event names
VALUE_CHARS = 60  # of each value it shows


@dataclass(frozen=True)
class SyncOutcome:
    """What one pass of a Sync did: the commit it read (None when the fetch failed), the knowledge bases applied and
    pruned, or why it applied nothing."""

    name: str
    revision: str | None
    results: list[KnowledgeBaseResult]
    pruned: list[str]
    error: str | None


def run_due_syncs(
    db: Database, embedder_for: Callable[[str], Embedder], reporter: Reporter, policy: FetchPolicy | None
) -> list[SyncOutcome]:
    """Run every Sync that is due, each claimed first (another controller skips it)."""
    outcomes = []
    while (status := db.claim_due_sync()) is not None:
        outcomes.append(run_sync(db, status, embedder_for, reporter, policy))
    return outcomes


def _failed(db: Database, status: SyncStatus, revision: str | None, error: str, reporter: Reporter) -> SyncOutcome:
    db.finish_sync(status.name, revision, error)
    record(db, [NewEvent(status.name, "Warning", "SyncFailed", error, "controller", kind="Sync")])
    reporter.report(SyncFinished(status.name, revision, error))
    return SyncOutcome(status.name, revision, [], [], error)


def run_sync(
    db: Database,
    status: SyncStatus,
    embedder_for: Callable[[str], Embedder],
    reporter: Reporter,
    policy: FetchPolicy | None,
) -> SyncOutcome:
    """One pass of one Sync (see the module docstring)."""
    policy = policy or FetchPolicy.from_env()
    if policy.cache_dir is None:
        return _failed(db, status, None, "syncs need a cache folder (FetchPolicy.cache_dir)", reporter)
    try:
        checkout = fetch_repository(status.url, status.ref, policy.cache_dir / "syncs", policy.guard())
    except KbctlError as exc:
        return _failed(db, status, None, f"cannot fetch: {exc}", reporter)
    revision, root = checkout.commit, checkout.folder.resolve()
    folder = (root / status.path).resolve()
    if not folder.is_relative_to(root) or not folder.is_dir():
        return _failed(db, status, revision, f"commit {revision[:12]}: no folder {status.path!r}", reporter)
    try:
        loaded = load_manifest_set(_manifest_files(folder, root, status.path))
    except SourceError as exc:
        return _failed(db, status, revision, f"commit {revision[:12]}: {exc}; nothing was applied", reporter)
    except ManifestError as exc:
        problems = [_in_repository(str(p), root) for p in exc.problems]
        more = f" (and {len(problems) - PROBLEMS_NAMED} more)" if len(problems) > PROBLEMS_NAMED else ""
        why = f"commit {revision[:12]}: " + "; ".join(problems[:PROBLEMS_NAMED]) + more + "; nothing was applied"
        return _failed(db, status, revision, why, reporter)
    applyset, kbs = f"{SYNC_APPLYSET_PREFIX}{status.name}", [m.kb for m in loaded.manifests]
    names = [kb.name for kb in kbs]
    try:  # as `kbctl apply --wait --applyset sync-NAME [--prune]` does it, here in the controller
        check_applyset(db, set(names), applyset)
        reverting = _changed_by_hand(db, status.name, kbs, revision)
        report = apply_knowledge_bases(db, kbs, embedder_for, reporter, policy=policy, component="controller")
        db.join_applyset(names, applyset)
        db.record_inventory(status.name, names)
        pruned = prune_knowledge_bases(db, names, PruneScope(applyset, None)) if status.prune else []
    except KbctlError as exc:
        return _failed(db, status, revision, f"commit {revision[:12]}: {exc}", reporter)
    failed = [r.name for r in report.results if r.failed]
    reverted = [NewEvent(n, "Normal", "DriftReverted", why, "controller") for n, why in reverting.items()]
    record(db, [e for e in reverted if e.name not in failed])
    error = f"commit {revision[:12]}: KnowledgeBase {', '.join(failed)} failed (see its events)" if failed else None
    db.finish_sync(status.name, revision, error)
    changed = [r.name for r in report.results if r.action != "unchanged"]
    if error is not None:
        record(db, [NewEvent(status.name, "Warning", "SyncFailed", error, "controller", kind="Sync")])
    elif revision != status.last_applied_revision or changed or pruned:
        message = (
            f"commit {revision[:12]} applied: {len(report.results)} knowledge bases, {len(changed)} changed"
            f"{', pruned ' + ', '.join(pruned) if pruned else ''}"
        )
        record(db, [NewEvent(status.name, "Normal", "SyncApplied", message, "controller", kind="Sync")])
    reporter.report(SyncFinished(status.name, revision, error))
    return SyncOutcome(status.name, revision, list(report.results), pruned, error)


def _changed_by_hand(db: Database, sync: str, kbs: Sequence[KnowledgeBase], revision: str) -> dict[str, str]:
    """The knowledge bases this Sync applied before that were changed by hand since (deleted, applied, rolled back),
    each with what its pass now reverts (the DriftReverted event's message)."""
    inventory = db.sync_inventory(sync)
    ours = [kb for kb in kbs if kb.name in inventory]
    if not ours:
        return {}
    managed = db.managers([kb.name for kb in ours])
    drifts = {d.name: d for d in db.drifted()}
    again = f"Sync/{sync} applies commit {revision[:12]} again"
    changed: dict[str, str] = {}
    for kb in ours:
        now = managed.get(kb.name)
        if now is None:
            if db.get_kb(kb.name) is None:
                changed[kb.name] = f"deleted by hand; Sync/{sync} creates it again from commit {revision[:12]}"
            continue
        by_hand = now.applied_sha256 != inventory[kb.name]
        if not by_hand and kb.name not in drifts:
            continue  # as the Sync applied it: no manifest to read
        applied, serving = db.stored_manifests(kb.name)
        if by_hand and applied is not None:
            what = _differences(applied, kb.to_manifest())
            changed[kb.name] = f"applied by hand since Sync/{sync} applied it ({what}); {again}"
        elif kb.name in drifts and serving is not None:
            what = _differences(serving, kb.to_manifest())
            changed[kb.name] = (
                f"version {drifts[kb.name].serving} serves a manifest other than the one Sync/{sync} applied (rolled "
                f"back by hand?: {what}); {again}"
            )
    return changed


def _differences(by_hand: dict[str, Any], repository: dict[str, Any]) -> str:
    """What reverting `by_hand` to `repository` changes, in a few words: `spec.retrieval.topK: 5 → 3, source
    retention changed`."""
    fields = [c for c in field_changes(by_hand, repository) if not c.path.startswith("status")]
    parts = [f"{c.path}: {_short(c.old)} → {_short(c.new)}" for c in fields]
    added, removed, changed = source_changes(by_hand, repository)
    parts += [f"source {n} changed" for n in changed]
    parts += [f"source {n} added by hand" for n in removed] + [f"source {n} removed by hand" for n in added]
    if not parts:
        return "its files or access differ"
    more = f", and {len(parts) - CHANGES_NAMED} more" if len(parts) > CHANGES_NAMED else ""
    return ", ".join(parts[:CHANGES_NAMED]) + more


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= VALUE_CHARS else text[: VALUE_CHARS - 1] + "…"


def _manifest_files(folder: Path, root: Path, path: str) -> ManifestFiles:
    """The folder's manifest files (with its subfolders), or, when it holds a kustomization, what kustomize renders of
    it (SourceError when it cannot), read as one file."""
    if kustomization_in(folder) is None:
        return read_manifest_files([str(folder)], recursive=True)
    label = f"{path} (kustomize build)"
    return [(label, [ManifestFile(label, render_kustomization(folder, root))])]


def _in_repository(problem: str, root: Path) -> str:
    """A problem's text with the checkout's folder left out: `kb/policy.yaml:7: ...` as in the repository."""
    return problem.replace(f"{root}/", "")
