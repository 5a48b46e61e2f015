"""What ties a stored row to a source of the manifest: a source's spec digest, the units (SOURCE/ID) a
many-document source serves, a document's own spec digest, and the context a file was read in (with
CHUNKER_VERSION). The fetch stage (kbctl.engine.fetch) reads them to ask only for what changed; the plan
(kbctl.engine.plan) to decide what each source serves."""

from __future__ import annotations

from collections.abc import Mapping

from kbctl.manifest import KnowledgeBase, Source
from kbctl.manifest.digest import sha256_json, source_sha256
from kbctl.store.database import VersionSourceRow

__all__ = [
    "CHUNKER_VERSION",
    "file_context",
    "same_spec",
    "spec_sha256",
    "unit_sha256",
    "units",
]

# Bump when the chunker's output for the same input changes, so stored revisions are rebuilt.
CHUNKER_VERSION = 1


def spec_sha256(source: Source) -> str:
    """The digest of a source's spec, as a version's row records it."""
    return source_sha256(source.model_dump(by_alias=True, mode="json"))


def units(served: Mapping[str, VersionSourceRow], source: Source) -> dict[str, tuple[str, VersionSourceRow]]:
    """The units of a many-document source the current version serves: unit name -> (document id, row)."""
    prefix = f"{source.name}/"
    return {name: (name[len(prefix) :], row) for name, row in served.items() if name.startswith(prefix)}


def unit_sha256(source_sha256: str, doc_id: str) -> str:
    """The spec hash of one document of a path, git or crawl source: its source's, and its id."""
    return sha256_json({"source": source_sha256, "document": doc_id})


def file_context(kb: KnowledgeBase, model_id: str, unit_sha256: str) -> str:
    """What else than its bytes makes a file's revision: a file is not re-read only under the same context."""
    c = kb.spec.chunking
    settings = [unit_sha256, c.max_chars, c.overlap_chars, model_id, kb.spec.retrieval.language, CHUNKER_VERSION]
    return sha256_json(settings)[:16]


def same_spec(prev: VersionSourceRow | None, sha: str) -> bool:
    """The current version serves content for this source under the same spec."""
    return prev is not None and prev.source_sha256 == sha and prev.revision_id is not None
