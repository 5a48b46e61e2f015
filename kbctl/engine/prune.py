"""Prune: delete the stored knowledge bases that a label selector owns and the applied manifests no longer name."""

from __future__ import annotations

from collections.abc import Collection

from kbctl.manifest.selectors import Selector
from kbctl.store.database import Database

__all__ = ["prune_knowledge_bases"]


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
