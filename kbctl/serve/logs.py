"""The server's log: one JSON object per line on stderr (one per request, plus warnings and errors)."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from kbctl.userconfig import redact

__all__ = ["JsonFormatter", "configure_logging", "log_request"]

ACCESS = logging.getLogger("kbctl.serve.access")


class JsonFormatter(logging.Formatter):
    """`{"ts", "level", "logger", "msg", ...fields}`; an exception's text is redacted like every message."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": redact(record.getMessage()),
        }
        line.update(getattr(record, "fields", {}))
        if record.exc_info:
            line["exception"] = redact(self.formatException(record.exc_info))
        return json.dumps(line, default=str)


def configure_logging(level: int = logging.INFO) -> None:
    """Send kbctl's and uvicorn's logs to stderr as JSON lines (uvicorn's access log is replaced by ours)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    for name in ("kbctl", "uvicorn", "uvicorn.error", "mcp"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(level if name != "mcp" else logging.WARNING)
        logger.propagate = False


def log_request(**fields: Any) -> None:
    """The one line of a request: route, knowledge base, version, hits, best score, latency, status..."""
    ACCESS.info("request", extra={"fields": fields})
