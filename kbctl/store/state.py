"""One snapshot of everything the engine needs to know about a knowledge base, read in a single transaction."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kbctl.store.knowledgebases import KnowledgeBases
from kbctl.store.revisions import Revisions
from kbctl.store.rows import KnowledgeBaseRow, LiveSourceRow, VersionRow, VersionSourceRow
from kbctl.store.versions import Versions

__all__ = ["States", "StoredRevision", "StoredState"]


@dataclass(frozen=True)
class StoredRevision:
    """A stored revision of one source: content already chunked and embedded under one set of settings."""

    id: int
    chunk_count: int


@dataclass(frozen=True)
class StoredState:
    """What the store holds for one knowledge base at one instant.

    `row` is None for a knowledge base the store has never seen; `current` is None until a version is
    published; its manifest is packed (inline texts stand as their sha256, kbctl.store.texts) unless it is
    the caller's own `known` copy. `served` holds the current version's sources by name (manifest order),
    `statuses` the live state of each source, `revisions` every retained revision by (source name, revision
    key).
    """

    name: str
    row: KnowledgeBaseRow | None = None
    current: VersionRow | None = None
    served: Mapping[str, VersionSourceRow] = field(default_factory=dict)
    statuses: Mapping[str, LiveSourceRow] = field(default_factory=dict)
    revisions: Mapping[tuple[str, str], StoredRevision] = field(default_factory=dict)
    next_version: int = 1

    @property
    def kb_id(self) -> int | None:
        """The knowledge base's id, None when it is not stored yet."""
        return self.row.id if self.row is not None else None


class States(KnowledgeBases, Versions, Revisions):
    """The stored state of one knowledge base, read in one snapshot."""

    def read_state(self, name: str, known: tuple[str, dict[str, Any]] | None = None) -> StoredState:
        """The stored state of knowledge base `name`, all read in one read-only snapshot (five small queries).

        `known`, a (sha256, manifest) pair, spares reading the serving version's manifest back when it is that one.
        """
        with self.read_only():
            row = self.get_kb(name)
            if row is None:
                return StoredState(name=name)
            current = (
                self.get_version(row.id, row.current_version, known=known, packed=True)
                if row.current_version is not None
                else None
            )
            served = {s.source_name: s for s in self.version_sources(current.id)} if current is not None else {}
            revisions = {key: StoredRevision(*value) for key, value in self.stored_revisions(row.id).items()}
            return StoredState(
                name=name,
                row=row,
                current=current,
                served=served,
                statuses=self.source_statuses(row.id),
                revisions=revisions,
                next_version=self.next_version_number(row.id),
            )
