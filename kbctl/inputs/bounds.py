"""Bounds on what kbctl reads from users: regular files of bounded size, bounded stdin, bounded nesting.

Manifests, eval sets and BEIR files all come through here, so a path that names a device (`/dev/zero`),
a FIFO or a directory, or a file or stream too large to hold, is one clear problem instead of a hang,
a MemoryError or a RecursionError.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from typing import IO, Any, BinaryIO, Final

from kbctl.errors import KbctlError

__all__ = [
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "UnreadableFile",
    "format_size",
    "manifest_limit",
    "nesting_depth",
    "open_regular",
    "read_bounded_stream",
    "read_bounded_text",
    "too_deep_message",
    "too_large_message",
]

MAX_FILE_BYTES: Final = 8 * 1024 * 1024
"""Largest manifest or eval set file (and stdin): a manifest of 8 MiB holds ~7,500 one-page sources and
loads in a few seconds; larger knowledge bases split over several files."""

MANIFEST_LIMIT_ENV: Final = "KBCTL_MAX_MANIFEST_MIB"
"""Environment variable that raises (or lowers) the manifest file limit, in MiB (1 to 4096): one knowledge base
of 100,000 inline chunks is a ~100 MB manifest."""


def manifest_limit(environ: Mapping[str, str] | None = None) -> int:
    """The largest manifest file read, in bytes: MAX_FILE_BYTES, or KBCTL_MAX_MANIFEST_MIB when set to 1..4096."""
    raw = (os.environ if environ is None else environ).get(MANIFEST_LIMIT_ENV, "").strip()
    if not raw:
        return MAX_FILE_BYTES
    if not raw.isdigit() or not 1 <= int(raw) <= 4096:
        raise KbctlError(f"{MANIFEST_LIMIT_ENV} must be a whole number of MiB from 1 to 4096, not {raw[:20]!r}")
    return int(raw) * 1024 * 1024


MAX_DEPTH: Final = 64
"""Deepest nesting of mappings and lists (aliases expanded): a manifest needs 5 levels."""


class UnreadableFile(Exception):
    """A path or stream that cannot be read as a text file; str() is the reason, one line, no content."""


def format_size(size: int) -> str:
    """A byte count for humans: 8 MiB, 512 KiB, 100 bytes."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            value = size / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{size} bytes"


def too_large_message(limit: int) -> str:
    """The problem of a file or stream larger than limit bytes."""
    return f"too large: more than {format_size(limit)}, the limit for one file"


def too_deep_message(limit: int = MAX_DEPTH) -> str:
    """The problem of data nested deeper than limit."""
    return f"nesting too deep: more than {limit} levels of mappings and lists"


def _kind(mode: int, expected: str) -> str | None:
    """Why a file of this mode cannot be read as a text file, or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return f"is a directory, expected {expected}"
    if stat.S_ISFIFO(mode):
        return f"is a named pipe (FIFO), expected {expected}"
    if stat.S_ISSOCK(mode):
        return f"is a socket, expected {expected}"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return f"is a device, expected {expected}"
    return f"is not a regular file, expected {expected}"


def _os_reason(error: OSError, expected: str = "a file") -> str:
    """The reason an OS error gives, in the words kbctl uses (never the path: the caller names it)."""
    if isinstance(error, FileNotFoundError):
        return "no such file or directory"
    if isinstance(error, IsADirectoryError):
        return f"is a directory, expected {expected}"
    return f"cannot read: {error.strerror or type(error).__name__}"


def open_regular(path: str | os.PathLike[str], limit: int, *, expected: str = "a file") -> BinaryIO:
    """Open path (symlinks followed) for binary reading when it is a regular file of at most limit bytes.

    Raises UnreadableFile naming why not: missing, a directory, a FIFO, a device, a socket, too large,
    or the OS's reason. A device or FIFO is refused before it is opened (opening one can block or have
    side effects); what was opened is checked again, so a file swapped meanwhile is refused too.
    """
    try:
        reason = _kind(os.stat(path).st_mode, expected)
        if reason is not None:
            raise UnreadableFile(reason)
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
        descriptor = os.open(path, flags)
    except OSError as error:
        raise UnreadableFile(_os_reason(error, expected)) from None
    try:
        info = os.fstat(descriptor)
        reason = _kind(info.st_mode, expected)
        if reason is None and info.st_size > limit:
            reason = too_large_message(limit)
        if reason is not None:
            raise UnreadableFile(reason)
        if hasattr(os, "set_blocking"):
            os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise UnreadableFile("cannot read: not valid UTF-8") from None


def read_bounded_text(path: str | os.PathLike[str], limit: int = MAX_FILE_BYTES, *, expected: str = "a file") -> str:
    """The UTF-8 text (a leading BOM dropped) of a regular file of at most limit bytes; else UnreadableFile."""
    with open_regular(path, limit, expected=expected) as handle:
        try:
            data = handle.read(limit + 1)
        except OSError as error:
            raise UnreadableFile(_os_reason(error, expected)) from None
    if len(data) > limit:  # it grew since it was checked
        raise UnreadableFile(too_large_message(limit))
    return _decode(data)


def read_bounded_stream(stream: IO[Any], limit: int = MAX_FILE_BYTES) -> str:
    """Read a stream (stdin) to its end, refusing more than limit bytes of UTF-8; else UnreadableFile.

    A text stream is read in characters (each at least one byte, so limit + 1 of them are too many);
    a binary one is decoded as UTF-8 (a leading BOM dropped).
    """
    try:
        text = stream.read(limit + 1)
    except UnicodeDecodeError:
        raise UnreadableFile("cannot read: not valid UTF-8") from None
    except OSError as error:
        raise UnreadableFile(_os_reason(error)) from None
    if isinstance(text, bytes | bytearray):
        text = _decode(bytes(text))
    if not isinstance(text, str):
        raise TypeError(f"stdin must be a text stream, read() gave {type(text).__name__}")
    if len(text) > limit or len(text.encode("utf-8", "surrogatepass")) > limit:
        raise UnreadableFile(too_large_message(limit))
    return text.removeprefix("\ufeff")


def nesting_depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """How deep dicts and lists nest in value (a scalar: 0), counting no further than limit + 1.

    Iterative, so a value nested deeper than Python's recursion limit is measured safely.
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest
