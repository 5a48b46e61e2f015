"""Syncs: the git folders of manifests a controller keeps applied (kbctl.engine.sync), and what each last applied.

A Sync is due `interval` after its last pass; a controller claims a due one by moving its next time on in the
same statement (`FOR UPDATE SKIP LOCKED`), so two controllers never run the same pass. `kbctl apply` of a Sync
manifest records it (due at once when new or changed).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from psycopg.types.json import Jsonb
from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from kbctl.manifest.digest import sha256_json
from kbctl.manifest.sync import Sync
from kbctl.store.database import Database, _store_errors

__all__ = ["SyncStatus", "claim_due_sync", "delete_sync", "finish_sync", "list_syncs", "record_sync"]


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


@_store_errors
def record_sync(db: Database, sync: Sync) -> Literal["created", "configured", "unchanged"]:
    """Record a Sync; "created", "configured" (its spec changed: due at once) or "unchanged"."""
    spec = sync.spec.model_dump(mode="json")
    digest = sha256_json(spec)
    row = db.connection.execute(
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


@_store_errors
def list_syncs(db: Database) -> list[SyncStatus]:
    rows = db.connection.execute(f"SELECT {_COLUMNS} FROM kb_syncs ORDER BY name").fetchall()
    return [_status(r) for r in rows]


@_store_errors
def delete_sync(db: Database, name: str) -> bool:
    return db.connection.execute("DELETE FROM kb_syncs WHERE name = %s", (name,)).rowcount > 0


@_store_errors
def claim_due_sync(db: Database) -> SyncStatus | None:
    """A Sync whose pass is due (not suspended), claimed: its next time moved on by its interval."""
    row = db.connection.execute(
        "WITH due AS (SELECT name FROM kb_syncs WHERE next_at <= now()"
        "  AND NOT coalesce((spec ->> 'suspend')::boolean, false) ORDER BY next_at LIMIT 1 FOR UPDATE SKIP LOCKED)"
        " UPDATE kb_syncs s SET next_at = now() + make_interval(secs => s.interval_seconds)"
        " FROM due WHERE s.name = due.name RETURNING " + ", ".join(f"s.{c.strip()}" for c in _COLUMNS.split(","))
    ).fetchone()
    return None if row is None else _status(row)


@_store_errors
def finish_sync(db: Database, name: str, revision: str | None, error: str | None) -> None:
    """Record a pass: the commit applied (`error` None), or why nothing was applied."""
    db.connection.execute(
        "UPDATE kb_syncs SET last_attempted_revision = %(rev)s, last_error = %(error)s,"
        " last_applied_revision = CASE WHEN %(error)s::text IS NULL THEN %(rev)s ELSE last_applied_revision END,"
        " last_applied_at = CASE WHEN %(error)s::text IS NULL THEN now() ELSE last_applied_at END,"
        " updated_at = now() WHERE name = %(name)s",
        {"rev": revision, "error": error, "name": name},
    )
