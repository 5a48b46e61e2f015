"""What evaluation needs from a store, as Protocols: `kbctl.client.KnowledgeBaseStore` is one of each.

Evaluation sits below the client in the pipeline, so it names only the methods it calls, with types of
the layers beneath it; any object with these methods (a test double, another client) will do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from kbctl.engine.events import Reporter
from kbctl.engine.results import ApplyReport
from kbctl.engine.status import KnowledgeBaseDetail
from kbctl.inputs.access import Reader
from kbctl.manifest import KnowledgeBase
from kbctl.query.options import QueryOptions
from kbctl.query.results import QueryResult

__all__ = ["ImportStore", "QueryStore"]


class QueryStore(Protocol):
    """A store whose knowledge bases can be described and queried (`evaluate_store` needs one)."""

    def describe(self, name: str) -> KnowledgeBaseDetail:
        """Spec in force, current version and per-source state of one knowledge base."""
        ...

    def query(
        self, name: str, question: str, options: QueryOptions | None = None, *, reader: Reader | None = None
    ) -> QueryResult:
        """The chunks most relevant to `question`, as `options` say (the spec's settings for what is unset), of
        those `reader` may read."""
        ...


class ImportStore(Protocol):
    """A store that knowledge bases can be applied to (`import_beir` needs one)."""

    def apply(self, knowledge_bases: Sequence[KnowledgeBase], *, reporter: Reporter | None = None) -> ApplyReport:
        """Reconcile the store to match these knowledge bases."""
        ...
