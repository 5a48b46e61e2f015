"""The bounds of one document on every route it arrives by (URL, crawl, path, git): bytes, then work, then time.

Every number is here, and each route applies the same ones, so a document is refused the same way however it
comes (URL and crawl pages through `kbctl.sources.url`, path and git files through `kbctl.sources.files`):
bytes read (MAX_FETCH_BYTES, MAX_FILE_BYTES); bytes handed to text extraction, per format (MAX_EXTRACT_BYTES,
`check_size`); what a format's reader may build, refused while it reads (`kbctl.sources.formats`: MAX_PAGES,
MAX_UNZIPPED_BYTES, MAX_UNZIPPED_XML_BYTES, MAX_ENTRIES, MAX_COLUMNS, MAX_FIELD_CHARS, MAX_TEXT_CHARS); and the
time of an extraction (EXTRACT_TIMEOUT: `within_time`, with `on_time` checked by the readers that loop).
One document over a bound fails alone, with a reason naming the bound; the other documents of its source go on.

Why, and figures: docs/reliability.md#bounded-work, docs/manifest.md (path sources), bench/html_bound.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Final, TypeVar

from kbctl.errors import SourceError

__all__ = [
    "EXTRACTED",
    "EXTRACT_TIMEOUT",
    "MAX_COLUMNS",
    "MAX_ENTRIES",
    "MAX_EXTRACT_BYTES",
    "MAX_FETCH_BYTES",
    "MAX_FIELD_CHARS",
    "MAX_FILE_BYTES",
    "MAX_PAGES",
    "MAX_TEXT_CHARS",
    "MAX_UNZIPPED_BYTES",
    "MAX_UNZIPPED_XML_BYTES",
    "MiB",
    "check_size",
    "on_time",
    "within_time",
]

MiB: Final = 1024 * 1024
MAX_FETCH_BYTES: Final = 10 * MiB  # one URL's body, decompressed
MAX_FILE_BYTES: Final = 32 * MiB  # one file of a path or git source
# Per format (kbctl.sources.formats.FileFormat), what text extraction is handed; at most what a file read gives.
MAX_EXTRACT_BYTES: Final[Mapping[str, int]] = {
    "markdown": MAX_FILE_BYTES,
    "text": MAX_FILE_BYTES,
    "html": 4 * MiB,
    "pdf": MAX_FILE_BYTES,
    "docx": MAX_FILE_BYTES,
    "json": 16 * MiB,
    "jsonl": 16 * MiB,
    "csv": 16 * MiB,
}
_LABELS: Final[Mapping[str, str]] = {"markdown": "Markdown", "text": "text", "jsonl": "JSON Lines"}
MAX_PAGES: Final = 5_000  # of one PDF
MAX_UNZIPPED_BYTES: Final = 256 * MiB  # what the parts of one DOCX (a zip) may expand to
MAX_UNZIPPED_XML_BYTES: Final = 32 * MiB  # ... its XML parts, which are parsed whole
MAX_ENTRIES: Final = 100_000  # objects of one JSON / JSONL file, rows of one CSV
MAX_FIELD_CHARS: Final = 20_000  # one value of a JSON or CSV entry (longer ones are cut)
MAX_COLUMNS: Final = 16_384  # of one CSV row (a spreadsheet's width)
MAX_TEXT_CHARS: Final = MAX_FILE_BYTES  # of the text a JSON / CSV file's entries are written to: a Markdown file's
EXTRACT_TIMEOUT: Final = 30.0  # seconds the extraction of one document may take
EXTRACTED: Final = frozenset({"html", "pdf", "docx", "json", "jsonl", "csv"})  # formats parsed, not only decoded

_T = TypeVar("_T")
_overdue: list[threading.Thread] = []  # extractions left to finish after they ran over their time
_overdue_lock = threading.Lock()
_budget = threading.local()  # on a worker thread of within_time: `deadline` (time.monotonic) and `reason`


def _mib(size: int) -> str:
    return f"{size / MiB:g} MiB"


def check_size(fmt: str, size: int, *, what: str | None = None, limit: int | None = None) -> None:
    """SourceError when `size` bytes of format `fmt` are over its bound of text extraction (`limit` instead of
    MAX_EXTRACT_BYTES[fmt] when given); `what` names the document in the reason (default: "HTML file" and so on)."""
    bound = MAX_EXTRACT_BYTES[fmt] if limit is None else limit
    if size > bound:
        what = what or f"{_LABELS.get(fmt, fmt.upper())} file"
        shown = f"{size / MiB:.1f} MiB"
        if round(size / MiB, 1) * MiB <= bound:  # "4.0 MiB is over the 4 MiB limit" would read as a bug
            shown = f"{size:,} bytes"
        raise SourceError(f"{what} of {shown} is over the {_mib(bound)} limit of text extraction")


def within_time(work: Callable[[], _T], *, what: str, timeout: float | None = None) -> _T:
    """`work()` on a worker thread, its result or its exception; SourceError when it takes more than `timeout`
    seconds (default EXTRACT_TIMEOUT: "extracting the text of {what} took more than …"). An extraction left
    running after its time is waited for before this one starts, so at most one runs at any moment."""
    timeout = EXTRACT_TIMEOUT if timeout is None else timeout
    with _overdue_lock:
        earlier = list(_overdue)
        _overdue.clear()
    for thread in earlier:
        thread.join()
    outcome: list[_T] = []
    failure: list[BaseException] = []
    reason = f"extracting the text of {what} took more than {timeout:g} s"
    deadline = time.monotonic() + timeout

    def run() -> None:
        _budget.deadline, _budget.reason = deadline, reason
        try:
            outcome.append(work())
        except BaseException as exc:  # handed to the caller's thread as is
            failure.append(exc)

    thread = threading.Thread(target=run, name="kbctl-extract", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        with _overdue_lock:
            _overdue.append(thread)
        raise SourceError(reason)
    if failure:
        raise failure[0]
    return outcome[0]


def on_time() -> None:
    """SourceError when the extraction running on this thread (under `within_time`) is past its time; nothing
    otherwise, and nothing outside `within_time`. Readers call it between the steps of their work."""
    deadline: float | None = getattr(_budget, "deadline", None)
    if deadline is not None and time.monotonic() > deadline:
        raise SourceError(_budget.reason)
