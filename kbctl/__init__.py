"""kbctl: declarative, kubectl-style knowledge bases on PostgreSQL + pgvector, importable by agents.

The public API is the names in `__all__`; each is imported on first use, so `import kbctl` stays cheap
and no module of the package has to import the package itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kbctl._lazy import lazy_attributes
from kbctl._version import __version__ as __version__

if TYPE_CHECKING:
    from kbctl.answer import AskResult
    from kbctl.chat import ChatModel
    from kbctl.client import DeleteResult, KnowledgeBaseStore, Overview, Readiness, Scope
    from kbctl.config import Settings
    from kbctl.embedding import Embedder
    from kbctl.engine.controller import Controller, RolloutStatus
    from kbctl.engine.diff import DiffReport
    from kbctl.engine.events import (
        ApplyResumed,
        ControllerGone,
        DocumentsRemoved,
        DriftFound,
        Event,
        FailureReason,
        HandedToController,
        NullReporter,
        ReconcileFailed,
        ReconcileFinished,
        ReconcileStarted,
        Reporter,
        SourceReconciled,
        StoreUnavailable,
        SyncFinished,
        VectorIndexBuilt,
        WorkProgress,
    )
    from kbctl.engine.prune import PruneScope
    from kbctl.engine.results import (
        AppliedSource,
        ApplyReport,
        DescribedSource,
        DiffedSource,
        KnowledgeBaseResult,
        PendingResult,
        RecordedSync,
        SourceStatus,
    )
    from kbctl.engine.settled import ManifestsToApply
    from kbctl.engine.status import KnowledgeBaseDetail, KnowledgeBaseSummary, SyncDetail
    from kbctl.errors import (
        AuthError,
        BeirError,
        ChatError,
        EmbeddingError,
        EvalSetError,
        InputError,
        JudgeError,
        KbctlError,
        LimitError,
        ManagedError,
        ManifestError,
        ManifestProblem,
        NotFoundError,
        RerankError,
        RollbackError,
        SourceError,
        StoreError,
        UsageError,
    )
    from kbctl.eval.run import EvalReport
    from kbctl.inputs.access import Reader
    from kbctl.manifest import (
        KnowledgeBase,
        LoadedManifest,
        ManifestFile,
        ManifestSet,
        load_manifests,
        parse_manifests,
    )
    from kbctl.manifest.load import ManifestFiles
    from kbctl.manifest.selectors import Selector
    from kbctl.query.context import GroundedContext, Passage
    from kbctl.query.federated import FederatedHit, FederatedResult, MemberOutcome, SourceOutcome
    from kbctl.query.options import Mode, QueryOptions, QueryOverrides
    from kbctl.query.results import QueryHit, QueryResult, RerankInfo, TraceEntry, TraceStage
    from kbctl.rerank import Reranker
    from kbctl.sources.url import FetchPolicy
    from kbctl.store.embedded import ServerStatus
    from kbctl.store.evalruns import EvalRun
    from kbctl.store.events import KnowledgeBaseEvent
    from kbctl.store.history import GcResult, RollbackResult, VersionInfo
    from kbctl.store.retrievals import NewRetrieval, Retrieval
    from kbctl.store.syncs import SyncStatus
    from kbctl.store.versiondiff import DiffBounds, VersionChange, VersionDiff

_WHERE = {
    "AppliedSource": "kbctl.engine.results",
    "ApplyReport": "kbctl.engine.results",
    "AskResult": "kbctl.answer",
    "AuthError": "kbctl.errors",
    "BeirError": "kbctl.errors",
    "ChatError": "kbctl.errors",
    "ChatModel": "kbctl.chat",
    "Controller": "kbctl.engine.controller",
    "ApplyResumed": "kbctl.engine.events",
    "ControllerGone": "kbctl.engine.events",
    "DocumentsRemoved": "kbctl.engine.events",
    "DriftFound": "kbctl.engine.events",
    "DeleteResult": "kbctl.client",
    "DescribedSource": "kbctl.engine.results",
    "DiffReport": "kbctl.engine.diff",
    "DiffedSource": "kbctl.engine.results",
    "Embedder": "kbctl.embedding",
    "EmbeddingError": "kbctl.errors",
    "DiffBounds": "kbctl.store.versiondiff",
    "EvalReport": "kbctl.eval.run",
    "EvalRun": "kbctl.store.evalruns",
    "EvalSetError": "kbctl.errors",
    "Event": "kbctl.engine.events",
    "FailureReason": "kbctl.engine.events",
    "FederatedHit": "kbctl.query.federated",
    "FederatedResult": "kbctl.query.federated",
    "FetchPolicy": "kbctl.sources.url",
    "GcResult": "kbctl.store.history",
    "GroundedContext": "kbctl.query.context",
    "HandedToController": "kbctl.engine.events",
    "InputError": "kbctl.errors",
    "JudgeError": "kbctl.errors",
    "KbctlError": "kbctl.errors",
    "KnowledgeBase": "kbctl.manifest",
    "KnowledgeBaseDetail": "kbctl.engine.status",
    "KnowledgeBaseEvent": "kbctl.store.events",
    "KnowledgeBaseResult": "kbctl.engine.results",
    "KnowledgeBaseStore": "kbctl.client",
    "KnowledgeBaseSummary": "kbctl.engine.status",
    "LimitError": "kbctl.errors",
    "LoadedManifest": "kbctl.manifest",
    "ManagedError": "kbctl.errors",
    "ManifestError": "kbctl.errors",
    "ManifestFile": "kbctl.manifest",
    "ManifestFiles": "kbctl.manifest.load",
    "ManifestProblem": "kbctl.errors",
    "ManifestSet": "kbctl.manifest",
    "ManifestsToApply": "kbctl.engine.settled",
    "MemberOutcome": "kbctl.query.federated",
    "Mode": "kbctl.query.options",
    "NewRetrieval": "kbctl.store.retrievals",
    "NotFoundError": "kbctl.errors",
    "NullReporter": "kbctl.engine.events",
    "Passage": "kbctl.query.context",
    "PendingResult": "kbctl.engine.results",
    "PruneScope": "kbctl.engine.prune",
    "QueryHit": "kbctl.query.results",
    "QueryOptions": "kbctl.query.options",
    "QueryOverrides": "kbctl.query.options",
    "QueryResult": "kbctl.query.results",
    "Overview": "kbctl.client",
    "Readiness": "kbctl.client",
    "Reader": "kbctl.inputs.access",
    "ReconcileFailed": "kbctl.engine.events",
    "ReconcileFinished": "kbctl.engine.events",
    "ReconcileStarted": "kbctl.engine.events",
    "Reporter": "kbctl.engine.events",
    "RerankError": "kbctl.errors",
    "RerankInfo": "kbctl.query.results",
    "Reranker": "kbctl.rerank",
    "Retrieval": "kbctl.store.retrievals",
    "RollbackError": "kbctl.errors",
    "RolloutStatus": "kbctl.engine.controller",
    "RollbackResult": "kbctl.store.history",
    "Scope": "kbctl.client",
    "Selector": "kbctl.manifest.selectors",
    "ServerStatus": "kbctl.store.embedded",
    "Settings": "kbctl.config",
    "SourceError": "kbctl.errors",
    "SourceOutcome": "kbctl.query.federated",  # deprecated: MemberOutcome
    "SourceReconciled": "kbctl.engine.events",
    "SourceStatus": "kbctl.engine.results",  # deprecated: DescribedSource (AppliedSource, DiffedSource)
    "StoreError": "kbctl.errors",
    "StoreUnavailable": "kbctl.engine.events",
    "SyncFinished": "kbctl.engine.events",
    "RecordedSync": "kbctl.engine.results",
    "SyncDetail": "kbctl.engine.status",
    "SyncStatus": "kbctl.store.syncs",
    "TraceEntry": "kbctl.query.results",
    "TraceStage": "kbctl.query.results",
    "UsageError": "kbctl.errors",
    "VectorIndexBuilt": "kbctl.engine.events",
    "VersionChange": "kbctl.store.versiondiff",
    "VersionDiff": "kbctl.store.versiondiff",
    "VersionInfo": "kbctl.store.history",
    "WorkProgress": "kbctl.engine.events",
    "load_manifests": "kbctl.manifest",
    "parse_manifests": "kbctl.manifest",
}

__all__ = [
    "AppliedSource",
    "ApplyReport",
    "ApplyResumed",
    "AskResult",
    "AuthError",
    "BeirError",
    "ChatError",
    "ChatModel",
    "Controller",
    "ControllerGone",
    "DeleteResult",
    "DescribedSource",
    "DiffBounds",
    "DiffReport",
    "DiffedSource",
    "DocumentsRemoved",
    "DriftFound",
    "Embedder",
    "EmbeddingError",
    "EvalReport",
    "EvalRun",
    "EvalSetError",
    "Event",
    "FailureReason",
    "FederatedHit",
    "FederatedResult",
    "FetchPolicy",
    "GcResult",
    "GroundedContext",
    "HandedToController",
    "InputError",
    "JudgeError",
    "KbctlError",
    "KnowledgeBase",
    "KnowledgeBaseDetail",
    "KnowledgeBaseEvent",
    "KnowledgeBaseResult",
    "KnowledgeBaseStore",
    "KnowledgeBaseSummary",
    "LimitError",
    "LoadedManifest",
    "ManagedError",
    "ManifestError",
    "ManifestFile",
    "ManifestFiles",
    "ManifestProblem",
    "ManifestSet",
    "ManifestsToApply",
    "MemberOutcome",
    "Mode",
    "NewRetrieval",
    "NotFoundError",
    "NullReporter",
    "Overview",
    "Passage",
    "PendingResult",
    "PruneScope",
    "QueryHit",
    "QueryOptions",
    "QueryOverrides",
    "QueryResult",
    "Reader",
    "Readiness",
    "ReconcileFailed",
    "ReconcileFinished",
    "ReconcileStarted",
    "RecordedSync",
    "Reporter",
    "RerankError",
    "RerankInfo",
    "Reranker",
    "Retrieval",
    "RollbackError",
    "RollbackResult",
    "RolloutStatus",
    "Scope",
    "Selector",
    "ServerStatus",
    "Settings",
    "SourceError",
    "SourceOutcome",
    "SourceReconciled",
    "SourceStatus",
    "StoreError",
    "StoreUnavailable",
    "SyncDetail",
    "SyncFinished",
    "SyncStatus",
    "TraceEntry",
    "TraceStage",
    "UsageError",
    "VectorIndexBuilt",
    "VersionChange",
    "VersionDiff",
    "VersionInfo",
    "WorkProgress",
    "load_manifests",
    "parse_manifests",
]


__getattr__ = lazy_attributes(__name__, _WHERE, globals())


def __dir__() -> list[str]:
    return sorted([*__all__, "__version__"])
