"""The apply and refresh log: one line per engine event, and the embedding progress bar on a terminal.

The engine reports typed events; this module alone words them, so the lines the README shows are made here. The
text log prints each line inert (`kbctl.cli.terminal.inert`: a file name's control characters escaped, on one line);
the JSON log keeps the exact characters, JSON-escaped.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import typer

from kbctl import (
    ControllerGone,
    DocumentsRemoved,
    DriftFound,
    Event,
    HandedToController,
    ReconcileFailed,
    ReconcileFinished,
    ReconcileStarted,
    SourceReconciled,
    StoreUnavailable,
    SyncFinished,
    VectorIndexBuilt,
    WorkProgress,
)
from kbctl.cli.render import count
from kbctl.cli.terminal import inert, say

if TYPE_CHECKING:
    from rich.progress import Progress

__all__ = ["PLAIN_EVERY_SECONDS", "CliReporter", "JsonLogReporter", "event_line", "progress_line"]


def _source_line(prefix: str, e: SourceReconciled) -> str | None:
    r, src = e.source, f"{prefix} source {e.source.name}"
    if r.failed:
        return f"{src} failed: {r.message}"
    if r.ingested:
        new = f", {r.embedded} new" if e.trigger == "refresh" else ""
        ends = "its end is" if r.truncated == 1 else "their ends are"
        cut = (
            f"; warning: {count(r.truncated, 'chunk')} longer than the model reads, {ends} not embedded"
            " (lower spec.chunking.maxChars)"
            if r.truncated
            else ""
        )
        return f"{src} ready: {count(r.chunks, 'chunk')} ({e.model}){new}{cut}"
    if r.fetched and e.trigger == "refresh":
        return f"{src} unchanged"
    return None


def event_line(event: Event) -> str | None:
    """The line an engine event prints in the apply / refresh log, or None for events that print nothing."""
    if isinstance(event, WorkProgress):
        return None
    if isinstance(event, StoreUnavailable):
        return f"database unavailable ({event.message}); reconnecting in {event.retry_seconds:g} s"
    prefix = f"KnowledgeBase/{event.name}"
    if isinstance(event, ControllerGone):
        return f"{prefix}: no controller is alive any more; reconciling in-process"
    if isinstance(event, ReconcileStarted):
        if event.trigger == "refresh":
            return None  # refresh names the outcome once its sources are done
        if event.action == "unchanged":
            return f"{prefix} unchanged (version {event.version})"
        n = event.waiting
        work = f"waiting for the ingestion of {count(n, 'source')}" if n else "every source reuses stored content"
        return f"{prefix} {event.action} (version {event.version}); {work}"
    if isinstance(event, SourceReconciled):
        return _source_line(prefix, event)
    if isinstance(event, SyncFinished):
        at = f"commit {event.revision[:12]}" if event.revision else "no commit"
        return f"Sync/{event.name}: {event.error}" if event.error else f"Sync/{event.name}: {at} applied"
    if isinstance(event, DriftFound):
        what = f"{prefix}: version {event.serving} serves a manifest other than the one last applied"
        return f"{what}; re-applying it" if event.reverted else f"{what}; spec.suspend is set, left as it is"
    if isinstance(event, DocumentsRemoved):
        shown = ", ".join(event.documents[:REMOVED_SHOWN])
        more = len(event.documents) - REMOVED_SHOWN
        return f"{prefix} no longer serves {count(len(event.documents), 'document')} (gone at the source): {shown}" + (
            f" and {more} more" if more > 0 else ""
        )
    if isinstance(event, ReconcileFinished):
        if event.trigger == "apply":
            return None
        outcome = "unchanged" if event.action == "unchanged" else "refreshed"
        return f"{prefix} {outcome} (version {event.version})"
    if isinstance(event, ReconcileFailed):
        return f"{prefix} failed: {event.message}"
    if isinstance(event, VectorIndexBuilt):
        vectors = count(event.vectors, "vector")
        return f"{prefix}: vector index of {event.model} built over {vectors} in {event.seconds:.1f} s"
    assert isinstance(event, HandedToController)
    return f"{prefix} {event.action} (version {event.version}); waiting for a controller"


REMOVED_SHOWN = 10
"""Documents a removal line names; the rest are counted (`describe` and the events keep every name)."""

PLAIN_EVERY_SECONDS = 10.0
"""How often, at most, a progress line is printed when stderr is not a terminal (a CI log)."""


def _eta(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def progress_line(event: WorkProgress, elapsed: float) -> str:
    """The plain progress line of a long stage (CI logs): counts, percent and, once there is a rate, the time left."""
    share = f"{event.done}/{event.total} ({100 * event.done // max(event.total, 1)}%)"
    left = ""
    if 0 < event.done < event.total and elapsed > 0:
        left = f", about {_eta(elapsed / event.done * (event.total - event.done))} left"
    return f"KnowledgeBase/{event.name} {event.stage}: {share}{left}"


class CliReporter:
    """Prints the apply log to stdout and the progress of long stages (fetching, embedding) to stderr: a bar with
    counts and the time left on a terminal, else a plain line at most every PLAIN_EVERY_SECONDS. `quiet` prints
    neither (errors still go to stderr); `log` False keeps the progress but not the log (for -o json)."""

    def __init__(self, quiet: bool = False, *, log: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
        self._quiet = quiet
        self._log = log and not quiet
        self._clock = clock
        self._terminal = sys.stderr.isatty()
        self._progress: Progress | None = None
        self._tasks: dict[tuple[str, str], Any] = {}
        self._started: dict[tuple[str, str], float] = {}
        self._printed: dict[tuple[str, str], float] = {}

    def report(self, event: Event) -> None:
        """Print an event's line, or move the progress of its stage."""
        if isinstance(event, WorkProgress):
            if not self._quiet:
                self._work_progress(event)
            return
        line = event_line(event)
        if line is not None:
            self.close()
            if self._log:
                say(inert(line))

    def _work_progress(self, event: WorkProgress) -> None:
        key = (event.name, event.stage)
        now = self._clock()
        started = self._started.setdefault(key, now)
        if not self._terminal:  # the first line after PLAIN_EVERY_SECONDS (short work prints none), the last at the end
            finishing = event.done >= event.total and key in self._printed
            if finishing or now - self._printed.get(key, started) >= PLAIN_EVERY_SECONDS:
                say(inert(progress_line(event, now - started)), err=True)
                self._printed[key] = now
            return
        if self._progress is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._progress.start()
        if key not in self._tasks:
            from rich.markup import escape  # the description is rich markup: data in it is text

            self._tasks[key] = self._progress.add_task(escape(inert(f"{event.stage} {event.name}")), total=event.total)
        self._progress.update(self._tasks[key], completed=event.done, total=event.total)

    def close(self) -> None:
        """Remove the progress bars, if any are drawn."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
            self._tasks.clear()


class JsonLogReporter:
    """The apply and refresh log as JSON lines on stdout, one object per event (for a controller run as a service):
    time, level (error for failures), event, knowledgeBase and message, the line the text log would print.
    Progress events print nothing."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock

    def report(self, event: Event) -> None:
        """Print one event as a JSON object on its own line (a reconcile's end too, which the text log leaves to the
        source lines and the command's summary)."""
        message = event_line(event)
        if message is None and isinstance(event, ReconcileFinished):
            message = f"KnowledgeBase/{event.name} {event.action} (version {event.version})"
        if message is None:
            return
        failed = isinstance(event, ReconcileFailed) or (isinstance(event, SourceReconciled) and event.source.failed)
        failed = failed or (isinstance(event, SyncFinished) and event.error is not None)
        level = "error" if failed else "warning" if isinstance(event, StoreUnavailable) else "info"
        self.say(type(event).__name__, message, level=level, name=getattr(event, "name", None))

    def say(self, event: str, message: str, *, level: str = "info", name: str | None = None, err: bool = False) -> None:
        """Print one JSON line of the command's own (`ControllerStarted`, `PassFinished`), as the events are."""
        record: dict[str, Any] = {
            "time": datetime.fromtimestamp(self._clock(), UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": level,
            "event": event,
            "knowledgeBase": name,
            "message": message,
        }
        typer.echo(json.dumps(record, ensure_ascii=False), err=err)

    def close(self) -> None:
        """Nothing to tidy (the text reporter's progress bar has no JSON twin)."""
