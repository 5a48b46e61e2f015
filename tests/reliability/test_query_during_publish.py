"""A query overlapping publishes and pruning reads one consistent version: never a wrong empty answer."""

from __future__ import annotations

import threading

import pytest

from kbctl.client import KnowledgeBaseStore
from kbctl.manifest import parse_manifests
from tests.support.manifests import knowledge_base, text_source

PUBLISHES = 8

STABLE = "Invoices and credit notes are kept for seven years after the end of the financial year."


def manifest(round_: int) -> str:
    """Version `round_` of a knowledge base that keeps one version only (so each publish prunes the last)."""
    text = f"{STABLE}\n\nRevision {round_}: timesheets are kept for {round_ + 2} years.\n"
    return knowledge_base(
        "policy", text_source("retention", text), versionHistory=1, chunking={"maxChars": 120, "overlapChars": 0}
    )


@pytest.mark.reliability
def test_queries_during_publishes_never_answer_empty(store: KnowledgeBaseStore) -> None:
    """While versions are published and the previous one pruned, every query answers from a whole version."""
    assert not store.apply(parse_manifests(manifest(0), "kb.yaml")).failed
    errors: list[BaseException] = []
    done = threading.Event()

    def publish() -> None:
        try:
            with KnowledgeBaseStore(settings=store.settings) as publisher:
                for round_ in range(1, PUBLISHES + 1):
                    report = publisher.apply(parse_manifests(manifest(round_), "kb.yaml"))
                    assert not report.failed and report.results[0].action == "configured"
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=publish)
    thread.start()
    answers = empties = 0
    versions: set[int] = set()
    try:
        while not done.is_set() or answers < 20:
            result = store.query("policy", "how long are invoices kept?", threshold=-1)
            answers += 1
            versions.add(result.version)
            if not result.hits or STABLE not in " ".join(h.text for h in result.hits):
                empties += 1
    finally:
        thread.join(timeout=120)
    assert not errors, errors
    # Queries ran between publishes (a version neither the first nor the last answered), not only before or after.
    assert versions & set(range(2, PUBLISHES + 1)), f"no query overlapped a publish: versions {sorted(versions)}"
    assert empties == 0, f"{empties} of {answers} queries answered without the stable chunk"
    assert [v.number for v in store.history("policy")] == [PUBLISHES + 1]
