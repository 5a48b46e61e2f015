"""kbctl: declarative, kubectl-style knowledge bases on PostgreSQL + pgvector, importable by agents.

The public API is the names in `__all__`; each is imported on first use, so `import kbctl` stays cheap
and no module of the package has to import the package itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kbctl._lazy import lazy_attributes
from kbctl._version import __version__ as __version__

if TYPE_CHECKING:
    from kbctl.client import DeleteResult, KnowledgeBaseStore
    from kbctl.engine.results import ApplyReport, KnowledgeBaseResult, SourceResult
    from kbctl.engine.status import KnowledgeBaseDetail, KnowledgeBaseSummary, SourceStatus
    from kbctl.errors import (
        BeirError,
        ChatError,
        EmbeddingError,
        EvalSetError,
        InputError,
        JudgeError,
        KbctlError,
        LimitError,
        ManifestError,
        ManifestProblem,
        NotFoundError,
        RerankError,
        RollbackError,
        SourceError,
        StoreError,
    )
    from kbctl.manifest import KnowledgeBase, LoadedManifest, load_manifests, parse_manifests
    from kbctl.query.context import GroundedContext, Passage
    from kbctl.query.options import QueryOptions
    from kbctl.query.results import QueryHit, QueryResult

_WHERE = {
    "ApplyReport": "kbctl.engine.results",
    "BeirError": "kbctl.errors",
    "ChatError": "kbctl.errors",
    "DeleteResult": "kbctl.client",
    "EmbeddingError": "kbctl.errors",
    "EvalSetError": "kbctl.errors",
    "GroundedContext": "kbctl.query.context",
    "InputError": "kbctl.errors",
    "JudgeError": "kbctl.errors",
    "KbctlError": "kbctl.errors",
    "KnowledgeBase": "kbctl.manifest",
    "KnowledgeBaseDetail": "kbctl.engine.status",
    "KnowledgeBaseResult": "kbctl.engine.results",
    "KnowledgeBaseStore": "kbctl.client",
    "KnowledgeBaseSummary": "kbctl.engine.status",
    "LimitError": "kbctl.errors",
    "LoadedManifest": "kbctl.manifest",
    "ManifestError": "kbctl.errors",
    "ManifestProblem": "kbctl.errors",
    "NotFoundError": "kbctl.errors",
    "Passage": "kbctl.query.context",
    "QueryHit": "kbctl.query.results",
    "QueryOptions": "kbctl.query.options",
    "QueryResult": "kbctl.query.results",
    "RerankError": "kbctl.errors",
    "RollbackError": "kbctl.errors",
    "SourceError": "kbctl.errors",
    "SourceResult": "kbctl.engine.results",
    "SourceStatus": "kbctl.engine.status",
    "StoreError": "kbctl.errors",
    "load_manifests": "kbctl.manifest",
    "parse_manifests": "kbctl.manifest",
}

__all__ = [
    "ApplyReport",
    "BeirError",
    "ChatError",
    "DeleteResult",
    "EmbeddingError",
    "EvalSetError",
    "GroundedContext",
    "InputError",
    "JudgeError",
    "KbctlError",
    "KnowledgeBase",
    "KnowledgeBaseDetail",
    "KnowledgeBaseResult",
    "KnowledgeBaseStore",
    "KnowledgeBaseSummary",
    "LimitError",
    "LoadedManifest",
    "ManifestError",
    "ManifestProblem",
    "NotFoundError",
    "Passage",
    "QueryHit",
    "QueryOptions",
    "QueryResult",
    "RerankError",
    "RollbackError",
    "SourceError",
    "SourceResult",
    "SourceStatus",
    "StoreError",
    "load_manifests",
    "parse_manifests",
]


__getattr__ = lazy_attributes(__name__, _WHERE, globals())


def __dir__() -> list[str]:
    return sorted([*__all__, "__version__"])
