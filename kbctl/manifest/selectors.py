"""Parse and match kubectl's label selectors: `k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a,b)`,
comma-separated (AND)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from kbctl.errors import UsageError
from kbctl.manifest._field_checks import check_label_key, check_label_value

__all__ = ["Requirement", "Selector", "parse_selector"]

Operator = Literal["=", "!=", "exists", "!exists", "in", "notin"]

# One requirement: `!key`, `key`, or `key OP value` with OP one of ==, =, != (value may be empty).
_REQUIREMENT = re.compile(
    r"^(?:(?P<not>!)\s*(?P<absent>[^=!\s]+)|(?P<key>[^=!\s]+)\s*(?:(?P<op>==|=|!=)\s*(?P<value>\S*))?)$"
)
_SET_BASED = re.compile(r"^(?P<key>[^=!\s(]+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")


@dataclass(frozen=True)
class Requirement:
    """One condition on a label: equals / not equals a value, exists, or does not exist."""

    key: str
    operator: Operator
    value: str = ""
    values: tuple[str, ...] = ()  # of `in` and `notin`

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether `labels` meet this requirement (`k!=v` also matches objects without `k`, as in kubectl)."""
        if self.operator == "exists":
            return self.key in labels
        if self.operator == "!exists":
            return self.key not in labels
        if self.operator == "=":
            return labels.get(self.key) == self.value
        if self.operator == "in":
            return labels.get(self.key) in self.values
        if self.operator == "notin":  # like != (and kubectl): an object without the key matches
            return labels.get(self.key) not in self.values
        return labels.get(self.key) != self.value

    def __str__(self) -> str:
        if self.operator == "exists":
            return self.key
        if self.operator == "!exists":
            return f"!{self.key}"
        if self.operator in ("in", "notin"):
            return f"{self.key} {self.operator} ({','.join(self.values)})"
        return f"{self.key}{self.operator}{self.value}"


@dataclass(frozen=True)
class Selector:
    """Requirements that must all hold (kubectl's comma means AND); never empty."""

    requirements: tuple[Requirement, ...]

    def __post_init__(self) -> None:
        if not self.requirements:
            raise UsageError("a selector needs at least one requirement (an empty one would select everything)")

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether `labels` meet every requirement."""
        return all(r.matches(labels) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


def _set_requirement(part: str) -> Requirement | None:
    """`key in (a,b)` / `key notin (a,b)`, or None when `part` is not set-based."""
    found = _SET_BASED.fullmatch(part)
    if found is None:
        return None
    values = tuple(v.strip() for v in found["values"].split(","))
    if not found["values"].strip():
        raise UsageError(f"{part!r}: {found['op']} needs at least one value, e.g. {found['key']} {found['op']} (a,b)")
    try:
        check_label_key(found["key"])
        for value in values:
            check_label_value(value)
    except ValueError as exc:
        raise UsageError(f"{part!r}: {exc}") from None
    operator: Operator = "in" if found["op"] == "in" else "notin"
    return Requirement(found["key"], operator, values=values)


def _split(text: str) -> list[str]:
    """The requirements of a selector: split at the commas outside parentheses."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    return [*parts, "".join(current).strip()]


def _requirement(part: str) -> Requirement:
    set_based = _set_requirement(part)
    if set_based is not None:
        return set_based
    found = _REQUIREMENT.fullmatch(part)
    if found is None:
        raise UsageError(
            f"{part!r} is not a requirement: use key=value, key==value, key!=value, key, !key, key in (a,b) "
            "or key notin (a,b)"
        )
    key = found["absent"] or found["key"]
    try:
        check_label_key(key)
        if found["op"] is not None:
            check_label_value(found["value"])
    except ValueError as exc:
        raise UsageError(f"{part!r}: {exc}") from None
    if found["not"]:
        return Requirement(key, "!exists")
    if found["op"] is None:
        return Requirement(key, "exists")
    return Requirement(key, "!=" if found["op"] == "!=" else "=", found["value"])


def parse_selector(text: str) -> Selector:
    """Parse a label selector like kubectl's `-l`; raise UsageError naming the bad requirement.

    An empty selector is refused (kubectl reads it as "everything"; kbctl never selects everything).
    """
    parts = _split(text)
    if not text.strip():
        raise UsageError("the label selector is empty: give at least one requirement, e.g. team=web")
    if "" in parts:
        raise UsageError(f"{text!r} has an empty requirement (a stray comma?)")
    return Selector(tuple(_requirement(part) for part in parts))
