"""The JSON Schema of the Sync kind: committed in schemas/, generated from kbctl.manifest.sync, and describing the
Sync manifests the documentation shows."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from kbctl.manifest import API_VERSION
from kbctl.manifest.load import _main
from kbctl.manifest.sync import SYNC_KIND, Sync, SyncSpec, sync_json_schema, write_sync_schema

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_FILE = ROOT / "schemas" / "sync.schema.json"
FENCED_YAML = re.compile(r"^```ya?ml\n(.*?)^```", re.MULTILINE | re.DOTALL)


def documented_syncs() -> list[tuple[str, dict[str, Any]]]:
    """Every Sync manifest of a ```yaml block of README.md and docs/, with the file it is in."""
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in FENCED_YAML.findall(page.read_text(encoding="utf-8")):
            for document in yaml.safe_load_all(block):
                if isinstance(document, dict) and document.get("kind") == SYNC_KIND:
                    found.append((page.relative_to(ROOT).as_posix(), document))
    return found


def test_committed_sync_schema_is_up_to_date() -> None:
    """schemas/sync.schema.json matches the Sync model."""
    committed = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    assert committed == sync_json_schema(), (
        "schemas/sync.schema.json is stale; regenerate it with:\n"
        "    python -m kbctl.manifest --kind Sync --write-schema schemas/sync.schema.json"
    )


def test_sync_schema_is_deterministic_and_describes_the_manifest() -> None:
    """sync_json_schema() is stable, carries $schema and title like the KnowledgeBase schema, and requires the
    four top-level fields."""
    schema = sync_json_schema()
    assert schema == sync_json_schema()
    assert list(schema)[:2] == ["$schema", "title"]
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"] == f"Sync ({API_VERSION})"
    assert schema["required"] == ["apiVersion", "kind", "metadata", "spec"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["apiVersion"]["const"] == API_VERSION
    assert schema["properties"]["kind"]["const"] == SYNC_KIND


def test_sync_schema_has_the_fields_of_the_model() -> None:
    """Each field of the Sync spec is a property (by its YAML name), required exactly when the model requires it,
    with the model's default; nothing else is allowed."""
    spec = sync_json_schema()["$defs"]["SyncSpec"]
    fields = {info.alias or name: info for name, info in SyncSpec.model_fields.items()}
    assert set(spec["properties"]) == set(fields) == {"url", "ref", "path", "interval", "prune", "suspend"}
    assert set(spec["required"]) == {key for key, info in fields.items() if info.is_required()} == {"url"}
    for key, info in fields.items():
        if not info.is_required():
            assert spec["properties"][key]["default"] == info.default, key
    assert spec["additionalProperties"] is False
    assert set(sync_json_schema()["properties"]) == {info.alias or n for n, info in Sync.model_fields.items()}


def test_write_sync_schema_and_the_module_command_write_the_same_file(tmp_path: Path) -> None:
    """write_sync_schema and `python -m kbctl.manifest --kind Sync --write-schema PATH` write the committed form:
    indented JSON ending in a newline; without --kind the command still writes the KnowledgeBase schema."""
    by_function, by_command, default = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    write_sync_schema(by_function)
    assert _main(["--kind", "Sync", "--write-schema", str(by_command)]) == 0
    assert _main(["--write-schema", str(default)]) == 0
    text = by_function.read_text(encoding="utf-8")
    assert text == by_command.read_text(encoding="utf-8") == SCHEMA_FILE.read_text(encoding="utf-8")
    assert text.startswith('{\n  "$schema"') and text.endswith("}\n")
    assert json.loads(default.read_text(encoding="utf-8"))["title"].startswith("KnowledgeBase ")


def test_the_module_command_prints_the_sync_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(["--kind", "Sync"]) == 0
    assert json.loads(capsys.readouterr().out) == sync_json_schema()


def test_documented_sync_manifests_are_valid() -> None:
    """The Sync manifests of the documentation load as Syncs and, when jsonschema is at hand, match the schema."""
    syncs = documented_syncs()
    assert syncs, "no ```yaml block of README.md or docs/ holds a Sync"
    for _page, document in syncs:
        Sync.model_validate(document)  # raises when the documentation shows a Sync that would not load
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(sync_json_schema())
    validator.check_schema(sync_json_schema())
    for page, document in syncs:
        assert not list(validator.iter_errors(document)), page


def test_sync_schema_refuses_what_the_model_refuses() -> None:
    """An unknown field, a missing url or another kind fails the schema as it fails the model."""
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(sync_json_schema())
    good = {"apiVersion": API_VERSION, "kind": "Sync", "metadata": {"name": "s"}, "spec": {"url": "https://h/r.git"}}
    assert validator.is_valid(good)
    Sync.model_validate(good)
    bad = [
        {**good, "kind": "KnowledgeBase"},
        {**good, "spec": {"url": "https://h/r.git", "intervall": "1m"}},
        {**good, "spec": {"ref": "main"}},
        {**good, "spec": {"url": "https://h/r.git", "prune": "yes"}},
        {**good, "metadata": {"name": "Not_A_Label"}},
        {**good, "status": {}},
    ]
    for document in bad:
        assert not validator.is_valid(document), document
        with pytest.raises(ValueError):
            Sync.model_validate(document)
