"""`kbctl controller` as a service: Prometheus metrics, /healthz and JSON logs, from the real process."""

from __future__ import annotations

import json
import os
import re
import select
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import typer.main
import yaml

from kbctl.cli import app
from kbctl.cli.progress import JsonLogReporter
from kbctl.client import KnowledgeBaseStore
from kbctl.engine.events import NullReporter, ReconcileFailed, ReconcileFinished, ReconcileStarted
from kbctl.manifest import parse_manifests
from kbctl.serve.controller import ControllerMetrics, parse_address
from kbctl.serve.logs import json_logging
from tests.test_controller import kb_text


def test_metrics_count_reconciles_durations_failures_and_last_success() -> None:
    now = [100.0]
    metrics = ControllerMetrics(NullReporter(), pending=lambda: 3, clock=lambda: now[0])
    metrics.report(ReconcileStarted("a", "apply", "created", 1, 1))
    now[0] = 112.5
    metrics.report(ReconcileFinished("a", "apply", "created", 1))
    metrics.report(ReconcileStarted("b", "refresh", "configured", 2, 1))
    metrics.report(ReconcileFailed("b", "no source could be read"))
    value = metrics.registry.get_sample_value
    labels = {"knowledge_base": "a", "trigger": "apply", "outcome": "created"}
    assert value("kbctl_controller_reconciles_total", labels) == 1
    assert value("kbctl_controller_reconcile_duration_seconds_sum", {"knowledge_base": "a", "trigger": "apply"}) == (
        pytest.approx(12.5)
    )
    assert value("kbctl_controller_failures_total", {"knowledge_base": "b", "reason": "other"}) == 1
    assert value("kbctl_controller_last_success_timestamp_seconds", {"knowledge_base": "a"}) == pytest.approx(112.5)
    assert value("kbctl_controller_last_success_timestamp_seconds", {"knowledge_base": "b"}) is None
    metrics.render()  # a scrape reads the queue depth
    assert value("kbctl_controller_queue_depth") == 3


def test_json_logs_are_one_object_per_event(capsys: pytest.CaptureFixture[str]) -> None:
    """Each event is one JSON line of the `kbctl.controller` logger, with the keys of every kbctl JSON log line."""
    log = JsonLogReporter()
    with json_logging():
        log.report(ReconcileStarted("a", "apply", "created", 1, 2))
        log.report(ReconcileFailed("a", "no source could be read", "no_content"))
        log.report(ReconcileFinished("b", "apply", "configured", 4))  # a success is logged too
    first, second, third = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first.pop("time"))
    assert first == {
        "level": "info",
        "logger": "kbctl.controller",
        "message": "KnowledgeBase/a created (version 1); waiting for the ingestion of 2 sources",
        "event": "ReconcileStarted",
        "knowledgeBase": "a",
    }
    assert (second["level"], second["message"], second["reason"]) == (
        "error",
        "KnowledgeBase/a failed: no source could be read",
        "no_content",
    )
    assert (third["event"], third["level"], third["message"]) == (
        "ReconcileFinished",
        "info",
        "KnowledgeBase/b configured (version 4)",
    )


@pytest.mark.parametrize(
    ("text", "address"),
    [(":9090", ("0.0.0.0", 9090)), ("127.0.0.1:0", ("127.0.0.1", 0)), ("9090", None), ("h:99999", None), ("h:", None)],
)
def test_metrics_address(text: str, address: tuple[str, int] | None) -> None:
    if address is None:
        with pytest.raises(ValueError, match="invalid address"):
            parse_address(text)
    else:
        assert parse_address(text) == address


def _line(stream: object, pattern: str, timeout: float = 60.0) -> re.Match[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([stream], [], [], 0.5)
        if ready:
            line = stream.readline()  # type: ignore[attr-defined]
            found = re.search(pattern, line)
            if found:
                return found
    raise AssertionError(f"no line matching {pattern!r} within {timeout} s")


def test_a_controller_process_serves_metrics_healthz_and_json_logs(
    store: KnowledgeBaseStore, database_url: str, tmp_path: Path
) -> None:
    env = {**os.environ, "KBCTL_DATABASE_URL": database_url, "KBCTL_HOME": str(store.settings.home)}
    argv = [sys.executable, "-m", "kbctl", "controller", "--metrics-address", "127.0.0.1:0", "--log-format", "json"]
    with subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            port = int(_line(proc.stdout, r"metrics and /healthz on port (\d+)").group(1))  # a JSON line too
            base = f"http://127.0.0.1:{port}"
            assert httpx.get(f"{base}/healthz").text == "ok\n"
            store.apply(parse_manifests(kb_text("a"), "kb.yaml"), wait=False)
            event = json.loads(_line(proc.stdout, r'"event": "SourceReconciled"').string)
            assert (event["knowledgeBase"], event["level"]) == ("a", "info")
            deadline = time.monotonic() + 30
            while "created" not in (body := httpx.get(f"{base}/metrics").text) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert 'kbctl_controller_reconciles_total{knowledge_base="a",outcome="created",trigger="apply"} 1.0' in body
            assert "kbctl_controller_queue_depth 0.0" in body
            assert httpx.post(f"{base}/metrics").status_code == 405
            assert httpx.get(f"{base}/other").status_code == 404
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    assert proc.returncode == 0
    assert store.describe("a").version == 1


def test_the_deploy_examples_run_options_the_controller_takes() -> None:
    """deploy/: the Kubernetes Deployment and the systemd unit start `kbctl controller` with options it
    accepts (parsed by the real command), and probe the paths it serves."""
    deploy = Path(__file__).resolve().parent.parent / "deploy"
    manifest = yaml.safe_load((deploy / "base" / "controller.yaml").read_text())
    [container] = manifest["spec"]["template"]["spec"]["containers"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    unit = (deploy / "systemd" / "kbctl-controller.service").read_text()
    [exec_start] = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    group = typer.main.get_command(app)
    for args in (container["args"], shlex.split(exec_start)[1:]):
        assert args[0] == "controller"
        command = group.get_command(group.make_context("kbctl", ["controller"]), "controller")  # type: ignore[attr-defined]
        context = command.make_context("controller", args[1:])
        assert context.params["log_format"] == "json"
        parse_address(context.params["metrics_address"])
