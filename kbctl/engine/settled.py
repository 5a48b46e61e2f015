"""Settled manifest files: the same bytes applied again report "unchanged" without being parsed or planned.

Parsing, validating and planning a manifest of 100,000 inline chunks again takes seconds to conclude that
nothing changed. A file is keyed by everything that decides what applying it does (its bytes, its path,
kbctl's version, the manifest schema with its defaults, the chunker's version); an apply that leaves each of
its knowledge bases serving with every source ready records the key (`kbctl.store.applied`), and a later
apply of a file with that key, while the store still serves exactly that, reports each knowledge base
unchanged from the store: its sources' checked time moves on, as after any unchanged apply. Only knowledge
bases of inline sources are recorded: files, repositories and sites must be read to know they are unchanged.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import TYPE_CHECKING, Protocol, TypeVar

from kbctl.embedding import Embedder
from kbctl.engine.events import ReconcileStarted, Reporter, report_sources
from kbctl.engine.fetch import all_inline
from kbctl.engine.keys import CHUNKER_VERSION
from kbctl.engine.results import KnowledgeBaseResult, reported
from kbctl.errors import KbctlError, UsageError
from kbctl.store.applied import AppliedFile, SettledKnowledgeBase
from kbctl.store.database import Database
from kbctl.store.rows import VersionSourceRow

if TYPE_CHECKING:
    from kbctl.manifest import ManifestSet

__all__ = ["ManifestsToApply", "file_key", "in_file_order", "record_applied", "report_settled", "settled"]


@dataclass(frozen=True)
class ManifestsToApply:
    """Manifest files read for `apply`: what was parsed, the knowledge bases of settled files (not parsed), and
    the key of each file read (stdin has none)."""

    manifests: ManifestSet
    settled: tuple[SettledKnowledgeBase, ...]
    keys: Mapping[str, str]  # path -> file_key


class _Named(Protocol):
    @property
    def name(self) -> str: ...


_N = TypeVar("_N", bound=_Named)


def in_file_order(names: Sequence[str], items: Sequence[_N]) -> list[_N]:
    """The items (results of the settled and of the parsed knowledge bases) in the order of `names`, the order
    of the manifests; a name without an item is skipped."""
    by_name = {item.name: item for item in items}
    return [by_name[name] for name in names if name in by_name]


@cache
def _context() -> bytes:
    """What else than a file's bytes decides what applying it does: kbctl's version, schema and chunker."""
    from kbctl._version import __version__
    from kbctl.manifest.models import _schema_text

    schema = hashlib.sha256(_schema_text().encode()).hexdigest()
    return f"kbctl {__version__}\0schema {schema}\0chunker {CHUNKER_VERSION}\0".encode()


def file_key(path: str, text: str) -> str:
    """The key of a manifest file as read: its absolute path and text under this kbctl."""
    digest = hashlib.sha256(_context())
    digest.update(os.path.abspath(path).encode("utf-8", "surrogateescape") + b"\0")
    digest.update(text.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def settled(
    db: Database, keys: Sequence[str], embedder_for: Callable[[str], Embedder]
) -> dict[str, list[SettledKnowledgeBase]]:
    """The settled files among `keys` (key -> its knowledge bases, in line order): the store still serves what
    applying them left, and each knowledge base's embedding model still resolves to the model of its version."""
    found = db.settled_files(keys)
    return {key: kbs for key, kbs in found.items() if all(_same_model(kb, embedder_for) for kb in kbs)}


def _same_model(kb: SettledKnowledgeBase, embedder_for: Callable[[str], Embedder]) -> bool:
    try:
        return embedder_for(kb.embedding_ref).model_id == kb.model
    except UsageError:
        raise  # a bad argument is not a model the configuration no longer has
    except KbctlError:  # a model or profile the configuration no longer has: the full apply says so
        return False


def report_settled(db: Database, kbs: Sequence[SettledKnowledgeBase], reporter: Reporter) -> list[KnowledgeBaseResult]:
    """Report each knowledge base of a settled file unchanged, as a full apply of it would, and move its sources'
    checked time on."""
    results = []
    for kb in kbs:
        db.touch_sources(kb.kb_id, datetime.now(UTC))
        sources = [
            reported(VersionSourceRow(source_name=name, state="ready", chunk_count=chunks, reused_count=chunks))
            for name, chunks in kb.sources
        ]
        reporter.report(ReconcileStarted(kb.name, "apply", "unchanged", kb.version, 0))
        report_sources(reporter, kb.name, "apply", sources, kb.model, finished=("unchanged", kb.version))
        results.append(KnowledgeBaseResult(name=kb.name, action="unchanged", version=kb.version, sources=sources))
    return results


def record_applied(db: Database, to_apply: ManifestsToApply, serving: Mapping[str, int]) -> None:
    """After an apply of what `to_apply` parsed: `serving` holds the knowledge bases that ended with every source
    ready (or that a controller already serves unchanged), by name, with the version serving. Each of them
    whose sources are all inline records the key of its file."""
    per_file = Counter(m.path for m in to_apply.manifests.manifests)
    db.record_applied_files(
        [
            AppliedFile(m.kb.name, to_apply.keys[m.path], per_file[m.path], m.line, serving[m.kb.name])
            for m in to_apply.manifests.manifests
            if m.path in to_apply.keys and m.kb.name in serving and all_inline(m.kb)
        ],
    )
