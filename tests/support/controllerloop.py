"""A controller's loop on a thread of the test process, as `kbctl controller` runs it, stopped when the block ends."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kbctl.engine.controller import Controller

__all__ = ["looping"]


@contextmanager
def looping(ctl: Controller, **run: Any) -> Iterator[threading.Thread]:
    """`ctl.run(stop, **run)` on a daemon thread until the block ends, then stopped and joined (at most 30 s); the
    thread, to tell whether it stopped."""
    stop = threading.Event()
    thread = threading.Thread(target=ctl.run, args=(stop,), kwargs=run, daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        stop.set()
        thread.join(timeout=30)
