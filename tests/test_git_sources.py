"""`git:` sources against a real repository made in the test (read with KBCTL_ALLOW_LOCAL_GIT=1), applied to the
real store with the real model: a shallow fetch per apply or refresh, one document per file, the commit kept."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kbctl.client import KnowledgeBaseStore
from kbctl.errors import ManifestError
from kbctl.manifest import parse_manifests
from kbctl.sources.git import ALLOW_LOCAL_ENV

MANIFEST = """apiVersion: kbctl.dev/v1alpha1
kind: KnowledgeBase
metadata: {{name: wiki}}
spec:
  sources:
    - name: wiki
      git: {{url: "{url}", ref: {ref}, paths: [docs]}}
"""


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(ALLOW_LOCAL_ENV, "1")
    repo = tmp_path / "wiki"
    (repo / "docs").mkdir(parents=True)
    git(repo, "init", "--quiet", "--initial-branch", "main")
    git(repo, "config", "user.email", "kb@example.com")
    git(repo, "config", "user.name", "kb")
    (repo / "docs" / "vpn.md").write_text("# VPN\n\nConnect to the VPN before opening the finance systems.\n")
    (repo / "docs" / "printers.md").write_text("# Printers\n\nThe third-floor printer needs your badge.\n")
    (repo / "README.md").write_text("# Not in docs\n\nNot read: paths is docs.\n")
    commit(repo, "first")
    return repo


def commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def _apply(store: KnowledgeBaseStore, repo: Path, ref: str = "main") -> str:
    result = store.apply(parse_manifests(MANIFEST.format(url=repo, ref=ref), "wiki.yaml")).results[0]
    return result.action


def test_a_repository_ref_is_read_and_refreshed(store: KnowledgeBaseStore, repo: Path) -> None:
    first = git(repo, "rev-parse", "HEAD")
    assert _apply(store, repo) == "created"
    detail = store.describe("wiki")
    assert sorted(s.name for s in detail.source_status) == ["wiki/docs/printers.md", "wiki/docs/vpn.md"]
    hit = store.query("wiki", "vpn for finance systems", top_k=1).hits[0]
    assert hit.source == "wiki/docs/vpn.md" and hit.origin == f"{repo}@{first[:12]}:docs/vpn.md"
    assert store.refresh(["wiki"]).results[0].action == "unchanged"  # fetched again, nothing changed
    assert _apply(store, repo) == "unchanged"  # the same spec: not fetched again by apply
    (repo / "docs" / "vpn.md").write_text("# VPN\n\nConnect to the VPN before opening any internal system.\n")
    (repo / "docs" / "printers.md").unlink()
    second = commit(repo, "second")
    refreshed = store.refresh(["wiki"]).results[0]
    assert refreshed.action == "refreshed"
    assert {s.name: s.embedded for s in refreshed.sources if s.embedded} == {"wiki/docs/vpn.md": 1}
    served = {s.name: s.origin for s in store.describe("wiki").source_status}
    assert served == {"wiki/docs/vpn.md": f"{repo}@{second[:12]}:docs/vpn.md"}


def test_a_tag_is_a_ref_too(store: KnowledgeBaseStore, repo: Path) -> None:
    git(repo, "tag", "v1")
    (repo / "docs" / "vpn.md").write_text("# VPN\n\nChanged after the tag.\n")
    commit(repo, "after the tag")
    assert _apply(store, repo, ref="v1") == "created"
    assert "before opening the finance systems" in store.query("wiki", "vpn", top_k=1).hits[0].text


def test_failures_are_the_source_s_and_clear(
    store: KnowledgeBaseStore, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _apply(store, repo, ref="no-such-branch") == "failed"
    [status] = store.describe("wiki").source_status
    assert status.state == "failed" and status.message is not None and status.message.startswith("git fetch failed")
    monkeypatch.delenv(ALLOW_LOCAL_ENV)
    assert _apply(store, repo) == "failed"
    assert f"local repositories are read only with {ALLOW_LOCAL_ENV}=1" in (
        store.describe("wiki").source_status[0].message or ""
    )
    store.apply(parse_manifests(MANIFEST.format(url="https://10.0.0.1/org/wiki.git", ref="main"), "wiki.yaml"))
    assert "refused to connect to 10.0.0.1" in (store.describe("wiki").source_status[0].message or "")


def test_credentials_never_go_in_the_manifest() -> None:
    with pytest.raises(ManifestError, match="must not hold a password"):
        parse_manifests(MANIFEST.format(url="https://user:secret@git.example.com/wiki.git", ref="main"), "wiki.yaml")
    with pytest.raises(ManifestError, match="must be a branch or tag name"):
        parse_manifests(MANIFEST.format(url="https://git.example.com/wiki.git", ref="--upload-pack=x"), "wiki.yaml")


def test_git_s_first_meaningful_error_line_is_the_one_shown() -> None:
    """Of git's error output the first `fatal:`/`error:` line is shown (not the advice that ends it), redacted and
    cut; hints, warnings and a server's chatter only when git said nothing else."""
    from kbctl.sources.git import MAX_ERROR_CHARS, _first_error

    missing = (
        b"fatal: '/srv/nowhere' does not appear to be a git repository\nfatal: Could not read from remote repository."
        b"\n\nPlease make sure you have the correct access rights\nand the repository exists.\n"
    )
    assert _first_error(missing, 128) == "'/srv/nowhere' does not appear to be a git repository"
    hosted = b"remote: Repository not found.\nfatal: repository 'https://git.example.com/o/r.git/' not found\n"
    assert _first_error(hosted, 128) == "repository 'https://git.example.com/o/r.git/' not found"
    assert _first_error(b"hint: try again\nsomething odd happened\n", 1) == "something odd happened"
    assert _first_error(b"remote: quota exceeded\n", 1) == "remote: quota exceeded"
    assert _first_error(b"", 9) == "exit code 9"
    secret = b"fatal: unable to access 'https://user:hunter2@git.example.com/r.git/': " + b"x" * 1000
    shown = _first_error(secret, 128)
    assert "hunter2" not in shown and len(shown) <= MAX_ERROR_CHARS
