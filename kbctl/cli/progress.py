"""The apply and refresh log: one line per engine event, and the embedding progress bar on a terminal.

The engine reports typed events; this module alone words them, so the lines the README shows are made here.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import typer

from kbctl.cli.render import count
from kbctl.engine.events import (
    ControllerGone,
    EmbeddingProgress,
    Event,
    HandedToController,
    ReconcileFailed,
    ReconcileFinished,
    ReconcileStarted,
    SourceReconciled,
    StoreUnavailable,
    VectorIndexBuilt,
)

if TYPE_CHECKING:
    from rich.progress import Progress

__all__ = ["CliReporter", "event_line"]


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
    if isinstance(event, EmbeddingProgress):
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


class CliReporter:
    """Prints the apply log to stdout and, on a terminal only, an embedding progress bar to stderr."""

    def __init__(self, quiet: bool) -> None:
        self._quiet = quiet
        self._progress: Progress | None = None
        self._task: Any = None

    def report(self, event: Event) -> None:
        """Print an event's line, or move the progress bar."""
        if isinstance(event, EmbeddingProgress):
            self._embedding_progress(event.done, event.total)
            return
        line = event_line(event)
        if line is not None:
            self.close()
            if not self._quiet:
                typer.echo(line)

    def _embedding_progress(self, done: int, total: int) -> None:
        if not sys.stderr.isatty():
            return
        if self._progress is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._progress = Progress(
                TextColumn("embedding"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._progress.start()
            self._task = self._progress.add_task("embedding", total=total)
        self._progress.update(self._task, completed=done, total=total)

    def close(self) -> None:
        """Remove the progress bar, if one is drawn."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
