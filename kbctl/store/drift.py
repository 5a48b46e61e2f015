"""Knowledge bases whose serving version drifted from the manifest last applied (kbctl.engine.drift decides).

Drift is a generation later than the one the applied manifest was recorded at (`rollout undo` makes one) whose
serving version holds another manifest, with nothing pending and no reconcile of the applied one failing (a
failed reconcile keeps its own generation, so it is not drift: it is Ready False, and retried by applying again).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kbctl.store.connection import Connected
from kbctl.store.texts import unpack

__all__ = ["Drift", "Drifts"]


@dataclass(frozen=True)
class Drift:
    """A knowledge base serving another manifest than the one applied."""

    name: str
    serving: int  # the version that serves
    applied_generation: int
    suspended: bool  # the applied manifest's spec.suspend
    applied_sha256: str
    applied_manifest: dict[str, Any]  # packed (its inline texts by reference: see `manifest`)

    def manifest(self, db: Connected) -> dict[str, Any]:
        """The applied manifest, its inline texts back in place."""
        return unpack(db.connection, self.applied_manifest)


class Drifts(Connected):
    """The knowledge bases whose serving version is not the one their applied manifest made."""

    def drifted(self) -> list[Drift]:
        """Every knowledge base that drifted, by name."""
        rows = self._conn.execute(
            "SELECT k.name, k.current_version, k.applied_generation,"
            " coalesce((k.applied_manifest #>> '{spec,suspend}')::boolean, false), k.applied_sha256, k.applied_manifest"
            " FROM kb_knowledge_bases k JOIN kb_versions v ON v.kb_id = k.id AND v.number = k.current_version"
            " WHERE k.applied_sha256 IS NOT NULL AND k.applied_manifest IS NOT NULL"
            " AND k.generation > k.applied_generation AND k.generation = k.observed_generation"
            " AND k.desired_manifest IS NULL AND v.manifest_sha256 <> k.applied_sha256"
            " ORDER BY k.name"
        ).fetchall()
        return [Drift(str(r[0]), int(r[1]), int(r[2]), bool(r[3]), str(r[4]), r[5]) for r in rows]

    def stored_manifests(self, name: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """(the manifest last applied, the serving version's manifest) of a knowledge base, inline texts in place; None
        for one it lacks (or when there is no such knowledge base)."""
        row = self._conn.execute(
            "SELECT k.applied_manifest, v.manifest FROM kb_knowledge_bases k"
            " LEFT JOIN kb_versions v ON v.kb_id = k.id AND v.number = k.current_version WHERE k.name = %s",
            (name,),
        ).fetchone()
        if row is None:
            return None, None
        applied, serving = (None if m is None else unpack(self._conn, m) for m in row)
        return applied, serving
