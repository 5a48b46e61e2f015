"""Prune: delete the stored knowledge bases of an apply set that the applied manifests no longer name.

An apply set (`kbctl apply --applyset NAME`, like kubectl's ApplySet or a Flux inventory) records which
knowledge bases one repository's manifests made; prune deletes only members of that set, so two repositories
whose labels overlap never delete each other's knowledge bases. A label selector narrows the set further.
Without an apply set, `--prune -l` (kubectl's legacy prune) still works, but only on knowledge bases that
belong to no apply set.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from kbctl.engine.eventlog import deleted, record
from kbctl.errors import KbctlError, UsageError
from kbctl.manifest.selectors import Selector
from kbctl.store.database import Database
from kbctl.store.rows import KnowledgeBaseRow

__all__ = ["PruneScope", "check_applyset", "prune_knowledge_bases"]


@dataclass(frozen=True)
class PruneScope:
    """Which stored knowledge bases a prune may delete: members of `applyset` (matching `selector` when given),
    or, without an apply set, those matching `selector` that belong to none."""

    applyset: str | None = None
    selector: Selector | None = None

    def __post_init__(self) -> None:
        if self.applyset is None and self.selector is None:
            raise UsageError("a prune needs an apply set or a label selector: kbctl never prunes everything")

    def covers(self, row: KnowledgeBaseRow) -> bool:
        """Whether prune may delete `row` (when the manifests no longer name it)."""
        if row.applyset != self.applyset:
            return False
        return self.selector is None or self.selector.matches(row.labels)


def check_applyset(db: Database, names: Collection[str], applyset: str) -> None:
    """Refuse (KbctlError, before anything is written) to apply into `applyset` a knowledge base that another
    apply set owns: moving it silently would let the other repository's next prune delete it, or this one's
    keep it forever."""
    for row in db.list_kbs():
        if row.name in names and row.applyset not in (None, applyset):
            raise KbctlError(
                f"KnowledgeBase/{row.name} belongs to apply set {row.applyset!r}, not {applyset!r}: apply it with "
                f"--applyset {row.applyset}, or delete it first"
            )


def prune_knowledge_bases(db: Database, keep: Collection[str], scope: PruneScope) -> list[str]:
    """Delete the knowledge bases `scope` covers whose names are not in `keep`.

    Each one is checked again and deleted under its advisory lock (an apply running meanwhile either
    finishes first or waits). Returns the names deleted, in name order.
    """
    if isinstance(keep, str):
        raise TypeError("keep must be a collection of names, not a single string")
    pruned: list[str] = []
    for row in db.list_kbs():
        if row.name in keep or not scope.covers(row):
            continue
        with db.kb_lock(row.name):
            latest = db.get_kb(row.name)
            if latest is not None and scope.covers(latest) and db.delete_kb(row.name) is not None:
                pruned.append(row.name)
    record(db, [deleted(name, "prune") for name in pruned])
    return pruned
