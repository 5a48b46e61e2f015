"""The seam through which the library reports progress; the CLI implements it, the library never prints."""

from __future__ import annotations

from typing import Protocol

__all__ = ["NullReporter", "Reporter"]


class Reporter(Protocol):
    """Receives what long work has to say while it runs."""

    def line(self, text: str) -> None:
        """A line of the apply log, e.g. `KnowledgeBase/x source faq ready: 3 chunks (model)`."""
        ...

    def embedding_progress(self, done: int, total: int) -> None:
        """`done` of `total` texts embedded so far in the current knowledge base."""
        ...


class NullReporter:
    """Says nothing (the default for library callers)."""

    def line(self, text: str) -> None:
        """Ignore a log line."""

    def embedding_progress(self, done: int, total: int) -> None:
        """Ignore progress."""
