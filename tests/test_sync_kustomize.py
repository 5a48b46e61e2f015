"""A Sync whose folder holds a kustomization is rendered with kustomize (`kubectl kustomize` here) and its output
applied like a folder's manifests; a kustomization that names anything but the repository's own files (a remote
base, a path out of the checkout) is refused before the program runs, and a missing program is named."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.errors import SourceError
from kbctl.manifest import parse_manifests
from kbctl.sources import kustomize
from kbctl.sources.git import ALLOW_LOCAL_ENV
from tests.support.gitrepo import commit, git, pushed_working_copy
from tests.support.manifests import knowledge_base, text_source

needs_a_program = pytest.mark.skipif(
    not any(shutil.which(p) for p in kustomize.EXTERNAL_PROGRAMS), reason="neither kustomize nor kubectl installed"
)

OVERLAY = """\
resources:
  - ../../base
namePrefix: prod-
labels:
  - pairs: {env: prod}
patches:
  - target: {kind: KnowledgeBase, name: policy}
    patch: |
      - op: add
        path: /spec/retrieval
        value: {topK: 3}
"""


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A GitOps repository as kustomize users lay it out: a base and a production overlay, pushed to a bare one."""
    monkeypatch.setenv(ALLOW_LOCAL_ENV, "1")
    repo = pushed_working_copy(tmp_path)
    (repo / "kb" / "base").mkdir(parents=True)
    (repo / "kb" / "overlays" / "prod").mkdir(parents=True)
    (repo / "kb" / "base" / "policy.yaml").write_text(
        knowledge_base("policy", text_source("retention", "Invoices are kept for seven years."))
    )
    (repo / "kb" / "base" / "kustomization.yaml").write_text("resources:\n  - policy.yaml\n")
    (repo / "kb" / "overlays" / "prod" / "kustomization.yaml").write_text(OVERLAY)
    commit(repo, "base and overlay")
    return repo


def record_sync(cli: CliRunner, repo: Path, path: str = "kb/overlays/prod") -> None:
    manifest = repo.parent / "sync.yaml"
    manifest.write_text(
        "apiVersion: kbctl.dev/v1alpha1\nkind: Sync\nmetadata: {name: knowledge}\n"
        f"spec:\n  url: {repo.parent / 'remote.git'}\n  ref: main\n  path: {path}\n  interval: 1m\n"
    )
    assert cli.invoke(app, ["apply", "-f", str(manifest)]).exit_code == 0


def due(store: KnowledgeBaseStore) -> None:
    store.db.connection.execute("UPDATE kb_syncs SET next_at = now()")


@needs_a_program
def test_an_overlay_is_rendered_and_applied(store: KnowledgeBaseStore, cli: CliRunner, repo: Path) -> None:
    record_sync(cli, repo)
    controller = store.controller()
    report = controller.run_once()
    assert [(r.name, r.action) for r in report.results] == [("prod-policy", "created")], store.syncs()
    [status] = store.syncs()
    assert status.last_error is None and status.last_applied_revision == git(repo, "rev-parse", "HEAD")
    [kb] = store.list()
    assert kb.labels == {"env": "prod"}
    assert store.resource("prod-policy")["spec"]["retrieval"]["topK"] == 3
    assert "seven years" in store.query("prod-policy", "how long are invoices kept?", threshold=-1).hits[0].text

    # A commit of the base reaches the overlay's knowledge base on the next pass.
    (repo / "kb" / "base" / "policy.yaml").write_text(
        knowledge_base("policy", text_source("retention", "Invoices are kept for ten years."))
    )
    commit(repo, "ten years")
    due(store)
    assert [(r.name, r.action) for r in controller.run_once().results] == [("prod-policy", "configured")]
    controller.deregister()


@needs_a_program
@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("github.com/org/knowledge//kb/base?ref=main", "is remote"),
        ("https://git.example.com/org/knowledge.git//kb/base", "is remote"),
        ("git@git.example.com:org/knowledge.git", "is remote"),
        ("../../../..", "leads out of the repository"),
        ("../../missing", "is no file or folder of the repository"),
    ],
)
def test_a_kustomization_naming_anything_but_the_repository_is_refused(
    store: KnowledgeBaseStore, cli: CliRunner, repo: Path, entry: str, why: str
) -> None:
    """Nothing is fetched or read outside the checkout, nothing applied, and the Sync says which entry and why;
    a base (not only the overlay) is checked too."""
    store.apply(parse_manifests(knowledge_base("kept", text_source("a", "Kept.")), "kb.yaml"))
    (repo / "kb" / "base" / "kustomization.yaml").write_text(f"resources:\n  - policy.yaml\n  - {entry}\n")
    bad = commit(repo, "a remote base")
    record_sync(cli, repo)
    assert store.controller().run_once().failed_syncs == ["knowledge"]
    [status] = store.syncs()
    assert status.last_error is not None and status.last_error.startswith(
        f"commit {bad[:12]}: kb/base/kustomization.yaml: resources: "
    )
    assert why in status.last_error and status.last_error.endswith("; nothing was applied")
    assert [kb.name for kb in store.list()] == ["kept"]


def test_without_kustomize_or_kubectl_the_error_names_them(
    store: KnowledgeBaseStore, cli: CliRunner, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    only_git = tmp_path / "bin"
    only_git.mkdir()
    git_program = shutil.which("git")
    assert git_program is not None
    (only_git / "git").symlink_to(git_program)
    monkeypatch.setenv("PATH", str(only_git))
    record_sync(cli, repo)
    assert store.controller().run_once().failed_syncs == ["knowledge"]
    [status] = store.syncs()
    assert status.last_error is not None
    assert "kb/overlays/prod holds a kustomization: rendering it needs the kustomize program (or kubectl" in (
        status.last_error
    )
    assert store.list() == []


@pytest.mark.parametrize(
    ("script", "why"),
    [
        ("exec /usr/bin/yes apiVersion", "printed more than 1 MiB, a manifest file's limit"),
        ("exec /bin/sleep 30", "took longer than 0.5 s"),
        ("echo 'Error: accumulating resources: no' >&2; exit 1", "failed: accumulating resources: no"),
        ('[ -z "$PATH" ] && [ "$1" = kustomize ] && [ "$2" = -- ] && [ "$3" = . ] && pwd && /usr/bin/env', ""),
    ],
)
def test_the_program_is_bounded_and_given_nothing_of_the_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str, why: str
) -> None:
    """The program runs in the folder on `.` after `--`, with no PATH, an HTTP proxy that reaches nothing, and
    within a time and an output limit."""
    stand_in = tmp_path / "bin" / "kubectl"
    stand_in.parent.mkdir()
    stand_in.write_text(f"#!/bin/sh\n{script}\n")
    stand_in.chmod(0o755)
    monkeypatch.setenv("PATH", str(stand_in.parent))
    monkeypatch.setenv("KBCTL_MAX_MANIFEST_MIB", "1")
    monkeypatch.setattr(kustomize, "KUSTOMIZE_TIMEOUT", 0.5)
    folder = tmp_path / "repo" / "kb"
    folder.mkdir(parents=True)
    (folder / "kustomization.yaml").write_text("namePrefix: x-\n")
    if not why:
        printed = kustomize.render_kustomization(folder, tmp_path / "repo").splitlines()
        assert printed[0] == str(folder)
        assert "HTTPS_PROXY=http://127.0.0.1:9" in printed and not any(line.startswith("KBCTL_") for line in printed)
        home = next(line for line in printed if line.startswith("HOME="))
        assert home != f"HOME={os.environ.get('HOME')}"
        return
    with pytest.raises(SourceError, match=why):
        kustomize.render_kustomization(folder, tmp_path / "repo")


def test_a_kustomization_that_is_a_symlink_out_of_the_checkout_is_refused(tmp_path: Path) -> None:
    """The kustomization file itself is the repository's own, like every path it names: a symlink leading out of
    the checkout is refused before it is read or any program runs."""
    outside = tmp_path / "outside.yaml"
    outside.write_text("resources: []\n")
    folder = tmp_path / "repo" / "kb"
    folder.mkdir(parents=True)
    (folder / "kustomization.yaml").symlink_to(outside)
    with pytest.raises(SourceError, match=r"^kb/kustomization.yaml: leads out of the repository$"):
        kustomize.render_kustomization(folder, tmp_path / "repo")
