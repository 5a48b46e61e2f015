"""Where the `path:` sources of a knowledge base are read: the folder of its manifest file, or the folder the store
read them from last, for output of `kbctl get -o yaml` saved elsewhere.

`get -o yaml` names that folder as `status.appliedFrom`. A manifest is hostile until proven otherwise, so the hint
is honoured only when the store recorded that very folder for this knowledge base (an apply from a manifest file
there listed every path source) and each path source is the one the serving version read there (same spec). A
manifest can then read again what this knowledge base already serves, and nothing else: a folder of its own, or a
path source it adds or edits, reads relative to the manifest file as always.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kbctl.engine.fetch import path_sources, serves_spec
from kbctl.manifest import KnowledgeBase
from kbctl.store.database import Database

__all__ = ["honour_applied_from"]


def honour_applied_from(db: Database, kbs: Sequence[KnowledgeBase]) -> list[KnowledgeBase]:
    """`kbs`, each located at the folder its `status.appliedFrom` names when the store vouches for it."""
    return [_located(db, kb) for kb in kbs]


def _located(db: Database, kb: KnowledgeBase) -> KnowledgeBase:
    hint = kb.applied_from
    if hint is None or not kb.reads_files or hint == kb.base_dir:
        return kb
    recorded = db.applied_from(kb.name)
    if recorded is None or Path(recorded) != hint:
        return kb
    state = db.read_state(kb.name)
    if not all(serves_spec(state, s) for s in path_sources(kb)):
        return kb
    return kb.located(hint)
