"""Terminal escape injection: a file name holding `ESC[2J` and a newline, a Markdown title holding `ESC]0;...BEL`
and a description holding `ESC[31m` reach no terminal raw through any human output of kbctl, and a newline of a
name forges no line; `-o json` and `-o yaml` keep the exact characters.

The commands run as on a terminal (`color=True`: click passes escape sequences through, as it does to a tty) and
off one; the knowledge base is a real folder applied to the real store with the real model.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML
from typer.testing import CliRunner, Result

from kbctl.cli import app
from kbctl.cli.terminal import inert, inert_text
from kbctl.client import KnowledgeBaseStore
from tests.support.chatserver import ChatServer, serve_chat
from tests.support.manifests import docs_repository

pytestmark = pytest.mark.reliability

EVIL_FILE = "evil\x1b[2J\nKnowledgeBase forged ready.md"  # a file name that clears the screen and forges a line
TITLE = "Booking \x1b]0;PWNED\x07 guide"  # a Markdown title that sets the window title
DESCRIPTION = "red \x1b[31mtext [bold]not markup[/bold] \u202eesrever\u202c \x9b2J"
FORGED = "KnowledgeBase forged ready.md"  # what a forged line would start with
COLUMNS = "custom-columns=NAME:.metadata.name,DESCRIPTION:.spec.description,SOURCES:.status.sources[*].name"
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")  # all but \n and \t


def _folder(tmp_path: Path) -> Path:
    """A repository with kb/hostile.yaml and docs/ holding the hostile file name and the hostile title."""
    docs = {
        EVIL_FILE: "# Refunds\n\nRefunds of a booking are paid within five days.\n",
        "guide.md": f"# {TITLE}\n\nChoose a slot for your booking in the calendar.\n",
    }
    return docs_repository(tmp_path, "hostile", docs, path="../docs/", description=DESCRIPTION)


def _run(cli: CliRunner, *args: str, terminal: bool = True, code: int = 0, **kwargs: Any) -> Result:
    """Run kbctl as on a terminal (or off one) and check its exit code."""
    result = cli.invoke(app, list(args), color=terminal, **kwargs)
    assert result.exit_code == code, (args, result.output, result.exception)
    return result


def _assert_inert(result: Result) -> None:
    """Nothing but newlines and tabs of the layout among the control characters of stdout and stderr, and no line
    forged by a file name's newline."""
    for stream in (result.stdout, result.stderr):
        assert not RAW.search(stream), repr(stream)
        assert not any(line.lstrip().startswith(FORGED) for line in stream.splitlines()), stream


@pytest.fixture
def hostile(store: KnowledgeBaseStore, cli: CliRunner, tmp_path: Path) -> Iterator[Path]:
    """KnowledgeBase/hostile applied through the CLI from the hostile folder; the folder."""
    repo = _folder(tmp_path)
    applied = _run(cli, "apply", "-f", str(repo / "kb" / "hostile.yaml"), "--wait")
    _assert_inert(applied)
    assert "source docs/evil\\x1b[2J\\nKnowledgeBase forged ready.md ready: 1 chunk" in applied.stdout
    yield repo


def test_inert_escapes_control_characters_as_python_writes_them() -> None:
    """One field prints on one line with its controls escaped (\\n, \\x1b, \\x9b, \\u202e); multi-line text keeps
    its newlines and tabs, and ordinary text and backslashes are left as they are."""
    assert inert("a\x1b[2J\nb\r\t\x07\x7f\x9b\u202e\u2028c") == "a\\x1b[2J\\nb\\r\\t\\x07\\x7f\\x9b\\u202e\\u2028c"
    assert inert_text("one\n\ttwo\x1b]0;x\x07\r") == "one\n\ttwo\\x1b]0;x\\x07\\r"
    assert inert("café [red]x[/red] C:\\dir €") == "café [red]x[/red] C:\\dir €"


@pytest.mark.parametrize("terminal", [True, False])
def test_human_output_renders_hostile_data_inert(
    hostile: Path, cli: CliRunner, store: KnowledgeBaseStore, terminal: bool
) -> None:
    """get (table, wide, name, custom-columns, jsonpath), describe, query, context, rollout history, diff, validate
    and apply print every control character of the data escaped, and rich markup in it as text."""
    manifest = str(hostile / "kb" / "hostile.yaml")
    wide = _run(cli, "get", "kb", "-o", "wide", terminal=terminal)
    _assert_inert(wide)
    assert "red \\x1b[31mtext [bold]not markup[/bold] \\u202eesrever\\u202c \\x9b2J" in wide.stdout
    for args in (
        ("get", "kb"),
        ("get", "kb", "-o", "name"),
        ("get", "kb", "-o", COLUMNS),
        ("get", "kb", "hostile", "-o", 'jsonpath={.spec.description}{"\\n"}{.status.sources[*].name}'),
        ("rollout", "history", "kb", "hostile"),
        ("context", "hostile", "booking calendar slot"),
        ("validate", "-f", manifest),
    ):
        _assert_inert(_run(cli, *args, terminal=terminal))
    jsonpath = _run(cli, "get", "kb", "hostile", "-o", "jsonpath={.status.sources[*].name}", terminal=terminal)
    assert jsonpath.stdout == "docs/evil\\x1b[2J\\nKnowledgeBase forged ready.md docs/guide.md"
    described = _run(cli, "describe", "kb", "hostile", terminal=terminal)
    _assert_inert(described)
    assert "Description: red \\x1b[31mtext" in described.stdout
    assert "  docs/evil\\x1b[2J\\nKnowledgeBase forged ready.md   path   ready" in described.stdout
    queried = _run(cli, "query", "hostile", "booking guide calendar slot", terminal=terminal)
    _assert_inert(queried)
    assert "docs/guide.md | Booking \\x1b]0;PWNED\\x07 guide | chunk 0" in queried.stdout
    _assert_inert(_run(cli, "query", "hostile", "booking guide", "--explain", terminal=terminal))
    _assert_inert(_run(cli, "query", "hostile,hostile", "booking guide", terminal=terminal))
    (hostile / "docs" / "guide.md").write_text(f"# {TITLE}\n\nChoose any free slot in the booking calendar.\n")
    _assert_inert(_run(cli, "diff", "-f", manifest, terminal=terminal, code=1))
    _assert_inert(_run(cli, "apply", "-f", manifest, "--dry-run", terminal=terminal))


def test_events_and_removal_lines_render_a_file_name_inert(hostile: Path, cli: CliRunner) -> None:
    """A removed file whose name clears the screen and holds a newline is named escaped, on one line, by apply's
    log, get events and describe's Events."""
    (hostile / "docs" / EVIL_FILE).unlink()
    applied = _run(cli, "apply", "-f", str(hostile / "kb" / "hostile.yaml"), "--wait")
    _assert_inert(applied)
    assert "(gone at the source): docs/evil\\x1b[2J\\nKnowledgeBase forged ready.md\n" in applied.stdout
    events = _run(cli, "get", "events")
    _assert_inert(events)
    removed = [line for line in events.stdout.splitlines() if "DocumentsRemoved" in line]
    assert len(removed) == 1 and removed[0].endswith("docs/evil\\x1b[2J\\nKnowledgeBase forged ready.md"), removed
    _assert_inert(_run(cli, "get", "events", "--no-headers"))
    _assert_inert(_run(cli, "describe", "kb", "hostile"))


def test_error_lines_render_a_file_name_inert(store: KnowledgeBaseStore, cli: CliRunner, tmp_path: Path) -> None:
    """The one error handler prints a problem quoting a hostile file name on one line, escaped."""
    bad = tmp_path / "bad\x1b]0;PWNED\x07\nError: forged.yaml"
    bad.write_text("apiVersion: kbctl.dev/v1alpha1\nkind: KnowledgeBase\nmetadata: {name: Not_A_Name}\n")
    for command in ("apply", "validate", "diff"):
        failed = _run(cli, command, "-f", str(bad), code=2 if command == "diff" else 1)
        _assert_inert(failed)
        assert "bad\\x1b]0;PWNED\\x07\\nError: forged.yaml:" in failed.stderr
        assert not any(line.startswith("Error: forged") for line in failed.stderr.splitlines())


def test_json_and_yaml_keep_the_exact_characters(hostile: Path, cli: CliRunner) -> None:
    """-o json and -o yaml of get, describe, query and get events give back every hostile character exactly."""
    as_json = json.loads(_run(cli, "get", "kb", "hostile", "-o", "json").stdout)
    assert as_json["spec"]["description"] == DESCRIPTION
    names = [s["name"] for s in as_json["status"]["sources"]]
    assert names == [f"docs/{EVIL_FILE}", "docs/guide.md"]
    assert as_json["status"]["sources"][1]["title"] == TITLE
    assert json.loads(_run(cli, "describe", "kb", "hostile", "-o", "json").stdout) == as_json
    as_yaml = YAML(typ="safe").load(io.StringIO(_run(cli, "get", "kb", "hostile", "-o", "yaml").stdout))
    assert as_yaml["spec"]["description"] == DESCRIPTION and as_yaml["status"] == as_json["status"]
    hits = json.loads(_run(cli, "query", "hostile", "booking guide calendar slot", "-o", "json").stdout)["hits"]
    assert TITLE in [h["title"] for h in hits]
    (hostile / "docs" / EVIL_FILE).unlink()
    _run(cli, "apply", "-f", str(hostile / "kb" / "hostile.yaml"), "--wait")
    events = json.loads(_run(cli, "get", "events", "-o", "json").stdout)["items"]
    assert any(e["message"].endswith(f"docs/{EVIL_FILE}") for e in events)
    events_yaml = YAML(typ="safe").load(io.StringIO(_run(cli, "get", "events", "-o", "yaml").stdout))["items"]
    assert [e["message"] for e in events_yaml] == [e["message"] for e in events]


@pytest.fixture(scope="module")
def chat() -> Iterator[ChatServer]:
    """The stand-in chat model, answering from the passages it is given."""
    with serve_chat() as server:
        yield server


@pytest.mark.parametrize("stream", ["--stream", "--no-stream"])
def test_ask_renders_a_hostile_title_inert(
    hostile: Path, store: KnowledgeBaseStore, database_url: str, chat: ChatServer, tmp_path: Path, stream: str
) -> None:
    """ask's answer (streamed or not) and its Sources lines print the hostile title's controls escaped."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"chat": {"providers": {"stand-in": {"baseURL": chat.url}}}}))
    env = {"KBCTL_DATABASE_URL": database_url, "KBCTL_HOME": str(store.settings.home), "KBCTL_CONFIG": str(config)}
    question = "How do I choose a slot for my booking in the calendar?"
    asked = _run(CliRunner(env=env), "ask", "hostile", question, "-m", "stand-in/chat-test-v1", stream)
    _assert_inert(asked)
    assert "Booking \\x1b]0;PWNED\\x07 guide" in asked.stdout.partition("\nSources:\n")[2]
