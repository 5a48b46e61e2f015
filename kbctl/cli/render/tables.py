"""The CLI's tables and the pieces every renderer shares: counts, ages, spans, labels, aligned columns; the
tables of `get` (knowledge bases, Syncs, events, `get all`) and `rollout history`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from kbctl.cli.terminal import inert

if TYPE_CHECKING:  # imported by the commands that print them (a command's start-up pays only for its own)
    from kbctl import KnowledgeBaseEvent, KnowledgeBaseSummary, SyncStatus, VersionInfo


MINUS = "\u2212"  # the minus sign (U+2212) of "+3 \u22122 chunks": ruff flags it written out


def count(n: int, noun: str) -> str:
    """`1 chunk`, `3 chunks`."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], indent: str = "") -> str:
    """Columns padded to their widest cell, three spaces apart (kubectl's layout); None prints empty, and a cell's
    control characters print escaped (`inert`), so no cell breaks its row."""
    cells = [list(headers), *[[("" if c is None else inert(str(c))) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join(indent + "   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def age(when: datetime) -> str:
    """A kubectl-style age: 42s, 5m, 3h, 2d."""
    return span((datetime.now(UTC) - when).total_seconds())


def span(seconds_float: float) -> str:
    """A kubectl-style span of time: 42s, 5m, 3h, 2d (negative counts as 0)."""
    seconds = max(0, int(seconds_float))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


AGE_COLUMN = 6
"""Where AGE is in every layout of knowledge_base_rows (a watch ignores it: it changes with the clock alone)."""


def label_text(labels: Mapping[str, str]) -> str:
    """Labels as kubectl's LABELS column shows them: k=v,k=v by key, or <none>."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "<none>"


def label_column_title(key: str) -> str:
    """The title of a `-L KEY` column, as kubectl makes it: the key's last /-part upper-cased."""
    return key.rsplit("/", 1)[-1].upper()


def knowledge_base_rows(
    items: Sequence[KnowledgeBaseSummary],
    *,
    wide: bool = False,
    show_labels: bool = False,
    label_columns: Sequence[str] = (),
) -> tuple[list[str], list[list[object]]]:
    """The headers and rows of `kbctl get kb` (see knowledge_base_table)."""
    headers = ["NAME", "READY", "STATUS", "VERSION", "SOURCES", "CHUNKS", "AGE"]
    rows: list[list[object]] = [
        [i.name, i.ready, i.status, i.version or "-", f"{i.ready_sources}/{i.sources}", i.chunks, age(i.created_at)]
        for i in items
    ]
    if wide:
        headers += ["MODEL", "LABELS", "DESCRIPTION"]
        for row, i in zip(rows, items, strict=True):
            row += [i.model, label_text(i.labels), i.description or "<none>"]
    headers += [label_column_title(key) for key in label_columns]
    for row, i in zip(rows, items, strict=True):
        row += [i.labels.get(key, "") for key in label_columns]
    if show_labels and not wide:  # wide has its LABELS column already
        headers.append("LABELS")
        for row, i in zip(rows, items, strict=True):
            row.append(label_text(i.labels))
    return headers, rows


def knowledge_base_table(
    items: Sequence[KnowledgeBaseSummary],
    *,
    wide: bool = False,
    no_headers: bool = False,
    show_labels: bool = False,
    label_columns: Sequence[str] = (),
) -> str:
    """`kbctl get kb`: name, Ready condition, the conditions in one word, serving version, sources ready/total,
    chunks, age; `-o wide` adds the model, the labels and the description (what an agent reads to choose a
    knowledge base). As in kubectl, `label_columns` (-L) add a column per label key, `show_labels` a LABELS
    column, and `no_headers` leaves the header line out."""
    headers, rows = knowledge_base_rows(items, wide=wide, show_labels=show_labels, label_columns=label_columns)
    return headed_table(headers, rows, no_headers=no_headers)


def headed_table(headers: Sequence[str], rows: Sequence[Sequence[object]], *, no_headers: bool = False) -> str:
    """`table`, or with `no_headers` its rows alone, padded to their own widths (kubectl's --no-headers)."""
    if not no_headers:
        return table(headers, rows)
    return table([""] * len(headers), rows).split("\n", 1)[1] if rows else ""


def table_body(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """The rows of `table(headers, rows)` without the header line, still padded as under it (what a watch prints
    below the table it printed first)."""
    return table(headers, rows).split("\n", 1)[1] if rows else ""


def events_table(events: Sequence[KnowledgeBaseEvent], *, indent: str = "", no_headers: bool = False) -> str:
    """`kbctl get events` and describe's Events: as kubectl lists them, a repeated one as `5m (x3 over 2h)`."""
    rows = []
    for e in events:
        seen = age(e.last_seen)
        if e.count > 1:
            seen += f" (x{e.count} over {age(e.first_seen)})"
        rows.append([seen, e.type, e.reason, f"{e.kind.lower()}/{e.name}", e.message])
    headers = ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    if no_headers:
        return "\n".join(indent + line for line in headed_table(headers, rows, no_headers=True).split("\n"))
    return table(headers, rows, indent=indent)


def _redacted(url: str) -> str:
    from kbctl.userconfig import redact

    return redact(url)


def syncs_table(syncs: Sequence[SyncStatus], *, no_headers: bool = False) -> str:
    """`kbctl get syncs`: where each Sync reads, how often, the commit it last applied and the last error."""
    rows = [
        [
            s.name,
            _redacted(s.url),
            s.ref or "<default>",
            s.path,
            s.interval + (" (suspended)" if s.suspend else ""),
            s.last_applied_revision[:12] if s.last_applied_revision else "-",
            age(s.last_applied_at) if s.last_applied_at else "-",
            s.last_error or "",
        ]
        for s in syncs
    ]
    headers = ["NAME", "URL", "REF", "PATH", "INTERVAL", "REVISION", "APPLIED", "ERROR"]
    return headed_table(headers, rows, no_headers=no_headers)


def history_table(versions: Sequence[VersionInfo]) -> str:
    """`kbctl rollout history`: newest first, * on the serving one, sources ready/total, what made each."""
    rows = [
        [
            *(v.number, "*" if v.current else "", f"{v.created_at.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}"),
            *(f"{v.sources - v.failed_sources}/{v.sources}", v.chunk_count, v.embedded_count, v.reused_count),
            v.change_cause,
        ]
        for v in versions
    ]
    return table(["VERSION", "CURRENT", "CREATED", "SOURCES", "CHUNKS", "EMBEDDED", "REUSED", "CHANGE"], rows)


def all_tables(kbs: Sequence[KnowledgeBaseSummary], syncs: Sequence[SyncStatus], *, no_headers: bool = False) -> str:
    """`kbctl get all`: a table per kind (knowledge bases, then Syncs), each object named KIND/NAME, a blank line
    between two tables; "" when there is nothing."""
    tables = []
    if kbs:
        headers, rows = knowledge_base_rows(kbs)
        tables.append(headed_table(headers, [[f"knowledgebase/{r[0]}", *r[1:]] for r in rows], no_headers=no_headers))
    if syncs:
        named = [s.model_copy(update={"name": f"sync/{s.name}"}) for s in syncs]
        tables.append(syncs_table(named, no_headers=no_headers))
    return "\n\n".join(tables)
