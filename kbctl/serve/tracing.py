"""OpenTelemetry spans of the server's queries: the Python API's `kbctl.query` span tree (kbctl.telemetry), with
the route and the caller's name that only the server knows, and the question (when KBCTL_TRACE_CONTENT asks for
content) redacted by the server's redaction: the one its retrieval log uses (serve.retrievalLog.redact), handed to
`server_traces`, else the default patterns."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from types import FrameType
from typing import Any

from kbctl import QueryResult
from kbctl.telemetry import Redact, flush_traces, queries_traced_by_caller, queries_traced_with
from kbctl.telemetry import trace_query as _trace_query

__all__ = ["server_traces", "trace_members", "trace_query"]


def trace_query(result: QueryResult, *, route: str, principal: str, redact: Redact | None = None) -> None:
    """Record `result` as a `kbctl.query` span with one child per stage (embed, vector, keyword, fuse, threshold,
    rerank, select), carrying the knowledge base, version, hit count and scores, the route (`kbctl.route`) and the
    caller's token name (`kbctl.token`), and the retrieval conventions of OpenInference and OpenTelemetry GenAI
    (kbctl.telemetry.retrieval_attributes) over the hits the caller got. Its question, when KBCTL_TRACE_CONTENT asks
    for content, passes through `redact` (else `server_traces`'s redaction, else the default patterns). A no-op
    without OpenTelemetry, and for a result the store traced already (a query outside `server_traces`: then
    without route and caller)."""
    _trace_query(result, {"kbctl.route": route, "kbctl.token": principal}, redact=redact)


def trace_members(*, route: str, principal: str, redact: Redact | None = None) -> AbstractContextManager[None]:
    """Within it, each knowledge base a federated query asks is its own `kbctl.query` span tree, with the route
    and the caller's token name (and its question redacted as `trace_query`'s): the server sees only the fused
    result, so the library records the members."""
    return queries_traced_with({"kbctl.route": route, "kbctl.token": principal}, redact=redact)


@contextmanager
def server_traces(redact: Redact | None = None) -> Iterator[None]:
    """Run a server within it: the store leaves each query's spans to the route (`trace_query`), so that they
    carry the route and the caller, and their questions pass through `redact` (the server's configured redaction;
    None: the default patterns of kbctl.inputs.redaction.Redactor). And a SIGTERM that stops the server first
    exports the spans still buffered: uvicorn raises it again once it has shut down, and its default action ends
    the process without the exit handlers that would have exported them (in the main thread only, where signals
    are handled)."""
    previous: Any = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, _flush_then(previous))
    try:
        with queries_traced_by_caller(redact=redact):
            yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _flush_then(previous: Any) -> Any:
    """A SIGTERM handler that exports the buffered spans, then does what `previous` did."""

    def handler(signum: int, frame: FrameType | None) -> None:
        flush_traces()
        signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        signal.raise_signal(signum)

    return handler
