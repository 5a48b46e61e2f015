"""GitOps folders mix kinds: other tools' objects are skipped with one note per file, a `List` is applied object by
object, and what `get -o yaml` prints applies again unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.errors import ManifestError
from kbctl.manifest import load_manifest_set, read_manifest_files
from tests.support.manifests import knowledge_base, text_source

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: kbctl-controller}
spec: {replicas: 1}
---
apiVersion: v1
kind: Service
metadata: {name: kbctl}
"""

LIST = """\
apiVersion: v1
kind: List
items:
  - apiVersion: kbctl.dev/v1alpha1
    kind: KnowledgeBase
    metadata: {name: first}
    spec: {sources: [{name: a, text: The first knowledge base holds this sentence.}]}
  - apiVersion: apps/v1
    kind: Deployment
    metadata: {name: beside}
  - apiVersion: kbctl.dev/v1alpha1
    kind: KnowledgeBase
    metadata: {name: second}
    spec: {sources: [{name: b, text: The second knowledge base holds another sentence.}]}
"""


@pytest.fixture
def gitops(tmp_path: Path) -> Path:
    """A folder as a GitOps repository holds it: manifests beside a kustomization.yaml and a Deployment."""
    folder = tmp_path / "deploy"
    folder.mkdir()
    (folder / "kb.yaml").write_text(knowledge_base("notes", text_source("hours", "Office hours are 9 to 5.")))
    (folder / "kustomization.yaml").write_text("resources:\n  - kb.yaml\n  - controller.yaml\n")
    (folder / "controller.yaml").write_text(DEPLOYMENT)
    return folder


def test_other_tools_objects_are_skipped_and_named_once_per_file(gitops: Path) -> None:
    loaded = load_manifest_set(read_manifest_files([str(gitops)]))
    assert [m.kb.name for m in loaded.manifests] == ["notes"]
    assert [s.message for s in loaded.skipped] == [
        f"{gitops / 'controller.yaml'}: skipped 2 objects that are not kbctl's (apps/v1 Deployment, v1 Service)",
        f"{gitops / 'kustomization.yaml'}: skipped 1 object that is not kbctl's (kustomize configuration)",
    ]


def test_a_mixed_folder_validates_and_applies(gitops: Path, store: KnowledgeBaseStore, cli: CliRunner) -> None:
    checked = cli.invoke(app, ["validate", "-f", str(gitops)])
    assert checked.exit_code == 0, checked.output
    assert checked.stdout == f"{gitops / 'kb.yaml'}:1: KnowledgeBase/notes valid\n"
    assert "controller.yaml: skipped 2 objects" in checked.stderr
    diffed = cli.invoke(app, ["diff", "-f", str(gitops)])
    assert diffed.exit_code == 1, diffed.output  # differences: notes would be created
    applied = cli.invoke(app, ["apply", "-f", str(gitops), "--wait"])
    assert applied.exit_code == 0, applied.output
    assert "kustomization.yaml: skipped" in applied.stderr
    assert [kb.name for kb in store.list()] == ["notes"]


def test_a_folder_of_only_other_objects_has_no_manifests(tmp_path: Path) -> None:
    (tmp_path / "controller.yaml").write_text(DEPLOYMENT)
    with pytest.raises(ManifestError, match="no manifests found"):
        load_manifest_set(read_manifest_files([str(tmp_path)]))


def test_a_typo_in_kbctls_own_objects_is_still_an_error(tmp_path: Path) -> None:
    """Skipping must not hide a manifest: kbctl's apiVersion group, or kind KnowledgeBase, is checked as kbctl's
    (else a typo would skip it, and --prune delete what it names)."""
    text = knowledge_base("notes", text_source("hours", "Office hours."))
    (tmp_path / "a.yaml").write_text(text.replace("kbctl.dev/v1alpha1", "kbctl.dev/v1alpha2"))
    (tmp_path / "b.yaml").write_text(text.replace("kbctl.dev/v1alpha1", "kbctl/v1alpha1").replace("notes", "b"))
    with pytest.raises(ManifestError) as caught:
        load_manifest_set(read_manifest_files([str(tmp_path)]))
    expected = "expected kbctl.dev/v1alpha1"
    assert [str(p) for p in caught.value.problems] == [
        f"{tmp_path / 'a.yaml'}:2: apiVersion: unsupported apiVersion 'kbctl.dev/v1alpha2', {expected}",
        f"{tmp_path / 'b.yaml'}:2: apiVersion: unsupported apiVersion 'kbctl/v1alpha1', {expected}",
    ]


def test_a_list_is_read_object_by_object_with_its_lines(tmp_path: Path) -> None:
    (tmp_path / "list.yaml").write_text(LIST)
    loaded = load_manifest_set(read_manifest_files([str(tmp_path / "list.yaml")]))
    assert [(m.kb.name, m.line) for m in loaded.manifests] == [("first", 4), ("second", 11)]
    assert [s.objects for s in loaded.skipped] == [("apps/v1 Deployment",)]
    (tmp_path / "list.yaml").write_text(LIST.replace("{name: b, text:", "{name: b, chunking: 3, text:"))
    with pytest.raises(ManifestError) as caught:
        load_manifest_set(read_manifest_files([str(tmp_path / "list.yaml")]))
    [problem] = caught.value.problems
    assert (problem.line, problem.field) == (14, "spec.sources[0].chunking")
    (tmp_path / "list.yaml").write_text("apiVersion: v1\nkind: List\nitems: {a: 1}\n")
    with pytest.raises(ManifestError, match=r"list.yaml:3: items: expected a list of objects, got a mapping"):
        load_manifest_set(read_manifest_files([str(tmp_path / "list.yaml")]))


def test_get_o_yaml_applies_again_unchanged(tmp_path: Path, store: KnowledgeBaseStore, cli: CliRunner) -> None:
    """`kbctl get kb -o yaml > all.yaml && kbctl apply -f all.yaml` reports every object unchanged."""
    (tmp_path / "list.yaml").write_text(LIST)
    first = cli.invoke(app, ["apply", "-f", str(tmp_path / "list.yaml"), "--wait"])
    assert first.exit_code == 0, first.output
    printed = cli.invoke(app, ["get", "kb", "-o", "yaml"])
    assert printed.exit_code == 0 and printed.stdout.startswith("apiVersion: v1\nkind: List\n")
    (tmp_path / "all.yaml").write_text(printed.stdout)
    again = cli.invoke(app, ["apply", "-f", str(tmp_path / "all.yaml"), "--wait", "-o", "json"])
    assert again.exit_code == 0, again.output
    results = json.loads(again.stdout)["results"]
    assert [(r["name"], r["action"]) for r in results] == [("first", "unchanged"), ("second", "unchanged")]
    single = cli.invoke(app, ["get", "kb", "first", "-o", "json"])
    (tmp_path / "first.json").write_text(single.stdout)
    diffed = cli.invoke(app, ["diff", "-f", str(tmp_path / "first.json")])
    assert diffed.exit_code == 0, diffed.output
