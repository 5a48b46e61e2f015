"""kbctl: declarative, kubectl-style knowledge bases on PostgreSQL + pgvector, importable by agents.

The public API is the names in `__all__`; each is imported on first use, so `import kbctl` stays cheap
and no module of the package has to import the package itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kbctl._lazy import lazy_attributes
from kbctl._version import __version__ as __version__

if TYPE_CHECKING:
    from kbctl.answer import AskResult as AskResult
    from kbctl.chat import ChatModel as ChatModel
    from kbctl.client import DeleteResult as DeleteResult
    from kbctl.client import KnowledgeBaseStore as KnowledgeBaseStore
    from kbctl.client import Overview as Overview
    from kbctl.client import Readiness as Readiness
    from kbctl.client import Scope as Scope
    from kbctl.config import Settings as Settings
    from kbctl.embedding import Embedder as Embedder
    from kbctl.engine.controller import Controller as Controller
    from kbctl.engine.controller import RolloutStatus as RolloutStatus
    from kbctl.engine.diff import DiffReport as DiffReport
    from kbctl.engine.events import ApplyResumed as ApplyResumed
    from kbctl.engine.events import ControllerGone as ControllerGone
    from kbctl.engine.events import DocumentsRemoved as DocumentsRemoved
    from kbctl.engine.events import DriftFound as DriftFound
    from kbctl.engine.events import Event as Event
    from kbctl.engine.events import FailureReason as FailureReason
    from kbctl.engine.events import HandedToController as HandedToController
    from kbctl.engine.events import NullReporter as NullReporter
    from kbctl.engine.events import ReconcileFailed as ReconcileFailed
    from kbctl.engine.events import ReconcileFinished as ReconcileFinished
    from kbctl.engine.events import ReconcileStarted as ReconcileStarted
    from kbctl.engine.events import Reporter as Reporter
    from kbctl.engine.events import SourceReconciled as SourceReconciled
    from kbctl.engine.events import StoreUnavailable as StoreUnavailable
    from kbctl.engine.events import SyncFinished as SyncFinished
    from kbctl.engine.events import VectorIndexBuilt as VectorIndexBuilt
    from kbctl.engine.events import VersionCalibrated as VersionCalibrated
    from kbctl.engine.events import WorkProgress as WorkProgress
    from kbctl.engine.prune import PruneScope as PruneScope
    from kbctl.engine.results import AppliedSource as AppliedSource
    from kbctl.engine.results import ApplyReport as ApplyReport
    from kbctl.engine.results import DescribedSource as DescribedSource
    from kbctl.engine.results import DiffedSource as DiffedSource
    from kbctl.engine.results import KnowledgeBaseResult as KnowledgeBaseResult
    from kbctl.engine.results import PendingResult as PendingResult
    from kbctl.engine.results import RecordedSync as RecordedSync
    from kbctl.engine.results import SourceStatus as SourceStatus
    from kbctl.engine.settled import ManifestsToApply as ManifestsToApply
    from kbctl.engine.status import KnowledgeBaseDetail as KnowledgeBaseDetail
    from kbctl.engine.status import KnowledgeBaseSummary as KnowledgeBaseSummary
    from kbctl.engine.status import SyncDetail as SyncDetail
    from kbctl.errors import AuthError as AuthError
    from kbctl.errors import BeirError as BeirError
    from kbctl.errors import ChatError as ChatError
    from kbctl.errors import EmbeddingError as EmbeddingError
    from kbctl.errors import EvalSetError as EvalSetError
    from kbctl.errors import InputError as InputError
    from kbctl.errors import JudgeError as JudgeError
    from kbctl.errors import KbctlError as KbctlError
    from kbctl.errors import LimitError as LimitError
    from kbctl.errors import ManagedError as ManagedError
    from kbctl.errors import ManifestError as ManifestError
    from kbctl.errors import ManifestProblem as ManifestProblem
    from kbctl.errors import NotFoundError as NotFoundError
    from kbctl.errors import RerankError as RerankError
    from kbctl.errors import RollbackError as RollbackError
    from kbctl.errors import SourceError as SourceError
    from kbctl.errors import StoreError as StoreError
    from kbctl.errors import UsageError as UsageError
    from kbctl.eval.beir import BeirImport as BeirImport
    from kbctl.eval.evalset import EvalSet as EvalSet
    from kbctl.eval.run import EvalReport as EvalReport
    from kbctl.inputs.access import Reader as Reader
    from kbctl.manifest import KnowledgeBase as KnowledgeBase
    from kbctl.manifest import LoadedManifest as LoadedManifest
    from kbctl.manifest import ManifestFile as ManifestFile
    from kbctl.manifest import ManifestSet as ManifestSet
    from kbctl.manifest import load_manifests as load_manifests
    from kbctl.manifest import parse_manifests as parse_manifests
    from kbctl.manifest.explain import FieldDoc as FieldDoc
    from kbctl.manifest.load import ManifestFiles as ManifestFiles
    from kbctl.manifest.selectors import Selector as Selector
    from kbctl.query.context import GroundedContext as GroundedContext
    from kbctl.query.context import Passage as Passage
    from kbctl.query.federated import FederatedHit as FederatedHit
    from kbctl.query.federated import FederatedResult as FederatedResult
    from kbctl.query.federated import MemberOutcome as MemberOutcome
    from kbctl.query.federated import SourceOutcome as SourceOutcome
    from kbctl.query.options import Mode as Mode
    from kbctl.query.options import QueryOptions as QueryOptions
    from kbctl.query.options import QueryOverrides as QueryOverrides
    from kbctl.query.results import QueryHit as QueryHit
    from kbctl.query.results import QueryResult as QueryResult
    from kbctl.query.results import RerankInfo as RerankInfo
    from kbctl.query.results import TraceEntry as TraceEntry
    from kbctl.query.results import TraceStage as TraceStage
    from kbctl.rerank import Reranker as Reranker
    from kbctl.sources.url import FetchPolicy as FetchPolicy
    from kbctl.store.embedded import ServerStatus as ServerStatus
    from kbctl.store.evalruns import EvalRun as EvalRun
    from kbctl.store.events import KnowledgeBaseEvent as KnowledgeBaseEvent
    from kbctl.store.history import GcResult as GcResult
    from kbctl.store.history import RollbackResult as RollbackResult
    from kbctl.store.history import VersionInfo as VersionInfo
    from kbctl.store.retrievals import NewRetrieval as NewRetrieval
    from kbctl.store.retrievals import Retrieval as Retrieval
    from kbctl.store.syncs import SyncStatus as SyncStatus
    from kbctl.store.versiondiff import DiffBounds as DiffBounds
    from kbctl.store.versiondiff import VersionChange as VersionChange
    from kbctl.store.versiondiff import VersionDiff as VersionDiff

# The public API, one name per line (sorted): name -> the module that defines it. `__all__` and the lazy loader are
# derived from it; the TYPE_CHECKING imports above repeat it for type checkers (`X as X`: an explicit re-export), and
# tests/test_layers.py fails when the two disagree.
_WHERE = {
    "AppliedSource": "kbctl.engine.results",
    "ApplyReport": "kbctl.engine.results",
    "ApplyResumed": "kbctl.engine.events",
    "AskResult": "kbctl.answer",
    "AuthError": "kbctl.errors",
    "BeirError": "kbctl.errors",
    "BeirImport": "kbctl.eval.beir",
    "ChatError": "kbctl.errors",
    "ChatModel": "kbctl.chat",
    "Controller": "kbctl.engine.controller",
    "ControllerGone": "kbctl.engine.events",
    "DeleteResult": "kbctl.client",
    "DescribedSource": "kbctl.engine.results",
    "DiffBounds": "kbctl.store.versiondiff",
    "DiffReport": "kbctl.engine.diff",
    "DiffedSource": "kbctl.engine.results",
    "DocumentsRemoved": "kbctl.engine.events",
    "DriftFound": "kbctl.engine.events",
    "Embedder": "kbctl.embedding",
    "EmbeddingError": "kbctl.errors",
    "EvalReport": "kbctl.eval.run",
    "EvalRun": "kbctl.store.evalruns",
    "EvalSet": "kbctl.eval.evalset",
    "EvalSetError": "kbctl.errors",
    "Event": "kbctl.engine.events",
    "FailureReason": "kbctl.engine.events",
    "FederatedHit": "kbctl.query.federated",
    "FederatedResult": "kbctl.query.federated",
    "FetchPolicy": "kbctl.sources.url",
    "FieldDoc": "kbctl.manifest.explain",
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
    "Overview": "kbctl.client",
    "Passage": "kbctl.query.context",
    "PendingResult": "kbctl.engine.results",
    "PruneScope": "kbctl.engine.prune",
    "QueryHit": "kbctl.query.results",
    "QueryOptions": "kbctl.query.options",
    "QueryOverrides": "kbctl.query.options",
    "QueryResult": "kbctl.query.results",
    "Reader": "kbctl.inputs.access",
    "Readiness": "kbctl.client",
    "ReconcileFailed": "kbctl.engine.events",
    "ReconcileFinished": "kbctl.engine.events",
    "ReconcileStarted": "kbctl.engine.events",
    "RecordedSync": "kbctl.engine.results",
    "Reporter": "kbctl.engine.events",
    "RerankError": "kbctl.errors",
    "RerankInfo": "kbctl.query.results",
    "Reranker": "kbctl.rerank",
    "Retrieval": "kbctl.store.retrievals",
    "RollbackError": "kbctl.errors",
    "RollbackResult": "kbctl.store.history",
    "RolloutStatus": "kbctl.engine.controller",
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
    "SyncDetail": "kbctl.engine.status",
    "SyncFinished": "kbctl.engine.events",
    "SyncStatus": "kbctl.store.syncs",
    "TraceEntry": "kbctl.query.results",
    "TraceStage": "kbctl.query.results",
    "UsageError": "kbctl.errors",
    "VectorIndexBuilt": "kbctl.engine.events",
    "VersionCalibrated": "kbctl.engine.events",
    "VersionChange": "kbctl.store.versiondiff",
    "VersionDiff": "kbctl.store.versiondiff",
    "VersionInfo": "kbctl.store.history",
    "WorkProgress": "kbctl.engine.events",
    "load_manifests": "kbctl.manifest",
    "parse_manifests": "kbctl.manifest",
}

__all__ = sorted(_WHERE)


__getattr__ = lazy_attributes(__name__, _WHERE, globals())


def __dir__() -> list[str]:
    return sorted([*__all__, "__version__"])
