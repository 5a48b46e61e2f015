"""kbctl's JSON log: one object per line, the same keys from `kbctl serve`, `kbctl mcp` and `kbctl controller`.

Every line has `time` (UTC, RFC 3339 with milliseconds), `level` (debug, info, warning, error, critical), `logger`
(the Python logger's name: `kbctl.serve.access` for a request, `kbctl.controller` for a controller's event...) and
`message`; then the record's fields (a request's `requestId`, `route`, `status`...; an event's `event`,
`knowledgeBase`...); `traceId` and `spanId` (hex, as OpenTelemetry writes them) when the line is written inside a
span (a controller's reconcile, when tracing); `exception` with a traceback. Messages and tracebacks are redacted.

Only a command's entry point configures logging (`configure_logging`, `json_logging`); kbctl imported as a library
never touches the logging of the process it runs in.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import IO, Any

from kbctl.telemetry import trace_ids
from kbctl.userconfig import redact

__all__ = ["LOG_KEYS", "JsonFormatter", "configure_logging", "json_logging", "log_request", "root_logging_kept"]

ACCESS = logging.getLogger("kbctl.serve.access")

LOG_KEYS = ("time", "level", "logger", "message")
"""The keys every JSON log line starts with, in this order."""

_SERVER_LOGGERS = ("kbctl", "uvicorn", "uvicorn.error", "mcp")


class JsonFormatter(logging.Formatter):
    """`{"time", "level", "logger", "message", ...fields, "traceId", "spanId"}`; an exception's text is redacted
    like every message. A record's fields are its `fields` mapping (`extra={"fields": {...}}`)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        line.update(getattr(record, "fields", {}))
        line.update(trace_ids())
        if record.exc_info:
            line["exception"] = redact(self.formatException(record.exc_info))
        return json.dumps(line, default=str, ensure_ascii=False)


def _install(handler: logging.Handler, levels: dict[str, int]) -> list[tuple[logging.Logger, Any]]:
    """Give each named logger `handler` alone at its level, without propagation; what each had before."""
    before = []
    for name, level in levels.items():
        logger = logging.getLogger(name)
        before.append((logger, (logger.handlers[:], logger.level, logger.propagate)))
        logger.handlers[:] = [handler]
        logger.setLevel(level)
        logger.propagate = False
    return before


def configure_logging(level: int = logging.INFO) -> None:
    """Send kbctl's and uvicorn's logs to stderr as JSON lines (uvicorn's access log is replaced by ours); the MCP
    SDK's at warning and above. For a server's entry point: the process is the server's."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    _install(handler, {name: level if name != "mcp" else logging.WARNING for name in _SERVER_LOGGERS})


@contextmanager
def json_logging(
    stream: IO[str] | None = None, level: int = logging.INFO, loggers: Sequence[str] = ("kbctl",)
) -> Iterator[None]:
    """Within it, `loggers` (kbctl's, by default) write JSON lines to `stream` (stdout by default) from `level` up;
    on exit each is as it was (a command run in-process, as tests do, leaves the process's logging alone)."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stdout)
    handler.setFormatter(JsonFormatter())
    before = _install(handler, dict.fromkeys(loggers, level))
    try:
        yield
    finally:
        handler.flush()
        for logger, (handlers, old_level, propagate) in before:
            logger.handlers[:] = handlers
            logger.setLevel(old_level)
            logger.propagate = propagate


@contextmanager
def root_logging_kept() -> Iterator[None]:
    """Within it, a library that configures the root logger (the MCP SDK's server does, with `logging.basicConfig`:
    INFO and a RichHandler) is undone on exit: the root logger's handlers and level are as they were."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def log_request(**fields: Any) -> None:
    """The one line of a request: route, knowledge base, version, hits, best score, latency, status..."""
    ACCESS.info("request", extra={"fields": fields})
