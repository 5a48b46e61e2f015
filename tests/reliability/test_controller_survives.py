"""The controller survives a dropped connection; `apply --wait` notices a dead controller and stored failures."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings
from kbctl.engine.controller import Controller
from kbctl.manifest import parse_manifests
from kbctl.store import claims
from kbctl.store.embedded import stop_server
from tests.support.lines import Lines
from tests.support.manifests import knowledge_base, text_source

pytestmark = pytest.mark.reliability


def kb(name: str, **spec: Any) -> str:
    return knowledge_base(name, text_source("facts", "Invoices are kept for seven years."), **spec)


@contextmanager
def running_controller(store: KnowledgeBaseStore, log: Lines) -> Iterator[Controller]:
    """A controller on its own connection, serving in a thread until the block ends."""
    own = KnowledgeBaseStore(settings=store.settings)
    ctl = own.controller(reporter=log)
    stop = threading.Event()
    thread = threading.Thread(target=ctl.run, args=(stop,), kwargs={"poll_seconds": 0.5, "max_backoff": 1.0})
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not store.controller_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        yield ctl
    finally:
        stop.set()
        thread.join(timeout=30)
        own.close()


def test_controller_reconnects_after_its_connection_is_killed(store: KnowledgeBaseStore) -> None:
    """Its backend terminated, the controller says so, reconnects, and reconciles what is submitted next."""
    log = Lines()
    with running_controller(store, log) as ctl:
        pid = ctl.db.connection.info.backend_pid
        store.db.connection.execute("SELECT pg_terminate_backend(%s)", (pid,))
        deadline = time.monotonic() + 20
        while not any(line.startswith("database unavailable") for line in log.lines) and time.monotonic() < deadline:
            time.sleep(0.1)
        store.submit(parse_manifests(kb("after-drop"), "kb.yaml"))
        assert store.wait("after-drop", timeout=30), log.lines
    assert store.describe("after-drop").version == 1
    assert any(line.startswith("database unavailable (") and "reconnecting in 1 s" in line for line in log.lines)


def test_apply_wait_reconciles_in_process_when_the_controller_dies(store: KnowledgeBaseStore) -> None:
    """A controller whose heartbeat stops while `apply --wait` waits is noticed; the work is done in-process."""
    claims.heartbeat(store.db, "ghost")  # looks alive, will never reconcile anything

    def die() -> None:
        time.sleep(1.0)
        with KnowledgeBaseStore(settings=store.settings) as other:
            other.db.connection.execute("UPDATE kb_controllers SET last_seen = now() - interval '1 hour'")

    killer = threading.Thread(target=die)
    killer.start()
    log = Lines()
    report = store.apply_and_wait(parse_manifests(kb("orphan"), "kb.yaml"), reporter=log, timeout=120)
    killer.join()
    assert [(r.action, r.version) for r in report.results] == [("created", 1)]
    assert log.lines[:2] == [
        "KnowledgeBase/orphan created (version 1); waiting for a controller",
        "KnowledgeBase/orphan: no controller is alive any more; reconciling in-process",
    ]
    assert store.describe("orphan").ready


def test_apply_wait_reports_the_failure_a_controller_stored(store: KnowledgeBaseStore) -> None:
    """A permanent failure is reported with its stored reason, not as a timeout."""
    log = Lines()
    with running_controller(store, log):
        text = kb("klingon", retrieval={"language": "klingon"})
        report = store.apply_and_wait(parse_manifests(text, "kb.yaml"), reporter=Lines(), timeout=120)
    [result] = report.results
    assert result.action == "failed"
    assert "'klingon' is not a text search configuration" in (result.message or "")
    assert "within" not in (result.message or "")


def test_controller_survives_a_restart_of_the_embedded_server(tmp_path: Path) -> None:
    """`kbctl server stop` under a running controller: it reconnects (starting the server again) and works on."""
    settings = Settings(home=tmp_path / "home")
    log = Lines()
    with KnowledgeBaseStore(settings=settings) as store:
        try:
            with running_controller(store, log):
                assert stop_server(settings.pgdata)
                deadline = time.monotonic() + 30
                while not any(line.startswith("database unavailable") for line in log.lines):
                    assert time.monotonic() < deadline, "the controller never noticed the restart"
                    time.sleep(0.1)
                with KnowledgeBaseStore(settings=settings) as other:  # starts the server again if needed
                    other.submit(parse_manifests(kb("after-restart"), "kb.yaml"))
                    assert other.wait("after-restart", timeout=60), log.lines
                    assert other.describe("after-restart").version == 1
        finally:
            stop_server(settings.pgdata)
