"""File formats as markdown text: what a file says, with its structure kept as headings the chunker follows.

- markdown, text: decoded as UTF-8 (a byte-order mark allowed); a NUL byte means a binary file;
- html: the main text, as for URL sources (trafilatura);
- pdf: the text of each page under a `## Page N` heading, so chunks never cross pages and every hit names
  its page (pypdf); an encrypted PDF, or one without a text layer (scanned images), fails with that reason;
- docx: headings (Heading 1-6, Title) as markdown headings, paragraphs, and tables as markdown tables
  (python-docx);
- json, jsonl: each object one entry under its own heading (the `titleField` value, else "Entry N"), each
  field as a `key: value` line (nested objects dotted, lists joined), only `textFields` when given;
- csv: each row one entry, titled by its first column, each column as a `header: value` line.
Every reader gets bytes already bounded in size, and answers (markdown text, title or None) or raises
SourceError with a reason a person can act on.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator, Sequence
from typing import Any, Final, Literal

from kbctl.errors import SourceError
from kbctl.manifest._bounds import MAX_DEPTH, nesting_depth
from kbctl.sources.extract import extract_html

__all__ = ["EXTENSIONS", "MAX_ENTRIES", "MAX_PAGES", "FileFormat", "as_markdown", "format_of"]

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
MAX_PAGES: Final = 5_000  # of one PDF
MAX_ENTRIES: Final = 100_000  # objects of one JSON / JSONL file, rows of one CSV
MAX_UNZIPPED_BYTES: Final = 256 * 1024 * 1024  # a DOCX is a zip: what its parts may expand to (zip bombs)
_MAX_FIELD_CHARS: Final = 20_000  # one value of a JSON or CSV entry


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
    """(text, title) of one file's bytes read as `fmt`; SourceError when it cannot be read or has no text."""
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
        pages = [(page.extract_text() or "").strip() for page in reader.pages]
        title = reader.metadata.title if reader.metadata is not None else None
    except SourceError:
        raise
    except (PdfReadError, ValueError, KeyError, TypeError, OSError) as exc:
        raise SourceError(f"not a readable PDF ({type(exc).__name__}: {str(exc)[:120]})") from None
    if not any(pages):
        raise SourceError("the PDF has no text layer (scanned images?): nothing to index")
    parts = [f"## Page {number}\n\n{text}" for number, text in enumerate(pages, start=1) if text]
    return "\n\n".join(parts), (str(title).strip() or None) if title else None


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
            unzipped = sum(info.file_size for info in archive.infolist())
        if unzipped > MAX_UNZIPPED_BYTES:
            raise SourceError(
                f"DOCX expands to {unzipped >> 20} MiB, over the {MAX_UNZIPPED_BYTES >> 20} MiB limit of its parts"
            )
        document = docx.Document(io.BytesIO(data))
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise SourceError(f"not a readable DOCX file ({type(exc).__name__})") from None
    parts: list[str] = []
    for block in document.iter_inner_content():
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


def _json_objects(text: str, lines: bool) -> list[Any]:
    if lines:
        items = []
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                items.append(_parse_json(line, f"line {number}: "))
    else:
        data = _parse_json(text, "")
        items = data if isinstance(data, list) else [data]
    if len(items) > MAX_ENTRIES:
        raise SourceError(f"{len(items)} entries, over the {MAX_ENTRIES} limit of one file")
    return items


def _parse_json(text: str, where: str) -> Any:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise SourceError(f"{where}invalid JSON ({getattr(exc, 'msg', 'too deep')})") from None
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
    return " ".join(text.split())[:_MAX_FIELD_CHARS]


def _entries(items: list[Any], title_field: str | None, text_fields: Sequence[str] | None) -> str:
    parts = []
    for number, item in enumerate(items, start=1):
        if not isinstance(item, dict):
            item = {"value": item}
        title = _scalar(item.get(title_field, "")) if title_field else ""
        fields = {k: item[k] for k in text_fields if k in item} if text_fields else item
        if title_field:
            fields = {k: v for k, v in fields.items() if k != title_field}
        lines = [f"{key}: {value}" for key, value in _flat(fields) if value]
        if lines or title:
            parts.append(f"## {title or f'Entry {number}'}\n\n" + "\n".join(lines))
    return "\n\n".join(parts)


def _csv(text: str) -> str:
    try:
        rows = list(csv.reader(io.StringIO(text)))
    except csv.Error as exc:
        raise SourceError(f"invalid CSV ({exc})") from None
    if len(rows) > MAX_ENTRIES + 1:
        raise SourceError(f"{len(rows) - 1} rows, over the {MAX_ENTRIES} limit of one file")
    if not rows:
        return ""
    header, parts = rows[0], []
    for number, row in enumerate(rows[1:], start=1):
        cells = [" ".join(c.split())[:_MAX_FIELD_CHARS] for c in row]
        if not any(cells):
            continue
        title = cells[0] or f"Row {number}"
        lines = [
            f"{header[i] if i < len(header) and header[i] else f'column {i + 1}'}: {c}"
            for i, c in enumerate(cells)
            if c
        ]
        parts.append(f"## {title}\n\n" + "\n".join(lines))
    return "\n\n".join(parts)
