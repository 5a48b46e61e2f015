"""Events: what happened to each knowledge base, as kubectl shows Kubernetes events (type, reason, message, count,
first and last time seen), written by apply, refresh, the controller, rollout, delete and prune, and read by
`kbctl get events` and `kbctl describe`.

An event repeated (same knowledge base, type, reason and message) counts up in its row instead of adding one.
Events are kept by the knowledge base's name, so a deletion stays on record; each object (a kind and a name: a
knowledge base and a Sync of the same name are two) keeps its newest EVENTS_PER_KNOWLEDGE_BASE, and the table its
newest EVENTS_MAX. A message is redacted and cut at EVENT_MESSAGE_CHARS: it may quote a URL, never a document's text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from kbctl.defaults import EVENT_MESSAGE_CHARS, EVENTS_MAX, EVENTS_PER_KNOWLEDGE_BASE
from kbctl.store.connection import Connected
from kbctl.userconfig import redact

__all__ = ["EventType", "Events", "KnowledgeBaseEvent", "NewEvent", "ObjectKind"]

EventType = Literal["Normal", "Warning"]
ObjectKind = Literal["KnowledgeBase", "Sync"]


@dataclass(frozen=True)
class NewEvent:
    """An event to record about one knowledge base."""

    name: str  # the knowledge base
    type: EventType
    reason: str  # one CamelCase word: Published, SourceFailed, RolledBack, DriftReverted, ...
    message: str
    component: str  # what did it: apply, refresh, controller, rollout, delete, prune
    kind: ObjectKind = "KnowledgeBase"  # what it is about: a knowledge base, or a Sync (`name` is then the Sync's)


class KnowledgeBaseEvent(BaseModel):
    """One event as `kbctl get events` shows it (camelCase with `model_dump(by_alias=True)`)."""

    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)

    name: str  # the knowledge base (or Sync) it is about
    kind: ObjectKind = "KnowledgeBase"
    type: EventType
    reason: str
    message: str
    component: str
    count: int
    first_seen: datetime
    last_seen: datetime


def _bounded(message: str) -> str:
    text = redact(message)
    return text if len(text) <= EVENT_MESSAGE_CHARS else text[: EVENT_MESSAGE_CHARS - 1] + "…"


class Events(Connected):
    """The events of knowledge bases and Syncs (kb_events)."""

    def record_events(self, events: Sequence[NewEvent]) -> None:
        """Record events (each a new row, or a count up of the same one), then trim what is kept."""
        if not events:
            return
        conn = self._conn
        with conn.transaction():
            for e in events:
                conn.execute(
                    "INSERT INTO kb_events (object_kind, object_name, type, reason, message, component)"
                    " VALUES (%s, %s, %s, %s, %s, %s)"
                    " ON CONFLICT (object_kind, object_name, type, reason, md5(message)) DO UPDATE"
                    " SET count = kb_events.count + 1, last_seen = now(), component = excluded.component",
                    (e.kind, e.name, e.type, e.reason, _bounded(e.message), e.component),
                )
            for kind, name in sorted({(e.kind, e.name) for e in events}):
                conn.execute(
                    "DELETE FROM kb_events WHERE object_kind = %(kind)s AND object_name = %(name)s AND id NOT IN ("
                    " SELECT id FROM kb_events WHERE object_kind = %(kind)s AND object_name = %(name)s"
                    " ORDER BY last_seen DESC, id DESC LIMIT %(keep)s)",
                    {"kind": kind, "name": name, "keep": EVENTS_PER_KNOWLEDGE_BASE},
                )
            conn.execute(
                "DELETE FROM kb_events WHERE last_seen < (SELECT last_seen FROM kb_events"
                " ORDER BY last_seen DESC OFFSET %s LIMIT 1)",
                (EVENTS_MAX,),
            )

    def list_events(
        self, names: Sequence[str] | None = None, *, limit: int | None = None, kind: ObjectKind | None = None
    ) -> list[KnowledgeBaseEvent]:
        """The events of `names` (every knowledge base's, deleted ones included, when None), oldest first as kubectl
        lists them; `limit` keeps the newest. `kind` keeps those of one kind (a knowledge base may share its name
        with a Sync); None: both."""
        conditions: list[str] = []
        args: dict[str, object] = {}
        if names is not None:
            conditions.append("object_name = ANY(%(names)s)")
            args["names"] = list(names)
        if kind is not None:
            conditions.append("object_kind = %(kind)s")
            args["kind"] = kind
        where = "WHERE " + " AND ".join(conditions) if conditions else ""
        rows = self._conn.execute(
            "SELECT object_name, object_kind, type, reason, message, component, count, first_seen, last_seen FROM ("
            f" SELECT * FROM kb_events {where} ORDER BY last_seen DESC, id DESC LIMIT %(limit)s"
            ") newest ORDER BY last_seen, id",
            {**args, "limit": limit if limit is not None else EVENTS_MAX},
        ).fetchall()
        return [
            KnowledgeBaseEvent(
                name=r[0],
                kind=r[1],
                type=r[2],
                reason=r[3],
                message=r[4],
                component=r[5],
                count=r[6],
                first_seen=r[7],
                last_seen=r[8],
            )
            for r in rows
        ]
