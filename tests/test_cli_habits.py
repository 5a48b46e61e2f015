"""The habits kubectl users bring: help that shows words, durations, --dry-run=client|server, --version, plain text."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from kbctl._version import __version__
from kbctl.cli import app
from kbctl.cli._common import parse_duration
from kbctl.cli.progress import CliReporter, progress_line
from kbctl.client import KnowledgeBaseStore
from kbctl.engine.events import WorkProgress
from kbctl.manifest import parse_manifests
from tests.support.manifests import knowledge_base, text_source
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


def _apply(store: KnowledgeBaseStore, name: str, labels: dict[str, str], text: str, **spec: Any) -> None:
    store.apply(parse_manifests(knowledge_base(name, text_source("notes", text), labels=labels, **spec), "kb.yaml"))


MULTILINE = "# Hours\n\nThe office opens at 9:00.\n\n  Indented line, trailing space \nLast line without newline"


def test_get_yaml_is_the_object_and_applies_again_unchanged(store: KnowledgeBaseStore, cli: CliRunner) -> None:
    """-o yaml|json print apiVersion, kind, metadata, the applied spec with defaults and status; applying that
    output again (file or stdin) changes nothing, and one name prints the object, several a List."""
    _apply(store, "office", {"team": "web"}, MULTILINE, description="Office facts, for people and agents.")
    as_yaml = cli.invoke(app, ["get", "kb", "office", "-o", "yaml"])
    assert as_yaml.exit_code == 0, as_yaml.output
    obj = json.loads(cli.invoke(app, ["get", "kb/office", "-o", "json"]).stdout)
    assert (obj["apiVersion"], obj["kind"]) == ("kbctl.dev/v1alpha1", "KnowledgeBase")
    assert obj["metadata"]["name"] == "office" and obj["metadata"]["labels"] == {"team": "web"}
    assert obj["metadata"]["generation"] == 1 and obj["metadata"]["creationTimestamp"].endswith("Z")
    assert obj["spec"]["description"] == "Office facts, for people and agents."
    assert obj["spec"]["sources"] == [{"name": "notes", "text": MULTILINE, "format": "markdown"}]
    assert obj["spec"]["chunking"] == {"maxChars": 1200, "overlapChars": 150}  # defaults filled in
    assert obj["status"]["version"] == 1 and obj["status"]["observedGeneration"] == 1
    assert {c["type"]: c["status"] for c in obj["status"]["conditions"]}["Ready"] == "True"
    assert [s["name"] for s in obj["status"]["sources"]] == ["notes"]
    assert "text: |" in as_yaml.stdout  # multi-line text stays readable
    for again in (as_yaml.stdout, json.dumps(obj)):
        result = cli.invoke(app, ["apply", "-f", "-", "--wait"], input=again)
        assert result.exit_code == 0, result.output
        assert result.stdout.splitlines()[0] == "KnowledgeBase/office unchanged (version 1)"
    listed = json.loads(cli.invoke(app, ["get", "kb", "-o", "json"]).stdout)
    assert (listed["kind"], [i["metadata"]["name"] for i in listed["items"]]) == ("List", ["office"])


def test_get_takes_names_selectors_and_kubectl_formats(store: KnowledgeBaseStore, cli: CliRunner) -> None:
    _apply(store, "alpha", {"team": "web"}, "Alpha opens at nine.", description="Alpha facts.")
    _apply(store, "beta", {"team": "ops", "tier": "gold"}, "Beta opens at ten.")
    names = cli.invoke(app, ["get", "kb", "-l", "team in (web,db)", "-o", "name"])
    assert (names.exit_code, names.stdout) == (0, "knowledgebase/alpha\n")
    assert cli.invoke(app, ["get", "kb", "-l", "!tier", "-o", "name"]).stdout == "knowledgebase/alpha\n"
    both = cli.invoke(app, ["get", "kb/beta", "kb/alpha", "-o", "name"]).stdout
    assert both == "knowledgebase/beta\nknowledgebase/alpha\n"  # in the order asked
    wide = cli.invoke(app, ["get", "kb", "-o", "wide"]).stdout.splitlines()
    assert wide[0].split()[-3:] == ["MODEL", "LABELS", "DESCRIPTION"]
    assert wide[1].split()[-4:] == ["local/all-MiniLM-L6-v2", "team=web", "Alpha", "facts."]
    assert wide[2].split()[-2:] == ["team=ops,tier=gold", "<none>"]
    path = cli.invoke(app, ["get", "kb", "-o", "jsonpath={range .items[*]}{.metadata.name}={.status.version};{end}"])
    assert path.stdout == "alpha=1;beta=1;"
    ready = '{.status.conditions[?(@.type=="Ready")].status}'
    assert cli.invoke(app, ["get", "kb", "alpha", "-o", f"jsonpath={ready}"]).stdout == "True"
    columns = cli.invoke(app, ["get", "kb", "-o", "custom-columns=NAME:.metadata.name,TIER:.metadata.labels.tier"])
    assert [line.split() for line in columns.stdout.splitlines()] == [
        ["NAME", "TIER"],
        ["alpha", "<none>"],
        ["beta", "gold"],
    ]
    missing = cli.invoke(app, ["get", "kb", "alpha", "gamma"])
    assert missing.exit_code == 1 and missing.stdout.splitlines()[1].split()[0] == "alpha"
    assert missing.stderr == 'Error: knowledgebase "gamma" not found\n'
    for bad in (["get", "kb", "alpha", "-l", "team=web"], ["get", "kb", "-o", "table"], ["get", "kb/"]):
        result = cli.invoke(app, bad)
        assert result.exit_code == 2 and result.output.startswith("Usage: kbctl get"), (bad, result.output)
    assert cli.invoke(app, ["get", "kb", "-o", "jsonpath={.items[*"]).exit_code == 2


def test_delete_by_names_manifests_selector_or_all(store: KnowledgeBaseStore, cli: CliRunner, tmp_path: Path) -> None:
    for name, team in (("alpha", "web"), ("beta", "web"), ("gamma", "ops"), ("delta", "ops")):
        _apply(store, name, {"team": team}, f"{name} opens at nine.")
    dry = cli.invoke(app, ["delete", "kb", "-l", "team=web", "--dry-run"])
    assert dry.stdout.splitlines() == ["KnowledgeBase/alpha deleted (dry run)", "KnowledgeBase/beta deleted (dry run)"]
    assert [s.name for s in store.list()] == ["alpha", "beta", "delta", "gamma"]
    by_label = cli.invoke(app, ["delete", "kb", "-l", "team=web"])
    assert by_label.exit_code == 0 and [line.split()[:2] for line in by_label.stdout.splitlines()] == [
        ["KnowledgeBase/alpha", "deleted"],
        ["KnowledgeBase/beta", "deleted"],
    ]
    manifest = tmp_path / "gamma.yaml"
    manifest.write_text(knowledge_base("gamma", text_source("notes", "gamma opens at nine.")))
    assert cli.invoke(app, ["delete", "-f", str(manifest)]).stdout.startswith("KnowledgeBase/gamma deleted (")
    again = cli.invoke(app, ["delete", "-f", str(manifest)])
    assert (again.exit_code, again.stderr) == (1, 'Error: knowledgebase "gamma" not found\n')
    assert cli.invoke(app, ["delete", "-f", str(manifest), "--ignore-not-found"]).exit_code == 0
    for bad in (["delete", "kb"], ["delete", "kb", "delta", "--all"], ["delete", "kb", "-f", str(manifest)]):
        assert cli.invoke(app, bad).exit_code == 2, bad
    assert cli.invoke(app, ["delete", "kb", "--all"]).stdout.startswith("KnowledgeBase/delta deleted (")
    assert store.list() == []


def test_query_and_context_exit_3_when_nothing_is_relevant(store: KnowledgeBaseStore, cli: CliRunner) -> None:
    _apply(store, "office", {"team": "web"}, MULTILINE)
    question = ["office", "how are cancelled trips refunded?"]
    for command in ("query", "context"):
        found = cli.invoke(app, [command, *question, "--exit-code", "--threshold", "-1"])
        assert found.exit_code == 0, found.output
        nothing = cli.invoke(app, [command, *question, "--exit-code", "--threshold", "1"])
        assert nothing.exit_code == 3, nothing.output
        assert cli.invoke(app, [command, *question, "--threshold", "1"]).exit_code == 0  # without the flag: 0


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _progress(reporter: CliReporter, clock: _Clock, at: float, done: int, total: int = 100) -> None:
    clock.now = at
    reporter.report(WorkProgress("docs", "embedding", done, total))


def test_progress_off_a_terminal_is_a_line_every_10_seconds_with_the_time_left(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """In a CI log: nothing for work shorter than 10 s; then a line at most every 10 s with counts, percent and the
    time left, and a last line when the stage ends; nothing at all with quiet."""
    clock = _Clock()
    short = CliReporter(clock=clock)
    for at, done in ((0, 10), (4, 60), (9, 100)):
        _progress(short, clock, at, done)
    assert capsys.readouterr().err == ""
    clock.now = 0.0
    long = CliReporter(clock=clock)
    for at, done in ((0, 1), (5, 20), (11, 25), (15, 40), (26, 60), (30, 100)):
        _progress(long, clock, at, done)
    assert capsys.readouterr().err.splitlines() == [
        "KnowledgeBase/docs embedding: 25/100 (25%), about 33s left",
        "KnowledgeBase/docs embedding: 60/100 (60%), about 17s left",
        "KnowledgeBase/docs embedding: 100/100 (100%)",
    ]
    quiet = CliReporter(quiet=True, clock=clock)
    for at, done in ((0, 1), (50, 50), (100, 100)):
        _progress(quiet, clock, at, done)
    assert capsys.readouterr() == ("", "")
    assert progress_line(WorkProgress("kb", "fetching", 3, 600), 30.0) == (
        "KnowledgeBase/kb fetching: 3/600 (0%), about 99m30s left"
    )


def test_quiet_apply_prints_nothing_but_errors(store: KnowledgeBaseStore, cli: CliRunner, tmp_path: Path) -> None:
    manifest = tmp_path / "kb.yaml"
    manifest.write_text(knowledge_base("office", text_source("notes", MULTILINE)))
    quiet = cli.invoke(app, ["apply", "-f", str(manifest), "--wait", "-q"])
    assert (quiet.exit_code, quiet.stdout, quiet.stderr) == (0, "", "")
    assert [s.name for s in store.list()] == ["office"]
    refreshed = cli.invoke(app, ["refresh", "kb", "office", "-q"])
    assert (refreshed.exit_code, refreshed.stdout, refreshed.stderr) == (0, "", "")
    broken = tmp_path / "broken.yaml"
    broken.write_text("apiVersion: kbctl.dev/v1alpha1\nkind: KnowledgeBase\nmetadata: {name: x}\nspec: {}\n")
    failed = cli.invoke(app, ["apply", "-f", str(broken), "--wait", "-q"])
    assert failed.exit_code == 1 and failed.stdout == "" and "spec.sources" in failed.stderr


def test_explain_documents_fields_from_the_schema() -> None:
    """`kbctl explain` prints type, default, bounds and description (from the models), and its fields."""
    result = CliRunner().invoke(app, ["explain", "knowledgebase.spec.retrieval"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[:2] == ["KIND:     KnowledgeBase", "VERSION:  kbctl.dev/v1alpha1"]
    assert "  topK  <integer>  (default 10, 1..200)" in lines
    assert '  mode  <string>  (default "hybrid", one of hybrid, vector, keyword)' in lines
    leaf = CliRunner().invoke(app, ["explain", "kb.spec.sources.name"]).stdout
    assert "FIELD: name <string>  (required" in leaf
    deep = CliRunner().invoke(app, ["explain", "kb.spec", "--recursive"]).stdout
    assert "    maxChars  <integer>  (default 1200, 100..100000)" in deep  # spec.chunking.maxChars, a level down
    wrong = CliRunner().invoke(app, ["explain", "kb.spec.retrieval.topk"])
    assert wrong.exit_code == 2 and "field 'topk' does not exist in knowledgebase.spec.retrieval" in wrong.output
    assert "its fields: topK, similarityThreshold" in wrong.output


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts_complete_commands_and_choices(shell: str) -> None:
    """`kbctl completion SHELL` prints a script; the requests it makes are answered by the installed kbctl."""
    script = CliRunner().invoke(app, ["completion", shell])
    assert script.exit_code == 0 and "_KBCTL_COMPLETE" in script.stdout
    if shell != "bash":
        return

    def complete(words: str) -> list[str]:
        env = {**os.environ, "COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - (not words.endswith(" ")))}
        env["_KBCTL_COMPLETE"] = "complete_bash"
        done = subprocess.run([sys.executable, "-m", "kbctl"], env=env, capture_output=True, text=True, check=False)
        return done.stdout.split()

    assert "get" in complete("kbctl ge")
    assert complete("kbctl query kb q --mode ") == ["hybrid", "vector", "keyword"]
    assert CliRunner().invoke(app, ["completion", "tcsh"]).exit_code == 2
