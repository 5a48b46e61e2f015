"""docs/gitops.md's console examples are what kbctl prints: a pipeline's validate, diff, apply and `echo $?`, a
scheduled refresh, rollback, wait, and a controller pulling a Sync from a git repository through three commits.

The document's commands run in order, against the real store, in the world each section describes:
- a repository folder `kb/` holding two of examples/kb's manifests, applied as the apply set `kb-repo` before
  the pull request edits one paragraph of the refunds source;
- `KnowledgeBase/site`, an HTML page and a Markdown page on 127.0.0.1 (tests/test_readme.py's), whose FAQ answer
  changes before the scheduled refresh;
- for the Sync section, a fresh store and a local git repository (`knowledge`) holding examples/kb and
  examples/docs, committed to by the document's own `git commit` lines after the edit each names, the Sync's
  interval passing before each next controller pass.

Matching is tests/test_readme.py's, with three allowances for what differs from run to run: the scenario's
commits print as the document's (its first commit shown is the scenario's first, and so on, so a hash that names
the wrong commit fails), the repository's path prints as the document's `/tmp/demo/knowledge`, and runs of
spaces count as one (the column padding a longer path brings).
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.sources.git import ALLOW_LOCAL_ENV
from tests.test_readme import ENV, ROOT, Scenario, console_examples, matches

DOC = ROOT / "docs" / "gitops.md"
SHOWN_REPOSITORY = "/tmp/demo/knowledge"
# The abbreviated commits the document shows, in the order it shows them: the scenario's commits, in the order made.
SHOWN_COMMITS = list(dict.fromkeys(re.findall(r"\bcommit ([0-9a-f]{12})\b", DOC.read_text())))
SYNC = """apiVersion: kbctl.dev/v1alpha1
kind: Sync
metadata: {{name: knowledge}}
spec:
  url: {url}
  ref: main
  path: kb
  interval: 1m
"""
GIT_ENV = {
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "Docs",
    "GIT_AUTHOR_EMAIL": "docs@example.com",
    "GIT_COMMITTER_NAME": "Docs",
    "GIT_COMMITTER_EMAIL": "docs@example.com",
}


def replace_in(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path.name} no longer holds {old!r}"
    path.write_text(text.replace(old, new))


class GitOps:
    """Runs docs/gitops.md's commands (kbctl, `echo $?` and `git commit`) in order, preparing what each needs."""

    def __init__(self, cli: CliRunner, workdir: Path, stack: ExitStack, store: KnowledgeBaseStore) -> None:
        self.cli, self.workdir, self.store = cli, workdir, store
        self.readme = Scenario(cli, workdir, stack)  # KnowledgeBase/site on 127.0.0.1, as README.md's refresh
        self.repository = workdir / "knowledge"
        self.exit_code = 0
        self.commits: list[str] = []  # abbreviated, in the order made
        self.setups: dict[str, Callable[[], None]] = {
            "kbctl validate -f kb/ -R": self.a_pull_request_edits_refunds,
            "kbctl refresh knowledgebase --all": self.readme.site_with_a_changed_page,
            "kbctl apply -f sync.yaml": self.a_repository_and_a_fresh_store,
            'git commit -qam "Raise the wind-down fee cap"': self.raise_the_fee_cap,
            'git commit -qam "Bad: topK 0"': self.set_top_k_to_zero,
        }

    def run(self, command: str) -> str:
        """What the terminal shows for one command of the document."""
        words = shlex.split(command, comments=True)
        setup = self.setups.pop(re.sub(r"\s+#.*$", "", command), None)
        if setup:
            setup()
        if words == ["echo", "$?"]:
            return f"{self.exit_code}\n"
        if words[0] == "git":
            self.git(*words[1:])
            return ""
        assert words[0] == "kbctl", f"docs/gitops.md runs kbctl, echo $? and git only: {command}"
        result = self.cli.invoke(app, words[1:], env={**ENV, ALLOW_LOCAL_ENV: "1"}, prog_name="kbctl")
        self.exit_code = result.exit_code
        output = result.output.replace(str(self.repository), SHOWN_REPOSITORY)
        for made, shown in zip(self.commits, SHOWN_COMMITS, strict=False):
            output = output.replace(made, shown)
        return output

    def kbctl_ok(self, *args: str) -> None:
        result = self.cli.invoke(app, list(args), env=ENV)
        assert result.exit_code == 0, result.output

    def git(self, *args: str) -> None:
        env = {**os.environ, **GIT_ENV}
        subprocess.run(["git", "-C", str(self.repository), *args], env=env, check=True)
        if args[0] == "commit":
            head = ["git", "-C", str(self.repository), "rev-parse", "--short=12", "HEAD"]
            self.commits.append(
                subprocess.run(head, env=env, check=True, capture_output=True, text=True).stdout.strip()
            )

    def a_pull_request_edits_refunds(self) -> None:
        """kb/: two manifests of examples/kb, applied as the apply set kb-repo; then the refunds source's
        wind-down fee cap goes from GBP 5,000 to GBP 7,500 (one paragraph)."""
        folder = self.workdir / "kb"
        folder.mkdir()
        for name in ("client-service-policy.yaml", "data-handling-policy.yaml"):
            shutil.copy(self.workdir / "examples" / "kb" / name, folder / name)
            replace_in(
                folder / name, "  labels: {team: operations,", "  labels: {managed-by: kb-repo, team: operations,"
            )
        self.kbctl_ok("apply", "-f", "kb/", "--wait")
        replace_in(folder / "client-service-policy.yaml", "capped at GBP 5,000", "capped at GBP 7,500")

    def a_repository_and_a_fresh_store(self) -> None:
        """A fresh store, and the local repository `knowledge` holding examples/kb and examples/docs on main."""
        for kb in self.store.list():
            self.store.delete(kb.name)
        shutil.copytree(ROOT / "examples" / "kb", self.repository / "kb")
        shutil.copytree(ROOT / "examples" / "docs", self.repository / "docs")
        self.git("init", "-q", "-b", "main")
        self.git("add", "-A")
        self.git("commit", "-qm", "Knowledge bases")
        (self.workdir / "sync.yaml").write_text(SYNC.format(url=self.repository))

    def raise_the_fee_cap(self) -> None:
        replace_in(self.repository / "kb" / "client-service-policy.yaml", "capped at GBP 5,000", "capped at GBP 7,500")
        self.interval_passes()

    def set_top_k_to_zero(self) -> None:
        replace_in(self.repository / "kb" / "data-handling-policy.yaml", "retrieval: {topK: 5}", "retrieval: {topK: 0}")
        self.interval_passes()

    def interval_passes(self) -> None:
        """The Sync's interval has passed before the next `controller --once` (the test does not wait a minute)."""
        self.store.db.connection.execute("UPDATE kb_syncs SET next_at = now()")


def collapsed(lines: list[str]) -> list[str]:
    """`lines` with runs of spaces made one (the column padding of a path longer than the one shown) and each
    age in a table's columns (`25s`, `4m`) written `AGE`: events a test makes in a second are all `0s` old."""
    return [re.sub(r"(?<!\S)\d+[smhd](?!\S)", "AGE", re.sub(r" {2,}", " ", line)) for line in lines]


@pytest.fixture
def gitops(
    cli: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: KnowledgeBaseStore
) -> Iterator[GitOps]:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    with ExitStack() as stack:
        yield GitOps(cli, tmp_path, stack, store)


@pytest.mark.slow
def test_gitops_console_examples_are_what_kbctl_prints(gitops: GitOps) -> None:
    """Each command of docs/gitops.md, run in order, prints the lines the document shows after it."""
    examples = console_examples(DOC.read_text())
    assert len(examples) >= 15, "docs/gitops.md lost its console examples"
    failures = []
    for example in examples:
        actual = gitops.run(example.command)
        if not matches(collapsed(example.expected), "\n".join(collapsed(actual.splitlines()))):
            diff = "\n".join(
                difflib.unified_diff(example.expected, actual.splitlines(), "gitops.md", "kbctl", lineterm="")
            )
            failures.append(f"docs/gitops.md:{example.line}: $ {example.command}\n{diff}")
    assert not gitops.setups, f"docs/gitops.md no longer runs: {sorted(gitops.setups)}"
    assert not failures, "\n\n".join(failures)
    assert len(gitops.commits) == len(SHOWN_COMMITS) == 3
