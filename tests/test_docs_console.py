"""The console examples of docs/ (beyond README.md, which tests/test_readme.py replays) are what kbctl prints.

Each document's `$ kbctl ...` lines run in order, through the CLI against the real store, from a folder holding a
copy of examples/, under tests/test_readme.py's matching rules; an example that needs a world around it (an
edited manifest) gets it from the document's setups, keyed by the exact command.
"""

from __future__ import annotations

import difflib
import shutil
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbctl.client import KnowledgeBaseStore
from tests.test_readme import ROOT, Scenario, console_examples, matches


def payroll_reads_the_restricted_folder(workdir: Path) -> None:
    """docs/access.md: payroll joins hr-managers on the restricted folder."""
    path = workdir / "examples" / "access" / "hr.yaml"
    text = path.read_text()
    assert "groups: [hr-managers]    # replaces" in text
    path.write_text(text.replace("groups: [hr-managers]    # replaces", "groups: [hr-managers, payroll]    # replaces"))


DOCS: dict[str, dict[str, Callable[[Path], None]]] = {
    "access.md": {"kbctl diff -f examples/access/": payroll_reads_the_restricted_folder},
    "eval.md": {},
}


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


@pytest.mark.slow
@pytest.mark.parametrize("doc", sorted(DOCS))
def test_docs_console_examples_are_what_kbctl_prints(
    doc: str, cli: CliRunner, workdir: Path, stack: ExitStack, store: KnowledgeBaseStore
) -> None:
    """Each `$ kbctl ...` of the document, run in order, prints the lines it shows after it."""
    examples = console_examples((ROOT / "docs" / doc).read_text())
    assert examples, f"docs/{doc} lost its console examples"
    scenario = Scenario(cli, workdir, stack)
    scenario.setups = {command: (lambda setup=setup: setup(workdir)) for command, setup in DOCS[doc].items()}
    failures = []
    for example in examples:
        actual = scenario.run(example.command)
        if not matches(example.expected, actual):
            diff = "\n".join(difflib.unified_diff(example.expected, actual.splitlines(), doc, "kbctl", lineterm=""))
            failures.append(f"docs/{doc}:{example.line}: $ {example.command}\n{diff}")
    assert not scenario.setups, f"docs/{doc} no longer runs: {sorted(scenario.setups)}"
    assert not failures, "\n\n".join(failures)
