"""What changed between two manifests, as field paths: shared by apply's change causes and `kbctl diff`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["FieldChange", "access_changes", "field_changes", "source_changes"]


@dataclass(frozen=True)
class FieldChange:
    """One field whose value differs (`old` is None for an added field, `new` for a removed one)."""

    path: str
    old: Any
    new: Any

    def __str__(self) -> str:
        return f"{self.path}: {self.old!r} → {self.new!r}"


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict) and value:
        for key, item in value.items():
            _flatten(item, f"{prefix}.{key}" if prefix else str(key), out)
    else:
        out[prefix] = value


def field_changes(old: dict[str, Any] | None, new: dict[str, Any]) -> list[FieldChange]:
    """Fields of two manifests (sources excluded: see `source_changes`) whose values differ, sorted by path."""
    before: dict[str, Any] = {}
    after: dict[str, Any] = {}
    for manifest, out in ((old or {}, before), (new, after)):
        trimmed = {**manifest, "spec": {k: v for k, v in manifest.get("spec", {}).items() if k != "sources"}}
        _flatten(trimmed, "", out)
    return [
        FieldChange(path, before.get(path), after.get(path))
        for path in sorted(before.keys() | after.keys())
        if before.get(path) != after.get(path)
    ]


def source_changes(old: dict[str, Any] | None, new: dict[str, Any]) -> tuple[list[str], list[str], list[str]]:
    """(added, removed, changed) source names between two manifests, each in manifest order."""
    before = {s["name"]: s for s in (old or {}).get("spec", {}).get("sources", [])}
    after = {s["name"]: s for s in new.get("spec", {}).get("sources", [])}
    added = [n for n in after if n not in before]
    removed = [n for n in before if n not in after]
    changed = [n for n in after if n in before and before[n] != after[n]]
    return added, removed, changed


def access_changes(old: dict[str, Any] | None, new: dict[str, Any]) -> list[FieldChange]:
    """The sources present in both manifests whose `access` differs, as `spec.sources[NAME].access` (who may read
    them: a change that publishes a new version of the same chunks), in manifest order."""
    before = {s["name"]: s.get("access") for s in (old or {}).get("spec", {}).get("sources", [])}
    return [
        FieldChange(f"spec.sources[{s['name']}].access", before[s["name"]], s.get("access"))
        for s in new.get("spec", {}).get("sources", [])
        if s["name"] in before and before[s["name"]] != s.get("access")
    ]
