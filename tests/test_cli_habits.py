"""The habits kubectl users bring: help that shows words, durations, --dry-run=client|server, --version, plain text."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from kbctl._version import __version__
from kbctl.cli import app
from kbctl.cli._common import parse_duration
from tests.test_cli import EXAMPLES

PYTHON_TYPE = re.compile(r"<(str|int|float|bool|path|list\[|[a-z]+ range)")
UNREACHABLE = {"KBCTL_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}


def _commands(group: typer.main.TyperGroup, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for name, command in sorted(group.commands.items()):
        if hasattr(command, "commands"):
            found += _commands(command, (*path, name))
        else:
            found.append((*path, name))
    return found


def test_every_option_shows_a_word_or_its_choices_not_a_python_type() -> None:
    """`--top-k N`, `--timeout DURATION`, `--mode [hybrid|vector|keyword]`: never `<int range>` or `<list[str]>`."""
    commands = _commands(typer.main.get_command(app))  # type: ignore[arg-type]
    assert ("apply",) in commands and ("rollout", "undo") in commands
    for path in commands:
        result = CliRunner().invoke(app, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        options = [line for line in result.output.splitlines() if line.lstrip().startswith("-")]
        assert options, path
        assert not [line for line in options if PYTHON_TYPE.search(line)], (path, options)
        assert "│" not in result.output and "\x1b[" not in result.output, path


def test_mode_lists_its_choices_and_a_wrong_one_is_a_usage_error() -> None:
    help_text = CliRunner().invoke(app, ["query", "--help"]).output
    assert "--mode [hybrid|vector|keyword]" in help_text
    wrong = CliRunner().invoke(app, ["query", "kb", "question", "--mode", "fuzzy"])
    assert wrong.exit_code == 2
    assert wrong.output.startswith("Usage: kbctl query ") and "Invalid value for '--mode'" in wrong.output


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90.0), ("10m", 600.0), ("1h30m", 5400.0), ("250ms", 0.25), ("1.5m", 90.0), ("12", 12.0), ("0.5", 0.5)],
)
def test_durations_read_like_kubectl(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5x", "m", "1h 30m", "-3s", "s10"])
def test_a_bad_duration_is_refused(text: str) -> None:
    with pytest.raises(typer.BadParameter, match="invalid duration"):
        parse_duration(text)


def test_a_bad_or_out_of_range_duration_is_a_usage_error_before_anything_runs() -> None:
    bad = CliRunner(env=UNREACHABLE).invoke(app, ["delete", "kb", "notes", "--timeout", "2x"])
    assert bad.exit_code == 2 and "Invalid value for '--timeout': invalid duration '2x'" in bad.output
    too_long = CliRunner().invoke(app, ["serve", "--timeout", "20m"])
    assert too_long.exit_code == 2
    assert "'20m' is out of range: at least 0.1 s and at most 600 s" in too_long.output
    legacy = CliRunner(env=UNREACHABLE).invoke(app, ["wait", "kb", "notes", "--timeout", "5"])
    assert legacy.exit_code == 1 and "cannot connect to PostgreSQL" in legacy.output  # 5 s parsed, then the store


def test_dry_run_client_validates_without_a_store_and_bare_dry_run_means_server() -> None:
    runner = CliRunner(env=UNREACHABLE)
    client = runner.invoke(app, ["apply", "-f", str(EXAMPLES), "--dry-run=client"])
    assert client.exit_code == 0, client.output
    assert client.stdout.splitlines() == [
        f"KnowledgeBase/{name} valid (dry run: client, the store was not consulted)"
        for name in ("client-service-policy", "data-handling-policy", "team-handbook")
    ]
    for server in (["--dry-run"], ["--dry-run=server"]):
        result = runner.invoke(app, ["apply", "-f", str(EXAMPLES), *server])
        assert result.exit_code == 1 and "cannot connect to PostgreSQL" in result.output, server
    # a bare --dry-run before other options, and `--` ends the spelling out
    before = runner.invoke(app, ["apply", "--dry-run", "-f", str(EXAMPLES)])
    assert before.exit_code == 1 and "cannot connect to PostgreSQL" in before.output


def test_version_and_its_flag_print_the_same_line() -> None:
    expected = f"kbctl {__version__}\n"
    assert CliRunner().invoke(app, ["version"]).stdout == expected
    assert CliRunner().invoke(app, ["--version"]).stdout == expected
    for args in (["version"], ["--version"]):  # the installed entry point answers before loading the CLI
        done = subprocess.run([sys.executable, "-m", "kbctl", *args], capture_output=True, text=True, check=True)
        assert done.stdout == expected
