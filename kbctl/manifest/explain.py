"""`kbctl explain knowledgebase.spec.retrieval` (or `sync.spec.url`): the documentation of a manifest field, read
from the JSON Schema the models generate (so it cannot drift from what apply accepts), like `kubectl explain`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kbctl.errors import UsageError
from kbctl.manifest.models import json_schema

__all__ = ["FieldDoc", "explain"]

_ROOTS = ("knowledgebase", "knowledgebases", "kb", "kbs")
_SYNC_ROOTS = ("sync", "syncs")


@dataclass(frozen=True)
class FieldDoc:
    """One field: its dotted path, type, whether it is required, default, bounds, description, and its fields."""

    path: str
    type: str
    description: str
    kind: str = "KnowledgeBase"  # the kind whose field it is: KnowledgeBase or Sync
    required: bool = False
    default: Any = None
    has_default: bool = False
    rules: str = ""  # bounds, choices or pattern, as text
    fields: tuple[FieldDoc, ...] = ()


def _deref(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """`node` with a `$ref` and a nullable `anyOf` (an optional field) resolved to the object it stands for."""
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        if len(options) == 1:
            node = {**{k: v for k, v in node.items() if k != "anyOf"}, **options[0]}
    if "$ref" in node:
        target = schema["$defs"][node["$ref"].rsplit("/", 1)[-1]]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _type(schema: dict[str, Any], node: dict[str, Any]) -> str:
    node = _deref(schema, node)
    if node.get("type") == "array":
        return f"[]{_type(schema, node.get('items', {}))}"
    if node.get("type") == "object" and "properties" in node:
        return "Object"
    if "anyOf" in node:
        return " | ".join(_type(schema, o) for o in node["anyOf"])
    if node.get("type") == "object":
        return "map[string]string" if node.get("additionalProperties") else "object"
    return str(node.get("type", "any"))


def _rules(node: dict[str, Any]) -> str:
    parts = []
    if "enum" in node:
        parts.append("one of " + ", ".join(str(v) for v in node["enum"]))
    if "const" in node:
        parts.append(f"must be {node['const']}")
    low, high = node.get("minimum"), node.get("maximum")
    if low is not None or high is not None:
        parts.append(f"{'' if low is None else low}..{'' if high is None else high}")
    if "maxLength" in node:
        parts.append(f"at most {node['maxLength']} characters")
    if "minItems" in node:
        parts.append(f"at least {node['minItems']} item{'s' if node['minItems'] != 1 else ''}")
    return "; ".join(parts)


def _doc(schema: dict[str, Any], path: str, node: dict[str, Any], required: bool, depth: int, kind: str) -> FieldDoc:
    node = _deref(schema, node)
    shape = _deref(schema, node["items"]) if node.get("type") == "array" and "items" in node else node
    fields: tuple[FieldDoc, ...] = ()
    if depth > 0 and "properties" in shape:
        needed = set(shape.get("required", ()))
        fields = tuple(
            _doc(schema, f"{path}.{name}", child, name in needed, depth - 1, kind)
            for name, child in shape["properties"].items()
        )
    return FieldDoc(
        path=path,
        type=_type(schema, node),
        description=str(node.get("description", "")),
        required=required,
        default=node.get("default"),
        has_default="default" in node,
        rules=_rules(node),
        fields=fields,
        kind=kind,
    )


def explain(path: str, *, recursive: bool = False) -> FieldDoc:
    """The documentation of `path` (`knowledgebase`, `kb.spec.sources`, `knowledgebase.spec.retrieval.topK`, `sync`,
    `sync.spec.interval`), with its direct fields (every level below with `recursive`). UsageError names an unknown
    field and the fields that exist there."""
    from kbctl.manifest.sync import sync_json_schema

    root, *steps = path.strip().split(".")
    if root.lower() in _SYNC_ROOTS:
        schema, shown, kind = sync_json_schema(), "sync", "Sync"
    elif root.lower() in _ROOTS:
        schema, shown, kind = json_schema(), "knowledgebase", "KnowledgeBase"
    else:
        raise UsageError(f"unknown resource type {root!r}; kbctl knows: knowledgebase (kb), sync")
    node: dict[str, Any] = schema
    required = True
    for step in steps:
        node = _deref(schema, node)
        if node.get("type") == "array" and "items" in node:
            node = _deref(schema, node["items"])
        properties = node.get("properties", {})
        if step not in properties:
            known = ", ".join(properties) or "none (it has no fields)"
            raise UsageError(f"field {step!r} does not exist in {shown}; its fields: {known}")
        required = step in node.get("required", ())
        node, shown = properties[step], f"{shown}.{step}"
    return _doc(schema, shown, node, required, 10 if recursive else 1, kind)
