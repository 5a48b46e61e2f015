"""The refresh schedule of knowledge bases with `spec.refresh`: when each is due, claimed by one controller.

A run is due `interval` after the last, jittered by up to 10% (so many knowledge bases do not refresh at
once). A controller claims a due run by moving it to its next time in the same statement (`FOR UPDATE SKIP
LOCKED`), so two controllers never start the same run; the refresh itself holds the knowledge base's lock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from kbctl.store.connection import Connected

__all__ = ["Schedule", "Schedules"]


def _next(seconds: str) -> str:
    """SQL for the next run: `seconds` (an SQL expression) from now, times a factor in [0.9, 1.1)."""
    return f"now() + make_interval(secs => {seconds} * (0.9 + random() * 0.2))"


@dataclass(frozen=True)
class Schedule:
    """A knowledge base's refresh schedule."""

    interval_seconds: float
    next_at: datetime
    last_at: datetime | None


class Schedules(Connected):
    """Refresh schedules of knowledge bases."""

    def set_schedule(self, kb_id: int, seconds: float | None, *, refreshed: bool) -> None:
        """Keep the schedule of a knowledge base after a reconcile: none without `spec.refresh`; a new or changed
        interval starts from now; `refreshed` (a refresh just ran) records it and counts the next run from now."""
        conn = self._conn
        if seconds is None:
            conn.execute("DELETE FROM kb_refresh_schedule WHERE kb_id = %s", (kb_id,))
            return
        args = {"kb": kb_id, "seconds": seconds, "refreshed": refreshed}
        conn.execute(
            "INSERT INTO kb_refresh_schedule (kb_id, interval_seconds, next_at, last_at)"
            f" VALUES (%(kb)s, %(seconds)s, {_next('%(seconds)s')}, CASE WHEN %(refreshed)s THEN now() END)"
            " ON CONFLICT (kb_id) DO UPDATE SET interval_seconds = excluded.interval_seconds,"
            "  next_at = CASE WHEN %(refreshed)s OR kb_refresh_schedule.interval_seconds <> excluded.interval_seconds"
            "   THEN excluded.next_at ELSE kb_refresh_schedule.next_at END,"
            "  last_at = CASE WHEN %(refreshed)s THEN now() ELSE kb_refresh_schedule.last_at END",
            args,
        )

    def claim_due_refresh(self) -> str | None:
        """The name of a knowledge base whose refresh is due, claimed (its next run moved on), or None."""
        row = self._conn.execute(
            "WITH due AS (SELECT kb_id, interval_seconds FROM kb_refresh_schedule WHERE next_at <= now()"
            "  ORDER BY next_at LIMIT 1 FOR UPDATE SKIP LOCKED)"
            f" UPDATE kb_refresh_schedule s SET next_at = {_next('due.interval_seconds')}"
            " FROM due JOIN kb_knowledge_bases k ON k.id = due.kb_id WHERE s.kb_id = due.kb_id RETURNING k.name"
        ).fetchone()
        return None if row is None else str(row[0])

    def read_schedule(self, kb_id: int) -> Schedule | None:
        """A knowledge base's refresh schedule, or None when it has none."""
        row = self._conn.execute(
            "SELECT interval_seconds, next_at, last_at FROM kb_refresh_schedule WHERE kb_id = %s", (kb_id,)
        ).fetchone()
        return None if row is None else Schedule(float(row[0]), row[1], row[2])
