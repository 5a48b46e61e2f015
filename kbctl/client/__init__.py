"""The Python API: one object per store that every CLI command (and any agent) calls.

`KnowledgeBaseStore` is composed of one class per family of operations, each in its own module and each building
on `StoreBase` (kbctl/client/_base.py: the settings, the database, the models): `Reads` (reads.py), `Queries`
(retrieval.py), `Reconciling` (reconcile.py), `VersionHistory` (versions.py) and `Evaluation` (evaluation.py).
"""

from __future__ import annotations

from kbctl.client._base import Scope, StoreBase
from kbctl.client.evaluation import Evaluation
from kbctl.client.reads import Overview, Reads
from kbctl.client.reconcile import DeleteResult, Reconciling
from kbctl.client.retrieval import Queries, Readiness
from kbctl.client.versions import VersionHistory

__all__ = ["DeleteResult", "KnowledgeBaseStore", "Overview", "Readiness", "Scope"]


class KnowledgeBaseStore(Evaluation, VersionHistory, Queries, Reads, Reconciling, StoreBase):
    """Knowledge bases in one PostgreSQL store (the embedded one unless a database URL is given).

    >>> with KnowledgeBaseStore() as store:                       # doctest: +SKIP
    ...     store.apply_paths(["examples/kb/"])
    ...     result = store.query("client-service-policy", "how long do we keep invoices?")
    """

    def __enter__(self) -> KnowledgeBaseStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
