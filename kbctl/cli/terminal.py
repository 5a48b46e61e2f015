"""Data made inert for human output: the one way kbctl prints text for people, on a terminal or off it.

A file name, a page title, a label value or an error quoting them is data, and data must not drive the terminal
(`ESC[2J`, `ESC]0;...BEL`) nor start a line of its own (a newline in a file name would forge a line of
`describe`). So every control character of data (Cc, U+2028/U+2029, the bidirectional controls) is printed as a
visible escape, as Python writes it (`\\n`, `\\x1b`, `\\u202e`); `-o json|yaml` gives the exact characters.

`inert` is for one field on one line (even its newlines are escaped); `say` prints what the renderers made,
keeping the newlines and tabs of the layout while escaping every other control character, so data reaches no
terminal raw by any path. The characters escaped, and the tests: docs/reliability.md#output-is-inert.
"""

from __future__ import annotations

import re

import typer

__all__ = ["inert", "inert_text", "say"]

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_CONTROLS = "\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_ANY = re.compile(f"[{_CONTROLS}]")
_BUT_LAYOUT = re.compile(f"(?![\n\t])[{_CONTROLS}]")


def _escape(found: re.Match[str]) -> str:
    char = found.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def inert(text: str) -> str:
    """`text` as one line with no control character left: each shown as its escape (`\\n`, `\\x1b`, `\\u202e`)."""
    return _ANY.sub(_escape, text)


def inert_text(text: str) -> str:
    """`text` with its newlines and tabs kept and every other control character shown as its escape (`\\x1b`)."""
    return _BUT_LAYOUT.sub(_escape, text)


def say(message: str = "", *, err: bool = False, nl: bool = True) -> None:
    """Print human text (stdout, or stderr with `err`) through `inert_text`: never JSON or YAML, which keep their
    exact characters."""
    typer.echo(inert_text(message), err=err, nl=nl)
