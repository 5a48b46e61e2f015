"""Drift converged: a manual `rollout undo` is brought back to the applied manifest by the controller's next pass
(reusing what is stored, with an event); with spec.suspend it is reported once and left as it is."""

from __future__ import annotations

import pytest

from kbctl.client import KnowledgeBaseStore
from kbctl.manifest import parse_manifests
from tests.support.lines import Lines
from tests.support.manifests import knowledge_base, text_source

FIRST = "Invoices are kept for seven years."
SECOND = "Invoices are kept for ten years after the end of the financial year."


def apply_both(store: KnowledgeBaseStore, **spec: object) -> None:
    for text in (FIRST, SECOND):
        store.apply(parse_manifests(knowledge_base("policy", text_source("retention", text), **spec), "kb.yaml"))


def serving_text(store: KnowledgeBaseStore) -> str:
    return store.query("policy", "how long are invoices kept?", threshold=-1).hits[0].text


def test_a_manual_rollback_is_reverted_by_the_next_controller_pass(store: KnowledgeBaseStore) -> None:
    apply_both(store)
    store.rollback("policy")
    assert FIRST in serving_text(store)
    log = Lines()
    report = store.controller(reporter=log).run_once()
    assert [(r.name, r.action) for r in report.results] == [("policy", "configured")]
    assert sum(s.embedded for r in report.results for s in r.sources) == 0  # the stored content is reused
    assert SECOND in serving_text(store)
    detail = store.describe("policy")
    assert detail.version == 3 and detail.ready and detail.generation == detail.observed_generation
    assert (
        "KnowledgeBase/policy: version 1 serves a manifest other than the one last applied; re-applying it" in log.lines
    )
    reasons = [(e.reason, e.component) for e in store.events(["policy"])]
    assert reasons[-3:] == [("RolledBack", "rollout"), ("DriftReverted", "controller"), ("Published", "controller")]
    assert store.controller().run_once().results == []  # converged: nothing more to do
    assert [e.reason for e in store.events(["policy"])][-1] == "Published"


def test_with_suspend_the_drift_is_reported_once_and_left(store: KnowledgeBaseStore) -> None:
    apply_both(store, suspend=True)
    store.rollback("policy")
    controller = store.controller()
    assert controller.run_once().results == [] and controller.run_once().results == []
    assert FIRST in serving_text(store)
    [drift] = [e for e in store.events(["policy"]) if e.reason == "DriftDetected"]
    assert (drift.type, drift.count) == ("Warning", 1)
    assert "spec.suspend is set, so it is left as it is" in drift.message


def test_accepting_the_rollback_by_applying_it_is_not_drift(store: KnowledgeBaseStore) -> None:
    """Applying the manifest the rollback serves makes it the applied one: the controller then leaves it."""
    apply_both(store)
    store.rollback("policy")
    store.apply(parse_manifests(knowledge_base("policy", text_source("retention", FIRST)), "kb.yaml"))
    assert store.controller().run_once().results == []
    assert FIRST in serving_text(store)


def test_a_failing_applied_manifest_is_not_retried_as_drift(
    store: KnowledgeBaseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An applied manifest whose reconcile failed (its model cannot load) is pending, retried as such by a
    controller: not drift, and the version before it keeps serving."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    apply_both(store)
    bad = knowledge_base(
        "policy", text_source("retention", SECOND), embedding={"model": "openai/text-embedding-3-small"}
    )
    [result] = store.apply(parse_manifests(bad, "kb.yaml")).results
    assert result.action == "failed"
    [retried] = store.controller().run_once().results  # the pending generation, retried
    assert retried.action == "failed" and "OPENAI_API_KEY" in (retried.message or "")
    assert store.describe("policy").version == 2
    assert "DriftReverted" not in [e.reason for e in store.events(["policy"])]
