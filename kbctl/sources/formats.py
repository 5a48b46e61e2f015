"""File formats as markdown text: what a file says, with its structure kept as headings the chunker follows.

Readers of markdown and text (UTF-8), html (trafilatura), pdf (a `## Page N` heading per page: pypdf), docx
(headings, paragraphs and tables as markdown: python-docx), json / jsonl (one entry per object, `titleField`,
`textFields`) and csv (one entry per row). Every reader gets bytes within its format's bound of text extraction
(checked here first, the same bound on every route: `kbctl.sources.bounds`), refuses what it would produce past
that module's bounds while it reads, and answers (markdown text, title or None) or raises SourceError with a
reason a person can act on.

What each format becomes: docs/manifest.md (`path` sources).
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator, Sequence
from typing import Any, Final, Literal

from kbctl.errors import SourceError
from kbctl.inputs.bounds import MAX_DEPTH, nesting_depth
from kbctl.sources.bounds import (
    MAX_COLUMNS,
    MAX_ENTRIES,
    MAX_FIELD_CHARS,
    MAX_PAGES,
    MAX_TEXT_CHARS,
    MAX_UNZIPPED_BYTES,
    MAX_UNZIPPED_XML_BYTES,
    check_size,
    on_time,
)
from kbctl.sources.extract import extract_html

__all__ = [
    "EXTENSIONS",
    "MAX_ENTRIES",
    "MAX_PAGES",
    "MAX_UNZIPPED_BYTES",
    "FileFormat",
    "as_markdown",
    "format_of",
]

FileFormat = Literal["markdown", "text", "html", "pdf", "docx", "json", "jsonl", "csv"]
EXTENSIONS: Final[dict[str, FileFormat]] = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
    ".text": "text",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
    ".docx": "docx",
    ".json": "json",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "csv",
}


def format_of(name: str) -> FileFormat | None:
    """The format of a file by its extension (any case), None when kbctl does not read it."""
    dot = name.rfind(".")
    return EXTENSIONS.get(name[dot:].lower()) if dot > 0 else None


def as_markdown(
    data: bytes,
    fmt: FileFormat,
    *,
    origin: str,
    title_field: str | None = None,
    text_fields: Sequence[str] | None = None,
) -> tuple[str, str | None]:
    """(text, title) of one file's bytes read as `fmt`; SourceError when it is over the format's bound of text
    extraction, cannot be read or has no text."""
    check_size(fmt, len(data))
    if fmt == "pdf":
        text, title = _pdf(data)
    elif fmt == "docx":
        text, title = _docx(data)
    elif fmt == "html":
        text, title = extract_html(_decoded(data), origin)
    elif fmt in ("json", "jsonl"):
        text, title = _entries(_json_objects(_decoded(data), fmt == "jsonl"), title_field, text_fields), None
    elif fmt == "csv":
        text, title = _csv(_decoded(data)), None
    else:
        text = _decoded(data)
        title = _markdown_title(text) if fmt == "markdown" else None
    if not text.strip():
        raise SourceError("no text extracted")
    return text, title


def _decoded(data: bytes) -> str:
    if b"\x00" in data[:8192]:
        raise SourceError("binary file (it holds NUL bytes), not text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SourceError(f"not UTF-8 text (invalid byte at offset {exc.start})") from None


def _markdown_title(text: str) -> str | None:
    match = re.search(r"^#[ \t]+(.+?)[ \t#]*$", text, re.MULTILINE)
    return match.group(1) if match else None


# ---- PDF ----


def _pdf(data: bytes) -> tuple[str, str | None]:
    import logging

    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # its warnings on damaged files are ours to word

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise SourceError("encrypted PDF: kbctl reads only PDFs that open without a password")
        if len(reader.pages) > MAX_PAGES:
            raise SourceError(f"PDF of {len(reader.pages)} pages, over the {MAX_PAGES}-page limit")
        pages = []
        for page in reader.pages:  # a page's text is where the time goes: checked between its operators
            on_time()
            pages.append((page.extract_text(visitor_operand_before=_on_time_visit) or "").strip())
        title = reader.metadata.title if reader.metadata is not None else None
    except SourceError:
        raise
    except (PdfReadError, ValueError, KeyError, TypeError, OSError) as exc:
        raise SourceError(f"not a readable PDF ({type(exc).__name__}: {str(exc)[:120]})") from None
    if not any(pages):
        raise SourceError("the PDF has no text layer (scanned images?): nothing to index")
    parts = [f"## Page {number}\n\n{text}" for number, text in enumerate(pages, start=1) if text]
    return "\n\n".join(parts), (str(title).strip() or None) if title else None


def _on_time_visit(*_: Any) -> None:
    on_time()


# ---- DOCX ----

_HEADING = re.compile(r"^Heading (\d)$")


def _docx(data: bytes) -> tuple[str, str | None]:
    import zipfile

    import docx
    from docx.opc.exceptions import PackageNotFoundError
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = archive.infolist()
        unzipped = sum(info.file_size for info in infos)
        if unzipped > MAX_UNZIPPED_BYTES:
            raise SourceError(
                f"DOCX expands to {unzipped >> 20} MiB, over the {MAX_UNZIPPED_BYTES >> 20} MiB limit of its parts"
            )
        xml = sum(info.file_size for info in infos if info.filename.endswith((".xml", ".rels")))
        if xml > MAX_UNZIPPED_XML_BYTES:  # parsed whole into a tree of some 7 times its size
            limit = MAX_UNZIPPED_XML_BYTES >> 20
            raise SourceError(f"DOCX's XML parts expand to {xml / (1 << 20):.1f} MiB, over the {limit} MiB limit")
        document = docx.Document(io.BytesIO(data))
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise SourceError(f"not a readable DOCX file ({type(exc).__name__})") from None
    parts: list[str] = []
    for block in document.iter_inner_content():
        on_time()
        if isinstance(block, Paragraph):
            text = block.text.strip()
            if not text:
                continue
            style = block.style.name if block.style is not None else ""
            level = 1 if style == "Title" else int(m.group(1)) if (m := _HEADING.match(style or "")) else 0
            parts.append(f"{'#' * level} {text}" if level else text)
        elif isinstance(block, Table):
            parts.append(_markdown_table([[cell.text for cell in row.cells] for row in block.rows]))
    title = document.core_properties.title or None
    return "\n\n".join(p for p in parts if p), title


def _markdown_table(rows: list[list[str]]) -> str:
    if not rows:
        return ""
    width = max(len(r) for r in rows)

    def line(cells: list[str]) -> str:
        cells = [" ".join(c.split()).replace("|", "\\|") for c in cells] + [""] * (width - len(cells))
        return "| " + " | ".join(cells) + " |"

    return "\n".join([line(rows[0]), "|" + "---|" * width, *(line(r) for r in rows[1:])])


# ---- JSON, JSON Lines, CSV ----


def _too_many(noun: str) -> SourceError:
    return SourceError(f"more than {MAX_ENTRIES} {noun}, over the limit of one file")


def _json_objects(text: str, lines: bool) -> list[Any]:
    """The entries of a JSON file (its list, or its one value) or of a JSON Lines file (one per line); refused past
    MAX_ENTRIES before the nesting of the entries is measured, and for JSON Lines while the lines are read."""
    if lines:
        items: list[Any] = []
        for number, line in enumerate(io.StringIO(text, newline=None), start=1):
            on_time()
            if line.strip():
                if len(items) == MAX_ENTRIES:
                    raise _too_many("entries")
                items.append(_checked_depth(_parse_json(line, f"line {number}: "), f"line {number}: "))
        return items
    data = _parse_json(text, "")
    items = data if isinstance(data, list) else [data]
    if len(items) > MAX_ENTRIES:
        raise _too_many("entries")
    _checked_depth(data, "")
    return items


def _parse_json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise SourceError(f"{where}invalid JSON ({getattr(exc, 'msg', 'too deep')})") from None


def _checked_depth(data: Any, where: str) -> Any:
    if nesting_depth(data) > MAX_DEPTH:
        raise SourceError(f"{where}JSON nested deeper than {MAX_DEPTH} levels")
    return data


def _flat(value: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(dotted key, readable value) of every leaf of `value`."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _flat(item, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list) and all(not isinstance(v, dict | list) for v in value):
        yield prefix, ", ".join(_scalar(v) for v in value)
    elif isinstance(value, list):
        for index, item in enumerate(value, start=1):
            yield from _flat(item, f"{prefix}[{index}]")
    else:
        yield prefix, _scalar(value)


def _scalar(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return " ".join(text.split())[:MAX_FIELD_CHARS]


class _Text:
    """The parts of the text one JSON / CSV file's entries are written to, refused once past MAX_TEXT_CHARS."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.size = 0

    def add(self, part: str) -> None:
        self.size += len(part) + 2
        if self.size > MAX_TEXT_CHARS:
            raise SourceError(
                f"its entries make more than {MAX_TEXT_CHARS:,} characters of text, the limit of one file"
            )
        self.parts.append(part)

    def joined(self) -> str:
        return "\n\n".join(self.parts)


def _entries(items: list[Any], title_field: str | None, text_fields: Sequence[str] | None) -> str:
    text = _Text()
    for number, item in enumerate(items, start=1):
        on_time()
        if not isinstance(item, dict):
            item = {"value": item}
        title = _scalar(item.get(title_field, "")) if title_field else ""
        fields = {k: item[k] for k in text_fields if k in item} if text_fields else item
        if title_field:
            fields = {k: v for k, v in fields.items() if k != title_field}
        lines = [f"{key}: {value}" for key, value in _flat(fields) if value]
        if lines or title:
            text.add(f"## {title or f'Entry {number}'}\n\n" + "\n".join(lines))
    return text.joined()


def _csv(data: str) -> str:
    """Each row one entry, written as it is read: refused past MAX_ENTRIES rows, MAX_COLUMNS columns in a row, or
    MAX_TEXT_CHARS characters of text."""
    text, header, number = _Text(), None, 0
    reader = csv.reader(io.StringIO(data))
    try:
        for row in reader:
            on_time()
            if len(row) > MAX_COLUMNS:
                raise SourceError(f"line {reader.line_num}: {len(row)} columns, over the limit of {MAX_COLUMNS}")
            if header is None:
                header = row
                continue
            number += 1
            if number > MAX_ENTRIES:
                raise _too_many("rows")
            cells = [" ".join(c.split())[:MAX_FIELD_CHARS] for c in row]
            if not any(cells):
                continue
            lines = [
                f"{header[i] if i < len(header) and header[i] else f'column {i + 1}'}: {c}"
                for i, c in enumerate(cells)
                if c
            ]
            text.add(f"## {cells[0] or f'Row {number}'}\n\n" + "\n".join(lines))
    except csv.Error as exc:
        raise SourceError(f"invalid CSV ({exc})") from None
    return text.joined()
