"""kubectl's `-o` for objects: json, yaml, wide, name, jsonpath=TEMPLATE and custom-columns=SPEC.

jsonpath templates are kubectl's: text with `{...}` expressions, each a JSONPath from the object (`{.metadata.name}`),
`{range .items[*]}...{end}` to loop, `{"\\n"}` for literals; several matches print space-separated. The paths
themselves are evaluated by jsonpath-ng (filters such as `[?(@.type=="Ready")]` included).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import typer

from kbctl.cli.terminal import inert
from kbctl.errors import UsageError

__all__ = ["OBJECT_FORMATS", "ObjectOutput", "custom_columns", "jsonpath_template", "parse_object_output"]

OBJECT_FORMATS: Final = ("json", "yaml", "wide", "name", "jsonpath=TEMPLATE", "custom-columns=SPEC")
_TOKEN = re.compile(r"\{((?:[^{}\"']|\"[^\"]*\"|'[^']*')*)\}")


@dataclass(frozen=True)
class ObjectOutput:
    """A parsed `-o`: its kind and, for jsonpath and custom-columns, what follows the `=`."""

    kind: str  # json | yaml | wide | name | jsonpath | custom-columns
    argument: str = ""

    @property
    def structured(self) -> bool:
        """Whether the objects themselves are printed (every format but wide and name)."""
        return self.kind not in ("wide", "name")


def _usage(message: str) -> typer.BadParameter:
    return typer.BadParameter(message, param_hint="'-o' / '--output'")


def parse_object_output(value: str | None) -> ObjectOutput | None:
    """The `-o` of get, describe and rollout history (a typer callback's check, so a bad one is exit code 2)."""
    if value is None:
        return None
    kind, _, argument = value.partition("=")
    if kind in ("json", "yaml", "wide", "name") and not argument:
        return ObjectOutput(kind)
    if kind in ("jsonpath", "custom-columns") and argument:
        output = ObjectOutput(kind, argument)
        try:  # compile now: a bad template is a usage error before the store is touched
            (_compile_template if kind == "jsonpath" else _columns)(argument)
        except ValueError as exc:
            raise _usage(f"{value!r}: {exc}") from None
        return output
    raise _usage(f"unknown output format {value!r}; use one of: {', '.join(OBJECT_FORMATS)}")


def check_object_output(value: str | None) -> str | None:
    """typer callback: refuse a bad `-o` (exit 2); the command parses it again with parse_object_output."""
    parse_object_output(value)
    return value


def _path(expression: str) -> Callable[[Any], list[Any]]:
    """A kubectl-style path (`.status.version`, `items[*].metadata.name`) as a function of the object."""
    from jsonpath_ng.exceptions import JsonPathParserError
    from jsonpath_ng.ext.parser import parse

    text = expression.strip()
    text = "$" + text if text.startswith((".", "[")) else ("$." + text if text and text != "$" else "$")
    try:
        compiled = parse(text)
    except (JsonPathParserError, Exception) as exc:  # the lexer raises plain Exception for a bad character
        raise UsageError(f"invalid JSONPath {expression!r}: {exc}") from None
    return lambda data: [match.value for match in compiled.find(data)]


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False) if not isinstance(value, bool) else str(value).lower()


# A compiled template: literals, ("path", fn), and ("range", fn, body) where body is a compiled template.
_Part = str | tuple[str, Any] | tuple[str, Any, list[Any]]


def _compile_template(template: str) -> list[_Part]:
    parts: list[Any] = []
    stack: list[list[Any]] = [parts]
    position = 0
    for found in _TOKEN.finditer(template):
        if found.start() > position:
            stack[-1].append(template[position : found.start()])
        position = found.end()
        inner = found.group(1).strip()
        if inner.startswith(("'", '"')) and inner.endswith(inner[0]) and len(inner) >= 2:
            stack[-1].append(inner[1:-1].encode().decode("unicode_escape"))
        elif inner.startswith("range "):
            body: list[Any] = []
            stack[-1].append(("range", _path(inner[len("range ") :]), body))
            stack.append(body)
        elif inner == "end":
            if len(stack) == 1:
                raise UsageError("{end} without {range}")
            stack.pop()
        else:
            stack[-1].append(("path", _path(inner)))
    if position < len(template):
        stack[-1].append(template[position:])
    if len(stack) != 1:
        raise UsageError("{range} without {end}")
    if "{" in "".join(p for p in parts if isinstance(p, str)):
        raise UsageError("unbalanced braces")
    return parts


def _render(parts: Sequence[_Part], data: Any) -> str:
    out = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
        elif part[0] == "path":
            out.append(" ".join(inert(_text(v)) for v in part[1](data)))  # a value is data: one line, inert
        else:
            out.extend(_render(part[2], item) for item in part[1](data))  # type: ignore[misc]
    return "".join(out)


def jsonpath_template(template: str, data: Any) -> str:
    """kubectl's `-o jsonpath=TEMPLATE` over `data` (an object, or a List with items): the template's own text as
    written, each value found with its control characters escaped (`inert`: -o json gives them exactly)."""
    return _render(_compile_template(template), data)


def _columns(spec: str) -> list[tuple[str, Callable[[Any], list[Any]]]]:
    columns = []
    for column in spec.split(","):
        header, sep, expression = column.partition(":")
        if not sep or not header.strip() or not expression.strip():
            raise UsageError(f"column {column!r} is not HEADER:PATH (e.g. NAME:.metadata.name)")
        columns.append((header.strip(), _path(expression)))
    return columns


def custom_columns(spec: str, objects: Sequence[Any]) -> list[list[str]]:
    """kubectl's `-o custom-columns=NAME:.metadata.name,...`: a header row, then one row per object (several
    matches joined by commas, none shown as <none>)."""
    columns = _columns(spec)
    rows = [[header for header, _ in columns]]
    for obj in objects:
        rows.append([",".join(_text(v) for v in path(obj)) or "<none>" for _, path in columns])
    return rows
