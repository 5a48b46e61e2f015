"""Manifest files the store applied and still serves, by hash: an apply of the same bytes is not parsed again.

After an apply, each knowledge base of inline sources alone that ended with every source ready records the
hash of the manifest file it came from (`ManifestFile.key`: kbctl's version, the file's path and its bytes),
how many knowledge bases that file held, its line there, and the manifest hash of the version it serves.
A later apply of a file with that hash is settled when every one of its knowledge bases still serves that
manifest (nothing pending, the version it recorded still current, Ready, every source ready): parsing,
validating and planning it again could only say "unchanged". Anything else (a rollback, a delete, a failed
source, a pending manifest, another kbctl) fails one of the checks, and the file is read as any other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from psycopg.types.json import Jsonb

from kbctl.store.connection import Connected

__all__ = ["AppliedFile", "AppliedFiles", "SettledKnowledgeBase"]


@dataclass(frozen=True)
class AppliedFile:
    """One knowledge base applied from a manifest file: the file's key, how many knowledge bases the file held,
    the line where this one starts, and the version the apply left serving."""

    name: str
    key: str
    kbs: int
    line: int
    version: int


@dataclass(frozen=True)
class SettledKnowledgeBase:
    """A knowledge base of a settled file: what an unchanged apply of it reports."""

    kb_id: int
    name: str
    key: str
    line: int
    version: int
    generation: int
    model: str  # the serving version's embedding model id
    embedding_ref: str  # what names its embedder in its manifest: `profile:NAME`, or spec.embedding.model
    sources: tuple[tuple[str, int], ...]  # (name, chunks) of each source, in manifest order


# The knowledge bases recorded under one of the keys that still serve what they recorded: nothing pending or
# unobserved, the recorded version current and of the recorded manifest, Ready, every source served and ready, and
# the version calibrated as a publish now calibrates it (VersionRow.calibrated: else an apply calibrates it).
_SETTLED = """
SELECT k.id, k.name, k.applied_file_sha256, k.applied_file_line, k.applied_file_kbs, v.number, k.generation,
       v.model,
       coalesce('profile:' || nullif(v.manifest #>> '{spec,embedding,profile}', ''),
                v.manifest #>> '{spec,embedding,model}', ''),
       (SELECT coalesce(array_agg(vs.source_name ORDER BY vs.position), '{}')
          FROM kb_version_sources vs WHERE vs.version_id = v.id),
       (SELECT coalesce(array_agg(coalesce(r.chunk_count, 0) ORDER BY vs.position), '{}')
          FROM kb_version_sources vs LEFT JOIN kb_source_revisions r ON r.id = vs.revision_id
         WHERE vs.version_id = v.id)
  FROM kb_knowledge_bases k
  JOIN kb_versions v ON v.kb_id = k.id AND v.number = k.current_version
 WHERE k.applied_file_sha256 = ANY(%(keys)s)
   AND k.desired_manifest IS NULL AND k.generation = k.observed_generation
   AND v.manifest_sha256 = k.applied_manifest_sha256
   AND v.background_similarity IS NOT NULL
   AND CASE WHEN v.restricted_chunks > 0 THEN v.background_bests IS NOT NULL ELSE v.background_keyword IS NOT NULL END
   AND k.conditions @> %(ready)s
   AND NOT EXISTS (SELECT 1 FROM kb_version_sources vs
                    WHERE vs.version_id = v.id AND (vs.revision_id IS NULL OR vs.state <> 'ready'))
   AND NOT EXISTS (SELECT 1 FROM kb_source_status s WHERE s.kb_id = k.id AND s.state <> 'ready')
 ORDER BY k.name
"""


class AppliedFiles(Connected):
    """The manifest files knowledge bases were applied from, and the checks that they still serve it."""

    def settled_files(self, keys: Sequence[str]) -> dict[str, list[SettledKnowledgeBase]]:
        """The settled files among `keys`: key -> its knowledge bases in line order. A key some of whose knowledge
        bases fail a check (or are gone) is not settled."""
        if not keys:
            return {}
        rows = self._conn.execute(
            _SETTLED, {"keys": list(keys), "ready": Jsonb([{"type": "Ready", "status": "True"}])}
        ).fetchall()
        found: dict[str, list[SettledKnowledgeBase]] = {}
        expected: dict[str, int] = {}
        for kb_id, name, key, line, kbs, version, generation, model, ref, names, chunks in rows:
            expected[key] = int(kbs)
            sources = tuple(zip(names, (int(c) for c in chunks), strict=True))
            found.setdefault(key, []).append(
                SettledKnowledgeBase(
                    int(kb_id), name, key, int(line), int(version), int(generation), model, ref, sources
                )
            )
        return {key: sorted(kbs, key=lambda kb: kb.line) for key, kbs in found.items() if len(kbs) == expected[key]}

    def record_applied_files(self, applied: Sequence[AppliedFile]) -> None:
        """Record the manifest file each knowledge base was applied from, with the manifest its version serves; a
        knowledge base whose current version is no longer `version` (changed meanwhile) records nothing."""
        if not applied:
            return
        with self._conn.transaction(), self._conn.cursor() as cur:
            cur.executemany(
                "UPDATE kb_knowledge_bases k SET applied_file_sha256 = %(key)s, applied_file_kbs = %(kbs)s,"
                " applied_file_line = %(line)s, applied_manifest_sha256 = v.manifest_sha256"
                " FROM kb_versions v WHERE k.name = %(name)s AND v.kb_id = k.id AND v.number = %(version)s"
                " AND k.current_version = %(version)s",
                [a.__dict__ for a in applied],
            )

    def touch_sources(self, kb_id: int, now: datetime) -> None:
        """Move every source status of a knowledge base to checked at `now` (what an unchanged apply records)."""
        self._conn.execute("UPDATE kb_source_status SET checked_at = %s WHERE kb_id = %s", (now, kb_id))

    def record_applied_from(self, kb_id: int, folder: str) -> None:
        """Record the folder the path: sources of a knowledge base were read from (an apply that listed them all)."""
        self._conn.execute(
            "UPDATE kb_knowledge_bases SET applied_from = %s WHERE id = %s AND applied_from IS DISTINCT FROM %s",
            (folder, kb_id, folder),
        )

    def applied_from(self, name: str) -> str | None:
        """The folder the path: sources of knowledge base `name` were last read from (None: never, or no such KB)."""
        row = self._conn.execute("SELECT applied_from FROM kb_knowledge_bases WHERE name = %s", (name,)).fetchone()
        return row[0] if row is not None else None
