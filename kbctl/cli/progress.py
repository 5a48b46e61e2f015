"""The apply and refresh log: one line per engine event, and the embedding progress bar on a terminal.

The engine reports typed events; this module alone words them, so the lines the README shows are made here. The
text log prints each line inert (`kbctl.cli.terminal.inert`: a file name's control characters escaped, on one line);
the JSON log keeps the exact characters, JSON-escaped.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kbctl import (
    ApplyResumed,
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
    VersionCalibrated,
    WorkProgress,
)
from kbctl.cli.render import count
from kbctl.cli.terminal import inert, say

if TYPE_CHECKING:
    from rich.progress import Progress

__all__ = ["PLAIN_EVERY_SECONDS", "CliReporter", "EventLevels", "JsonLogReporter", "event_line", "progress_line"]


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
    if isinstance(event, ApplyResumed):
        what = f"{prefix}: generation {event.generation} was left unfinished by an interrupted apply ({event.left_by})"
        if event.files_here:
            return f"{what}; finishing it"
        return f"{what}; its path: sources' files are not on this host and keep what they serve: apply again there"
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
    if isinstance(event, VersionCalibrated):
        return f"{prefix}: version {event.version} calibrated (published before its relevance gate was): {event.lines}"
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


class EventLevels:
    """The log level of each engine event in a controller's log (None: it prints nothing): error for a failure,
    warning for a lost store, debug for routine work that changed nothing (an unchanged reconcile and its sources, a
    Sync applying again the commit it applied last), info for the rest. Routine lines are what a Sync every few
    seconds repeats; the default level leaves them out."""

    def __init__(self) -> None:
        self._commits: dict[str, str | None] = {}  # Sync -> the commit its last pass applied

    def __call__(self, event: Event) -> int | None:
        """The level of `event` (a `logging` level)."""
        if isinstance(event, WorkProgress):
            return None
        if isinstance(event, ApplyResumed):
            return logging.INFO if event.files_here else logging.WARNING
        if isinstance(event, ReconcileFailed | StoreUnavailable):
            return logging.ERROR if isinstance(event, ReconcileFailed) else logging.WARNING
        if isinstance(event, SourceReconciled):
            return logging.ERROR if event.source.failed else logging.INFO if event.source.ingested else logging.DEBUG
        if isinstance(event, SyncFinished):
            if event.error is not None:
                self._commits.pop(event.name, None)
                return logging.ERROR
            again = self._commits.get(event.name) == event.revision
            self._commits[event.name] = event.revision
            return logging.DEBUG if again else logging.INFO
        if isinstance(event, ReconcileStarted | ReconcileFinished) and event.action == "unchanged":
            return logging.DEBUG
        return logging.INFO


CONTROLLER_LOG = logging.getLogger("kbctl.controller")


class JsonLogReporter:
    """A controller's log as records of the `kbctl.controller` logger, one per event, for the JSON log
    (kbctl.serve.logs): the line the text log would print as `message`, the event's type as `event`, its knowledge
    base (or Sync) as `knowledgeBase` (`sync`), a failure's `reason`, at the level of `EventLevels`. Progress
    events print nothing."""

    def __init__(self) -> None:
        self._levels = EventLevels()

    def report(self, event: Event) -> None:
        """Log one event (a reconcile's end too, which the text log leaves to the source lines and the command's
        summary)."""
        level = self._levels(event)
        message = event_line(event)
        if message is None and isinstance(event, ReconcileFinished):
            message = f"KnowledgeBase/{event.name} {event.action} (version {event.version})"
        if message is None or level is None:
            return
        fields: dict[str, Any] = {"event": type(event).__name__}
        if isinstance(event, SyncFinished):
            fields["sync"] = event.name
        else:
            fields["knowledgeBase"] = getattr(event, "name", None)
        if isinstance(event, ReconcileFailed):
            fields["reason"] = event.reason
        CONTROLLER_LOG.log(level, message, extra={"fields": fields})

    def say(self, event: str, message: str, *, level: str = "info", err: bool = False) -> None:
        """Log one line of the command's own (`ControllerStarted`, `PassFinished`), as the events are (on the log's
        one stream, whatever `err` says)."""
        CONTROLLER_LOG.log(logging.getLevelName(level.upper()), message, extra={"fields": {"event": event}})

    def close(self) -> None:
        """Nothing to tidy (the text reporter's progress bar has no JSON twin)."""
