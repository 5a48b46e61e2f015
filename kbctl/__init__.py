"""kbctl: declarative, kubectl-style knowledge bases on PostgreSQL + pgvector, importable by agents."""

__version__ = "0.1.0"

from kbctl.client import DeleteResult, KnowledgeBaseStore
from kbctl.errors import (
    EmbeddingError,
    KbctlError,
    ManifestError,
    ManifestProblem,
    NotFoundError,
    SourceError,
    StoreError,
)
from kbctl.grounding import GroundedContext, Passage
from kbctl.manifest import KnowledgeBase, LoadedManifest, load_manifests, parse_manifests
from kbctl.reconcile import ApplyReport, KnowledgeBaseResult, SourceResult
from kbctl.retrieval import QueryHit, QueryResult
from kbctl.status import KnowledgeBaseDetail, KnowledgeBaseSummary, SourceStatus

__all__ = [
    "ApplyReport",
    "DeleteResult",
    "EmbeddingError",
    "GroundedContext",
    "KbctlError",
    "KnowledgeBase",
    "KnowledgeBaseDetail",
    "KnowledgeBaseResult",
    "KnowledgeBaseStore",
    "KnowledgeBaseSummary",
    "LoadedManifest",
    "ManifestError",
    "ManifestProblem",
    "NotFoundError",
    "Passage",
    "QueryHit",
    "QueryResult",
    "SourceError",
    "SourceResult",
    "SourceStatus",
    "StoreError",
    "load_manifests",
    "parse_manifests",
]
