"""Turn a manifest source into a Document (its text and where it came from); one module per kind."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from kbctl.errors import SourceError
from kbctl.manifest import Source

__all__ = ["Document", "read_source"]


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


def read_source(source: Source) -> Document:
    """Read one source; raise SourceError with a one-line reason when it cannot be read."""
    if source.text is not None:
        if not source.text.strip():
            raise SourceError("no text")
        return Document(text=source.text, origin="inline")
    # URL fetching (httpx + trafilatura, with an SSRF guard) is not part of this release yet.
    raise SourceError(f"URL sources are not fetched by this version of kbctl yet ({source.url})")
