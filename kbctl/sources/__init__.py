"""Turn a manifest source into a Document (its text and where it came from); one module per kind."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from kbctl.manifest import Source

__all__ = ["Document", "read_inline"]


@dataclass(frozen=True)
class Document:
    """The extracted text of one source, ready to chunk."""

    text: str
    origin: str
    title: str | None = None

    @property
    def content_sha256(self) -> str:
        """sha256 of the extracted text: a source whose text hash is unchanged is not re-chunked."""
        return hashlib.sha256(self.text.encode()).hexdigest()


def read_inline(source: Source) -> Document:
    """The Document of an inline `text` source (URL sources are fetched by `kbctl.sources.url`)."""
    if source.text is None:
        raise ValueError(f"source {source.name!r} is not an inline text source")
    return Document(text=source.text, origin="inline")
