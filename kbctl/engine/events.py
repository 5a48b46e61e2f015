"""What the engine reports while it works, as typed events: only the CLI words them (cli/progress.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from kbctl.engine.results import AppliedSource
from kbctl.errors import ChatError, EmbeddingError, InputError, RerankError, SourceError, StoreError

__all__ = [
    "ApplyResumed",
    "ControllerGone",
    "DocumentsRemoved",
    "DriftFound",
    "Event",
    "FailureReason",
    "HandedToController",
    "NullReporter",
    "ReconcileFailed",
    "ReconcileFinished",
    "ReconcileStarted",
    "Reporter",
    "SourceReconciled",
    "StoreUnavailable",
    "SyncFinished",
    "Trigger",
    "VersionCalibrated",
    "failure_reason",
    "report_sources",
]

Trigger = Literal["apply", "refresh"]
Action = Literal["created", "configured", "refreshed", "unchanged"]
FailureReason = Literal["source_failed", "no_content", "store", "model", "manifest", "other"]
"""Why a reconcile failed (a metric's label: a small fixed set): a source could not be read, no source could be
read (nothing to publish), the store, a model, a manifest that no longer validates, anything else."""


@dataclass(frozen=True)
class ReconcileStarted:
    """A knowledge base is planned: `action` is what publishing does; `waiting` sources have work or trouble."""

    name: str
    trigger: Trigger
    action: Action
    version: int  # the version to publish, or the one that keeps serving when unchanged
    waiting: int


@dataclass(frozen=True)
class SourceReconciled:
    """One source is done: read (or not), ingested (or reused), ready, stale or failed."""

    name: str
    trigger: Trigger
    source: AppliedSource
    model: str


@dataclass(frozen=True)
class ReconcileFinished:
    """A knowledge base is done: `version` serves (a new one, or the same when unchanged)."""

    name: str
    trigger: Trigger
    action: Action
    version: int


@dataclass(frozen=True)
class ReconcileFailed:
    """A knowledge base failed as a whole; whatever served before still serves."""

    name: str
    message: str
    reason: FailureReason = "other"


@dataclass(frozen=True)
class HandedToController:
    """`apply --wait` left the work to a running controller and waits for it."""

    name: str
    action: str
    version: int | None


@dataclass(frozen=True)
class ControllerGone:
    """`apply --wait` found no live controller any more: it reconciles the knowledge base in-process."""

    name: str


@dataclass(frozen=True)
class StoreUnavailable:
    """The controller lost the database; it reconnects in `retry_seconds`."""

    message: str
    retry_seconds: float


Stage = Literal["fetching", "embedding"]


@dataclass(frozen=True)
class DocumentsRemoved:
    """Documents of a path, git or crawl source that the new version no longer serves: gone from the folder, the
    repository or the site (a page answering 404, a file deleted)."""

    name: str
    trigger: Trigger
    documents: tuple[str, ...]  # SOURCE/ID of each


@dataclass(frozen=True)
class DriftFound:
    """A controller found `name` serving another manifest than the one last applied: re-applied it (`reverted`),
    or left it as it is (spec.suspend)."""

    name: str
    serving: int
    reverted: bool


@dataclass(frozen=True)
class ApplyResumed:
    """A controller took up `generation` of `name`, which an in-process apply (`left_by`) recorded and stopped
    before finishing (its process or its database died); `files_here` is False when it has path: sources whose folder
    is not on this host (they then keep what they serve)."""

    name: str
    generation: int
    left_by: str
    files_here: bool


@dataclass(frozen=True)
class SyncFinished:
    """A controller's pass of the Sync `name`: the commit it read (None when the fetch failed) and, when it applied
    nothing or a knowledge base failed, why."""

    name: str
    revision: str | None
    error: str | None


@dataclass(frozen=True)
class WorkProgress:
    """`done` of `total` items of a long stage for the knowledge base `name`: pages fetched, or texts embedded."""

    name: str
    stage: Stage
    done: int
    total: int


@dataclass(frozen=True)
class VectorIndexBuilt:
    """The HNSW index of `model`'s vectors was built over `vectors` of them (once, when a model first has enough)."""

    name: str  # the knowledge base whose apply built it
    model: str
    vectors: int
    seconds: float


@dataclass(frozen=True)
class VersionCalibrated:
    """The version that keeps serving, published before kbctl calibrated versions as it now does, was calibrated in
    place by an apply or refresh that published nothing: its relevance gate's lines (`keyword_line` None: the
    version restricts some sources, and its callers' gate is the similarity line of what each may read)."""

    name: str
    version: int
    similarity_line: float
    keyword_line: float | None

    @property
    def lines(self) -> str:
        """The lines, as the apply log and the recorded event name them."""
        keyword = f", keyword line {self.keyword_line:g}" if self.keyword_line is not None else ""
        return f"similarity line {self.similarity_line:g}{keyword}"


Event = (
    ReconcileStarted
    | SourceReconciled
    | DocumentsRemoved
    | DriftFound
    | ApplyResumed
    | SyncFinished
    | ReconcileFinished
    | ReconcileFailed
    | HandedToController
    | ControllerGone
    | StoreUnavailable
    | WorkProgress
    | VectorIndexBuilt
    | VersionCalibrated
)


class Reporter(Protocol):
    """Receives the engine's events while long work runs."""

    def report(self, event: Event) -> None:
        """Handle one event."""
        ...


class NullReporter:
    """Ignores every event (the default for library callers)."""

    def report(self, event: Event) -> None:
        """Ignore an event."""


def report_sources(
    reporter: Reporter,
    name: str,
    trigger: Trigger,
    sources: Sequence[AppliedSource],
    model: str,
    *,
    finished: tuple[Action, int] | None = None,
    failed: str | None = None,
    removed: Sequence[str] = (),
) -> None:
    """The end of one knowledge base's reconcile, as every route reports it (in-process, a controller's result
    read back, a settled file): one SourceReconciled per source, DocumentsRemoved when documents are gone, then
    ReconcileFinished (`finished`: action and version) or ReconcileFailed (`failed`: why), when given."""
    for source in sources:
        reporter.report(SourceReconciled(name, trigger, source, model))
    if removed:
        reporter.report(DocumentsRemoved(name, trigger, tuple(removed)))
    if failed is not None:  # reported with its sources: none of them could be read
        reporter.report(ReconcileFailed(name, failed, "no_content"))
    elif finished is not None:
        reporter.report(ReconcileFinished(name, trigger, *finished))


def failure_reason(exc: BaseException) -> FailureReason:
    """The `FailureReason` of an exception that failed a knowledge base's reconcile."""
    if isinstance(exc, StoreError):
        return "store"
    if isinstance(exc, EmbeddingError | RerankError | ChatError):
        return "model"
    if isinstance(exc, SourceError):
        return "source_failed"
    if isinstance(exc, InputError):
        return "manifest"
    return "other"
