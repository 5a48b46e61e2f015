"""Three `kbctl controller` processes against one database share the pending work: each knowledge base is
reconciled by exactly one of them, none is lost, and a change recorded meanwhile is reconciled once too."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from kbctl.client import KnowledgeBaseStore
from kbctl.manifest import parse_manifests
from tests.support.manifests import knowledge_base, text_source

pytestmark = [pytest.mark.reliability, pytest.mark.slow]

KBS = 12
_RECONCILED = re.compile(r"^KnowledgeBase/(kb-\d+) (created|configured) \(version (\d+)\)", re.MULTILINE)


def manifests(fact: str) -> str:
    """KBS one-source knowledge bases kb-0 … kb-N stating `fact`."""
    return "\n---\n".join(knowledge_base(f"kb-{i}", text_source("facts", f"Fact {i}: {fact}")) for i in range(KBS))


def wait_until(check: object, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "the controllers did not finish the work"
        time.sleep(0.5)


def test_three_controllers_reconcile_each_knowledge_base_once(
    store: KnowledgeBaseStore, database_url: str, tmp_path: Path
) -> None:
    """12 pending knowledge bases, then a change to all of them: 3 controllers make exactly 24 versions, one each."""
    env = {**os.environ, "KBCTL_DATABASE_URL": database_url, "KBCTL_HOME": str(store.settings.home)}
    logs = [tmp_path / f"controller-{n}.log" for n in range(3)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "kbctl", "controller", "--poll-seconds", "1"],
            env=env,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
        )
        for log in logs
    ]
    try:
        wait_until(lambda: all("running" in log.read_text() for log in logs), timeout=60)
        store.apply(parse_manifests(manifests("invoices are kept for seven years."), "kb.yaml"), wait=False)
        wait_until(lambda: sum(s.version == 1 and s.ready for s in store.list()) == KBS)
        store.apply(parse_manifests(manifests("invoices are kept for ten years."), "kb.yaml"), wait=False)
        wait_until(lambda: sum(s.version == 2 and s.ready for s in store.list()) == KBS)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=60)
    reconciled = [m.groups() for log in logs for m in _RECONCILED.finditer(log.read_text())]
    counts = Counter((name, version) for name, _, version in reconciled)
    assert sorted(counts) == sorted((f"kb-{i}", v) for i in range(KBS) for v in ("1", "2"))
    assert set(counts.values()) == {1}  # no knowledge base reconciled twice
    assert len({n for n, log in enumerate(logs) if _RECONCILED.search(log.read_text())}) >= 2  # the work was shared
    versions = store.db.connection.execute("SELECT count(*) FROM kb_versions").fetchone()
    assert versions == (2 * KBS,)
