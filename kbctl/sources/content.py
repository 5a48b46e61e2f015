"""What a fetched response's body becomes (kbctl.sources.url fetches it): inflated within the byte bound, its
charset found (BOM, header, meta, XML declaration) and decoded, then extracted by its media type into a
Document (HTML through trafilatura under kbctl.sources.bounds, markdown, text, PDF and DOCX as path: files
are read); a page's links for a crawl; the one-line reasons a body is refused."""

from __future__ import annotations

import codecs
import re
import zlib
from urllib.parse import urljoin

from kbctl.errors import SourceError
from kbctl.sources import Document
from kbctl.sources.bounds import check_size
from kbctl.sources.extract import extract_html
from kbctl.sources.formats import FileFormat, as_markdown

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
TEXT_TYPES = frozenset({"text/plain", "text/markdown", "text/x-markdown"})
_MARKDOWN_TYPES = frozenset({"text/markdown", "text/x-markdown"})
# Binary documents read as path: sources read the same files (kbctl.sources.formats).
DOCUMENT_TYPES: dict[str, FileFormat] = {
    "application/pdf": "pdf",
    "application/x-pdf": "pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
}
_OFFICE_TYPE = re.compile(
    r"^application/(pdf|x-pdf|msword|rtf|vnd\.ms-|vnd\.openxmlformats-officedocument\.|vnd\.oasis\.opendocument\.)"
)


def parse_content_type(value: str | None) -> tuple[str | None, str | None]:
    """(lower-cased media type, charset) from a Content-Type header."""
    if not value or not value.strip():
        return None, None
    media, *params = value.split(";")
    charset = None
    for param in params:
        name, _, raw = param.partition("=")
        if name.strip().lower() == "charset":
            charset = raw.strip().strip("\"'") or None
    return media.strip().lower() or None, charset


# ---------------------------------------------------------------------------------------------------------
# Bounded decompression
# ---------------------------------------------------------------------------------------------------------


class TooLarge(Exception):
    pass


class Inflater:
    """Decodes a gzip/deflate/identity body chunk by chunk, never producing more than `limit` + 1 bytes in all."""

    def __init__(self, encoding: str, limit: int) -> None:
        self.encoding = encoding
        self._limit = limit
        self._size = 0
        self._obj: zlib._Decompress | None = None
        self._pending = b""  # deflate: bytes held until the zlib/raw decision can be made

    def _count(self, out: bytes) -> bytes:
        self._size += len(out)
        if self._size > self._limit:
            raise TooLarge
        return out

    def _new(self, first: bytes) -> zlib._Decompress:
        if self.encoding == "gzip":
            return zlib.decompressobj(16 + zlib.MAX_WBITS)
        # "deflate" is zlib-wrapped by the spec, but some servers send raw deflate; tell them apart by the header.
        zlib_header = len(first) >= 2 and first[0] & 0x0F == 8 and ((first[0] << 8) | first[1]) % 31 == 0
        return zlib.decompressobj(zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS)

    def feed(self, data: bytes) -> bytes:
        if self.encoding == "identity":
            return self._count(data)
        if self._obj is None:
            data = self._pending + data
            if len(data) < 2:
                self._pending = data
                return b""
            self._pending = b""
            self._obj = self._new(data)
        parts: list[bytes] = []
        while data:
            if self._obj.eof:  # another gzip member follows, or trailing bytes that are ignored
                if self.encoding != "gzip" or not data.startswith(b"\x1f\x8b"):
                    break
                self._obj = self._new(data)
            parts.append(self._count(self._obj.decompress(data, self._limit - self._size + 1)))
            data = self._obj.unused_data if self._obj.eof else b""
        return b"".join(parts)

    def finish(self) -> bytes:
        if self._obj is None:
            return self.feed(self._pending) if self._pending else b""
        return self._count(self._obj.flush())


# ---------------------------------------------------------------------------------------------------------
# Decoding and extraction
# ---------------------------------------------------------------------------------------------------------

# WHATWG Encoding Standard: labels browsers decode with a superset codec.
_CODEC_ALIASES = {
    "iso8859-1": "cp1252",
    "ascii": "cp1252",
    "iso8859-9": "cp1254",
    "tis-620": "cp874",
    "gb2312": "gb18030",
    "gbk": "gb18030",
    "shift_jis": "cp932",
    "euc_kr": "cp949",
}
# Codecs that are not page encodings (they transform text rather than decode it).
_REFUSED_CODECS = frozenset({"utf-7", "unicode-escape", "raw-unicode-escape", "idna", "punycode", "undefined"})
_META_CHARSET = re.compile(rb"""<meta[^>]+?charset\s*=\s*["']?\s*([A-Za-z0-9._:\-]+)""", re.IGNORECASE)
_XML_ENCODING = re.compile(rb"""^\s*<\?xml[^>]+encoding\s*=\s*["']([A-Za-z0-9._:\-]+)""", re.IGNORECASE)
_BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
_HTML_START = re.compile(rb"^\s*(<!--.*?-->\s*)*<(!doctype\s+html|html|head|body|title|meta|p|div|h1)\b", re.I | re.S)


def _codec(label: str | None) -> str | None:
    if not label:
        return None
    try:
        name = codecs.lookup(label).name
    except LookupError:
        return None
    if name in _REFUSED_CODECS:
        return None
    return _CODEC_ALIASES.get(name, name)


def decode_body(data: bytes, declared: str | None, *, html: bool) -> str:
    """Text of a body: BOM, then the declared charset, then (HTML) <meta charset>, then UTF-8 or a detected one."""
    for bom, bom_codec in _BOMS:
        if data.startswith(bom):
            return data.decode(bom_codec, errors="replace")
    candidates: list[str | None] = [declared]
    if html:
        head = data[:4096]
        candidates += [
            m.group(1).decode("ascii") for m in (_META_CHARSET.search(head), _XML_ENCODING.search(head)) if m
        ]
    for label in candidates:
        codec = _codec(label)
        if codec is not None:
            try:
                return data.decode(codec, errors="replace")
            except LookupError:  # a bytes-to-bytes codec such as base64
                continue
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    try:
        from charset_normalizer import from_bytes
    except ImportError:  # pragma: no cover - charset_normalizer comes with trafilatura
        return data.decode("utf-8", errors="replace")
    best = from_bytes(data).best()
    return str(best) if best is not None else data.decode("utf-8", errors="replace")


def _markdown_title(text: str) -> str | None:
    match = re.search(r"^#[ \t]+(.+?)[ \t#]*$", text, re.MULTILINE)
    return match.group(1) if match else None


def to_document(data: bytes, media: str | None, charset: str | None, final_url: str, max_html: int) -> Document:
    """Decode and extract one body; SourceError when it has no text, an unknown type, or HTML over `max_html`."""
    if not data.strip():
        raise SourceError("no text extracted")
    if media is None:
        if not _HTML_START.match(data[:2048]):
            raise SourceError("no content type, and the body does not look like HTML")
        media = "text/html"
    if media in DOCUMENT_TYPES:
        text, title = as_markdown(data, DOCUMENT_TYPES[media], origin=final_url)
        return Document(text=text, origin=final_url, title=title, markdown=True, compact=True)
    if media in HTML_TYPES:
        check_size("html", len(data), what="HTML page", limit=max_html)
        text, title = extract_html(decode_body(data, charset, html=True), final_url)
    else:
        text = decode_body(data, charset, html=False)
        title = _markdown_title(text) if media in _MARKDOWN_TYPES else None
    if not text.strip():
        raise SourceError("no text extracted")
    return Document(text=text, origin=final_url, title=title, compact=True)


MAX_LINKS = 5_000  # of one page, for a crawl


def page_links(body: bytes, charset: str | None, base: str) -> tuple[str, ...]:
    """The absolute http(s) URLs an HTML page links to (a[href]), resolved against `base`, without fragments, in
    page order without repeats, at most MAX_LINKS."""
    import lxml.html
    from lxml.etree import ParserError

    try:
        root = lxml.html.fromstring(decode_body(body, charset, html=True))
    except (ParserError, ValueError):
        return ()
    found: dict[str, None] = {}
    for href in root.xpath("//a/@href"):
        try:
            url = urljoin(base, str(href).strip()).split("#", 1)[0]
        except ValueError:
            continue
        if url.startswith(("http://", "https://")):
            found.setdefault(url, None)
            if len(found) >= MAX_LINKS:
                break
    return tuple(found)


def unsupported_type(media: str) -> str:
    if _OFFICE_TYPE.match(media):
        return f"unsupported content type '{media}' (of office files, only PDF and DOCX are read)"
    return f"unsupported content type '{media}' (HTML, markdown, plain text, PDF and DOCX are fetched)"
