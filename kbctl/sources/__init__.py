"""Turn a manifest source into a Document (its text and where it came from); one module per kind."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kbctl.errors import UsageError

if TYPE_CHECKING:
    from kbctl.manifest import Source

__all__ = ["Document", "read_inline", "source_of", "storable"]

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def source_of(unit: str) -> str:
    """The manifest source a unit belongs to: `docs` of `docs/guide.md` (a single-document source: itself).

    A source of many documents (path, git, crawl) is stored as one unit per document, named SOURCE/ID."""
    return unit.split("/", 1)[0]


def storable(text: str) -> str:
    """`text` as PostgreSQL can store it: NUL characters dropped, lone surrogates replaced by U+FFFD."""
    if ("\x00" not in text and text.isascii()) or _UNSTORABLE.search(text) is None:  # ASCII: one fast pass
        return text
    return re.sub("[\ud800-\udfff]", "\ufffd", text.replace("\x00", ""))


@dataclass(frozen=True)
class Document:
    """The extracted text of one source, ready to chunk; its text and title are always storable."""

    text: str
    origin: str
    title: str | None = None
    markdown: bool | None = None  # split as markdown (headings) or plain text; None: as the source's format says

    def __post_init__(self) -> None:
        # The boundary: a page with a NUL byte or a broken surrogate must not fail the whole publish.
        object.__setattr__(self, "text", storable(self.text))
        if self.title is not None:
            object.__setattr__(self, "title", storable(self.title))

    @property
    def content_sha256(self) -> str:
        """sha256 of the extracted text: a source whose text hash is unchanged is not re-chunked."""
        return hashlib.sha256(self.text.encode()).hexdigest()


def read_inline(source: Source) -> Document:
    """The Document of an inline `text` source (URL sources are fetched by `kbctl.sources.url`)."""
    if source.text is None:
        raise UsageError(f"source {source.name!r} is not an inline text source")
    return Document(text=source.text, origin="inline")
