"""The libyaml fast path of kbctl.inputs.yaml_lines: a document's data built from libyaml's events exactly as
ruamel's round-trip loader and to_plain would build it, or None (left to ruamel) wherever that is not certain."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any, Final

import yaml
from ruamel.yaml.resolver import implicit_resolvers

from kbctl.inputs.bounds import MAX_DEPTH
from kbctl.inputs.yaml_plain import _LINE_BREAK, _plain_key, _plain_str

# ---------------------------------------------------------------- the libyaml fast path
# ruamel's pure-Python scanner reads a few MB a second, libyaml ~50 times as much. Only libyaml's events are
# used: PyYAML's resolver is YAML 1.1 (`on` is True, `0777` octal), so the data is built from the events as
# ruamel's round-trip loader and to_plain would build it, and any document where that is not certain (aliases,
# tags, directives, a scalar not plainly a string, null, bool or decimal number, a duplicate key, a bound
# reached, text the two read differently, any error) is left to ruamel, which reads it as before and reports
# its problem with its line.

_LIBYAML: bool = bool(getattr(yaml, "__with_libyaml__", False))
"""Whether documents are first tried with libyaml (False: ruamel reads every document, as before)."""

# Text libyaml and ruamel may read differently: NEL and the Unicode line and paragraph separators (line breaks
# to YAML 1.1, which libyaml follows, not to 1.2), a byte order mark inside the stream, and directives
# (`%YAML 1.1` switches ruamel to YAML 1.1 resolution); a `%` at a line's start is taken for one.
_UNCERTAIN_TEXT: Final = ("\x85", "\u2028", "\u2029", "\ufeff", "\n%", "\r%")
_PLAIN_STYLES: Final = (None, "")  # libyaml's style of a plain scalar ("" from the C binding, None from Python)
_BLOCK_STYLES: Final = ("|", ">")

_NULL_TAG: Final = "tag:yaml.org,2002:null"
_BOOL_TAG: Final = "tag:yaml.org,2002:bool"
_INT_TAG: Final = "tag:yaml.org,2002:int"
_FLOAT_TAG: Final = "tag:yaml.org,2002:float"
# The numbers whose value is the same whichever way they are read; other spellings that ruamel resolves as
# numbers (0x1F, 0o17, 0b1, 1_000, 007, .inf, .nan) are left to it.
_DECIMAL_INT: Final = re.compile(r"[-+]?(?:0|[1-9][0-9]{0,999})")
_DECIMAL_FLOAT: Final = re.compile(r"[-+]?(?:0|[1-9][0-9]*)(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|[-+]?\.[0-9]+")


def _ruamel_resolvers() -> dict[str, list[tuple[str, Any]]]:
    """ruamel's YAML 1.2 implicit resolvers by the first character they apply to, as its VersionedResolver
    builds them: taken from ruamel itself so a plain scalar is never a str here that ruamel reads otherwise."""
    table: dict[str, list[tuple[str, Any]]] = {}
    for versions, tag, regexp, first in implicit_resolvers:
        if (1, 2) in versions:
            for char in first:
                table.setdefault(char, []).append((str(tag), regexp))
    return table


_RESOLVERS: Final = _ruamel_resolvers()
_UNCERTAIN: Final[Any] = object()  # a scalar whose value is left to ruamel


def _plain_scalar(value: str) -> Any:
    """A plain scalar's value as ruamel's round-trip loader and to_plain give it, or _UNCERTAIN."""
    for tag, regexp in _RESOLVERS.get(value[:1], ()):
        if not regexp.match(value):
            continue
        if tag == _NULL_TAG:
            return None
        if tag == _BOOL_TAG:
            return value.lower() == "true"
        if tag == _INT_TAG and _DECIMAL_INT.fullmatch(value):
            return int(value)
        if tag == _FLOAT_TAG and _DECIMAL_FLOAT.fullmatch(value):
            return float(value)
        return _UNCERTAIN
    return _plain_str(value)


class _OpenMapping:
    """A mapping being filled from events: its plain dict, the key waiting for its value, the keys seen."""

    __slots__ = ("data", "key", "seen")

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}
        self.key: str | None = None
        self.seen: set[Any] = set()  # keys as ruamel compares them: 1, 1.0 and true are one key to it


def _fast_load(text: str, nodes: int) -> tuple[Any, int, int | None] | None:
    """Read one document's text with libyaml: (plain data, nodes it holds, 0-based line of its top mapping or
    list, None for a scalar), or None to leave the document to ruamel. Past `nodes` nodes or MAX_DEPTH levels
    the document is left to ruamel too, which reports the bound with its line."""
    if any(uncertain in text for uncertain in _UNCERTAIN_TEXT) or text.startswith("%"):
        return None
    try:
        with contextlib.closing(yaml.parse(text, Loader=yaml.CSafeLoader)) as events:
            return _build(events, nodes, text)
    except Exception:  # libyaml's syntax errors, or text it cannot encode (a lone surrogate): ruamel says which
        return None


_BLOCK_HEADER = re.compile(r"[|>][-+0-9]{0,2}")
_BLOCK_BLANKS = " \r\n\x85\u2028\u2029"


def _blank_lines_ruamel_refuses(text: str, start: int, end: int) -> bool:
    """Whether ruamel refuses the block scalar at `start` (its `|` or `>`) that libyaml read: with no indentation
    indicator, a first line of spaces only, then a line indented further ("more indented follow up line than first
    in a block scalar"; YAML allows it). The scan of ruamel's `scan_block_scalar_indentation`."""
    header = _BLOCK_HEADER.match(text, start)
    if header is None or any(c.isdigit() for c in header.group()):
        return False
    line_break = _LINE_BREAK.search(text, start, end)
    if line_break is None:
        return False
    at, column, first, deepest = line_break.end(), 0, -1, 0
    while at < len(text) and text[at] in _BLOCK_BLANKS:
        if text[at] == " ":
            at, column = at + 1, column + 1
            deepest = max(deepest, column)
            continue
        if first < 0:
            first = column
        at += 2 if text.startswith("\r\n", at) else 1
        column = 0
    return first > 0 and deepest > first


def _tabs_outside(text: str, spans: list[tuple[int, int]]) -> bool:
    """Whether text has a tab outside the given sorted, disjoint spans (the quoted and block scalars' text)."""
    spans_iter = iter(spans)
    span_start, span_end = next(spans_iter, (len(text), len(text)))
    for tab in re.finditer("\t", text):
        at = tab.start()
        while at >= span_end:
            span_start, span_end = next(spans_iter, (len(text), len(text)))
        if at < span_start:
            return True
    return False


def _build(events: Iterator[Any], nodes: int, text: str) -> tuple[Any, int, int | None] | None:
    """The plain data of one document's events (see _fast_load), built with a stack rather than recursion."""
    scalar_event, sequence_event, mapping_event = yaml.ScalarEvent, yaml.SequenceStartEvent, yaml.MappingStartEvent
    end_events = (yaml.SequenceEndEvent, yaml.MappingEndEvent)
    stack: list[Any] = []  # the open collections: lists and _OpenMappings
    root: Any = _UNCERTAIN
    root_line: int | None = None
    spent = documents = 0
    # ruamel refuses a tab anywhere but inside a quoted scalar or a block scalar's lines (`a:<tab>b`, `a: b<tab>`,
    # even `a: x<tab>y`), where libyaml takes it as white space: where tabs are allowed is noted as events come.
    tab_spans: list[tuple[int, int]] | None = [] if "\t" in text else None
    for event in events:
        kind = type(event)
        if kind is scalar_event or kind is sequence_event or kind is mapping_event:
            if event.anchor is not None or event.tag is not None:
                return None  # aliases need the composer's budget; a tag needs ruamel's constructors
            spent += 1
            if spent > nodes or len(stack) >= MAX_DEPTH:
                return None
            opened: Any = None
            if kind is scalar_event:
                value = _plain_scalar(event.value) if event.style in _PLAIN_STYLES else _plain_str(event.value)
                if value is _UNCERTAIN:
                    return None
                if event.style in _BLOCK_STYLES and (
                    not stack  # a document that is one block scalar: a `#` line at column 0 is text to ruamel
                    or _blank_lines_ruamel_refuses(text, int(event.start_mark.index), int(event.end_mark.index))
                ):
                    return None  # not a manifest anyway, or what ruamel refuses
                if tab_spans is not None and event.style not in _PLAIN_STYLES:
                    start, end = int(event.start_mark.index), int(event.end_mark.index)
                    if event.style in _BLOCK_STYLES:  # its lines, not its header (`|<tab>` is refused)
                        header_end = _LINE_BREAK.search(text, start, end)
                        start = end if header_end is None else header_end.end()
                    else:  # inside the quotes
                        start, end = start + 1, end - 1
                    tab_spans.append((start, end))
            elif kind is sequence_event:
                value = opened = []
            else:
                if event.flow_style and text[event.start_mark.index : event.start_mark.index + 1] != "{":
                    return None  # a single pair in a flow list (`[a: 1]`): ruamel refuses its JSON form `["a":1]`
                opened = _OpenMapping()
                value = opened.data
            if not stack:
                root = value
                root_line = None if opened is None else int(event.start_mark.line)
            else:
                top = stack[-1]
                if type(top) is list:
                    top.append(value)
                elif top.key is not None:
                    top.data[top.key] = value
                    top.key = None
                elif opened is not None:
                    return None  # a mapping or list as a key: ruamel makes a special key of it
                else:
                    key = _plain_key(value)
                    if key in top.data or (not isinstance(value, str) and value in top.seen):
                        return None  # a duplicate key (or two that print the same): ruamel reports or orders it
                    if not isinstance(value, str):
                        top.seen.add(value)
                    top.key = key
            if opened is not None:
                stack.append(opened)
        elif kind in end_events:
            stack.pop()
        elif kind is yaml.DocumentStartEvent:
            documents += 1
            if documents > 1 or event.version is not None or event.tags:
                return None
        elif kind is yaml.AliasEvent:
            return None
    if root is _UNCERTAIN or stack:
        return None
    if tab_spans is not None and _tabs_outside(text, tab_spans):
        return None
    return root, spent, root_line
