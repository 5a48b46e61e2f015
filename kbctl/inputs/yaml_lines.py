"""Split a YAML stream into documents, load them with line numbers, and map field paths back to lines."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq, TaggedScalar
from ruamel.yaml.composer import Composer
from ruamel.yaml.constructor import DuplicateKeyError
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import AliasEvent
from ruamel.yaml.nodes import MappingNode, ScalarNode
from ruamel.yaml.reader import ReaderError
from ruamel.yaml.resolver import implicit_resolvers
from ruamel.yaml.scalarbool import ScalarBoolean

from kbctl.inputs.bounds import MAX_DEPTH, too_deep_message

__all__ = [
    "MAX_DOCUMENTS",
    "MAX_NODES",
    "SyntaxProblem",
    "YamlDocument",
    "load_documents",
    "locate",
    "split_documents",
    "to_plain",
]

MAX_NODES: Final = 100_000
"""Most YAML nodes one file may hold, an alias counting as every node it repeats. A manifest of 8 MiB
with ~7,500 one-page sources has ~55,000 (7 a source); a 700-byte alias bomb would expand to a billion.
ruamel composes ~25,000 nodes a second, so this also bounds what one file costs (~4 s, ~70 MB)."""

MAX_DOCUMENTS: Final = 1_000
"""Most non-empty YAML documents in one file (each costs a parser start, ~0.2 ms even when tiny)."""

# A line break as ruamel counts them (so our line offsets agree with its marks).
_LINE_BREAK = re.compile(r"\r\n|[\n\r\x85\u2028\u2029]")
_DOC_START = re.compile(r"---(?:[ \t\r\n\x85\u2028\u2029]|$)")
_DOC_END = re.compile(r"\.\.\.(?:[ \t\r\n\x85\u2028\u2029]|$)")


_UNLOADED: Final[Any] = object()


class YamlDocument:
    """One non-empty YAML document: its plain data, where it sits in the stream, and its round-trip tree.

    A document read by libyaml has no tree until one is asked for (only to place a problem on its line):
    ruamel then loads it from the document's text, so a valid document never pays for ruamel's scanner.
    """

    __slots__ = ("_text", "_tree", "data", "line", "offset")

    def __init__(self, tree: Any = _UNLOADED, *, data: Any, offset: int, line: int, text: str = "") -> None:
        self._tree = tree
        self._text = text  # the document's text, kept only until its tree is loaded from it
        self.data = data  # plain dict/list/str/int/float/bool/None (see to_plain)
        self.offset = offset  # 0-based line of the stream where this document's text begins; add to ruamel's lines
        self.line = line  # 1-based line where the document's content starts

    @property
    def tree(self) -> Any:
        """The document as ruamel loads it (CommentedMap, CommentedSeq or a scalar), carrying the line numbers."""
        if self._tree is _UNLOADED:
            self._tree = _round_trip_tree(self._text, self.data)
            self._text = ""
        return self._tree

    def __repr__(self) -> str:
        return f"YamlDocument(offset={self.offset}, line={self.line}, data={self.data!r})"


@dataclass(frozen=True)
class SyntaxProblem:
    """A document that is not valid YAML."""

    line: int  # 1-based, absolute in the stream
    message: str


class _CycleError(ValueError):
    """A YAML alias refers to a node that contains it."""


def _iter_lines(text: str, start: int = 0, end: int | None = None) -> Iterator[str]:
    """The lines of text[start:end], each keeping its line break, exactly where ruamel counts a new line
    (lazily: callers stop at the first line of content, which may come before megabytes of others)."""
    end = len(text) if end is None else end
    for match in _LINE_BREAK.finditer(text, start, end):
        yield text[start : match.end()]
        start = match.end()
    if start < end:
        yield text[start:end]


def _count_breaks(text: str, start: int, end: int) -> int:
    """How many line breaks ruamel counts in text[start:end] (start and end at line starts)."""
    return (
        text.count("\n", start, end)
        + text.count("\r", start, end)
        - text.count("\r\n", start, end)
        + text.count("\x85", start, end)
        + text.count("\u2028", start, end)
        + text.count("\u2029", start, end)
    )


def _is_prologue(line: str) -> bool:
    """True for lines that may precede a document's `---`: blank lines, comments and directives."""
    stripped = line.strip()
    return not stripped or stripped.startswith("#") or line.startswith("%")


# A line break followed by a `---` or `...` line (what _DOC_START and _DOC_END match): the break first, as
# a character class to scan for is ~8 times faster than a lookbehind tried at every position of the text.
_MARKER_AFTER_BREAK = re.compile(r"[\n\r\x85\u2028\u2029](?=(?:---|\.\.\.)(?:[ \t\r\n\x85\u2028\u2029]|\Z))")


def _marker_starts(text: str) -> Iterator[int]:
    """Where the lines that are `---` or `...` markers start, in order."""
    if _DOC_START.match(text) or _DOC_END.match(text):
        yield 0
    if text.isascii() and "\r" not in text:  # only \n breaks lines: str.find runs at memchr speed, a regex does not
        found = []
        for marker in ("\n---", "\n..."):
            at = text.find(marker)
            while at >= 0:
                if _DOC_START.match(text, at + 1) or _DOC_END.match(text, at + 1):
                    found.append(at + 1)
                at = text.find(marker, at + 1)
        yield from sorted(found)
        return
    for match in _MARKER_AFTER_BREAK.finditer(text):
        yield match.end()


def split_documents(text: str) -> list[tuple[int, str]]:
    """Cut a YAML stream at its document markers into (0-based start line, document text) pairs.

    A `---` or `...` at the start of a line always marks a document boundary in YAML, even inside a
    block scalar, so cutting on lines is exact; cutting lets one broken document not hide the others.
    A `---` after only blank lines, comments and directives starts no new document (it belongs to them).
    """
    text = text.removeprefix("\ufeff")
    chunks: list[tuple[int, str]] = []
    start = start_line = 0  # where the current document's text begins
    counted = counted_line = 0  # a line start, and its 0-based line: breaks are counted once, forwards
    prologue_until = 0  # text[start:prologue_until] is known to be only prologue lines
    for at in _marker_starts(text):
        counted_line += _count_breaks(text, counted, at)
        counted = at
        if text[at] == "-":
            if prologue_until < at and not all(_is_prologue(x) for x in _iter_lines(text, prologue_until, at)):
                chunks.append((start_line, text[start:at]))
                start, start_line = at, counted_line
            prologue_until = at
        else:  # `...` ends the document with its own line
            line_break = _LINE_BREAK.search(text, at)
            end = len(text) if line_break is None else line_break.end()
            chunks.append((start_line, text[start:end]))
            start, start_line = end, counted_line + 1
            prologue_until = end
    if start < len(text):
        chunks.append((start_line, text[start:]))
    return chunks


def _content_line(chunk: str, offset: int) -> int:
    """The 1-based line of the first content in a document's text (past comments, directives, `---`)."""
    for index, line in enumerate(_iter_lines(chunk)):
        if _is_prologue(line):
            continue
        if _DOC_START.match(line) and not line[3:].strip():
            continue
        return offset + index + 1
    return offset + 1


# A quoted part of a parser message: what the parser saw, which may be anything the file holds.
_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'" + "|" + r'"(?:[^"\\]|\\.)*"')
# Quoted parts that name a token (`'<stream end>'`) or one character (`','`, `'\t'`) say nothing of the file.
_HARMLESS = re.compile(r"<[a-z ]+>|.|\\(?:[a-z\\'\"]|x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8})")
_DUPLICATE_KEY = re.compile(r'found duplicate key "(?P<key>[^"\n]{1,63})" with value')
_MESSAGE_MAX: Final = 200


def _scrub(text: str) -> str:
    """A parser message without the file's content: quoted text other than a token name or one character
    is omitted, so a file that is not YAML (a key, a password file) is never echoed into logs."""

    def keep(match: re.Match[str]) -> str:
        quoted = match.group(0)
        return quoted if _HARMLESS.fullmatch(quoted[1:-1]) else "(text omitted)"

    first = text.strip().splitlines()[0] if text.strip() else "syntax error"
    return _QUOTED.sub(keep, first)


def _declares(root: Any, known_keys: Collection[str]) -> bool:
    """Whether a composed document is a mapping with one of known_keys at its top (it is what we expect)."""
    if not isinstance(root, MappingNode) or not known_keys:
        return False
    return any(isinstance(key, ScalarNode) and key.value in known_keys for key, _ in root.value)


def _syntax_message(error: YAMLError, *, declared: bool = False) -> str:
    """A one-line description of a YAML error that quotes nothing of the file.

    A duplicate key is named (with its values when short) only in a document that declares one of the
    expected top-level keys: there the key is the user's, not a line of some other file.
    """
    if isinstance(error, DuplicateKeyError):
        problem = str(error.problem or "")
        key = _DUPLICATE_KEY.search(problem)
        if not declared or key is None or not key.group("key").isprintable():
            text = "found a duplicate key"
        elif "\n" in problem or len(problem) > _MESSAGE_MAX or not problem.isprintable():
            text = f'found duplicate key "{key.group("key")}"'
        else:
            text = problem
    elif isinstance(error, MarkedYAMLError):
        text = _scrub(str(error.problem or error.context or "syntax error"))
    else:
        text = _scrub(str(error))
    return f"invalid YAML: {text}"


def _syntax_line(error: YAMLError, chunk: str, offset: int, fallback: int) -> int:
    """The 1-based absolute line a YAML error points at, or fallback when it points nowhere."""
    if isinstance(error, MarkedYAMLError):
        mark = error.problem_mark or error.context_mark
        if mark is not None:
            return offset + int(mark.line) + 1
    if isinstance(error, ReaderError) and isinstance(error.position, int):
        return offset + len(_LINE_BREAK.findall(chunk, 0, error.position)) + 1
    return fallback


class _Refused(Exception):
    """A document past one of the bounds (nodes, depth), or an alias into the node that holds it."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.message = message
        self.line = line  # 0-based, in the document's text


@dataclass
class _Budget:
    """What one file may still cost: nodes (aliases counted as what they repeat) and documents."""

    nodes: int = MAX_NODES
    documents: int = MAX_DOCUMENTS
    depth: int = MAX_DEPTH
    sizes: dict[int, tuple[int, int]] = field(default_factory=dict)  # id(anchored node) → (nodes, height)


class _BoundedComposer(Composer):
    """ruamel's composer, counting every node as the data will hold it (an alias: all the nodes it repeats)
    and the depth it reaches, so an alias bomb or a deep nesting is refused while it is read, before
    anything walks the tree it would expand to; the recursion of composing never goes past the depth."""

    budget: _Budget
    root: Any = None
    _heights: list[int]

    def compose_document(self) -> Any:
        self.budget.sizes.clear()  # node ids of a previous document may be reused
        self._heights = []
        self.root = None
        self.root = super().compose_document()
        return self.root

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.parser.peek_event()
        line = int(event.start_mark.line)
        budget = self.budget
        if isinstance(event, AliasEvent):
            node = super().compose_node(parent, index)  # an undefined alias raises here
            if id(node) not in budget.sizes:
                raise _Refused("invalid YAML: an alias refers to a node that contains it", line)
            size, height = budget.sizes[id(node)]
            if self.depth + height > budget.depth:
                raise _Refused(too_deep_message(budget.depth), line)
            self._spend(size, line, f"YAML aliases expand to more than {MAX_NODES} nodes, the limit for one file")
        else:
            if self.depth + 1 > budget.depth:
                raise _Refused(too_deep_message(budget.depth), line)
            self._spend(1, line, f"more than {MAX_NODES} YAML nodes, the limit for one file")
            before = budget.nodes
            self._heights.append(0)
            node = super().compose_node(parent, index)
            height = 1 + self._heights.pop()
            if event.anchor is not None:
                budget.sizes[id(node)] = (before - budget.nodes + 1, height)
        if self._heights:
            self._heights[-1] = max(self._heights[-1], height)
        return node

    def _spend(self, nodes: int, line: int, message: str) -> None:
        self.budget.nodes -= nodes
        if self.budget.nodes < 0:
            raise _Refused(message, line)


def _loader(budget: _Budget) -> YAML:
    """A round-trip YAML loader whose composer spends budget."""
    loader = YAML(typ="rt")
    loader.Composer = _BoundedComposer
    composer = loader.composer
    assert isinstance(composer, _BoundedComposer)
    composer.budget = budget
    composer.warn_double_anchors = False  # legal YAML; the warning would print the file's lines on stderr
    return loader


def _is_empty(chunk: str) -> bool:
    """True when a document's text has no content: only blank lines, comments and bare `---` / `...`."""
    for line in _iter_lines(chunk):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if (_DOC_START.match(line) or _DOC_END.match(line)) and not line[3:].strip():
            continue
        return False
    return True


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


def _round_trip_tree(text: str, data: Any) -> Any:
    """The round-trip tree of a document libyaml read, for its line numbers; its plain data (every line then
    the document's first) in the unexpected case that ruamel refuses what libyaml read."""
    try:
        return _loader(_Budget()).load(text)  # a full budget: the fast path saw no alias, and no more nodes
    except Exception:
        return data


def load_documents(text: str, *, known_keys: Collection[str] = ()) -> Iterator[YamlDocument | SyntaxProblem]:
    """Load each non-empty document of a YAML stream, in stream order: with libyaml when the data is certain
    to be what ruamel's round-trip loader gives (see _fast_load), else with that loader.

    The whole stream may hold MAX_NODES nodes (aliases expanded), MAX_DOCUMENTS documents and nest
    MAX_DEPTH deep; past a bound the problem is reported and the rest of the stream is not read.
    Problems quote nothing of the text (see _scrub), except a duplicate key in a document whose top
    mapping has one of known_keys.
    """
    budget = _Budget()
    for offset, chunk in split_documents(text):
        if _is_empty(chunk):
            continue
        fallback = _content_line(chunk, offset)
        budget.documents -= 1
        if budget.documents < 0:
            yield SyntaxProblem(fallback, f"more than {MAX_DOCUMENTS} YAML documents, the limit for one file")
            return
        fast = _fast_load(chunk, budget.nodes) if _LIBYAML else None
        if fast is not None:
            data, spent, root_line = fast
            budget.nodes -= spent
            if data is not None:  # None: an empty document, as ruamel's path skips it
                line = fallback if root_line is None else offset + root_line + 1
                yield YamlDocument(data=data, offset=offset, line=line, text=chunk)
            continue
        loader = _loader(budget)  # a fresh loader: one that failed mid-document keeps state from it
        composer: _BoundedComposer = loader.composer
        try:
            tree = loader.load(chunk)
            data = to_plain(tree)
        except _Refused as refused:
            yield SyntaxProblem(offset + refused.line + 1, refused.message)
            if budget.nodes < 0:
                return  # the file's budget is spent: every later document would be refused too
            continue
        except YAMLError as error:
            declared = _declares(composer.root, known_keys)
            yield SyntaxProblem(_syntax_line(error, chunk, offset, fallback), _syntax_message(error, declared=declared))
            continue
        except _CycleError:
            yield SyntaxProblem(fallback, "invalid YAML: an alias refers to a node that contains it")
            continue
        except RecursionError:  # not expected past the depth bound; never a traceback all the same
            yield SyntaxProblem(fallback, too_deep_message())
            continue
        except ValueError as error:  # e.g. a timestamp-shaped scalar that is not a real date
            yield SyntaxProblem(fallback, f"invalid YAML: {_scrub(str(error))}")
            continue
        except Exception as error:  # ruamel fails oddly on some input (`!!set ` on a scalar): still a problem
            yield SyntaxProblem(fallback, f"invalid YAML: cannot construct this document ({type(error).__name__})")
            continue
        if tree is None:
            continue  # empty document
        line = offset + int(tree.lc.line) + 1 if isinstance(tree, CommentedMap | CommentedSeq) else fallback
        yield YamlDocument(tree=tree, data=data, offset=offset, line=line)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _plain_str(text: str) -> str:
    """text as a plain str, a surrogate pair escaped in two halves ("\\ud83d\\ude00", as JSON writers do)
    joined into the one character it encodes; a lone surrogate stays (validation refuses it)."""
    text = str(text)
    if text.isascii() or _SURROGATE.search(text) is None:  # isascii first: it is ~10 times faster on long text
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def _plain_key(key: Any) -> str:
    """A mapping key as the string a JSON object would carry (like Kubernetes' YAML-to-JSON step)."""
    if isinstance(key, bool):
        return "true" if key else "false"
    if key is None:
        return "null"
    return _plain_str(str(key))


def to_plain(node: Any, _active: frozenset[int] = frozenset()) -> Any:
    """Convert a ruamel round-trip tree to plain dict/list/str/int/float/bool/None (other scalars kept)."""
    if isinstance(node, Mapping | list):
        if id(node) in _active:
            raise _CycleError("recursive alias")
        active = _active | {id(node)}
        if isinstance(node, Mapping):
            return {_plain_key(k): to_plain(v, active) for k, v in node.items()}
        return [to_plain(v, active) for v in node]
    if isinstance(node, bool | ScalarBoolean):
        return bool(node)
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return _plain_str(node)
    if isinstance(node, TaggedScalar):  # a custom tag (`!foo bar`): ignored, like kubectl does
        return to_plain(node.value, _active)
    return node


def _find_key(node: CommentedMap, spellings: Sequence[str]) -> tuple[bool, Any]:
    """The key of node written as one of spellings (a str, or a non-str key that prints as one)."""
    for spelling in spellings:
        if spelling in node:
            return True, spelling
    for key in node:
        if _plain_key(key) in spellings:  # a non-str key, or one with an escaped surrogate pair
            return True, key
    return False, None


def _position(getter: Any, arg: Any) -> int | None:
    """A 0-based line from a ruamel `.lc` accessor, or None when ruamel did not record one."""
    try:
        return int(getter(arg)[0])
    except (KeyError, IndexError, TypeError, AttributeError):
        return None


def locate(
    document: YamlDocument, steps: Sequence[Sequence[str] | int], *, want_key: bool = False
) -> tuple[list[str | int | None], int]:
    """Follow steps (accepted key spellings, or list indices) into the tree as far as they exist.

    Returns, per step, the key as written in the YAML (an int for an index; None from the first step
    that does not exist), and the 1-based absolute line of the deepest existing node: a mapping key's
    line when the key itself is wanted (want_key, last step) or its value is a collection or empty,
    else the value's line; a list item's line.
    """
    node: Any = document.tree
    line = document.line
    written: list[str | int | None] = []
    found = True
    for index, step in enumerate(steps):
        last = index == len(steps) - 1
        position: int | None = None
        if found and isinstance(step, int) and isinstance(node, CommentedSeq) and 0 <= step < len(node):
            position = _position(node.lc.item, step)
            node = node[step]
            written.append(step)
        elif found and not isinstance(step, int) and isinstance(node, CommentedMap):
            found, key = _find_key(node, step)
            if not found:
                written.append(None)
                continue
            child = node[key]
            use_key = (last and want_key) or child is None or isinstance(child, CommentedMap | CommentedSeq)
            position = _position(node.lc.key if use_key else node.lc.value, key)
            node = child
            written.append(_plain_key(key))
        else:
            found = False
            written.append(None)
            continue
        if position is not None:
            line = document.offset + position + 1
    return written, line
