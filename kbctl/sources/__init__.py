"""Turn a manifest source into a Document (its text and where it came from); one module per kind."""

from __future__ import annotations

import hashlib
import re
import zlib
from dataclasses import dataclass, field
from functools import partial
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


@dataclass(frozen=True, init=False, eq=False)
class Document:
    """The extracted text of one source, ready to chunk; its text and title are always storable.

    `compact=True` (a file or a page, which nothing else keeps) holds the text zlib-compressed and inflates it on
    each use of `text`: a plan keeps every new document until its version is published, and a million chunks of
    files were ~1 GB of text held as str (at level 1 the benchmarks' generated Markdown compresses 3.8x, kbctl's own
    docs 2.4x, and inflating costs a few ms a MB). An inline text stays as it is: the manifest holds it anyway."""

    origin: str
    title: str | None
    markdown: bool | None  # split as markdown (headings) or plain text; None: as the source's format says
    content_sha256: str  # sha256 of the extracted text: a source whose text hash is unchanged is not re-chunked
    length: int  # characters of the text
    _text: str | None = field(repr=False)
    _packed: bytes | None = field(repr=False)

    def __init__(
        self, text: str, origin: str, title: str | None = None, markdown: bool | None = None, *, compact: bool = False
    ) -> None:
        # The boundary: a page with a NUL byte or a broken surrogate must not fail the whole publish.
        text = storable(text)
        data = text.encode()
        set_ = partial(object.__setattr__, self)
        set_("origin", origin)
        set_("title", storable(title) if title is not None else None)
        set_("markdown", markdown)
        set_("content_sha256", hashlib.sha256(data).hexdigest())
        set_("length", len(text))
        set_("_text", None if compact else text)
        set_("_packed", zlib.compress(data, 1) if compact else None)

    @property
    def text(self) -> str:
        if self._text is not None:
            return self._text
        assert self._packed is not None
        return zlib.decompress(self._packed).decode()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Document):
            return NotImplemented
        same = (self.origin, self.title, self.markdown, self.content_sha256)
        return same == (other.origin, other.title, other.markdown, other.content_sha256)

    def __hash__(self) -> int:
        return hash((self.origin, self.title, self.markdown, self.content_sha256))


def read_inline(source: Source) -> Document:
    """The Document of an inline `text` source (URL sources are fetched by `kbctl.sources.url`)."""
    if source.text is None:
        raise UsageError(f"source {source.name!r} is not an inline text source")
    return Document(text=source.text, origin="inline")
