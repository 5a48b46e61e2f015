"""Parse and match kubectl's equality-based label selectors (`k=v`, `k==v`, `k!=v`, `k`, `!k`, comma-separated)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from kbctl.manifest._field_checks import check_label_key, check_label_value

__all__ = ["Requirement", "Selector", "parse_selector"]

Operator = Literal["=", "!=", "exists", "!exists"]

# One requirement: `!key`, `key`, or `key OP value` with OP one of ==, =, != (value may be empty).
_REQUIREMENT = re.compile(
    r"^(?:(?P<not>!)\s*(?P<absent>[^=!\s]+)|(?P<key>[^=!\s]+)\s*(?:(?P<op>==|=|!=)\s*(?P<value>\S*))?)$"
)
_SET_BASED = re.compile(r"^\S+\s+(?:in|notin)\s*\(", re.IGNORECASE)


@dataclass(frozen=True)
class Requirement:
    """One condition on a label: equals / not equals a value, exists, or does not exist."""

    key: str
    operator: Operator
    value: str = ""

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether `labels` meet this requirement (`k!=v` also matches objects without `k`, as in kubectl)."""
        if self.operator == "exists":
            return self.key in labels
        if self.operator == "!exists":
            return self.key not in labels
        if self.operator == "=":
            return labels.get(self.key) == self.value
        return labels.get(self.key) != self.value

    def __str__(self) -> str:
        if self.operator == "exists":
            return self.key
        if self.operator == "!exists":
            return f"!{self.key}"
        return f"{self.key}{self.operator}{self.value}"


@dataclass(frozen=True)
class Selector:
    """Requirements that must all hold (kubectl's comma means AND); never empty."""

    requirements: tuple[Requirement, ...]

    def __post_init__(self) -> None:
        if not self.requirements:
            raise ValueError("a selector needs at least one requirement (an empty one would select everything)")

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether `labels` meet every requirement."""
        return all(r.matches(labels) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


def _requirement(part: str) -> Requirement:
    if _SET_BASED.match(part):
        raise ValueError(f"{part!r}: set-based requirements (in, notin) are not supported; use k=v, k!=v, k or !k")
    found = _REQUIREMENT.fullmatch(part)
    if found is None:
        raise ValueError(f"{part!r} is not a requirement: use key=value, key==value, key!=value, key or !key")
    key = found["absent"] or found["key"]
    try:
        check_label_key(key)
        if found["op"] is not None:
            check_label_value(found["value"])
    except ValueError as exc:
        raise ValueError(f"{part!r}: {exc}") from None
    if found["not"]:
        return Requirement(key, "!exists")
    if found["op"] is None:
        return Requirement(key, "exists")
    return Requirement(key, "!=" if found["op"] == "!=" else "=", found["value"])


def parse_selector(text: str) -> Selector:
    """Parse a label selector like kubectl's `-l`; raise ValueError naming the bad requirement.

    An empty selector is refused (kubectl reads it as "everything"; kbctl never selects everything).
    """
    parts = [part.strip() for part in text.split(",")]
    if not text.strip():
        raise ValueError("the label selector is empty: give at least one requirement, e.g. team=web")
    if "" in parts:
        raise ValueError(f"{text!r} has an empty requirement (a stray comma?)")
    return Selector(tuple(_requirement(part) for part in parts))
