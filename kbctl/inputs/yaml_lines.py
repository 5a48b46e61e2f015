"""Split a YAML stream into documents, load them with line numbers, and map field paths back to lines."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.constructor import DuplicateKeyError
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, ScalarNode
from ruamel.yaml.reader import ReaderError

from kbctl.inputs.bounds import too_deep_message
from kbctl.inputs.yaml_budget import MAX_DOCUMENTS, MAX_NODES, _BoundedComposer, _Budget, _loader, _Refused
from kbctl.inputs.yaml_fast import _LIBYAML, _fast_load
from kbctl.inputs.yaml_plain import _LINE_BREAK, _CycleError, _plain_key, to_plain

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
