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

from kbctl.errors import StoreError
from kbctl.store.database import Database
from kbctl.store.embedded import running_url, stop_server
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


def read(home: Path, statement: str, *params: object) -> tuple[object, ...] | None:
    """One row read from the embedded server of `home` when it is up (None when it is not), never starting it."""
    url = running_url(home / "pg")
    if url is None:
        return None
    try:
        with Database(url, migrate=False) as db:
            return db.connection.execute(statement, params).fetchone()
    except StoreError:
        return None


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
            subprocess.run([sys.executable, "-m", "kbctl", "server", "stop"], env=kbctl_env(server_home, None), check=True)
        else:
            os.kill(before, signal.SIGKILL)
        eventually(lambda: "database unavailable" in log.read_text(), f"not noticed: {log.read_text()}")
        # Nobody but the controller starts it: the test only reads the folder.
        eventually(lambda: read(server_home, "SELECT 1") == (1,), f"not started again: {log.read_text()}")
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
            lambda: read(server_home, "SELECT current_version FROM kb_knowledge_bases WHERE name = %s", "after-restart")
            == (1,),
            f"not reconciled after the restart: {log.read_text()}",
        )
    stop_server(server_home / "pg")
