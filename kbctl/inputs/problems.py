"""Translate pydantic validation errors into ManifestProblems naming the field as written and its line."""

from __future__ import annotations

import difflib
import json
import types
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from kbctl.errors import ManifestProblem
from kbctl.inputs.yaml_lines import YamlDocument, locate

__all__ = ["problems_from"]


def _unwrap(annotation: Any) -> Any:
    """Strip Annotated[...] and Optional from a type annotation."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            args = [a for a in get_args(annotation) if a is not type(None)]
            if len(args) != 1:
                return annotation
            annotation = args[0]
        else:
            return annotation


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


@dataclass
class _ErrorPath:
    """A pydantic error location resolved against the models."""

    steps: list[tuple[str, ...] | int]  # key spellings to look up in the YAML (alias first), or indices
    parts: list[tuple[str, str | int]]  # ("field"|"key"|"index", default rendering)
    container: Any  # the type holding the last step (a model class for unknown fields)
    leaf: Any  # the type of the last step, None when unknown
    is_key: bool  # the error is about a mapping key itself, not its value


def _resolve(root: type[BaseModel], loc: tuple[int | str, ...]) -> _ErrorPath:
    """Walk loc through the models from root, learning aliases, dict keys and leaf types."""
    path = _ErrorPath(steps=[], parts=[], container=None, leaf=root, is_key=False)
    for element in loc:
        if element == "[key]":
            path.is_key = True
            continue
        current = _unwrap(path.leaf)
        path.container = current
        if _is_model(current) and isinstance(element, str):
            fields = current.model_fields
            name = next((n for n, f in fields.items() if element in (n, f.alias)), None)
            if name is None:
                path.steps.append((element,))
                path.parts.append(("field", element))
                path.leaf = None
            else:
                alias = fields[name].alias or name
                path.steps.append((alias, name) if alias != name else (name,))
                path.parts.append(("field", alias))
                path.leaf = fields[name].annotation
        elif get_origin(current) is dict:
            path.steps.append((str(element),))
            path.parts.append(("key", str(element)))
            path.leaf = get_args(current)[1]
        elif isinstance(element, int):
            path.steps.append(element)
            path.parts.append(("index", element))
            path.leaf = get_args(current)[0] if get_origin(current) is list else None
        else:
            path.steps.append((element,))
            path.parts.append(("field", element))
            path.leaf = None
    path.leaf = _unwrap(path.leaf)
    return path


def _render(parts: Sequence[tuple[str, str | int]]) -> str:
    """Render a field path like spec.sources[1].url or metadata.labels["app"]."""
    text = ""
    for kind, value in parts:
        if kind == "index":
            text += f"[{value}]"
        elif kind == "key" or not str(value).isprintable():
            # A key with control or invisible characters (or half a surrogate pair) is escaped, never printed raw.
            text += f"[{json.dumps(value, ensure_ascii=not str(value).isprintable())}]"
        else:
            text += f".{value}" if text else str(value)
    return text


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


_SIMPLE_MESSAGES: Final = {
    "missing": "required field is missing",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "finite_number": "must be a finite number",
    "string_type": "must be a string",
    "bool_type": "must be a boolean",
    "bool_parsing": "must be a boolean",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "dict_type": "must be a mapping",
    "list_type": "must be a list",
}


def _message(error: ErrorDetails, path: _ErrorPath) -> str:
    """A short human message for one pydantic error."""
    kind = error["type"]
    ctx: dict[str, Any] = dict(error.get("ctx") or {})
    if kind in _SIMPLE_MESSAGES:
        return _SIMPLE_MESSAGES[kind]
    if kind == "extra_forbidden":
        key = str(error["loc"][-1])
        fields = path.container.model_fields if _is_model(path.container) else {}
        allowed = [f.alias or n for n, f in fields.items()]
        close = difflib.get_close_matches(key, allowed, n=1)
        return f"unknown field {key!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
    if kind == "literal_error":
        choices = get_args(path.leaf) if get_origin(path.leaf) is Literal else ()
        return "must be one of: " + (", ".join(map(str, choices)) if choices else str(ctx.get("expected")))
    bounds = {"greater_than_equal": ("at least", "ge"), "greater_than": ("greater than", "gt")}
    bounds |= {"less_than_equal": ("at most", "le"), "less_than": ("less than", "lt")}
    if kind in bounds:
        words, key = bounds[kind]
        return f"must be {words} {ctx[key]}"
    if kind in ("too_short", "too_long"):
        words, key = ("at least", "min_length") if kind == "too_short" else ("at most", "max_length")
        return f"must have {words} {_plural(ctx[key], 'item')}"
    if kind in ("string_too_short", "string_too_long"):
        words, key = ("at least", "min_length") if kind == "string_too_short" else ("at most", "max_length")
        return f"must be {words} {_plural(ctx[key], 'character')}"
    if kind in ("value_error", "assertion_error") and "error" in ctx:
        return str(ctx["error"])
    return error["msg"]


def _problem(root: type[BaseModel], error: ErrorDetails, document: YamlDocument, file: str) -> ManifestProblem:
    """Turn one pydantic error into a problem with the field as written and its line in the file."""
    path = _resolve(root, error["loc"])
    want_key = path.is_key or error["type"] == "extra_forbidden"
    written, line = locate(document, path.steps, want_key=want_key)
    parts = [(kind, value if seen is None else seen) for (kind, value), seen in zip(path.parts, written, strict=True)]
    return ManifestProblem(file, line, _render(parts), _message(error, path))


def problems_from(
    invalid: ValidationError, root: type[BaseModel], document: YamlDocument, file: str
) -> list[ManifestProblem]:
    """The problems of a failed root.model_validate(document.data), in line order."""
    problems = [_problem(root, error, document, file) for error in invalid.errors(include_url=False)]
    return sorted(problems, key=lambda p: p.line or 0)
