"""Real processes: a `kbctl controller` brings back the embedded server it lost, finishes a change an interrupted
`apply --wait` recorded, and never deadlocks with an apply building the first vector index."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kbctl.store.database import Database
from kbctl.store.embedded import stop_server
from tests.support.recovery import read_running, write_policies
from tests.support.serveproc import kbctl_env

pytestmark = [pytest.mark.reliability, pytest.mark.slow]

MANIFEST = """\
apiVersion: kbctl.dev/v1alpha1
kind: KnowledgeBase
metadata:
  name: {name}
spec:
  sources:
    - name: facts
      text: Invoices are kept for seven years.
"""


def kbctl(home: Path, *args: str, **popen: object) -> subprocess.Popen[bytes]:
    """`kbctl ARGS` as a process of its own, on the embedded server of `home`."""
    return subprocess.Popen(  # type: ignore[call-overload,no-any-return]
        [sys.executable, "-m", "kbctl", *args], env=kbctl_env(home, None), **popen
    )


def eventually(check: Callable[[], bool], what: str, timeout: float = 120) -> None:
    """Wait until `check()` holds; a hang detector, not a timing claim."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


@contextmanager
def controller(home: Path, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A `kbctl controller` process, serving until the block ends (stopped with SIGTERM)."""
    proc = kbctl(home, "controller", "--poll-interval", "1s", stdout=log.open("w"), stderr=subprocess.STDOUT)
    try:
        eventually(lambda: "running" in log.read_text(), f"the controller did not start: {log.read_text()}")
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def postmaster_pid(home: Path) -> int:
    return int((home / "pg" / "postmaster.pid").read_text().splitlines()[0])


@pytest.mark.parametrize("how", ["server stop", "kill -9"])
def test_the_controller_starts_the_embedded_server_again(how: str, server_home: Path, tmp_path: Path) -> None:
    """The embedded server stopped by another process, or killed, under a running controller: the controller starts
    it again on its own and reconciles what is applied next."""
    log = tmp_path / "controller.log"
    with controller(server_home, log):
        before = postmaster_pid(server_home)
        if how == "server stop":
            stop = [sys.executable, "-m", "kbctl", "server", "stop"]
            subprocess.run(stop, env=kbctl_env(server_home, None), check=True, capture_output=True)
        else:
            os.kill(before, signal.SIGKILL)
        eventually(lambda: "database unavailable" in log.read_text(), f"not noticed: {log.read_text()}")
        # Nobody but the controller starts it: the test only reads the folder.
        eventually(lambda: read_running(server_home, "SELECT 1") == (1,), f"not started again: {log.read_text()}")
        assert postmaster_pid(server_home) != before
        manifest = tmp_path / "kb.yaml"
        manifest.write_text(MANIFEST.format(name="after-restart"))
        applied = subprocess.run(
            [sys.executable, "-m", "kbctl", "apply", "-f", str(manifest)],
            env=kbctl_env(server_home, None),
            capture_output=True,
            text=True,
        )
        assert applied.returncode == 0, applied.stderr
        eventually(
            lambda: (
                read_running(
                    server_home, "SELECT current_version FROM kb_knowledge_bases WHERE name = %s", "after-restart"
                )
                == (1,)
            ),
            f"not reconciled after the restart: {log.read_text()}",
        )
    stop_server(server_home / "pg")


def seed_vectors(home: Path, count: int) -> None:
    """`count` cached vectors of the default model for texts no knowledge base holds (the cache is content-addressed:
    nothing serves them), so the next apply crosses the line at which the model's first vector index is built."""
    import numpy as np

    from kbctl.store.embedded import embedded_url

    vectors = np.random.default_rng(7).normal(size=(count, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    copying = "COPY kb_embeddings (model, text_sha256, embedding) FROM STDIN"
    with Database(embedded_url(home / "pg")) as db, db.connection.cursor() as cur, cur.copy(copying) as copy:
        for i, v in enumerate(vectors):
            copy.write_row(("local/all-MiniLM-L6-v2", i.to_bytes(32, "big"), v))


def test_apply_and_a_controller_never_deadlock_on_the_first_vector_index(server_home: Path, tmp_path: Path) -> None:
    """The first `apply --wait` that crosses the vector index's line, a knowledge base of many files, while a controller
    runs (which sees the new knowledge base pending): the apply publishes and builds a valid index, exit 0, no
    deadlock, and no invalid index is left behind."""
    from kbctl.defaults import INDEX_MIN_VECTORS

    seed_vectors(server_home, INDEX_MIN_VECTORS - 20)
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(40):
        (folder / f"note-{i}.md").write_text(
            f"# Note {i}\n\nExpense report {i} is filed within {i + 3} days of travel.\n"
        )
    manifest = tmp_path / "kb.yaml"
    manifest.write_text(
        "apiVersion: kbctl.dev/v1alpha1\nkind: KnowledgeBase\nmetadata: {name: notes}\n"
        "spec:\n  sources:\n    - {name: docs, path: docs/}\n"
    )
    log = tmp_path / "controller.log"
    with controller(server_home, log):
        applied = subprocess.run(
            [sys.executable, "-m", "kbctl", "apply", "-f", str(manifest), "--wait"],
            env=kbctl_env(server_home, None),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert applied.returncode == 0, applied.stdout + applied.stderr + log.read_text()
        assert "deadlock" not in applied.stdout + applied.stderr + log.read_text()
    indexes = read_running(
        server_home,
        "SELECT count(*) FILTER (WHERE i.indisvalid), count(*) FILTER (WHERE NOT i.indisvalid) FROM pg_index i"
        " JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname LIKE 'kb_embeddings_hnsw%%'",
    )
    assert indexes == (1, 0)
    stop_server(server_home / "pg")


@pytest.mark.parametrize("how", ["server stop", "kill -9"])
def test_a_change_interrupted_mid_apply_is_finished_by_the_controller(
    how: str, server_home: Path, tmp_path: Path
) -> None:
    """`apply --wait` of new files of a path: source, the database stopped (or killed) while it embeds: the apply
    fails, but the change was recorded before the work began, so the running controller starts the server again,
    finishes the new version from the same files and says so in an event."""
    folder = tmp_path / "docs"
    write_policies(folder, 1, 1)
    manifest = tmp_path / "kb.yaml"
    manifest.write_text(
        "apiVersion: kbctl.dev/v1alpha1\nkind: KnowledgeBase\nmetadata: {name: policies}\n"
        "spec:\n  sources:\n    - {name: docs, path: docs/}\n"
    )
    apply = [sys.executable, "-m", "kbctl", "apply", "-f", str(manifest), "--wait"]
    first = subprocess.run(apply, env=kbctl_env(server_home, None), capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stdout + first.stderr
    cached = read_running(server_home, "SELECT count(*) FROM kb_embeddings")
    assert cached is not None
    write_policies(folder, 40, 8)  # 320 new chunks: several embedding calls, each committed as it comes
    log = tmp_path / "controller.log"
    with controller(server_home, log):
        out = tmp_path / "apply.log"
        applying = subprocess.Popen(
            apply, env=kbctl_env(server_home, None), stdout=out.open("w"), stderr=subprocess.STDOUT
        )
        embedded = read_running(server_home, "SELECT count(*) FROM kb_embeddings")
        while embedded is None or int(embedded[0]) - int(cached[0]) < 40:  # some vectors cached: mid-embedding
            assert applying.poll() is None, out.read_text()
            time.sleep(0.1)
            embedded = read_running(server_home, "SELECT count(*) FROM kb_embeddings")
        if how == "server stop":
            stop_server(server_home / "pg")
        else:
            os.kill(postmaster_pid(server_home), signal.SIGKILL)
        assert applying.wait(timeout=120) == 1, out.read_text()
        assert "database" in out.read_text()
        eventually(
            lambda: (
                read_running(
                    server_home,
                    "SELECT current_version, generation = observed_generation FROM kb_knowledge_bases"
                    " WHERE name = 'policies'",
                )
                == (2, True)
            ),
            f"the controller did not finish the change: {log.read_text()}",
            timeout=300,
        )
    ready = read_running(
        server_home,
        "SELECT count(*) FILTER (WHERE vs.state = 'ready'), min(v.chunk_count) FROM kb_version_sources vs"
        " JOIN kb_versions v ON v.id = vs.version_id JOIN kb_knowledge_bases k ON k.id = v.kb_id"
        " WHERE k.name = 'policies' AND v.number = 2",
    )
    assert ready == (40, 320)
    event = read_running(
        server_home,
        "SELECT type, message FROM kb_events WHERE object_name = 'policies' AND reason = 'ApplyResumed'",
    )
    assert event is not None and event[0] == "Normal" and "interrupted apply" in str(event[1]), event
    said = [line for line in log.read_text().splitlines() if "left unfinished by an interrupted apply" in line]
    assert (
        len(said) == 1
        and said[0].startswith("KnowledgeBase/policies: generation ")
        and said[0].endswith("; finishing it")
    ), log.read_text()
    stop_server(server_home / "pg")
