"""Bounds on an external program a source runs (git, kustomize): its output read as it comes, within a time limit,
its error output kept to MAX_ERROR_BYTES, and the program stopped, with all it started, at the first bound passed.

The caller starts the program (and declares it in its EXTERNAL_PROGRAMS) in a session of its own
(`start_new_session=True`) with stdout and stderr piped, so that stopping it stops what it started too.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Final

from kbctl.errors import SourceError
from kbctl.userconfig import redact

__all__ = ["EXTERNAL_PROGRAMS", "MAX_ERROR_BYTES", "MAX_ERROR_CHARS", "error_text", "finish"]

# None of its own: it bounds the programs its callers start, and they declare theirs (tests/test_image.py).
EXTERNAL_PROGRAMS: Final[tuple[str, ...]] = ()
MAX_ERROR_BYTES: Final = 64 * 1024  # of a program's error output, kept
MAX_ERROR_CHARS: Final = 300  # of its error line, in a message (a server's text may be long)
_READ_BYTES: Final = 64 * 1024


def finish(
    process: subprocess.Popen[bytes],
    *,
    name: str,
    timeout: float,
    on_output: Callable[[bytes], None] | None = None,
    watch: Callable[[], str | None] | None = None,
    watch_every: float = 0.2,
) -> tuple[int, bytes, bytes]:
    """(exit code, output, error output) of `process` once it ends. Each chunk of its output goes to `on_output` when
    given (and is not kept), which may raise SourceError to stop it; `watch`, asked every `watch_every` seconds
    while it runs, may give a reason to stop it. SourceError, the program stopped, for either, or when it takes
    longer than `timeout` seconds (`{name} took longer than …`)."""
    assert process.stdout is not None and process.stderr is not None
    deadline = time.monotonic() + timeout
    late = f"{name} took longer than {timeout:g} s"
    look = time.monotonic() + watch_every
    out, err = bytearray(), bytearray()
    with process, selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ, out)
        selector.register(process.stderr, selectors.EVENT_READ, err)
        try:
            while selector.get_map():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise SourceError(late)
                wait = min(remaining, max(look - time.monotonic(), 0)) if watch else remaining
                for key, _ in selector.select(wait):
                    chunk = os.read(key.fd, _READ_BYTES)
                    if not chunk:
                        selector.unregister(key.fileobj)
                    elif key.data is out and on_output is not None:
                        on_output(chunk)
                    else:
                        buffer: bytearray = key.data
                        buffer += chunk
                        del err[MAX_ERROR_BYTES:]
                if watch is not None and time.monotonic() >= look:
                    look = time.monotonic() + watch_every
                    if (reason := watch()) is not None:
                        raise SourceError(reason)
            returncode = process.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            _stop(process)
            raise SourceError(late) from None
        except SourceError:
            _stop(process)
            raise
    return returncode, bytes(out), bytes(err)


def _stop(process: subprocess.Popen[bytes]) -> None:
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def error_text(line: str) -> str:
    """A program's error line for a message: redacted (a URL's credentials) and cut to MAX_ERROR_CHARS."""
    text = redact(line)
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"
