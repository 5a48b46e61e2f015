"""The retrieval log of `kbctl serve` (serve.retrievalLog, off by default): each query, context and ask served over
HTTP and MCP, and each federated /v1/query, recorded with its trace, the caller, the version, the latency and the
result, or the problem it failed with.

`record` costs a request a clock read and a put on a bounded queue, never a wait (a full queue drops the run and
counts it). One writer thread redacts the question (kbctl.inputs.redaction), writes the runs in batches through the
store's pool, and prunes past the log's days and rows every RETRIEVAL_LOG_PRUNE_SECONDS; `close` writes what is
queued, within a time limit. While the log is on, queries run with `explain`; a caller gets the trace back only
when it asked for it (`without_trace`). Configuration, bounds and figures: docs/serve.md#retrieval-log.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from kbctl import AskResult, FederatedResult, KnowledgeBaseStore, NewRetrieval, QueryOptions, QueryResult
from kbctl.defaults import RETRIEVAL_LOG_BATCH, RETRIEVAL_LOG_PRUNE_SECONDS, RETRIEVAL_LOG_QUEUE
from kbctl.inputs.redaction import Redactor
from kbctl.serve.auth import Principal
from kbctl.serve.problems import problem_kind
from kbctl.userconfig import RetrievalLogConfig

__all__ = ["RetrievalLog", "logged", "without_trace"]

log = logging.getLogger("kbctl.serve")

T = TypeVar("T")
Served = QueryResult | AskResult | FederatedResult


@dataclass
class _Run:
    """What a request hands the writer: the raw question and result, turned into a row on the writer's thread."""

    channel: str
    operation: str
    caller: str
    knowledge_bases: Sequence[str]
    question: str
    latency_ms: float
    result: Served | None = None
    members: Sequence[QueryResult] = ()
    status: str = "ok"


@dataclass
class _Flush:
    """A marker the writer sets once everything queued before it is written."""

    done: threading.Event = field(default_factory=threading.Event)


class RetrievalLog:
    """Records served retrievals in the background; `record` never blocks. `dropped` counts the runs a full queue
    refused, `failed` those a failed write lost, `written` those recorded."""

    def __init__(
        self,
        store: KnowledgeBaseStore,
        config: RetrievalLogConfig,
        *,
        queue_size: int = RETRIEVAL_LOG_QUEUE,
        batch: int = RETRIEVAL_LOG_BATCH,
        prune_seconds: float = RETRIEVAL_LOG_PRUNE_SECONDS,
    ) -> None:
        self.store = store
        self.config = config
        self.redact = Redactor(config.redact)
        self.dropped = 0
        self.failed = 0
        self.written = 0
        self._batch = batch
        self._prune_seconds = prune_seconds
        self._queue: queue.Queue[_Run | _Flush | None] = queue.Queue(maxsize=queue_size)
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._write, name="kbctl-retrieval-log", daemon=True)
        self._thread.start()

    @classmethod
    def configured(cls, store: KnowledgeBaseStore, config: RetrievalLogConfig) -> RetrievalLog | None:
        """The log `config` asks for (serve.retrievalLog), None when it is not enabled."""
        return cls(store, config) if config.enabled else None

    # ---------------------------------------------------------------- the request's side

    @staticmethod
    def explained(options: QueryOptions) -> QueryOptions:
        """`options` with the trace on, which the log keeps."""
        return options if options.explain else replace(options, explain=True)

    def record(
        self,
        channel: str,
        operation: str,
        principal: Principal,
        knowledge_bases: Sequence[str],
        question: str,
        started: float,
        *,
        result: Served | None = None,
        members: Sequence[QueryResult] = (),
        error: BaseException | None = None,
    ) -> None:
        """Queue a run that started at `started` (time.perf_counter()), served `result` or failed with `error`;
        dropped and counted when the queue is full."""
        run = _Run(
            channel=channel,
            operation=operation,
            caller=principal.caller,
            knowledge_bases=knowledge_bases,
            question=question,
            latency_ms=(time.perf_counter() - started) * 1000,
            result=result,
            members=members,
            status="ok" if error is None else problem_kind(error),
        )
        try:
            self._queue.put_nowait(run)
        except queue.Full:
            with self._lock:
                self.dropped += 1

    # ---------------------------------------------------------------- the writer's side

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until what was queued before this call is written (or failed); False when `timeout` ran out."""
        marker = _Flush()
        try:
            self._queue.put(marker, timeout=timeout)
        except queue.Full:
            return False
        return marker.done.wait(timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Write what is queued and stop the writer (the server's shutdown); a second call does nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            log.warning("retrieval log: the queue did not drain within %g s at shutdown", timeout)
            return
        self._thread.join(timeout)
        if self.dropped or self.failed:
            log.warning(
                "retrieval log: %d runs dropped (queue full), %d lost to failed writes", self.dropped, self.failed
            )

    def _write(self) -> None:
        next_prune = 0.0  # at start
        stopping = False
        while not stopping:
            if time.monotonic() >= next_prune:
                self._prune()
                next_prune = time.monotonic() + self._prune_seconds
            try:
                first = self._queue.get(timeout=max(0.01, next_prune - time.monotonic()))
            except queue.Empty:
                continue
            items = [first]
            while len(items) < self._batch:
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            runs = [item for item in items if isinstance(item, _Run)]
            if runs:
                self._insert(runs)
            for item in items:
                if isinstance(item, _Flush):
                    item.done.set()
            stopping = any(item is None for item in items)

    def _insert(self, runs: Sequence[_Run]) -> None:
        try:
            rows = [self.row(run) for run in runs]
            self.store.record_retrievals(rows, max_result_bytes=self.config.max_row_bytes)
        except Exception as exc:  # the log must never take the server down: counted and said
            self.failed += len(runs)
            log.warning("retrieval log: %d runs not recorded: %s", len(runs), f"{type(exc).__name__}: {exc}"[:300])
        else:
            self.written += len(runs)

    def _prune(self) -> None:
        try:
            self.store.prune_retrievals(days=self.config.days, max_rows=self.config.max_rows)
        except Exception as exc:
            log.warning("retrieval log: pruning failed: %s", f"{type(exc).__name__}: {exc}"[:300])

    def row(self, run: _Run) -> NewRetrieval:
        """The row of a run: the question redacted, in the result too (which the store cuts to maxRowBytes)."""
        question = self.redact(run.question)
        result = run.result.retrieval if isinstance(run.result, AskResult) else run.result
        data: dict[str, Any] | None = None
        version, best, hits, names = None, None, 0, list(run.knowledge_bases)
        if isinstance(result, QueryResult):
            data = result.model_dump(mode="json", by_alias=True)
            version, best, hits, names = result.version, result.best_score, len(result.hits), [result.knowledge_base]
        elif isinstance(result, FederatedResult):
            data = result.model_dump(mode="json", by_alias=True)
            data["trace"] = [
                {
                    "knowledgeBase": m.knowledge_base,
                    "version": m.version,
                    "stages": [s.model_dump(mode="json", by_alias=True) for s in m.trace or []],
                }
                for m in run.members
            ]
            scores = [o.best_score for o in result.results if o.best_score is not None]
            best, hits, names = max(scores, default=None), len(result.hits), list(result.knowledge_bases)
        if data is not None:
            data["question"] = question
        return NewRetrieval(
            channel=run.channel,
            operation=run.operation,
            knowledge_bases=names,
            version=version,
            caller=run.caller,
            question=question,
            nothing_relevant=result is not None and hits == 0,
            hits=hits,
            best_similarity=best,
            latency_ms=round(run.latency_ms, 3),
            status=run.status,
            result=data,
        )


async def logged(
    retrieval_log: RetrievalLog | None,
    call: Callable[[], Awaitable[T]],
    channel: str,
    operation: str,
    principal: Principal,
    knowledge_bases: Sequence[str],
    question: str,
    *,
    members: Sequence[QueryResult] = (),
) -> T:
    """`await call()`, its result (or failure) recorded in `retrieval_log` when there is one."""
    if retrieval_log is None:
        return await call()
    started = time.perf_counter()
    try:
        result = await call()
    except Exception as exc:
        retrieval_log.record(channel, operation, principal, knowledge_bases, question, started, error=exc)
        raise
    served = result if isinstance(result, QueryResult | AskResult | FederatedResult) else None
    retrieval_log.record(
        channel, operation, principal, knowledge_bases, question, started, result=served, members=members
    )
    return result


def without_trace(result: T, asked: bool) -> T:
    """`result` as the caller gets it: its trace only when it asked for one (`asked`), the log's explain aside."""
    if asked:
        return result
    if isinstance(result, QueryResult) and result.trace is not None:
        return result.model_copy(update={"trace": None})
    if isinstance(result, AskResult) and result.retrieval.trace is not None:
        return result.model_copy(update={"retrieval": result.retrieval.model_copy(update={"trace": None})})
    return result
