"""A manifest's git URL, ref and paths never make kbctl run a command: each injection form is refused by the
manifest's checks (`kbctl validate`, file:line) and again where git is called, with and without
KBCTL_ALLOW_LOCAL_GIT, and the marker file the injected command would write never appears."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.errors import ManifestError, SourceError
from kbctl.manifest import parse_manifests
from kbctl.sources._guard import Guard
from kbctl.sources.git import ALLOW_LOCAL_ENV, fetch_repository

pytestmark = pytest.mark.reliability

MANIFEST = """apiVersion: kbctl.dev/v1alpha1
kind: KnowledgeBase
metadata: {{name: wiki}}
spec:
  sources:
    - name: wiki
      git: {{url: '{url}', ref: '{ref}', paths: ['{path}']}}
"""


@pytest.fixture
def evil(tmp_path: Path) -> tuple[Path, Path]:
    """A script that writes a marker file when anything runs it, and the marker's path."""
    marker = tmp_path / "marker"
    script = tmp_path / "evil.sh"
    script.write_text(f"#!/bin/sh\nid > {marker}\nexit 1\n")
    script.chmod(0o755)
    return script, marker


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A real repository with one commit, for the forms that inject through the ref or paths."""
    repo = tmp_path / "wiki"
    (repo / "docs").mkdir(parents=True)
    for args in (
        ("init", "--quiet", "--initial-branch", "main"),
        ("config", "user.email", "kb@example.com"),
        ("config", "user.name", "kb"),
    ):
        subprocess.run(["git", "-C", str(repo), *args], check=True)
    (repo / "docs" / "vpn.md").write_text("# VPN\n\nConnect first.\n")
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "--quiet", "-m", "first"], check=True)
    return repo


def _forms(script: Path, marker: Path, repo: Path) -> list[tuple[str, str, str]]:
    """(url, ref, path) injection forms: through the URL, the ref and the paths, as git and ssh read options."""
    return [
        (f"--upload-pack={script}", "main", "docs"),
        (f"--upload-pack=id>{marker};#", "main", "docs"),
        (f"--upload-pack={script};#", "main", "docs"),
        (f"ext::{script}", "main", "docs"),
        (f"ext::sh -c id>{marker}", "main", "docs"),
        (f"-ccore.sshCommand={script}", "main", "docs"),
        (f"--config=core.sshCommand={script}", "main", "docs"),
        (f"ssh://-oProxyCommand={script}/repo", "main", "docs"),
        (f"ssh://git@-oProxyCommand={script}/repo", "main", "docs"),
        (f"-oProxyCommand={script}:repo", "main", "docs"),
        (f"git@example.com:--upload-pack={script}", "main", "docs"),
        (f"file://--upload-pack={script}", "main", "docs"),
        (f"{repo}/--upload-pack={script}", "main", "docs"),
        ("fd::3", "main", "docs"),
        (str(repo), f"--upload-pack={script}", "docs"),
        (str(repo), f"--exec={script}", "docs"),
        (str(repo), "-c", "docs"),
        (str(repo), "main", f"--upload-pack={script}"),
        (str(repo), "main", "docs/-x"),
    ]


@pytest.mark.parametrize("allow_local", [False, True], ids=["default", "allow-local-git"])
def test_every_injection_form_is_refused_by_the_manifest(
    evil: tuple[Path, Path], repo: Path, allow_local: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every form fails the manifest's checks with file:line and the field, and no marker is written."""
    script, marker = evil
    monkeypatch.setenv(ALLOW_LOCAL_ENV, "1" if allow_local else "0")
    for url, ref, path in _forms(script, marker, repo):
        text = MANIFEST.format(url=url, ref=ref, path=path)
        with pytest.raises(ManifestError) as refused:
            parse_manifests(text, "kb/wiki.yaml")
        message = str(refused.value)
        assert message.startswith("kb/wiki.yaml:7: spec.sources[0].git."), (url, ref, path, message)
    assert not marker.exists()


@pytest.mark.parametrize("allow_local", [False, True], ids=["default", "allow-local-git"])
def test_every_injection_form_is_refused_where_git_is_called(
    evil: tuple[Path, Path], repo: Path, tmp_path: Path, allow_local: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Called without a manifest, the git fetch refuses every URL and ref form before git runs, and no marker is
    written."""
    script, marker = evil
    monkeypatch.setenv(ALLOW_LOCAL_ENV, "1" if allow_local else "0")
    for url, ref, path in _forms(script, marker, repo):
        if path != "docs":
            continue  # paths are never handed to git: they select files in the checkout
        with pytest.raises(SourceError):
            fetch_repository(url, ref, tmp_path / "cache", Guard())
    assert not marker.exists()


def test_the_injection_is_real_without_the_checks(evil: tuple[Path, Path], tmp_path: Path) -> None:
    """The marker does appear when git is handed the first form unprotected, so the tests above can fail."""
    script, marker = evil
    target = tmp_path / "target"
    subprocess.run(["git", "init", "--quiet", str(target)], check=True)
    subprocess.run(["git", "-C", str(target), "fetch", f"--upload-pack={script}", "unused"], capture_output=True)
    assert marker.exists()


def test_the_git_allow_list_refuses_ext_even_with_local_repositories(
    evil: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The protocol allow-list holds where the URL checks would not: git itself refuses `ext::` from kbctl."""
    from kbctl.sources import git as git_module

    script, marker = evil
    monkeypatch.setenv(ALLOW_LOCAL_ENV, "1")
    folder = tmp_path / "target"
    subprocess.run(["git", "init", "--quiet", str(folder)], check=True)
    with pytest.raises(SourceError, match="git fetch failed"):
        git_module._git(folder, "fetch", "--quiet", "--", f"ext::{script}", "HEAD")
    assert not marker.exists()


def test_validate_refuses_an_injection_with_file_line_and_exit_1(evil: tuple[Path, Path], tmp_path: Path) -> None:
    """`kbctl validate` names the file, the line and the field of an injected URL, exits 1, and runs nothing."""
    script, marker = evil
    manifest = tmp_path / "wiki.yaml"
    manifest.write_text(MANIFEST.format(url=f"--upload-pack={script}", ref="main", path="docs"))
    env = {ALLOW_LOCAL_ENV: "1", "KBCTL_HOME": str(tmp_path / "home")}
    result = CliRunner(env=env).invoke(app, ["validate", "-f", str(manifest)])
    assert result.exit_code == 1
    assert f"{manifest}:7: spec.sources[0].git.url: must not start with '-'" in result.output
    assert "Traceback" not in result.output
    assert not marker.exists()


@pytest.mark.parametrize(
    "url",
    [
        "https://git.example.com/ops/wiki.git",
        "https://git.example.com:8443/ops/wiki",
        "https://deploy@git.example.com/ops/wiki.git",
        "ssh://git@git.example.com/ops/wiki.git",
        "ssh://git@[2001:db8::1]:2222/ops/wiki.git",
        "git@github.com:ops/wiki.git",
        "github.com:ops/wiki-docs.git",
        "/srv/mirrors/wiki.git",
        "file:///srv/mirrors/wiki.git",
    ],
)
def test_the_forms_people_use_still_pass(url: str) -> None:
    """The checks refuse options, not repositories: https, ssh, scp-like and local mirror URLs validate."""
    [loaded] = parse_manifests(MANIFEST.format(url=url, ref="release/2.1", path="docs"), "kb/wiki.yaml")
    kb = loaded.kb
    assert kb.spec.sources[0].git is not None and kb.spec.sources[0].git.url == url
