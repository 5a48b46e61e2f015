"""Desired state, the controller, status conditions and `wait`, on the real store with the real model."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.engine.results import KnowledgeBaseResult
from kbctl.manifest import parse_manifests
from tests.support.lines import Lines


def kb_text(name: str, fact: str = "Invoices are kept for seven years.") -> str:
    """A one-source KnowledgeBase manifest."""
    return f"""apiVersion: kbctl.dev/v1alpha1
kind: KnowledgeBase
metadata:
  name: {name}
  labels: {{team: ops}}
spec:
  sources:
    - name: facts
      text: "{fact}"
"""


def kbs(text: str):  # type: ignore[no-untyped-def]
    """Parse manifests from YAML text."""
    return parse_manifests(text, "kb.yaml")


def conditions(store: KnowledgeBaseStore, name: str) -> dict[str, tuple[str, str]]:
    """Condition type → (status, reason) of a knowledge base."""
    return {c.type: (c.status, c.reason) for c in store.describe(name).conditions}


def test_in_process_apply_sets_generation_and_conditions(store: KnowledgeBaseStore) -> None:
    """A reconciled knowledge base is Ready, not Progressing, not Degraded, with observedGeneration current."""
    store.apply(kbs(kb_text("a")))
    store.apply(kbs(kb_text("a", "Invoices are kept for ten years.")))
    detail = store.describe("a")
    assert (detail.generation, detail.observed_generation, detail.version) == (2, 2, 2)
    assert conditions(store, "a") == {
        "Ready": ("True", "Reconciled"),
        "Progressing": ("False", "Reconciled"),
        "Degraded": ("False", "AllSourcesReady"),
    }
    store.apply(kbs(kb_text("a", "Invoices are kept for ten years.")))
    assert store.describe("a").generation == 2  # unchanged manifests do not make a generation


def test_submit_records_pending_work_and_the_controller_reconciles_it(store: KnowledgeBaseStore) -> None:
    """apply without --wait only records the desired state; a controller publishes it and marks it Ready."""
    store.apply(kbs(kb_text("a")))
    before = store.db.counts()
    [pending] = store.apply(kbs(kb_text("a", "Invoices are kept for ten years.")), wait=False).recorded
    assert (pending.action, pending.version, pending.pending) == ("configured", 2, True)
    assert store.db.counts() == before  # nothing ingested yet
    assert conditions(store, "a")["Ready"] == ("True", "Serving")  # version 1 still serves while 2 waits
    assert conditions(store, "a")["Progressing"] == ("True", "Pending")
    assert "seven years" in store.query("a", "how long are invoices kept?").hits[0].text
    assert not store.wait("a", timeout=0.2)  # Ready is awaited for the generation just recorded
    [row] = store.list()
    assert (row.ready, row.version) == (True, 1)

    processed = store.controller().run_once()
    assert [r.name for r in processed.results] == ["a"] and processed.exit_code() == 0
    assert store.wait("a", timeout=0.2)
    assert "ten years" in store.query("a", "how long are invoices kept?").hits[0].text
    [again] = store.apply(kbs(kb_text("a", "Invoices are kept for ten years.")), wait=False).recorded
    assert (again.action, again.version, again.pending) == ("unchanged", 2, False)


def test_a_newer_generation_recorded_during_a_reconcile_stays_pending(store: KnowledgeBaseStore) -> None:
    """A desired manifest recorded while a controller works on an older one is not lost."""
    store.apply(kbs(kb_text("a", "Version one.")), wait=False)
    ctl = store.controller()
    claim = ctl.claim()
    assert claim is not None and claim.generation == 1
    store.apply(kbs(kb_text("a", "Version two.")), wait=False)
    ctl.process(claim)
    row = store.db.get_kb("a")
    assert row is not None and (row.generation, row.observed_generation) == (2, 1)
    assert conditions(store, "a")["Ready"] == ("True", "Serving")
    assert conditions(store, "a")["Progressing"] == ("True", "Pending")
    assert len(ctl.run_once().results) == 1
    assert store.query("a", "which version?", threshold=-1).hits[0].text == "Version two."


def test_two_controllers_never_process_one_knowledge_base_twice(store: KnowledgeBaseStore) -> None:
    """Two controllers draining 10 pending knowledge bases share the work without overlap."""
    names = [f"kb-{i}" for i in range(10)]
    store.apply(kbs("---\n".join(kb_text(n, f"Fact number {i}.") for i, n in enumerate(names))), wait=False)
    stores = [KnowledgeBaseStore(settings=store.settings) for _ in range(2)]
    controllers = [s.controller() for s in stores]
    threads = [threading.Thread(target=c.run_once) for c in controllers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    processed: list[KnowledgeBaseResult] = [r for c in controllers for r in c.processed]
    counts = Counter(r.name for r in processed)
    assert sorted(counts) == names and set(counts.values()) == {1}
    assert all(r.action == "created" and r.version == 1 for r in processed)
    assert all(s.version == 1 and s.ready for s in store.list())
    for s in stores:
        s.close()


def test_concurrent_applies_of_one_knowledge_base_make_one_version(store: KnowledgeBaseStore) -> None:
    """Two applies of the same change at once serialize on the KB lock: exactly one new version results."""
    store.apply(kbs(kb_text("a")))
    stores = [KnowledgeBaseStore(settings=store.settings) for _ in range(2)]
    results: list[str] = []

    def apply(s: KnowledgeBaseStore) -> None:
        [r] = s.apply(kbs(kb_text("a", "Invoices are kept for ten years."))).results
        results.append(f"{r.action} {r.version}")

    threads = [threading.Thread(target=apply, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert sorted(results) == ["configured 2", "unchanged 2"]
    versions = store.db.connection.execute("SELECT count(*) FROM kb_versions").fetchone()
    assert versions == (2,)
    for s in stores:
        s.close()


def test_controller_once_exits_1_when_a_reconcile_failed(
    store: KnowledgeBaseStore, cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`controller --once` in a pipeline: a knowledge base it could not reconcile (no API key for its model) makes
    it exit 1 and say how many failed; the good one is still published."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    bad = kb_text("b").replace("  sources:", "  embedding: {model: openai/text-embedding-3-small}\n  sources:")
    store.apply(kbs(kb_text("a") + "---\n" + bad), wait=False)
    ran = cli.invoke(app, ["controller", "--once"])
    assert ran.exit_code == 1, ran.output
    assert ran.stdout.splitlines()[-1] == "reconciled 2 knowledge bases, 1 failed"
    assert [(s.name, s.ready) for s in store.list()] == [("a", True), ("b", False)]


def test_wait_and_controller_cli(store: KnowledgeBaseStore, cli: CliRunner) -> None:
    """`kbctl wait` times out on pending work (exit 1) and succeeds once `kbctl controller --once` ran."""
    store.apply(kbs(kb_text("a")), wait=False)
    timed_out = cli.invoke(app, ["wait", "kb", "a", "--for=condition=Ready", "--timeout=300ms"])
    assert timed_out.exit_code == 1
    assert timed_out.stderr == "Error: timed out after 300ms waiting for Ready=True on knowledgebase/a\n"
    ran = cli.invoke(app, ["controller", "--once"])
    assert (ran.exit_code, ran.stdout.splitlines()[-1]) == (0, "reconciled 1 knowledge base")
    ok = cli.invoke(app, ["wait", "knowledgebase", "a", "--for", "condition=Ready", "--timeout", "5s"])
    assert (ok.exit_code, ok.stdout) == (0, "knowledgebase/a condition met\n")
    degraded = cli.invoke(app, ["wait", "kb", "a", "--for=condition=Degraded=false", "--timeout=1s"])
    assert degraded.exit_code == 0
    bad = cli.invoke(app, ["wait", "kb", "a", "--for=ready"])
    assert bad.exit_code == 2


def test_apply_without_wait_records_pending_work(store: KnowledgeBaseStore, cli: CliRunner, tmp_path: Path) -> None:
    """`apply` without --wait prints 'created (version 1 pending)', ingests nothing, hints at the controller."""
    (tmp_path / "kb.yaml").write_text(kb_text("a"))
    result = cli.invoke(app, ["apply", "-f", str(tmp_path / "kb.yaml"), "--exit-code"])
    assert result.exit_code == 2
    assert result.stdout == (
        "KnowledgeBase/a created (version 1 pending)\n"
        "no controller is running, so nothing is ingested yet: run `kbctl controller` (or `kbctl controller "
        "--once`), or apply again with --wait\n"
    )
    assert store.db.counts()["versions"] == 0
    assert cli.invoke(app, ["controller", "--once"]).exit_code == 0
    again = cli.invoke(app, ["apply", "-f", str(tmp_path / "kb.yaml"), "--exit-code"])
    assert (again.exit_code, again.stdout) == (0, "KnowledgeBase/a unchanged (version 1)\n")


def test_apply_wait_hands_work_to_a_running_controller(store: KnowledgeBaseStore) -> None:
    """With a controller running, `apply --wait` records the work, waits for it, and reports its lines."""
    other = KnowledgeBaseStore(settings=store.settings)
    ctl = other.controller()
    stop = threading.Event()
    thread = threading.Thread(target=ctl.run, args=(stop,), kwargs={"poll_seconds": 0.5})
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not store.controller_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        log = Lines()
        report = store.apply(kbs(kb_text("a")), controller=True, reporter=log, timeout=60)
    finally:
        stop.set()
        thread.join(timeout=30)
        other.close()
    assert log.lines == [
        "KnowledgeBase/a created (version 1); waiting for a controller",
        "KnowledgeBase/a source facts ready: 1 chunk (local/all-MiniLM-L6-v2)",
    ]
    assert [(r.action, r.version) for r in report.results] == [("created", 1)]
    assert [r.name for r in ctl.processed] == ["a"]


def test_query_of_a_pending_new_knowledge_base_says_why(store: KnowledgeBaseStore, cli: CliRunner) -> None:
    """Querying a knowledge base recorded but never reconciled names the reason, exit 1."""
    store.apply(kbs(kb_text("a")), wait=False)
    result = cli.invoke(app, ["query", "a", "anything"])
    assert (result.exit_code, result.stderr) == (
        1,
        'Error: knowledgebase "a" has no published version yet: generation 1 waits for a controller (no version'
        " serves queries); start `kbctl controller`, or apply with --wait\n",
    )


def test_controller_once_in_json_mode_prints_only_json_lines(store: KnowledgeBaseStore, cli: CliRunner) -> None:
    import json

    store.apply(kbs(kb_text("a")), wait=False)
    ran = cli.invoke(app, ["controller", "--once", "--log-format", "json"])
    assert ran.exit_code == 0, ran.output
    records = [json.loads(line) for line in ran.stdout.splitlines()]
    assert [r["event"] for r in records][-2:] == ["ReconcileFinished", "PassFinished"]
    assert records[-1]["message"] == "reconciled 1 knowledge base"
