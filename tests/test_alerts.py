"""deploy/alerts and deploy/dashboards: the alert rules pass `promtool check rules` and their unit tests, and every
expression of the rules and of the Grafana dashboard parses and names only metrics the controller or serve export."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from kbctl.engine.events import NullReporter
from kbctl.serve.controller import ControllerMetrics
from kbctl.serve.metrics import Metrics
from tests.support.promtool import promtool

ROOT = Path(__file__).resolve().parent.parent
ALERTS = ROOT / "deploy" / "alerts"
DASHBOARD = ROOT / "deploy" / "dashboards" / "kbctl.json"

_SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}


def exported() -> set[str]:
    """Every sample name `kbctl controller --metrics-address` and `kbctl serve` can export."""
    names = set()
    for registry in (ControllerMetrics(NullReporter()).registry, Metrics().registry):
        for family in registry.collect():
            names.update(family.name + suffix for suffix in _SUFFIXES[family.type])
    return names


def rule_expressions() -> list[str]:
    rules = yaml.safe_load((ALERTS / "kbctl.rules.yaml").read_text())
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def dashboard_expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]


def metric_names(expression: str) -> set[str]:
    return set(re.findall(r"\bkbctl_[a-z_]+\b", expression))


def test_the_alert_rules_check_and_pass_their_unit_tests() -> None:
    """`promtool check rules` accepts the rules and `promtool test rules` passes every case of the test file: each
    alert fires when it should (not ready for 15 minutes, reconciles failing, a Sync stuck or not applying, serve
    5xx above 5%, query latency above 2 s) and stays quiet on the healthy series beside it."""
    checked = subprocess.run([promtool(), "check", "rules", "kbctl.rules.yaml"], cwd=ALERTS, capture_output=True)
    assert checked.returncode == 0, checked.stdout.decode() + checked.stderr.decode()
    assert b"SUCCESS: 6 rules found" in checked.stdout
    tested = subprocess.run([promtool(), "test", "rules", "kbctl.rules.test.yaml"], cwd=ALERTS, capture_output=True)
    assert tested.returncode == 0, tested.stdout.decode() + tested.stderr.decode()
    tests = yaml.safe_load((ALERTS / "kbctl.rules.test.yaml").read_text())["tests"]
    covered = {case["alertname"] for test in tests for case in test["alert_rule_test"]}
    rules = yaml.safe_load((ALERTS / "kbctl.rules.yaml").read_text())
    assert covered == {rule["alert"] for group in rules["groups"] for rule in group["rules"]}


def test_a_broken_alert_fails_its_unit_test(tmp_path: Path) -> None:
    """The unit tests can fail: with the not-ready threshold moved from 15 to 30 minutes, promtool says so."""
    broken = (ALERTS / "kbctl.rules.yaml").read_text().replace("for: 15m", "for: 30m", 1)
    (tmp_path / "kbctl.rules.yaml").write_text(broken)
    (tmp_path / "kbctl.rules.test.yaml").write_text((ALERTS / "kbctl.rules.test.yaml").read_text())
    tested = subprocess.run([promtool(), "test", "rules", "kbctl.rules.test.yaml"], cwd=tmp_path, capture_output=True)
    assert tested.returncode == 1
    assert b"alertname: KbctlKnowledgeBaseNotReady, time: 20m" in tested.stdout + tested.stderr


def test_every_expression_parses_and_names_only_exported_metrics(tmp_path: Path) -> None:
    """Each query of the dashboard parses as PromQL (promtool checks it as a recording rule), and the rules and
    the dashboard name no metric that neither the controller nor serve exports."""
    expressions = dashboard_expressions()
    assert len(expressions) >= 20
    rules = {
        "groups": [
            {"name": "dashboard", "rules": [{"record": f"panel_{i}", "expr": e} for i, e in enumerate(expressions)]}
        ]
    }
    (tmp_path / "dashboard.rules.yaml").write_text(yaml.safe_dump(rules))
    checked = subprocess.run([promtool(), "check", "rules", "dashboard.rules.yaml"], cwd=tmp_path, capture_output=True)
    assert checked.returncode == 0, checked.stdout.decode() + checked.stderr.decode()
    known = exported()
    unknown = {name for e in [*expressions, *rule_expressions()] for name in metric_names(e)} - known
    assert not unknown
    used = {name for e in expressions for name in metric_names(e)}
    families = {re.sub(r"_(total|bucket|sum|count)$", "", n) for n in known}
    assert families <= {re.sub(r"_(total|bucket|sum|count)$", "", n) for n in used}  # every metric is on it


def test_the_dashboard_is_grafana_json_with_one_datasource_variable() -> None:
    """Every panel reads the `datasource` variable (chosen on import) and has a title and a description."""
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "kbctl" and dashboard["schemaVersion"] >= 36
    [variable] = dashboard["templating"]["list"]
    assert (variable["name"], variable["type"], variable["query"]) == ("datasource", "datasource", "prometheus")
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert all(p["datasource"] == {"type": "prometheus", "uid": "${datasource}"} for p in panels)
    assert all(p["title"] and p["description"] for p in panels)
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
