"""The controllers' side of the store: heartbeats, wake-ups, and claims of pending knowledge bases."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from psycopg import sql

from kbctl.defaults import BUSY_RETRY_SECONDS
from kbctl.store.connection import Connected, lock_key
from kbctl.store.texts import unpack

__all__ = ["CHANNEL", "Claim", "Claims"]

CHANNEL = "kbctl_work"


@dataclass(frozen=True)
class Claim:
    """A pending knowledge base one controller holds: the generation and manifest to reconcile."""

    kb_id: int
    name: str
    generation: int
    manifest: dict[str, Any]
    left_by: str | None = None  # the in-process apply that recorded this generation and stopped before finishing it


APPLY_PREFIX = "apply "  # how an in-process apply marks the generation it works on (see `mark_applying`)


class Claims(Connected):
    """The controllers' heartbeats, wake-ups and claims of pending knowledge bases."""

    def heartbeat(self, controller_id: str) -> None:
        """Announce a controller as alive."""
        self._conn.execute(
            "INSERT INTO kb_controllers (id, hostname, pid) VALUES (%s, %s, %s)"
            " ON CONFLICT (id) DO UPDATE SET last_seen = now()",
            (controller_id, socket.gethostname(), os.getpid()),
        )

    def deregister(self, controller_id: str) -> None:
        """Remove a controller's heartbeat row."""
        self._conn.execute("DELETE FROM kb_controllers WHERE id = %s", (controller_id,))

    def controllers_alive(self, ttl_seconds: int) -> bool:
        """Whether some controller has sent a heartbeat in the last `ttl_seconds`."""
        row = self._conn.execute(
            "SELECT count(*) FROM kb_controllers WHERE last_seen > now() - make_interval(secs => %s)", (ttl_seconds,)
        ).fetchone()
        return bool(row and row[0])

    def notify_work(self, name: str) -> None:
        """Wake the listening controllers: `name` has a new desired state."""
        self._conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, name))

    def listen(self) -> None:
        """Start receiving wake-ups on this connection."""
        self._conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(CHANNEL)))

    def unlisten(self) -> None:
        """Stop receiving wake-ups on this connection."""
        self._conn.execute(sql.SQL("UNLISTEN {}").format(sql.Identifier(CHANNEL)))

    def wake_ups(self, timeout: float) -> Iterator[Any]:
        """The wake-ups received within `timeout` seconds (at most one)."""
        return iter(list(self._conn.notifies(timeout=timeout, stop_after=1)))

    def claim_next(self, controller_id: str, lease_seconds: int) -> Claim | None:
        """Claim the oldest pending knowledge base no other controller holds (FOR UPDATE SKIP LOCKED + a lease).

        One whose lock another process holds (an `apply --wait` reconciling it in-process) is left alone for
        BUSY_RETRY_SECONDS instead of waited for: that apply finishes the generation, and if it dies its lock goes with
        its connection and the next try claims the work. A controller waiting on the lock would also hold a snapshot
        that the apply's CREATE INDEX CONCURRENTLY waits for."""
        conn = self._conn
        with conn.transaction():
            while True:
                row = conn.execute(
                    "SELECT id, name, generation, coalesce(desired_manifest, manifest), claimed_by"
                    " FROM kb_knowledge_bases"
                    " WHERE generation > observed_generation AND (claim_expires IS NULL OR claim_expires < now())"
                    " ORDER BY updated_at, id LIMIT 1 FOR UPDATE SKIP LOCKED"
                ).fetchone()
                if row is None:
                    return None
                free = conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (lock_key(row[1]),)).fetchone()
                if free and free[0]:
                    break
                conn.execute(
                    "UPDATE kb_knowledge_bases SET claim_expires = now() + make_interval(secs => %s) WHERE id = %s",
                    (BUSY_RETRY_SECONDS, row[0]),
                )
            conn.execute(
                "UPDATE kb_knowledge_bases SET claimed_by = %s, claim_expires = now() + make_interval(secs => %s)"
                " WHERE id = %s",
                (controller_id, lease_seconds, row[0]),
            )
        left_by = str(row[4])[len(APPLY_PREFIX) :] if row[4] and str(row[4]).startswith(APPLY_PREFIX) else None
        return Claim(row[0], row[1], row[2], unpack(conn, row[3]), left_by)

    def mark_applying(self, name: str, holder: str | None) -> None:
        """Mark (or, with None, unmark) the pending generation of `name` as being reconciled by an in-process apply,
        `holder` naming it: a controller that claims the generation later knows an apply left it unfinished."""
        self._conn.execute(
            "UPDATE kb_knowledge_bases SET claimed_by = %s WHERE name = %s AND (claimed_by IS NULL"
            " OR claimed_by LIKE %s)",
            (None if holder is None else APPLY_PREFIX + holder, name, APPLY_PREFIX + "%"),
        )

    def release_claim(self, claim: Claim, controller_id: str, *, retry_after: int | None = None) -> None:
        """Release a claim; after a failure the knowledge base is left alone for `retry_after` seconds."""
        self._conn.execute(
            "UPDATE kb_knowledge_bases SET claimed_by = NULL,"
            " claim_expires = CASE WHEN %s THEN now() + make_interval(secs => %s) END"
            " WHERE id = %s AND claimed_by = %s",
            (retry_after is not None, retry_after or 0, claim.kb_id, controller_id),
        )

    def release_held(self, controller_id: str) -> int:
        """Release every claim `controller_id` still holds (its work in flight was lost with its connection), so the
        knowledge bases are claimed again at once instead of when their lease expires; how many were released."""
        cur = self._conn.execute(
            "UPDATE kb_knowledge_bases SET claimed_by = NULL, claim_expires = NULL WHERE claimed_by = %s",
            (controller_id,),
        )
        return cur.rowcount

    def backend_active(self, pid: int) -> bool:
        """Whether the server is running a statement for the backend `pid` (a long publish, say) right now."""
        row = self._conn.execute("SELECT state = 'active' FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
        return bool(row and row[0])
