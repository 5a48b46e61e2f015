"""A reporter for tests that keeps the apply / refresh log as the CLI would print it (engine events, worded)."""

from __future__ import annotations

from kbctl.cli.progress import event_line
from kbctl.engine.events import Event

__all__ = ["Lines"]


class Lines:
    """Collects the printed line of every engine event, in order."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.events: list[Event] = []

    def report(self, event: Event) -> None:
        self.events.append(event)
        line = event_line(event)
        if line is not None:
            self.lines.append(line)
