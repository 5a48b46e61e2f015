"""The CLI's contract beyond apply: generated docs, schema, validate, stdin, exit codes, the embedded server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.cli.docs import render
from kbctl.client import KnowledgeBaseStore
from kbctl.manifest import json_schema
from kbctl.store.migrations import migrate

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "kb"


def test_cli_reference_is_current() -> None:
    """docs/cli.md is exactly what --help prints (regenerate: python -m kbctl.cli.docs > docs/cli.md)."""
    assert (ROOT / "docs" / "cli.md").read_text() == render()


def test_schema_command_prints_the_schema() -> None:
    """`kbctl schema` prints the JSON Schema generated from the models."""
    result = CliRunner().invoke(app, ["schema"])
    assert result.exit_code == 0 and json.loads(result.stdout) == json_schema()


def test_validate_reports_valid_files_and_writes_nothing() -> None:
    """`kbctl validate` names each valid KnowledgeBase with file:line and needs no database."""
    result = CliRunner(env={"KBCTL_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}).invoke(
        app, ["validate", "-f", str(EXAMPLES)]
    )
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        f"{EXAMPLES / 'client-service-policy.yaml'}:5: KnowledgeBase/client-service-policy valid",
        f"{EXAMPLES / 'data-handling-policy.yaml'}:5: KnowledgeBase/data-handling-policy valid",
        f"{EXAMPLES / 'team-handbook.yaml'}:5: KnowledgeBase/team-handbook valid",
    ]


def test_apply_reads_stdin(cli: CliRunner, store: KnowledgeBaseStore) -> None:
    """`apply -f -` reads manifests from standard input, like kubectl."""
    text = (EXAMPLES / "data-handling-policy.yaml").read_text()
    result = cli.invoke(app, ["apply", "--wait", "-f", "-", "-o", "json"], input=text)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [(r["name"], r["action"], r["version"]) for r in report["results"]] == [
        ("data-handling-policy", "created", 1)
    ]
    assert [k.name for k in store.list()] == ["data-handling-policy"]


@pytest.mark.slow
def test_examples_answer_their_questions(store: KnowledgeBaseStore) -> None:
    """The example KBs, applied offline, answer questions from their own text and nothing off-topic."""
    report = store.apply_paths([str(EXAMPLES)])
    assert not report.failed and [r.action for r in report.results] == ["created", "created", "created"]
    hits = store.query("data-handling-policy", "who must be notified after a data breach and how fast?").hits
    assert [h.source for h in hits[:2]] == ["breach-response", "breach-response"]
    assert "72 hours" in hits[0].text + hits[1].text
    refund = store.query("client-service-policy", "refund if the client cancels 20 days before the start").hits
    assert refund[0].source == "refunds"
    assert store.query("data-handling-policy", "what is the capital of France?").hits == []
    stolen = store.query("team-handbook", "what do I do if my laptop is stolen?", top_k=1).hits[0]
    assert stolen.source == "handbook/it-security.docx" and "+44 20 7946 0199" in stolen.text
    hotel = store.query("team-handbook", "hotel budget per night in London", top_k=1).hits[0]
    assert hotel.source == "handbook/travel-policy.pdf" and hotel.heading_path[-1] == "Page 2"
    again = store.apply_paths([str(EXAMPLES)])
    assert [r.action for r in again.results] == ["unchanged"] * 3 and again.embedded == 0


def test_unknown_name_is_one_line_and_exit_1(cli: CliRunner, store: KnowledgeBaseStore) -> None:
    """Describing or querying an unknown knowledge base prints one line, exit code 1, no traceback."""
    for args in (["describe", "kb", "nope"], ["query", "nope", "hello"]):
        result = cli.invoke(app, args)
        assert (result.exit_code, result.stderr) == (1, 'Error: knowledgebase "nope" not found\n')


def test_unreachable_database_is_a_clear_error() -> None:
    """A database URL that cannot be reached gives one 'cannot connect' line and exit code 1."""
    runner = CliRunner(env={"KBCTL_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2"})
    result = runner.invoke(app, ["get", "kb"])
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: cannot connect to PostgreSQL:")
    assert len(result.stderr.strip().splitlines()) == 1


def test_migrations_apply_once(store: KnowledgeBaseStore) -> None:
    """Running the migrations again on a migrated database applies nothing and changes nothing."""
    before = store.db._conn.execute("SELECT version, applied_at FROM kb_schema_migrations").fetchall()
    assert migrate(store.db._conn) == []
    assert store.db._conn.execute("SELECT version, applied_at FROM kb_schema_migrations").fetchall() == before


@pytest.mark.slow
def test_embedded_server_lifecycle(server_home: Path) -> None:
    """With no database URL, kbctl starts its own server on demand; `server status`/`stop` manage it."""
    env = {k: v for k, v in os.environ.items() if k != "KBCTL_DATABASE_URL"}
    env["KBCTL_HOME"] = str(server_home)

    def kbctl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "kbctl", *args], env=env, capture_output=True, text=True, timeout=120
        )

    assert kbctl("server", "status").stdout.startswith("not running")
    listed = kbctl("get", "kb")
    assert listed.returncode == 0 and listed.stderr == "No knowledge bases found.\n", listed.stderr
    status = kbctl("server", "status", "-o", "json")
    data = json.loads(status.stdout)
    assert data["running"] is True and "host=" in data["url"]
    assert kbctl("server", "stop").stdout == "stopped\n"
    assert kbctl("server", "status").stdout.startswith("not running")


def test_manifest_reference_names_every_field() -> None:
    """docs/manifest.md documents every property of the generated JSON Schema."""
    doc = (ROOT / "docs" / "manifest.md").read_text()
    schema = json_schema()
    fields = {name for d in schema["$defs"].values() for name in d.get("properties", {})}
    missing = sorted(f for f in fields if f"`{f}`" not in doc)
    assert not missing, f"docs/manifest.md does not document: {missing}"


def test_validate_exit_codes(tmp_path: Path) -> None:
    """`validate` exits 1 with one line per problem, and 2 on a usage error."""
    (tmp_path / "bad.yaml").write_text("apiVersion: v1\nkind: KnowledgeBase\n")
    runner = CliRunner()
    bad = runner.invoke(app, ["validate", "-f", str(tmp_path / "bad.yaml")])
    assert bad.exit_code == 1
    assert (
        bad.stderr
        == f"{tmp_path / 'bad.yaml'}:1: apiVersion: unsupported apiVersion 'v1', expected kbctl.dev/v1alpha1\n"
    )
    assert runner.invoke(app, ["validate"]).exit_code == 2
    assert runner.invoke(app, ["no-such-command"]).exit_code == 2
