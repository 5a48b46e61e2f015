"""Plain data from YAML as both of kbctl.inputs.yaml_lines' readers build it: `to_plain` of a ruamel tree (dicts,
lists, str, int, float, bool, None), the strings and keys it keeps, and the line breaks YAML counts."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ruamel.yaml.comments import TaggedScalar
from ruamel.yaml.scalarbool import ScalarBoolean

# A line break as ruamel counts them (so our line offsets agree with its marks).
_LINE_BREAK = re.compile(r"\r\n|[\n\r\x85\u2028\u2029]")


class _CycleError(ValueError):
    """A YAML alias refers to a node that contains it."""


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
