"""The store: `Database`, one connection (kbctl.store.connection) with every read and write kbctl makes, each noun's
in its own module (knowledge bases, versions, revisions, statuses, chunks, embeddings, history, ...)."""

from __future__ import annotations

from kbctl.store.applied import AppliedFiles
from kbctl.store.claims import Claims
from kbctl.store.connection import GC_LOCK_KEY, Connected, lock_key, poll_lock, store_error
from kbctl.store.drift import Drifts
from kbctl.store.evalruns import EvalRuns
from kbctl.store.events import Events
from kbctl.store.history import History
from kbctl.store.knowledgebases import KnowledgeBases
from kbctl.store.retrievals import Retrievals
from kbctl.store.revisions import Revisions
from kbctl.store.rows import (
    ChunkHit,
    ChunkRow,
    KnowledgeBaseRow,
    LiveSourceRow,
    NewRevision,
    QueryTarget,
    SourceRow,
    VersionRow,
    VersionSourceRow,
    WrittenRevision,
)
from kbctl.store.schedule import Schedules
from kbctl.store.state import States
from kbctl.store.syncs import Syncs
from kbctl.store.versiondiff import VersionDiffs
from kbctl.store.versions import Versions

__all__ = [
    "GC_LOCK_KEY",
    "ChunkHit",
    "ChunkRow",
    "Database",
    "KnowledgeBaseRow",
    "LiveSourceRow",
    "NewRevision",
    "QueryTarget",
    "SourceRow",
    "VersionRow",
    "VersionSourceRow",
    "WrittenRevision",
    "lock_key",
    "poll_lock",
    "store_error",
]


class Database(
    States,
    History,
    EvalRuns,
    VersionDiffs,
    AppliedFiles,
    Drifts,
    Syncs,
    Schedules,
    Claims,
    Events,
    Retrievals,
    KnowledgeBases,
    Versions,
    Revisions,
    Connected,
):
    """A connection to the store; migrates the schema on open. Use as a context manager.

    One class per noun, each in its module, each building on the connection seam (`Connected`): every driver
    error is translated there once, never per method."""
