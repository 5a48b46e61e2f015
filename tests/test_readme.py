"""README.md tells the truth: its console examples are what kbctl prints, and its two commands are where CI finds them.

Every `$ kbctl ...` line of every ```console block is run, in README order, through the CLI against the real
store, from a folder holding a copy of examples/. The few examples that need a world around them (a web site
to refresh, an edited manifest, an invalid file) get it from SCENARIO, keyed by the exact command. Matching:
trailing spaces are ignored; a line that is only `...` stands for any number of lines (output shortened in
the README); decimals compare within DECIMAL_TOLERANCE (scores may move in the last digit on another CPU);
timestamps and ages match any value. A README example that is not run, or prints something else, fails here.
"""

from __future__ import annotations

import difflib
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from tests.support.httpserver import HTTPTestServer, serve

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DECIMAL_TOLERANCE = 0.011
ENV = {"KBCTL_ALLOW_PRIVATE_NETWORKS": "1", "COLUMNS": "200", "NO_COLOR": "1"}

TIMESTAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"
TOKEN = re.compile(rf"(?P<time>{TIMESTAMP})|(?P<decimal>-?\d+\.\d+)|(?P<age>(?<=\s)\d+[smhd]$)")


@dataclass(frozen=True)
class Example:
    """One `$ command` of a console block and the lines the README shows after it."""

    line: int
    command: str
    expected: list[str]


def console_examples(text: str) -> list[Example]:
    """Every `$ ` command in the ```console blocks of a markdown text, with its expected output."""
    examples: list[Example] = []
    inside = False
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("```"):
            inside = line.strip() == "```console" and not inside
            continue
        if not inside:
            continue
        if line.startswith("$ "):
            examples.append(Example(number, line[2:], []))
        elif examples:
            examples[-1].expected.append(line)
    return examples


def readme_command(which: str) -> str:
    """The README command that CI runs (.ci/readme_command.py install|test), as CI reads it."""
    script = ROOT / ".ci" / "readme_command.py"
    done = subprocess.run([sys.executable, str(script), which], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def _pattern(expected: list[str]) -> tuple[re.Pattern[str], list[float]]:
    """A regex for the expected lines (decimals captured, volatile values loose) and the decimals shown."""
    parts: list[str] = []
    decimals: list[float] = []
    for line in expected:
        line = line.rstrip()
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
            continue
        pos, piece = 0, []
        for m in TOKEN.finditer(line):
            piece.append(re.escape(line[pos : m.start()]))
            if m.group("time"):
                piece.append(TIMESTAMP)
            elif m.group("decimal"):
                piece.append(r"(-?\d+\.\d+)")
                decimals.append(float(m.group("decimal")))
            else:
                piece.append(r"\d+[smhd]")
            pos = m.end()
        piece.append(re.escape(line[pos:]))
        parts.append("".join(piece) + r"\n")
    return re.compile("".join(parts)), decimals


def matches(expected: list[str], actual: str) -> bool:
    """Whether kbctl's output is what the README shows, under the rules in this module's docstring."""
    pattern, decimals = _pattern(expected)
    text = "".join(line.rstrip() + "\n" for line in actual.splitlines())
    found = pattern.fullmatch(text)
    if found is None:
        return False
    return all(abs(float(got) - want) <= DECIMAL_TOLERANCE for got, want in zip(found.groups(), decimals, strict=True))


# --- the world some examples need ------------------------------------------------------------------------------

FAQ = """# Booking FAQ

## How do I book a session?
Choose a specialist on the booking page, then pick a free slot in their calendar.

## Can I move a booked session?
Sessions can be moved free of charge up to {hours} hours before they start.
"""

ABOUT = """<html><head><title>About Northwind Advisory</title></head><body><main><article>
<h1>About us</h1>
<p>Northwind Advisory is a consulting firm founded in 2009 in Rotterdam. It advises mid-sized logistics
companies on warehouse automation, route planning and the procurement of transport software.</p>
</article></main></body></html>"""

INVALID_SITE = """apiVersion: kbctl.dev/v1alpha1
kind: KnowledgeBase
metadata:
  name: site
spec:
  sources:
    - name: about
      url: https://www.example.com/about
    - name: faq
      url: https://www.example.com/faq
      text: "## How do I book a session?"
"""


class Scenario:
    """Runs the README's commands in order from a folder with a copy of examples/, preparing what some need."""

    def __init__(self, cli: CliRunner, workdir: Path, stack: ExitStack) -> None:
        self.cli, self.workdir, self.stack = cli, workdir, stack
        self.site: HTTPTestServer | None = None
        self.setups: dict[str, Callable[[], None]] = {
            "kbctl refresh kb site": self.site_with_a_changed_page,
            "kbctl apply -f site.yaml": self.invalid_manifest,
            "kbctl diff -f examples/kb/": self.edit_one_paragraph,
            "kbctl rollout history kb client-service-policy": self.apply_the_edit,
        }

    def run(self, command: str) -> str:
        """The output (stdout and stderr, as a terminal shows them) of one README command."""
        setup = self.setups.pop(command, None)
        if setup:
            setup()
        words = shlex.split(command)
        assert words[0] == "kbctl", f"README console examples run kbctl only: {command}"
        return self.cli.invoke(app, words[1:], env=ENV, prog_name="kbctl").output

    def invoke_ok(self, *args: str) -> None:
        result = self.cli.invoke(app, list(args), env=ENV)
        assert result.exit_code == 0, result.output

    def site_with_a_changed_page(self) -> None:
        """KnowledgeBase/site: an HTML page and a markdown page on 127.0.0.1, applied; then one FAQ answer changes."""
        self.site = site = self.stack.enter_context(serve())
        site.route("/about", body=ABOUT, etag=True)
        site.route("/faq.md", body=FAQ.format(hours=48), content_type="text/markdown", etag=True)
        manifest = self.workdir / "site-kb.yaml"
        manifest.write_text(
            "apiVersion: kbctl.dev/v1alpha1\nkind: KnowledgeBase\nmetadata:\n  name: site\nspec:\n  sources:\n"
            f"    - name: about\n      url: {site.url('/about')}\n"
            f"    - name: faq\n      url: {site.url('/faq.md')}\n"
        )
        self.invoke_ok("apply", "-f", str(manifest), "--wait")
        site.route("/faq.md", body=FAQ.format(hours=24), content_type="text/markdown", etag=True)

    def invalid_manifest(self) -> None:
        """site.yaml whose second source (line 9) sets both url and text."""
        (self.workdir / "site.yaml").write_text(INVALID_SITE)

    def edit_one_paragraph(self) -> None:
        """The wind-down fee cap in the refunds source goes from GBP 5,000 to GBP 7,500."""
        path = self.workdir / "examples" / "kb" / "client-service-policy.yaml"
        text = path.read_text()
        assert "capped at GBP 5,000" in text
        path.write_text(text.replace("capped at GBP 5,000", "capped at GBP 7,500"))

    def apply_the_edit(self) -> None:
        self.invoke_ok("apply", "-f", "examples/kb/", "--wait")


@pytest.fixture
def scenario(cli: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Scenario]:
    """A scenario in a fresh folder (the working directory) holding a copy of examples/, in a git repository like
    the README's clone (outside one, examples/kb/team-handbook.yaml could not read ../docs/)."""
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    with ExitStack() as stack:
        yield Scenario(cli, tmp_path, stack)


# --- the tests -------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_readme_console_examples_are_what_kbctl_prints(scenario: Scenario, store: KnowledgeBaseStore) -> None:
    """Each `$ kbctl ...` in README.md, run in order, prints the lines the README shows after it."""
    examples = console_examples(README.read_text())
    assert len(examples) >= 10, "README.md lost its console examples"
    failures = []
    for example in examples:
        actual = scenario.run(example.command)
        if not matches(example.expected, actual):
            diff = "\n".join(
                difflib.unified_diff(example.expected, actual.splitlines(), "README.md", "kbctl", lineterm="")
            )
            failures.append(f"README.md:{example.line}: $ {example.command}\n{diff}")
    assert not scenario.setups, f"README.md no longer runs: {sorted(scenario.setups)}"
    assert not failures, "\n\n".join(failures)


def test_readme_holds_the_two_newcomer_commands() -> None:
    """CI finds the README's install-and-apply command and its test command, each whole and without a pip upgrade."""
    install, tests = readme_command("install"), readme_command("test")
    assert f"```sh\n{install}\n```" in README.read_text() and f"```sh\n{tests}\n```" in README.read_text()
    assert install.startswith("python3 -m venv .venv && ") and "'.[offline-model]'" in install
    assert install.endswith("kbctl apply -f examples/kb/ --wait")
    assert tests.startswith("python3 -m venv .venv && ") and tests.endswith("-m pytest")
    assert "--upgrade" not in install + tests and "-U " not in install + tests


def test_matching_rules_catch_real_drift() -> None:
    """The matcher accepts volatile values and shortened output, and rejects changed words, lines and scores."""
    shown = ["a | score 0.454 | 225 tokens", "   ...", "done 2026-11-30T09:34:06Z 4s", "threshold 0.35"]
    good = "a | score 0.451 | 225 tokens  \n x\n y\ndone 2027-01-02T03:04:05Z 12m\nthreshold 0.35\n"
    assert matches(shown, good)
    assert not matches(shown, good.replace("0.451", "0.480"))  # a score that really moved
    assert not matches(shown, good.replace("225", "226"))  # integers are exact
    assert not matches(shown, good.replace("threshold 0.35", "threshold 0.20"))
    assert not matches(shown, good + "extra line\n")
    assert not matches(["one", "two"], "one\n")
