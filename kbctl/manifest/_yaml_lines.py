"""Split a YAML stream into documents, load them with line numbers, and map field paths back to lines."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq, TaggedScalar
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.scalarbool import ScalarBoolean

__all__ = ["Document", "SyntaxProblem", "load_documents", "locate", "split_documents", "to_plain"]

# A line break as ruamel counts them (so our line offsets agree with its marks).
_LINE_BREAK = re.compile(r"\r\n|[\n\r\x85\u2028\u2029]")
_DOC_START = re.compile(r"---(?:[ \t\r\n\x85\u2028\u2029]|$)")
_DOC_END = re.compile(r"\.\.\.(?:[ \t\r\n\x85\u2028\u2029]|$)")


@dataclass(frozen=True)
class Document:
    """One non-empty YAML document: its round-trip tree and where it sits in the stream."""

    tree: Any  # as ruamel loaded it: CommentedMap, CommentedSeq or a scalar; carries the line numbers
    data: Any  # the same as plain dict/list/str/int/float/bool/None (see to_plain)
    offset: int  # 0-based line of the stream where this document's text begins; add to ruamel's lines
    line: int  # 1-based line where the document's content starts


@dataclass(frozen=True)
class SyntaxProblem:
    """A document that is not valid YAML."""

    line: int  # 1-based, absolute in the stream
    message: str


class _CycleError(ValueError):
    """A YAML alias refers to a node that contains it."""


def _lines(text: str) -> list[str]:
    """Split text into lines, each keeping its line break, exactly where ruamel counts a new line."""
    lines: list[str] = []
    start = 0
    for match in _LINE_BREAK.finditer(text):
        lines.append(text[start : match.end()])
        start = match.end()
    if start < len(text):
        lines.append(text[start:])
    return lines


def _is_prologue(line: str) -> bool:
    """True for lines that may precede a document's `---`: blank lines, comments and directives."""
    stripped = line.strip()
    return not stripped or stripped.startswith("#") or line.startswith("%")


def split_documents(text: str) -> list[tuple[int, str]]:
    """Cut a YAML stream at its document markers into (0-based start line, document text) pairs.

    A `---` or `...` at the start of a line always marks a document boundary in YAML, even inside a
    block scalar, so cutting on lines is exact; cutting lets one broken document not hide the others.
    """
    text = text.removeprefix("\ufeff")
    chunks: list[tuple[int, str]] = []
    current: list[str] = []
    start = 0
    for index, line in enumerate(_lines(text)):
        if _DOC_START.match(line) and not all(_is_prologue(x) for x in current):
            chunks.append((start, "".join(current)))
            current, start = [], index
        current.append(line)
        if _DOC_END.match(line):
            chunks.append((start, "".join(current)))
            current, start = [], index + 1
    if current:
        chunks.append((start, "".join(current)))
    return chunks


def _content_line(chunk: str, offset: int) -> int:
    """The 1-based line of the first content in a document's text (past comments, directives, `---`)."""
    for index, line in enumerate(_lines(chunk)):
        if _is_prologue(line):
            continue
        if _DOC_START.match(line) and not line[3:].strip():
            continue
        return offset + index + 1
    return offset + 1


def _syntax_message(error: YAMLError) -> str:
    """A one-line description of a YAML syntax error."""
    if isinstance(error, MarkedYAMLError):
        text = error.problem or error.context or "syntax error"
    else:
        text = str(error).strip().splitlines()[0] if str(error).strip() else "syntax error"
    return f"invalid YAML: {text}"


def _syntax_line(error: YAMLError, offset: int, fallback: int) -> int:
    """The 1-based absolute line a YAML error points at, or fallback when it points nowhere."""
    if isinstance(error, MarkedYAMLError):
        mark = error.problem_mark or error.context_mark
        if mark is not None:
            return offset + int(mark.line) + 1
    return fallback


def load_documents(text: str) -> Iterator[Document | SyntaxProblem]:
    """Load each non-empty document of a YAML stream with the round-trip loader, in stream order."""
    for offset, chunk in split_documents(text):
        fallback = _content_line(chunk, offset)
        try:
            tree = YAML(typ="rt").load(chunk)
            data = to_plain(tree)
        except YAMLError as error:
            yield SyntaxProblem(_syntax_line(error, offset, fallback), _syntax_message(error))
            continue
        except _CycleError:
            yield SyntaxProblem(fallback, "invalid YAML: an alias refers to a node that contains it")
            continue
        except ValueError as error:  # e.g. a timestamp-shaped scalar that is not a real date
            yield SyntaxProblem(fallback, f"invalid YAML: {error}")
            continue
        if tree is None:
            continue  # empty document
        line = offset + int(tree.lc.line) + 1 if isinstance(tree, CommentedMap | CommentedSeq) else fallback
        yield Document(tree=tree, data=data, offset=offset, line=line)


def _plain_key(key: Any) -> str:
    """A mapping key as the string a JSON object would carry (like Kubernetes' YAML-to-JSON step)."""
    if isinstance(key, bool):
        return "true" if key else "false"
    if key is None:
        return "null"
    return str(key)


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
        return str(node)
    if isinstance(node, TaggedScalar):  # a custom tag (`!foo bar`): ignored, like kubectl does
        return to_plain(node.value, _active)
    return node


def _find_key(node: CommentedMap, spellings: Sequence[str]) -> tuple[bool, Any]:
    """The key of node written as one of spellings (a str, or a non-str key that prints as one)."""
    for spelling in spellings:
        if spelling in node:
            return True, spelling
    for key in node:
        if not isinstance(key, str) and _plain_key(key) in spellings:
            return True, key
    return False, None


def _position(getter: Any, arg: Any) -> int | None:
    """A 0-based line from a ruamel `.lc` accessor, or None when ruamel did not record one."""
    try:
        return int(getter(arg)[0])
    except (KeyError, IndexError, TypeError, AttributeError):
        return None


def locate(
    document: Document, steps: Sequence[Sequence[str] | int], *, want_key: bool = False
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
