"""One log schema: `kbctl serve` and `kbctl controller` in JSON mode write the same keys (time, level, logger,
message, then fields, trace ids inside a span); routine reconciles that changed nothing are debug lines; and kbctl
imported as a library never configures the logging of the process it runs in."""

from __future__ import annotations

import ast
import io
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.cli.progress import JsonLogReporter
from kbctl.client import KnowledgeBaseStore
from kbctl.manifest import parse_manifests
from kbctl.serve import RetrievalService, Tokens, create_app
from kbctl.serve.logs import LOG_KEYS, json_logging
from kbctl.userconfig import ServeConfig
from tests.support.gitrepo import commit
from tests.support.manifests import knowledge_base, text_source
from tests.support.otel import send_spans_to
from tests.test_sync import due, sync_manifest
from tests.test_sync import repo as repo  # the fixture: a git repository of manifests

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = knowledge_base("office", text_source("hours", "# Hours\n\nThe office opens at nine."))


def lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture
def serve_log(store: KnowledgeBaseStore) -> Iterator[list[dict[str, Any]]]:
    """The JSON lines `kbctl serve`'s app writes for a list and a query (its loggers set up as `serve` sets them)."""
    store.apply(parse_manifests(MANIFEST, "kb.yaml"))
    service = RetrievalService(store.settings, pool_size=2)
    stream = io.StringIO()
    try:
        app = create_app(service, Tokens(ServeConfig(), {}))
        with json_logging(stream, loggers=("kbctl", "uvicorn", "uvicorn.error")), TestClient(app) as client:
            assert client.get("/v1/knowledgebases").status_code == 200
            assert client.post("/v1/knowledgebases/office/query", json={"question": "when?"}).status_code == 200
        yield lines(stream.getvalue())
    finally:
        service.close()


def test_serve_and_the_controller_write_the_same_keys(
    serve_log: list[dict[str, Any]], store: KnowledgeBaseStore, cli: CliRunner
) -> None:
    """A request's line and a controller's event line start with the same keys, in the same order, with the same
    time format; each one's own fields follow."""
    store.apply(parse_manifests(knowledge_base("faq", text_source("a", "Answers.")), "kb.yaml"), wait=False)
    ran = cli.invoke(app, ["controller", "--once", "--log-format", "json"])
    assert ran.exit_code == 0, ran.output
    controller_log = lines(ran.stdout)
    request = [line for line in serve_log if line["logger"] == "kbctl.serve.access"][-1]
    event = next(line for line in controller_log if line.get("event") == "ReconcileStarted")
    for line in (*serve_log, *controller_log):
        assert tuple(line)[:4] == LOG_KEYS, line
        assert line["level"] in ("debug", "info", "warning", "error")
    assert (request["message"], request["route"], request["status"]) == (
        "request",
        "/v1/knowledgebases/{name}/query",
        200,
    )
    assert (event["logger"], event["knowledgeBase"], event["message"]) == (
        "kbctl.controller",
        "faq",
        "KnowledgeBase/faq created (version 1); waiting for the ingestion of 1 source",
    )
    assert len(request["time"]) == len(event["time"]) == len("2026-01-01T00:00:00.000Z")
    assert request["time"].endswith("Z") and event["time"].endswith("Z")
    assert "ts" not in request and "msg" not in request  # the old serve keys are gone


def test_a_controller_s_lines_inside_a_reconcile_carry_its_trace_ids(store: KnowledgeBaseStore) -> None:
    """When tracing, each line a reconcile logs carries the trace and span ids of its `kbctl.reconcile` span."""
    exporter = InMemorySpanExporter()
    send_spans_to(exporter)
    store.apply(parse_manifests(MANIFEST, "kb.yaml"), wait=False)
    stream = io.StringIO()
    with json_logging(stream):
        store.controller(reporter=JsonLogReporter()).run_once()
    logged = [line for line in lines(stream.getvalue()) if line.get("knowledgeBase") == "office"]
    [span] = [s for s in exporter.get_finished_spans() if s.name == "kbctl.reconcile"]
    assert logged and {(line["traceId"], line["spanId"]) for line in logged} == {
        (format(span.context.trace_id, "032x"), format(span.context.span_id, "016x"))
    }


def test_a_sync_pass_that_changes_nothing_logs_nothing_at_the_default_level(
    store: KnowledgeBaseStore, cli: CliRunner, repo: Path, tmp_path: Path
) -> None:
    """The first pass of a Sync logs what it applied; the next ones, on the same commit with nothing changed, write
    no line at info (they are debug lines); a new commit is info again."""
    (tmp_path / "sync.yaml").write_text(sync_manifest(repo))
    assert cli.invoke(app, ["apply", "-f", str(tmp_path / "sync.yaml")]).exit_code == 0
    stream = io.StringIO()
    with json_logging(stream, level=logging.DEBUG):
        controller = store.controller(reporter=JsonLogReporter())
        passes = []
        for change in (False, False, False, True):
            if change:
                (repo / "kb" / "hours.yaml").write_text(
                    knowledge_base("hours", text_source("open", "The office opens at 10."))
                )
                commit(repo, "ten")
            start = len(stream.getvalue())
            controller.run_once()
            due(store)
            passes.append(lines(stream.getvalue()[start:]))
    first, second, third, changed = passes
    assert {line["level"] for line in first} == {"info"}
    assert "Sync/knowledge: commit" in first[-1]["message"] and first[-1]["sync"] == "knowledge"
    for routine in (second, third):
        assert routine and {line["level"] for line in routine} == {"debug"}
        assert any(line["message"] == "KnowledgeBase/hours unchanged (version 1)" for line in routine)
    info = [line["message"] for line in changed if line["level"] == "info"]
    assert "KnowledgeBase/hours configured (version 2); waiting for the ingestion of 1 source" in info
    assert info[-1].startswith("Sync/knowledge: commit")


def test_the_text_log_of_a_controller_leaves_routine_lines_to_debug(store: KnowledgeBaseStore, cli: CliRunner) -> None:
    """In text mode too: a pass that finds a pending knowledge base unchanged prints nothing but its summary, unless
    --log-level debug."""
    store.apply(parse_manifests(MANIFEST, "kb.yaml"))
    store.db.connection.execute("UPDATE kb_knowledge_bases SET generation = generation + 1")  # pending, unchanged
    quiet = cli.invoke(app, ["controller", "--once"])
    assert (quiet.exit_code, quiet.stdout) == (0, "reconciled 1 knowledge base\n")
    store.db.connection.execute("UPDATE kb_knowledge_bases SET generation = generation + 1")
    verbose = cli.invoke(app, ["controller", "--once", "--log-level", "debug"])
    assert verbose.stdout == "KnowledgeBase/office unchanged (version 1)\nreconciled 1 knowledge base\n"


HOST = """
import json, logging, sys
root = logging.getLogger()
if sys.argv[1] == "handler":
    logging.basicConfig(level=logging.ERROR, format="host: %(message)s")
else:
    root.setLevel(logging.ERROR)  # a host that only set a level: no handler yet
before = [type(h).__name__ for h in root.handlers], root.level
from kbctl.integrations import tool_definitions
tools = tool_definitions("openai")
from kbctl.serve.mcp import build_mcp
build_mcp(None)
logging.getLogger("httpx").info("an INFO line of a library, which the host does not want")
print(json.dumps({"before": before, "after": ([type(h).__name__ for h in root.handlers], root.level),
                  "tools": len(tools)}))
"""


@pytest.mark.parametrize("host", ["handler", "level"])
def test_tool_definitions_leave_the_host_s_root_logger_alone(host: str) -> None:
    """A host process that configured its root logger (a handler and a level, or a level only) has the same root
    logger after `kbctl.integrations.tool_definitions()` and `build_mcp` (whose SDK configures the root logger with
    INFO and a RichHandler), and sees no INFO line it did not ask for."""
    ran = subprocess.run([sys.executable, "-c", HOST, host], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert ran.returncode == 0, ran.stderr
    report = json.loads(ran.stdout)
    assert report["after"] == report["before"] and report["tools"] == 4
    assert report["before"][1] == logging.ERROR
    assert "INFO" not in ran.stderr and "an INFO line" not in ran.stderr


ENTRY_POINTS = {Path("kbctl/serve/logs.py")}  # the JSON log that the entry points (kbctl/cli/) install
CONFIGURING = {"basicConfig", "dictConfig", "fileConfig", "addHandler", "captureWarnings"}


def test_no_library_module_configures_logging() -> None:
    """Outside kbctl/cli/ and the log module the entry points call, no kbctl module adds a handler, calls
    basicConfig / dictConfig / fileConfig / captureWarnings, or touches the root logger."""
    found = []
    for path in sorted((ROOT / "kbctl").rglob("*.py")):
        relative = path.relative_to(ROOT)
        if relative.parts[:2] == ("kbctl", "cli") or relative in ENTRY_POINTS:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            root = name == "getLogger" and not node.args  # the root logger
            if name in CONFIGURING or root:
                found.append(f"{relative}:{node.lineno}: {name}")
    assert not found
