"""The controller's metrics tell the truth: a reconcile that could not read a source is a failure by reason, never a
success; per knowledge base gauges come from the store and leave with a deleted knowledge base; the alert rules of
deploy/alerts fire on what a real controller exports when a source's server stops."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from kbctl.client import KnowledgeBaseStore, Overview
from kbctl.engine.events import (
    NullReporter,
    ReconcileFailed,
    ReconcileFinished,
    ReconcileStarted,
    SourceReconciled,
    SyncFinished,
)
from kbctl.engine.results import AppliedSource
from kbctl.engine.status import KnowledgeBaseSummary
from kbctl.manifest import parse_manifests
from kbctl.serve.controller import ControllerMetrics, HealthServer
from kbctl.store.database import Database
from kbctl.store.syncs import SyncStatus
from tests.support.controllerloop import looping
from tests.support.httpserver import fetch_policy_for, serve
from tests.support.manifests import knowledge_base, url_source
from tests.support.promtool import promtool

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "alerts" / "kbctl.rules.yaml"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def summary(
    name: str, *, ready: bool, sources: int = 2, ready_sources: int = 2, version: int | None = 1
) -> KnowledgeBaseSummary:
    now = datetime.now(UTC)
    return KnowledgeBaseSummary(
        name=name,
        description="",
        labels={},
        ready=ready,
        status="Ready" if ready else "Degraded",
        generation=1,
        observed_generation=1,
        conditions=[],
        version=version,
        model="local/x",
        sources=sources,
        ready_sources=ready_sources,
        chunks=3,
        created_at=now,
        updated_at=now,
    )


def test_a_reconcile_that_could_not_read_a_source_is_a_failure_and_not_a_success() -> None:
    """A refresh that finds a source unreadable and publishes nothing new is `degraded` and a `source_failed`
    failure, and leaves the last success where the last full success put it; a whole failure has its reason."""
    now = [100.0]
    metrics = ControllerMetrics(NullReporter(), clock=lambda: now[0])
    metrics.report(ReconcileStarted("faq", "refresh", "unchanged", 1, 0))
    metrics.report(SourceReconciled("faq", "refresh", AppliedSource(name="hours", fetched=True), "local/x"))
    metrics.report(ReconcileFinished("faq", "refresh", "unchanged", 1))
    now[0] = 160.0
    metrics.report(ReconcileStarted("faq", "refresh", "unchanged", 1, 0))
    stale = AppliedSource(name="hours", state="stale", message="connection refused")
    metrics.report(SourceReconciled("faq", "refresh", stale, "local/x"))
    metrics.report(ReconcileFinished("faq", "refresh", "unchanged", 1))
    metrics.report(ReconcileStarted("faq", "apply", "configured", 2, 1))
    metrics.report(ReconcileFailed("faq", "embedding server unreachable", "model"))
    metrics.report(SyncFinished("docs", "abc", None))
    metrics.report(SyncFinished("docs", "def", "commit def: no folder 'kb'"))
    value = metrics.registry.get_sample_value
    reconciles = "kbctl_controller_reconciles_total"
    assert value(reconciles, {"knowledge_base": "faq", "trigger": "refresh", "outcome": "unchanged"}) == 1
    assert value(reconciles, {"knowledge_base": "faq", "trigger": "refresh", "outcome": "degraded"}) == 1
    assert value(reconciles, {"knowledge_base": "faq", "trigger": "apply", "outcome": "failed"}) == 1
    assert value("kbctl_controller_failures_total", {"knowledge_base": "faq", "reason": "source_failed"}) == 1
    assert value("kbctl_controller_failures_total", {"knowledge_base": "faq", "reason": "model"}) == 1
    assert value("kbctl_controller_last_success_timestamp_seconds", {"knowledge_base": "faq"}) == 100.0
    assert value("kbctl_controller_sync_runs_total", {"sync": "docs", "outcome": "applied"}) == 1
    assert value("kbctl_controller_sync_runs_total", {"sync": "docs", "outcome": "failed"}) == 1


def test_gauges_come_from_the_store_and_a_deleted_knowledge_base_leaves_every_series() -> None:
    """Each scrape sets the per knowledge base and per Sync gauges from the store; a knowledge base gone from it
    takes its counters, histogram and gauges with it, while one still there keeps them."""
    now = [1000.0]
    state = Overview(
        2,
        [summary("faq", ready=False, ready_sources=1), summary("ops", ready=True, version=None)],
        [
            SyncStatus(
                name="docs",
                url="https://git.example/kb.git",
                ref=None,
                path="kb",
                interval="5m",
                prune=True,
                suspend=False,
                last_applied_revision="a" * 40,
                last_applied_at=datetime.fromtimestamp(900, UTC),
                last_attempted_revision="b" * 40,
                last_error="commit bbbbbbbbbbbb: kb/faq.yaml:3: spec: ...",
                next_at=datetime.now(UTC),
            )
        ],
    )
    read: list[Overview] = [state]
    metrics = ControllerMetrics(NullReporter(), clock=lambda: now[0], state=lambda: read[-1])
    for name in ("faq", "ops"):
        metrics.report(ReconcileStarted(name, "apply", "created", 1, 1))
        metrics.report(ReconcileFinished(name, "apply", "created", 1))
    now[0] = 1010.0
    samples = scrape_text(metrics.render().decode())
    assert samples[("kbctl_knowledge_base_ready", frozenset({("knowledge_base", "faq")}))] == 0
    assert samples[("kbctl_knowledge_base_ready", frozenset({("knowledge_base", "ops")}))] == 1
    assert samples[("kbctl_knowledge_base_sources_failing", frozenset({("knowledge_base", "faq")}))] == 1
    assert samples[("kbctl_knowledge_base_serving_version", frozenset({("knowledge_base", "faq")}))] == 1
    assert ("kbctl_knowledge_base_serving_version", frozenset({("knowledge_base", "ops")})) not in samples
    failures = ("kbctl_controller_failures_total", frozenset({("knowledge_base", "faq"), ("reason", "store")}))
    assert samples[failures] == 0  # every reason from 0: the first failure is an increase
    sync = frozenset({("sync", "docs")})
    assert samples[("kbctl_sync_failing", sync)] == 1
    assert samples[("kbctl_sync_behind", sync)] == 1
    assert samples[("kbctl_sync_last_applied_timestamp_seconds", sync)] == 900
    assert samples[("kbctl_sync_interval_seconds", sync)] == 300
    assert samples[("kbctl_sync_suspended", sync)] == 0
    assert samples[("kbctl_controller_queue_depth", frozenset())] == 2

    read.append(Overview(0, [summary("ops", ready=True)], []))  # faq deleted, the Sync too
    now[0] = 1020.0
    text = metrics.render().decode()
    assert 'knowledge_base="faq"' not in text and 'sync="docs"' not in text
    assert 'kbctl_controller_reconciles_total{knowledge_base="ops",outcome="created",trigger="apply"} 1.0' in text


def scrape_text(text: str) -> Samples:
    """The samples of a Prometheus text page, by name and labels."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@contextmanager
def running_controller(store: KnowledgeBaseStore) -> Iterator[Callable[[], Samples]]:
    """A controller loop on a thread of this process with its metrics server on a free port of 127.0.0.1, as
    `kbctl controller --metrics-address` runs them; yields a scrape of /metrics over HTTP."""
    metrics = ControllerMetrics(NullReporter(), state=store.overview)
    ctl = store.controller(reporter=metrics)
    server = HealthServer(("127.0.0.1", 0), metrics, ctl.alive)

    def scrape() -> Samples:
        response = httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=10)
        assert response.status_code == 200, response.text
        return scrape_text(response.text)

    try:
        with looping(ctl, poll_seconds=0.2):
            yield scrape
    finally:
        server.close()


def make_due(url: str) -> None:
    """What the passing of a refresh interval does (on a connection of the test's own: the controller's is busy)."""
    with Database(url, migrate=False) as db:
        db.connection.execute("UPDATE kb_refresh_schedule SET next_at = now() - interval '1 second'")


def until(scrape: Callable[[], Samples], check: Callable[[Samples], bool], timeout: float = 60.0) -> Samples:
    deadline = time.monotonic() + timeout
    while True:
        samples = scrape()
        if check(samples) or time.monotonic() > deadline:
            return samples
        time.sleep(0.2)


def kb(name: str, **labels: str) -> frozenset[tuple[str, str]]:
    return frozenset({("knowledge_base", name), *labels.items()})


def test_a_stopped_source_server_turns_the_failure_counter_the_gauge_and_the_alerts(
    store: KnowledgeBaseStore, tmp_path: Path
) -> None:
    """A url: source refreshed every minute by a running controller: while its server answers, each refresh is a
    success; once the server is stopped, the scraped failure counter rises (source_failed), Ready drops to 0 with a
    failing source, the last success stays put, and the alerts of deploy/alerts, fed these scraped values, fire where
    they did not before. Deleting the knowledge base removes its series."""
    failed = ("kbctl_controller_failures_total", kb("office", reason="source_failed"))
    unchanged = ("kbctl_controller_reconciles_total", kb("office", trigger="refresh", outcome="unchanged"))
    degraded = ("kbctl_controller_reconciles_total", kb("office", trigger="refresh", outcome="degraded"))
    ready = ("kbctl_knowledge_base_ready", kb("office"))
    failing = ("kbctl_knowledge_base_sources_failing", kb("office"))
    success = ("kbctl_controller_last_success_timestamp_seconds", kb("office"))
    with ExitStack() as stack:
        site = stack.enter_context(serve())
        site.route("/hours.md", body="# Hours\n\nThe office opens at nine.", content_type="text/markdown")
        store.fetch_policy = fetch_policy_for(site)
        text = knowledge_base("office", url_source("hours", site.url("/hours.md")), refresh={"interval": "1m"})
        assert not store.apply(parse_manifests(text, "kb.yaml")).failed
        scrape = stack.enter_context(running_controller(store))

        make_due(store.db.url)
        healthy = until(scrape, lambda s: s.get(unchanged, 0) >= 1)
        assert (healthy[unchanged], healthy[ready], healthy[failing], healthy[failed]) == (1, 1, 0, 0)
        assert healthy[success] > 0

        site.close()  # the source's server stops
        make_due(store.db.url)
        first = until(scrape, lambda s: s.get(failed, 0) >= 1)
        make_due(store.db.url)
        second = until(scrape, lambda s: s.get(failed, 0) >= 2)
        assert (first[failed], second[failed]) == (1, 2)
        assert (second[degraded], second[unchanged]) == (2, 1)  # never counted as unchanged again
        assert (second[ready], second[failing]) == (0, 1)
        assert second[success] == healthy[success]  # a failure is not a success
        assert ("kbctl_controller_failures_total", kb("office", reason="store")) in second  # reasons from 0

        with store_of(store) as other:
            described = other.describe("office")
            assert not described.ready and [s.state for s in described.source_status] == ["stale"]
            other.delete("office")
        gone = until(scrape, lambda s: not [k for k in s if ("knowledge_base", "office") in k[1]])
        assert not [key for key in gone if ("knowledge_base", "office") in key[1]]

    fired = alerts_on([healthy, first, second], tmp_path)
    assert fired == {
        "before": set(),
        "after": {("KbctlKnowledgeBaseNotReady", "office"), ("KbctlReconcilesFailing", "office")},
    }


def store_of(store: KnowledgeBaseStore) -> KnowledgeBaseStore:
    """A store of the test's own on the same database (the running controller holds `store`'s connection)."""
    return KnowledgeBaseStore(settings=store.settings)


def alerts_on(scrapes: list[Samples], tmp_path: Path) -> dict[str, set[tuple[str, str]]]:
    """Which alerts of deploy/alerts fire (`promtool test rules`) on series made of the scraped values: a minute
    per scrape, the last one's growth repeated for 20 more minutes (a refresh failing every minute, as the
    interval says); asked 1 minute in (healthy) and 20 minutes after the source stopped."""
    failing = scrapes[1:]
    series = []
    for key in sorted({k for s in scrapes for k in s if k[0].startswith(("kbctl_controller", "kbctl_knowledge_base"))}):
        name, labels = key
        values = [s.get(key, 0.0) for s in scrapes]
        step = values[-1] - values[-2]
        shown = ", ".join(f'{k}="{v}"' for k, v in sorted(labels))
        grow = f"{values[-1]:g}+{step:g}x20" if step else f"{values[-1]:g}x20"
        series.append(
            {
                "series": f"{name}{{{shown}}}",
                "values": f"{values[0]:g} {values[0]:g} " + " ".join(f"{v:g}" for v in values[1:-1]) + f" {grow}",
            }
        )
    start = 2  # minutes of the healthy scrape before the failing ones
    asked = {"before": 1, "after": start + len(failing) + 18}
    names = ("KbctlKnowledgeBaseNotReady", "KbctlReconcilesFailing")
    fired: dict[str, set[tuple[str, str]]] = {}
    for when, minute in asked.items():
        fired[when] = set()
        for alert in names:
            case = {"eval_time": f"{minute}m", "alertname": alert, "exp_alerts": [_expected(alert)]}
            test = {
                "rule_files": [str(RULES)],
                "evaluation_interval": "1m",
                "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": [case]}],
            }
            path = tmp_path / f"{when}-{alert}-office.yaml"
            path.write_text(yaml.safe_dump(test))
            ran = subprocess.run([promtool(), "test", "rules", str(path)], capture_output=True, text=True)
            if ran.returncode == 0:  # promtool passes when exactly this alert fires, for office
                fired[when].add((alert, "office"))
    return fired


def _expected(alert: str) -> dict[str, Any]:
    """The alert `alert` of the rules for knowledge base office, labels and annotations as promtool compares them."""
    labels = {"knowledge_base": "office", "reason": "source_failed"}
    [rule] = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if r["alert"] == alert]
    annotations = {}
    for key, template in rule["annotations"].items():
        for name, value in labels.items():
            template = template.replace(f"{{{{ $labels.{name} }}}}", value)
        annotations[key] = template
    by = ("knowledge_base", "reason") if alert == "KbctlReconcilesFailing" else ("knowledge_base",)  # its `by`
    shown = {**rule["labels"], **{k: labels[k] for k in by}}
    return {"exp_labels": shown, "exp_annotations": annotations}
