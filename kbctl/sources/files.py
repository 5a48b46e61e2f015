"""`path:` sources: the files a source names, each read into one Document.

A path is a file, a folder (every file of a known format below it, hidden files and folders skipped) or a
glob (`docs/**/*.md`), relative to the manifest's folder. `include` / `exclude` globs match each file's id:
its path relative to the folder the source names (for a glob, the folder before its first wildcard), with
`*` matching across folders. Nothing outside the manifest's repository is read, through `..` or a symlink
(the nearest folder at or above the manifest's holding `.git`; without one, the manifest's own folder, wherever
the command runs from); symlinked folders are not walked.
A source lists at most MAX_FILES files (more fails the source). Each file is read under the bounds every route
shares (`kbctl.sources.bounds`): a file over MAX_FILE_BYTES, or over its format's bound of text extraction (HTML:
4 MiB) fails alone before it is read, and the extraction of a parsed format fails it after EXTRACT_TIMEOUT.
"""

from __future__ import annotations

import fnmatch
import glob as globbing
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Final

from kbctl.errors import SourceError
from kbctl.manifest import Source
from kbctl.sources import Document
from kbctl.sources.bounds import EXTRACTED, MAX_FILE_BYTES, check_size, within_time
from kbctl.sources.formats import FileFormat, as_markdown, format_of
from kbctl.sources.url import Validators

__all__ = [
    "MAX_FILES",
    "MAX_FILE_BYTES",
    "NOT_MODIFIED",
    "DocumentsRead",
    "ListedDocument",
    "NotModified",
    "list_files",
    "read_entry",
    "read_file",
    "read_path",
    "repository_root",
    "selected",
]

MAX_FILES: Final = 10_000  # files one path source may list
_WILDCARDS = frozenset("*?[")


@dataclass(frozen=True)
class ListedDocument:
    """One document of a many-document source: a file of a path or git source (its id relative to the source's
    folder or the repository, where it is, its format), or a page of a crawl (no path; its HTTP validators)."""

    doc_id: str
    path: Path | None
    format: FileFormat
    origin: str  # the path relative to the manifest's folder, the repository path at its commit, or the URL
    stamp: str = ""  # "size:mtime_ns" when listed: unchanged, the file is not read again
    validators: Validators | None = None  # a page's, from its last response


class NotModified:
    """A file whose size and modification time are those recorded when it was last read: not read again."""

    def __repr__(self) -> str:
        return "NotModified()"


NOT_MODIFIED = NotModified()
# Each document a many-document source lists, with its Document, why that one could not be read, or NOT_MODIFIED.
DocumentsRead = list[tuple[ListedDocument, Document | SourceError | NotModified]]


def repository_root(base_dir: Path) -> Path:
    """The nearest folder at or above `base_dir` holding `.git`; else `base_dir` itself: a manifest outside any
    repository reads only its own folder tree, whatever the working directory (applied from `/`, the working
    directory would open every file of the machine to it)."""
    for folder in (base_dir, *base_dir.parents):
        if (folder / ".git").exists():
            return folder
    return base_dir


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root)
    except ValueError:
        return False
    return True


def selected(source: Source, doc_id: str) -> bool:
    """Whether a document id passes the source's `include` / `exclude` globs (`*` matches across folders)."""
    if source.include is not None and not any(fnmatch.fnmatchcase(doc_id, g) for g in source.include):
        return False
    return source.exclude is None or not any(fnmatch.fnmatchcase(doc_id, g) for g in source.exclude)


def _hidden(relative: str) -> bool:
    return any(part.startswith(".") for part in relative.split("/"))


def _walk(folder: Path) -> Iterator[tuple[Path, bool]]:
    """Every file below `folder` that is not hidden nor below a hidden folder, with whether it is a symlink;
    symlinked folders are not entered (so only a symlinked file can lead out of the folder)."""
    pending = [str(folder)]
    while pending:
        with os.scandir(pending.pop()) as scan:
            for entry in scan:
                if entry.name.startswith("."):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
                elif entry.is_file():
                    yield Path(entry.path), entry.is_symlink()


def _candidates(source: Source, base_dir: Path) -> tuple[Path, list[tuple[Path, bool]]]:
    """(the folder ids are relative to, the files named with whether each may lead out of the repository) of a
    path source; SourceError when nothing is there."""
    assert source.path is not None
    pattern = source.path
    if _WILDCARDS & set(pattern):
        parts = pattern.split("/")
        fixed = [p for p in parts[: next(i for i, p in enumerate(parts) if _WILDCARDS & set(p))]]
        anchor = (base_dir / "/".join(fixed)) if fixed else base_dir
        found = [Path(p) for p in globbing.glob(str(base_dir / pattern), recursive=True)]
        return anchor, [(p, True) for p in found if p.is_file()]  # a glob may pass through symlinked folders
    target = base_dir / pattern
    if target.is_dir():
        return target, list(_walk(target))
    if target.is_file():
        return target.parent, [(target, True)]
    raise SourceError(f"path {pattern!r}: no such file or folder (relative to {base_dir})")


def list_files(source: Source, base_dir: Path) -> list[ListedDocument]:
    """The files of a path source, in id order; SourceError when the path is missing, leaves the repository,
    or names more than MAX_FILES files."""
    assert source.path is not None
    root = repository_root(base_dir)
    if not _inside(base_dir / source.path.split("*")[0], root):
        where = "the repository the manifest is in" if (root / ".git").exists() else "the manifest's folder"
        raise SourceError(
            f"path {source.path!r} leaves {where} ({root}); outside a git repository a manifest reads only the "
            "files below its own folder"
        )
    anchor, found = _candidates(source, base_dir)
    entries: list[ListedDocument] = []
    for file, may_leave in found:
        doc_id = file.relative_to(anchor).as_posix() if file != anchor else file.name
        if _hidden(doc_id) or (may_leave and not _inside(file, root)):
            continue  # a hidden file, or a symlink out of the repository
        if not selected(source, doc_id):
            continue
        fmt = format_of(file.name) if source.format == "auto" else source.format
        if fmt is None:
            continue  # a file of no format kbctl reads (images, archives...) in a folder
        try:
            info = file.stat()
        except OSError:
            continue  # gone between the listing and now
        origin = os.path.relpath(file, base_dir).replace(os.sep, "/")
        entries.append(ListedDocument(doc_id, file, fmt, origin, f"{info.st_size}:{info.st_mtime_ns}"))
        if len(entries) > MAX_FILES:
            raise SourceError(f"path {source.path!r} names more than {MAX_FILES} files: narrow it or use include")
    entries.sort(key=lambda e: e.doc_id)
    if not entries:
        raise SourceError(
            f"path {source.path!r}: no file of a format kbctl reads (markdown, text, html, pdf, docx, json, jsonl, csv)"
        )
    return entries


def read_file(entry: ListedDocument, source: Source) -> Document:
    """The Document of one file; SourceError (for this file alone) when it cannot be read, is over a bound
    (`kbctl.sources.bounds`), or its extraction takes too long."""
    assert entry.path is not None, "a crawled page is fetched, not read"
    try:
        size = entry.path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise SourceError(
                f"{size / 1024 / 1024:.1f} MiB, over the {MAX_FILE_BYTES // 1024 // 1024} MiB limit of one file"
            )
        check_size(entry.format, size)  # before a byte is read
        with entry.path.open("rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise SourceError(f"cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE_BYTES:
        raise SourceError(f"over the {MAX_FILE_BYTES // 1024 // 1024} MiB limit of one file")
    extract = partial(
        as_markdown,
        data,
        entry.format,
        origin=entry.origin,
        title_field=source.title_field,
        text_fields=source.text_fields,
    )
    text, title = within_time(extract, what="the file") if entry.format in EXTRACTED else extract()
    return Document(text=text, origin=entry.origin, title=title, markdown=entry.format != "text", compact=True)


def read_entry(entry: ListedDocument, source: Source) -> Document | SourceError:
    """`read_file`, with the reason this one file could not be read as the outcome instead of raised."""
    try:
        return read_file(entry, source)
    except SourceError as exc:
        return exc


def read_path(source: Source, base_dir: Path, known: Mapping[str, str] | None = None) -> DocumentsRead:
    """Every file of a path source with its Document, or the reason that file could not be read, or NOT_MODIFIED
    when its stamp is the one `known` records for its id (read before, unchanged since); SourceError when the
    source itself cannot be listed."""
    results: DocumentsRead = []
    for entry in list_files(source, base_dir):
        unchanged = known is not None and known.get(entry.doc_id) == entry.stamp
        results.append((entry, NOT_MODIFIED if unchanged else read_entry(entry, source)))
    return results
