"""`get -o yaml` of a knowledge base of `path:` sources, saved in another folder, applies again unchanged: the output
names where the files were read (`status.appliedFrom`), and apply reads them there only when the store vouches
for that folder and for the path sources read there. A manifest cannot name a folder of its own."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore

MANIFEST = """\
apiVersion: kbctl.dev/v1alpha1
kind: KnowledgeBase
metadata: {name: handbook}
spec:
  sources:
    - {name: docs, path: docs/}
"""


def _repo(root: Path, text: str) -> Path:
    """A folder holding the manifest and the docs/ it reads."""
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "leave.md").write_text(text)
    (root / "kb.yaml").write_text(MANIFEST)
    return root


def _applied(result_stdout: str) -> list[tuple[str, str, int]]:
    report = json.loads(result_stdout)
    return [(r["name"], r["action"], sum(s["embedded"] for s in r["sources"])) for r in report["results"]]


def _saved(cli: CliRunner, where: Path) -> dict[str, object]:
    printed = cli.invoke(app, ["get", "kb", "handbook", "-o", "yaml"])
    assert printed.exit_code == 0, printed.output
    where.mkdir(parents=True, exist_ok=True)
    (where / "saved.yaml").write_text(printed.stdout)
    loaded = yaml.safe_load(printed.stdout)
    assert isinstance(loaded, dict)
    return loaded


def _served(store: KnowledgeBaseStore) -> str:
    return " ".join(h.text for h in store.query("handbook", "annual leave days", threshold=0.0).hits)


def test_saved_output_applies_unchanged_from_another_folder(
    tmp_path: Path, store: KnowledgeBaseStore, cli: CliRunner
) -> None:
    repo = _repo(tmp_path / "repo", "# Leave\n\nEvery employee has 25 days of annual leave a year.\n")
    first = cli.invoke(app, ["apply", "-f", str(repo / "kb.yaml"), "--wait"])
    assert first.exit_code == 0, first.output
    saved = _saved(cli, tmp_path / "elsewhere")
    status = saved["status"]
    assert isinstance(status, dict) and status["appliedFrom"] == str(repo.resolve())
    diffed = cli.invoke(app, ["diff", "-f", str(tmp_path / "elsewhere" / "saved.yaml")])
    assert diffed.exit_code == 0, diffed.output
    assert "would fail" not in diffed.output
    again = cli.invoke(app, ["apply", "-f", str(tmp_path / "elsewhere" / "saved.yaml"), "--wait", "-o", "json"])
    assert again.exit_code == 0, again.output
    assert _applied(again.stdout) == [("handbook", "unchanged", 0)]
    assert store.describe("handbook").conditions[0].status == "True"
    # The files are read where they are: an edit there is what the saved output publishes next.
    (repo / "docs" / "leave.md").write_text("# Leave\n\nEvery employee has 30 days of annual leave a year.\n")
    edited = cli.invoke(app, ["apply", "-f", str(tmp_path / "elsewhere" / "saved.yaml"), "--wait", "-o", "json"])
    assert edited.exit_code == 0, edited.output
    assert _applied(edited.stdout) == [("handbook", "configured", 1)]
    assert "30 days" in _served(store)


def test_a_folder_the_store_did_not_record_is_not_read(
    tmp_path: Path, store: KnowledgeBaseStore, cli: CliRunner
) -> None:
    repo = _repo(tmp_path / "repo", "# Leave\n\nEvery employee has 25 days of annual leave a year.\n")
    assert cli.invoke(app, ["apply", "-f", str(repo / "kb.yaml"), "--wait"]).exit_code == 0
    secret = _repo(tmp_path / "secret", "# Salaries\n\nThe annual leave of directors is 40 days.\n")
    hostile = tmp_path / "pr"
    hostile.mkdir()
    forged = yaml.safe_load(MANIFEST) | {"status": {"appliedFrom": str(secret.resolve())}}
    (hostile / "kb.yaml").write_text(yaml.safe_dump(forged))
    applied = cli.invoke(app, ["apply", "-f", str(hostile / "kb.yaml"), "--wait"])
    assert applied.exit_code == 1  # docs/ is read beside the manifest, where there is none
    assert "no such file or folder" in applied.output
    assert "40 days" not in _served(store) and "25 days" in _served(store)


def test_an_edited_path_source_reads_beside_its_manifest(
    tmp_path: Path, store: KnowledgeBaseStore, cli: CliRunner
) -> None:
    """The recorded folder is honoured only for the path sources read there: one the manifest adds or edits could
    otherwise read any file of the repository the store recorded."""
    repo = _repo(tmp_path / "repo", "# Leave\n\nEvery employee has 25 days of annual leave a year.\n")
    (repo / "private").mkdir()
    (repo / "private" / "pay.md").write_text("# Pay\n\nThe annual leave of directors is 40 days.\n")
    assert cli.invoke(app, ["apply", "-f", str(repo / "kb.yaml"), "--wait"]).exit_code == 0
    saved = _saved(cli, tmp_path / "elsewhere")
    spec = saved["spec"]
    assert isinstance(spec, dict)
    spec["sources"][0]["path"] = "private/"
    (tmp_path / "elsewhere" / "edited.yaml").write_text(yaml.safe_dump(saved))
    applied = cli.invoke(app, ["apply", "-f", str(tmp_path / "elsewhere" / "edited.yaml"), "--wait"])
    assert applied.exit_code == 1
    assert "no such file or folder" in applied.output
    assert "40 days" not in _served(store)


def test_a_hint_that_is_not_an_absolute_folder_is_ignored(tmp_path: Path, store: KnowledgeBaseStore) -> None:
    from kbctl.manifest import load_manifest_set, read_manifest_files

    for hint in ["relative/docs", "/tmp/\x00x", 12, "/" + "a" * 5000]:
        data = yaml.safe_load(MANIFEST) | {"status": {"appliedFrom": hint}}
        (tmp_path / "kb.yaml").write_text(json.dumps(data))
        [loaded] = load_manifest_set(read_manifest_files([str(tmp_path / "kb.yaml")])).manifests
        assert loaded.kb.applied_from is None, hint
