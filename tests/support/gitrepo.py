"""A git working copy whose commits are pushed to a bare repository beside it, as to a git host: what the Sync tests
read (the bare one), and the git commands they commit with."""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["commit", "git", "pushed_working_copy", "remote"]


def git(repo: Path, *args: str) -> str:
    """Run git in `repo`; its output, stripped."""
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def commit(repo: Path, message: str) -> str:
    """Commit the working copy and push it to the bare repository; the commit's hash."""
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "-m", message)
    git(repo, "push", "--quiet", "origin", "main")
    return git(repo, "rev-parse", "HEAD")


def remote(repo: Path) -> Path:
    """The bare repository `repo` pushes to (what a Sync's url names)."""
    return repo.parent / "remote.git"


def pushed_working_copy(parent: Path, name: str = "knowledge") -> Path:
    """An empty working copy `parent/name` on branch main, with an author, whose origin is the bare `remote`."""
    repo = parent / name
    subprocess.run(["git", "init", "--quiet", "--bare", "--initial-branch", "main", str(remote(repo))], check=True)
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "--quiet", "--initial-branch", "main")
    git(repo, "config", "user.email", "kb@example.com")
    git(repo, "config", "user.name", "kb")
    git(repo, "remote", "add", "origin", str(remote(repo)))
    return repo
