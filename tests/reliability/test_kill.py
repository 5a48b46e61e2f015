"""kill -9 of `kbctl apply --wait` at fixed points loses nothing but the work in flight.

Each test runs the real CLI in a child process and kills it at one point, found without hooks in kbctl:
a loopback page that answers slowly (during the fetch), a loopback embeddings endpoint counting requests
(mid-embedding), a row lock the test holds that the publish transaction needs (inside the publish), and
one that the pruning after it needs (right after the commit). Afterwards the store is checked: the old
version serves, nothing half-written is visible, and a rerun reuses every vector already cached.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings
from kbctl.embedding import get_embedder
from kbctl.manifest import parse_manifests
from tests.support.embedserver import EmbeddingServer, serve_embeddings
from tests.support.httpserver import fetch_policy_for, serve

pytestmark = [pytest.mark.reliability, pytest.mark.slow]

KEY = "sk-kill-test-4be1"
PARAGRAPHS = 100  # chunks of the big source: two embedding batches of 64 texts


def paragraphs(variant: str) -> str:
    return "\n\n".join(
        f"        Rule {i} of the {variant} handbook: keep record {i} for {i % 9 + 1} years." for i in range(PARAGRAPHS)
    )


def manifest(*, variant: str = "first", url: str | None = None, embedding: str = "", history: int = 5) -> str:
    page = f"    - name: page\n      url: {url}\n" if url else ""
    return f"""apiVersion: kbctl.dev/v1alpha1
kind: KnowledgeBase
metadata:
  name: handbook
spec:
  versionHistory: {history}
  sources:
    - name: rules
      format: text
      text: |
{paragraphs(variant)}
{page}  chunking: {{maxChars: 100, overlapChars: 0}}
{embedding}"""


@contextmanager
def child_apply(
    tmp_path: Path, text: str, database_url: str, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """`kbctl apply -f FILE --wait` in a child process (killed at the end if still running)."""
    path = tmp_path / "kb.yaml"
    path.write_text(text)
    full_env = {**os.environ, "KBCTL_DATABASE_URL": database_url, "KBCTL_ALLOW_PRIVATE_NETWORKS": "1", **(env or {})}
    proc = subprocess.Popen(
        [sys.executable, "-m", "kbctl", "apply", "-f", str(path), "--wait"],
        env=full_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def kill_when(proc: subprocess.Popen[bytes], ready: Callable[[], bool], timeout: float = 60) -> None:
    """SIGKILL the child as soon as `ready()` holds (fails the test if it exits or the moment never comes)."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, f"the apply ended (exit {proc.returncode}) before the kill point"
        assert time.monotonic() < deadline, "the kill point was never reached"
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def waiting_on_lock(database_url: str) -> Callable[[], bool]:
    """Whether some backend waits on a lock (the child, blocked by the test's row lock)."""

    def check() -> bool:
        with psycopg.connect(database_url, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'").fetchone()
        return bool(row and row[0])

    return check


def assert_version_1_serves_whole(store: KnowledgeBaseStore) -> None:
    """Version 1 is current and whole; nothing of the killed apply is visible."""
    detail = store.describe("handbook")
    assert detail.version == 1 and detail.chunks == PARAGRAPHS
    assert [v.number for v in store.history("handbook")] == [1]
    hits = store.query("handbook", "how long is record 7 kept?", threshold=-1).hits
    assert hits and all("first handbook" in h.text for h in hits)
    orphans = store.db.connection.execute(
        "SELECT count(*) FROM kb_source_revisions r WHERE NOT EXISTS"
        " (SELECT 1 FROM kb_version_sources vs WHERE vs.revision_id = r.id)"
    ).fetchone()
    assert orphans == (0,)


@pytest.fixture
def applied(store: KnowledgeBaseStore) -> KnowledgeBaseStore:
    """Version 1 of the handbook, applied in-process."""
    assert not store.apply(parse_manifests(manifest(), "kb.yaml")).failed
    return store


def test_kill_during_the_fetch(applied: KnowledgeBaseStore, tmp_path: Path, database_url: str) -> None:
    """Killed while a page is being fetched: version 1 serves, the KB says a generation is pending, a rerun works."""
    with serve() as site:
        site.route("/slow.md", body="# Slow\n\nA page that takes its time.", content_type="text/markdown", delay=30)
        text = manifest(variant="second", url=site.url("/slow.md"))
        with child_apply(tmp_path, text, database_url) as proc:
            kill_when(proc, lambda: site.hits["/slow.md"] > 0)
        assert_version_1_serves_whole(applied)
        detail = applied.describe("handbook")
        assert detail.generation > detail.observed_generation and detail.ready  # version 1 still serves
        reasons = {c.type: (c.status, c.reason) for c in detail.conditions}
        assert (reasons["Ready"], reasons["Progressing"]) == (("True", "Serving"), ("True", "Pending"))
        assert not applied.wait("handbook", timeout=0.2)  # waiting for Ready means the recorded generation
        site.route("/slow.md", body="# Slow\n\nA page that takes its time.", content_type="text/markdown")
        applied.fetch_policy = fetch_policy_for(site)
        rerun = applied.apply(parse_manifests(text, "kb.yaml"))
    assert not rerun.failed and rerun.results[0].version == 2 and applied.describe("handbook").ready


@pytest.fixture
def endpoint(store: KnowledgeBaseStore) -> Iterator[EmbeddingServer]:
    """A loopback embeddings endpoint running the real local model, answering each request after 30 ms."""
    with serve_embeddings(embedder=get_embedder("local/all-MiniLM-L6-v2", store.settings)) as srv:
        srv.require_key = KEY
        srv.latency = 0.03
        yield srv


def test_kill_mid_embedding_keeps_the_vectors_already_cached(
    store: KnowledgeBaseStore,
    endpoint: EmbeddingServer,
    tmp_path: Path,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Killed after the first batch of vectors was cached: nothing is published, and the rerun embeds the rest only."""
    config = tmp_path / "config.yaml"
    config.write_text(
        f"embedding:\n  providers:\n    loop: {{baseURL: '{endpoint.url}', apiKeyEnv: LOOP_KEY, batchSize: 2}}\n"
    )
    env = {"KBCTL_CONFIG": str(config), "LOOP_KEY": KEY}
    text = manifest(embedding="  embedding: {model: loop/all-MiniLM-L6-v2}\n")
    endpoint.latency = 0.1  # the 36 texts left after the kill point take 5 rounds of 4 requests: 0.5 s or more

    def cached() -> int:
        row = store.db.connection.execute(
            "SELECT count(*) FROM kb_embeddings WHERE model = 'loop/all-MiniLM-L6-v2'"
        ).fetchone()
        assert row is not None
        return int(row[0])

    with child_apply(tmp_path, text, database_url, env) as proc:
        # Vectors are committed call by call (16 texts: 2 per request, 4 requests at once, twice) as they come.
        kill_when(proc, lambda: cached() >= 64)
    counts = store.db.counts()
    assert counts["versions"] == 0 and counts["source_revisions"] == 0 and counts["chunks"] == 0
    kept = cached()
    assert 64 <= kept < PARAGRAPHS
    monkeypatch.setenv("LOOP_KEY", KEY)
    monkeypatch.setenv("KBCTL_CONFIG", str(config))
    with KnowledgeBaseStore(settings=Settings.from_env(home=store.settings.home, database_url=database_url)) as fresh:
        rerun = fresh.apply(parse_manifests(text, "kb.yaml"))
    assert not rerun.failed and rerun.results[0].version == 1
    assert rerun.embedded == PARAGRAPHS - kept


def test_kill_inside_the_publish_transaction(applied: KnowledgeBaseStore, tmp_path: Path, database_url: str) -> None:
    """Killed inside the publish transaction: it rolls back whole; the rerun embeds nothing again."""
    holder = psycopg.connect(database_url)
    try:
        # SHARE lets every read through and stops the INSERT of the new version row, inside the publish.
        holder.execute("LOCK TABLE kb_versions IN SHARE MODE")
        with child_apply(tmp_path, manifest(variant="second"), database_url) as proc:
            kill_when(proc, waiting_on_lock(database_url))
    finally:
        holder.rollback()
        holder.close()
    assert_version_1_serves_whole(applied)
    rerun = applied.apply(parse_manifests(manifest(variant="second"), "kb.yaml"))
    assert not rerun.failed and rerun.results[0].version == 2
    assert rerun.embedded == 0  # every vector was cached before the publish began


def test_kill_right_after_the_commit(store: KnowledgeBaseStore, tmp_path: Path, database_url: str) -> None:
    """Killed after the commit, while pruning: the new version serves whole; a rerun finds it unchanged and Ready."""
    assert not store.apply(parse_manifests(manifest(history=1), "kb.yaml")).failed
    holder = psycopg.connect(database_url)
    try:
        # The publish never touches version 1's row; the pruning after the commit deletes it, and waits here.
        holder.execute("SELECT 1 FROM kb_versions WHERE number = 1 FOR UPDATE")
        with child_apply(tmp_path, manifest(variant="second", history=1), database_url) as proc:
            kill_when(proc, waiting_on_lock(database_url))
    finally:
        holder.rollback()
        holder.close()
    detail = store.describe("handbook")
    assert detail.version == 2 and detail.chunks == PARAGRAPHS
    assert all("second handbook" in h.text for h in store.query("handbook", "record 7", threshold=-1).hits)
    rerun = store.apply(parse_manifests(manifest(variant="second", history=1), "kb.yaml"))
    assert rerun.results[0].action == "unchanged" and store.describe("handbook").ready
