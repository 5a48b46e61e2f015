"""Syncs: the git folders of manifests a controller keeps applied (kbctl.engine.sync), and what each last applied.

A Sync is due `interval` after its last pass; a controller claims a due one by moving its next time on in the
same statement (`FOR UPDATE SKIP LOCKED`), so two controllers never run the same pass. `kbctl apply` of a Sync
manifest records it (due at once when new or changed).

A Sync manages the knowledge bases of its apply set (`sync-NAME`) while it exists and is not suspended: `managers`
names it, for a change by hand to be refused (kbctl.engine.ownership). Its inventory is the manifest it last applied
to each, by digest: one whose applied manifest is another was applied by hand since.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from psycopg.types.json import Jsonb
from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from kbctl.manifest.digest import sha256_json
from kbctl.manifest.sync import SYNC_APPLYSET_PREFIX, Sync
from kbctl.store.connection import Connected

__all__ = ["Managed", "SyncStatus", "Syncs"]


class SyncStatus(BaseModel):
    """A Sync as `kbctl get syncs` shows it: its spec and what it last applied."""

    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)

    name: str
    url: str
    ref: str | None
    path: str
    interval: str
    prune: bool
    suspend: bool
    last_applied_revision: str | None  # the commit last applied whole
    last_applied_at: datetime | None
    last_attempted_revision: str | None
    last_error: str | None  # why the last pass applied nothing (None when it succeeded)
    next_at: datetime


_COLUMNS = "name, spec, last_applied_revision, last_applied_at, last_attempted_revision, last_error, next_at"


def _status(row: Any) -> SyncStatus:
    spec = row[1]
    return SyncStatus(
        name=row[0],
        url=spec["url"],
        ref=spec.get("ref"),
        path=spec.get("path", "."),
        interval=spec.get("interval", "5m"),
        prune=bool(spec.get("prune", True)),
        suspend=bool(spec.get("suspend", False)),
        last_applied_revision=row[2],
        last_applied_at=row[3],
        last_attempted_revision=row[4],
        last_error=row[5],
        next_at=row[6],
    )


@dataclass(frozen=True)
class Managed:
    """A knowledge base a Sync manages, and the digest of the manifest applied to it last (by anyone)."""

    name: str
    sync: str
    applied_sha256: str | None


class Syncs(Connected):
    """Recorded Syncs and the knowledge bases each manages."""

    def record_sync(self, sync: Sync) -> Literal["created", "configured", "unchanged"]:
        """Record a Sync; "created", "configured" (its spec changed: due at once) or "unchanged"."""
        spec = sync.spec.model_dump(mode="json")
        digest = sha256_json(spec)
        row = self._conn.execute(
            "INSERT INTO kb_syncs (name, spec, spec_sha256, interval_seconds) VALUES (%s, %s, %s, %s)"
            " ON CONFLICT (name) DO UPDATE SET spec = excluded.spec, spec_sha256 = excluded.spec_sha256,"
            "  interval_seconds = excluded.interval_seconds,"
            "  next_at = now(), last_attempted_revision = NULL, updated_at = now()"
            "  WHERE kb_syncs.spec_sha256 <> excluded.spec_sha256"
            " RETURNING (xmax = 0)",
            (sync.name, Jsonb(spec), digest, sync.spec.seconds),
        ).fetchone()
        if row is None:
            return "unchanged"
        return "created" if row[0] else "configured"

    def list_syncs(self) -> list[SyncStatus]:
        rows = self._conn.execute(f"SELECT {_COLUMNS} FROM kb_syncs ORDER BY name").fetchall()
        return [_status(r) for r in rows]

    def delete_sync(self, name: str) -> bool:
        return self._conn.execute("DELETE FROM kb_syncs WHERE name = %s", (name,)).rowcount > 0

    def claim_due_sync(self) -> SyncStatus | None:
        """A Sync whose pass is due (not suspended), claimed: its next time moved on by its interval."""
        row = self._conn.execute(
            "WITH due AS (SELECT name FROM kb_syncs WHERE next_at <= now()"
            "  AND NOT coalesce((spec ->> 'suspend')::boolean, false) ORDER BY next_at LIMIT 1 FOR UPDATE SKIP LOCKED)"
            " UPDATE kb_syncs s SET next_at = now() + make_interval(secs => s.interval_seconds)"
            " FROM due WHERE s.name = due.name RETURNING " + ", ".join(f"s.{c.strip()}" for c in _COLUMNS.split(","))
        ).fetchone()
        return None if row is None else _status(row)

    def finish_sync(self, name: str, revision: str | None, error: str | None) -> None:
        """Record a pass: the commit applied (`error` None), or why nothing was applied."""
        self._conn.execute(
            "UPDATE kb_syncs SET last_attempted_revision = %(rev)s, last_error = %(error)s,"
            " last_applied_revision = CASE WHEN %(error)s::text IS NULL THEN %(rev)s ELSE last_applied_revision END,"
            " last_applied_at = CASE WHEN %(error)s::text IS NULL THEN now() ELSE last_applied_at END,"
            " updated_at = now() WHERE name = %(name)s",
            {"rev": revision, "error": error, "name": name},
        )

    def managers(self, names: Sequence[str], applyset: str | None = None) -> dict[str, Managed]:
        """Of `names`, those that a Sync which exists and is not suspended manages, by name: the members of its apply
        set, and all of them when `applyset` is its apply set (a change by hand into it)."""
        rows = self._conn.execute(
            "SELECT n.name, s.name, k.applied_sha256 FROM unnest(%(names)s::text[]) AS n(name)"
            " LEFT JOIN kb_knowledge_bases k ON k.name = n.name"
            " JOIN kb_syncs s ON %(prefix)s || s.name IN (k.applyset, %(applyset)s::text)"
            " WHERE NOT coalesce((s.spec ->> 'suspend')::boolean, false)",
            {"names": list(names), "prefix": SYNC_APPLYSET_PREFIX, "applyset": applyset},
        ).fetchall()
        return {str(r[0]): Managed(str(r[0]), str(r[1]), r[2]) for r in rows}

    def sync_inventory(self, name: str) -> dict[str, str]:
        """The digest of the manifest the Sync last applied to each knowledge base, by name ({} before its first
        pass)."""
        row = self._conn.execute("SELECT inventory FROM kb_syncs WHERE name = %s", (name,)).fetchone()
        return {} if row is None else {str(k): str(v) for k, v in row[0].items()}

    def record_inventory(self, name: str, kbs: Sequence[str]) -> None:
        """Record as the Sync's inventory the manifest each of `kbs` was just applied (the Sync's own pass)."""
        self._conn.execute(
            "UPDATE kb_syncs SET inventory = coalesce((SELECT jsonb_object_agg(k.name, k.applied_sha256)"
            "  FROM kb_knowledge_bases k WHERE k.name = ANY(%s) AND k.applied_sha256 IS NOT NULL), '{}')"
            " WHERE name = %s",
            (list(kbs), name),
        )
