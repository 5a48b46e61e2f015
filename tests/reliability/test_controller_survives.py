"""The controller survives a dropped connection; `apply --wait` notices a dead controller and stored failures."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest

from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings
from kbctl.engine.controller import Controller
from kbctl.engine.events import Event, HandedToController, WorkProgress
from kbctl.errors import StoreError
from kbctl.manifest import parse_manifests
from kbctl.store.embedded import running_url, stop_server
from tests.support.controllerloop import looping
from tests.support.httpserver import serve
from tests.support.lines import Lines
from tests.support.manifests import knowledge_base, text_source, url_source

pytestmark = pytest.mark.reliability


def kb(name: str, **spec: Any) -> str:
    return knowledge_base(name, text_source("facts", "Invoices are kept for seven years."), **spec)


@contextmanager
def running_controller(store: KnowledgeBaseStore, log: Lines) -> Iterator[Controller]:
    """A controller on its own connection, serving in a thread until the block ends."""
    own = KnowledgeBaseStore(settings=store.settings)
    ctl = own.controller(reporter=log)
    try:
        with looping(ctl, poll_seconds=0.5, max_backoff=1.0):
            deadline = time.monotonic() + 20
            while not store.controller_alive() and time.monotonic() < deadline:
                time.sleep(0.1)
            yield ctl
    finally:
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
        store.apply(parse_manifests(kb("after-drop"), "kb.yaml"), wait=False)
        assert store.wait("after-drop", timeout=30), log.lines
    assert store.describe("after-drop").version == 1
    assert any(line.startswith("database unavailable (") and "reconnecting in 1 s" in line for line in log.lines)


class _HandedOver(Lines):
    """Lines that also say when apply has handed a knowledge base to a controller and waits for it."""

    def __init__(self) -> None:
        super().__init__()
        self.handed = threading.Event()

    def report(self, event: Event) -> None:
        super().report(event)
        if isinstance(event, HandedToController):
            self.handed.set()


def test_apply_wait_reconciles_in_process_when_the_controller_dies(store: KnowledgeBaseStore) -> None:
    """A controller whose heartbeat stops while `apply --wait` waits is noticed; the work is done in-process."""
    store.db.heartbeat("ghost")  # looks alive, will never reconcile anything
    log = _HandedOver()

    def die() -> None:  # once apply waits for the controller (not before: it would not hand the work over)
        assert log.handed.wait(60)
        with KnowledgeBaseStore(settings=store.settings) as other:
            other.db.connection.execute("UPDATE kb_controllers SET last_seen = now() - interval '1 hour'")

    killer = threading.Thread(target=die)
    killer.start()
    report = store.apply(parse_manifests(kb("orphan"), "kb.yaml"), controller=True, reporter=log, timeout=120)
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
        report = store.apply(parse_manifests(text, "kb.yaml"), controller=True, reporter=Lines(), timeout=120)
    [result] = report.results
    assert result.action == "failed"
    assert "'klingon' is not a text search configuration" in (result.message or "")
    assert "within" not in (result.message or "")


def test_controller_survives_a_restart_of_the_embedded_server(server_home: Path) -> None:
    """`kbctl server stop` under a running controller: it reconnects (starting the server again) and works on."""
    settings = Settings(home=server_home)
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
                    other.apply(parse_manifests(kb("after-restart"), "kb.yaml"), wait=False)
                    assert other.wait("after-restart", timeout=60), log.lines
                    assert other.describe("after-restart").version == 1
        finally:
            stop_server(settings.pgdata)


def _long_text(sections: int) -> str:
    """Markdown of `sections` sections of ~1,000 characters each: one chunk a section, several embedding calls."""
    return "\n\n".join(
        f"## Clause {i}\n\n"
        + " ".join(f"Record {j} of clause {i} is kept for audit by the finance team, then archived." for j in range(12))
        for i in range(sections)
    )


class _StopsTheServer(Lines):
    """A controller's reporter that runs `act` on the first event `when` picks, from the controller's own thread:
    the database goes away at that exact point of a reconcile."""

    def __init__(self, when: Callable[[Event], bool], act: Callable[[], None]) -> None:
        super().__init__()
        self.when, self.act = when, act
        self.stopped = threading.Event()

    def report(self, event: Event) -> None:
        super().report(event)
        if not self.stopped.is_set() and self.when(event):
            self.act()
            self.stopped.set()


def _stop_when_publish_waits(settings: Settings) -> None:
    """Lock kb_versions against writes now; a thread stops the server once the controller's publish waits on it."""
    from kbctl.store.database import Database

    url = running_url(settings.pgdata)
    assert url is not None
    db = Database(url, migrate=False)
    db.connection.execute("BEGIN")
    db.connection.execute("LOCK TABLE kb_versions IN EXCLUSIVE MODE")

    def stop() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            waiting = db.connection.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            ).fetchone()
            if waiting and waiting[0]:
                break
            time.sleep(0.05)
        stop_server(settings.pgdata)
        with suppress(Exception):
            db.close()

    threading.Thread(target=stop, daemon=True).start()


def _embedding(first: bool) -> Callable[[Event], bool]:
    """The first embedding progress event after some but not all texts (`first`), or the one after the last."""
    return lambda e: (
        isinstance(e, WorkProgress)
        and e.stage == "embedding"
        and (0 < e.done < e.total if first else e.done == e.total)
    )


@pytest.mark.parametrize("stage", ["fetch", "embedding", "publish"])
def test_controller_finishes_after_the_database_stops_mid_reconcile(
    stage: str, server_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedded server stopped during a reconcile's fetch, embedding or publish: the controller starts it
    again itself (nobody else touches it), releases the claim it lost, and publishes the whole version."""
    monkeypatch.setenv("KBCTL_ALLOW_PRIVATE_NETWORKS", "1")
    settings = Settings(home=server_home)
    sources = [text_source("clauses", _long_text(100), format="markdown")]
    stop_db: Callable[[], None] = lambda: stop_server(settings.pgdata)  # noqa: E731
    log = {
        "fetch": _StopsTheServer(lambda e: isinstance(e, WorkProgress) and e.stage == "fetching", stop_db),
        "embedding": _StopsTheServer(_embedding(first=True), stop_db),
        "publish": _StopsTheServer(_embedding(first=False), lambda: _stop_when_publish_waits(settings)),
    }[stage]
    with serve() as srv, KnowledgeBaseStore(settings=settings) as store:
        for i in range(3):
            html = f"<h1>Page {i}</h1><p>Travel for client {i} is booked through the portal.</p>"
            srv.route(f"/page{i}", body=html, content_type="text/html; charset=utf-8", delay=1.0 if i else 0.0)
            sources.append(url_source(f"page{i}", srv.url(f"/page{i}")))
        own = KnowledgeBaseStore(settings=settings)
        stop = threading.Event()
        ctl = own.controller(reporter=log)
        thread = threading.Thread(target=ctl.run, args=(stop,), kwargs={"poll_seconds": 0.5, "max_backoff": 1.0})
        thread.start()
        try:
            store.apply(parse_manifests(knowledge_base("big", *sources), "kb.yaml"), wait=False)
            assert log.stopped.wait(120), log.lines
            deadline = time.monotonic() + 120  # a hang detector, not a timing claim
            while not _published(settings, "big"):
                assert time.monotonic() < deadline, log.lines
                time.sleep(0.5)
        finally:
            stop.set()
            thread.join(timeout=60)
            own.close()
            with KnowledgeBaseStore(settings=settings) as after:
                detail = after.describe("big") if not thread.is_alive() else None
            stop_server(settings.pgdata)
    assert not thread.is_alive(), "the controller did not stop"
    assert any(line.startswith("database unavailable") for line in log.lines), log.lines
    assert detail is not None and detail.version == 1 and detail.ready
    states = {s.name: s.state for s in detail.source_status}
    assert states == dict.fromkeys(["clauses", "page0", "page1", "page2"], "ready")


def _published(settings: Settings, name: str) -> bool:
    """Whether version 1 of `name` is published and reconciled, read without starting the server."""
    from kbctl.store.database import Database

    url = running_url(settings.pgdata)
    if url is None:
        return False
    try:
        with Database(url, migrate=False) as db:
            row = db.get_kb(name)
            return row is not None and row.current_version == 1 and row.observed_generation >= row.generation
    except StoreError:
        return False


class _Blocks(Lines):
    """A controller's reporter that runs `during` on the controller's thread at the first event of a reconcile."""

    def __init__(self, during: Callable[[], None]) -> None:
        super().__init__()
        self.during = during
        self.entered = threading.Event()

    def report(self, event: Event) -> None:
        super().report(event)
        if not self.entered.is_set():
            self.entered.set()
            self.during()


def _run_with(store: KnowledgeBaseStore, log: Lines) -> tuple[Controller, threading.Event, threading.Thread]:
    """A controller with a 1 s stall limit and a 0.2 s heartbeat, serving in a thread."""
    own = KnowledgeBaseStore(settings=store.settings)
    ctl = Controller(own.db, own.embedder, reporter=log, stall_seconds=1.0, heartbeat_seconds=0.2)
    stop = threading.Event()
    thread = threading.Thread(target=ctl.run, args=(stop,), kwargs={"poll_seconds": 0.5})
    thread.start()
    return ctl, stop, thread


def test_a_stuck_controller_stops_heartbeating_and_a_working_one_does_not(store: KnowledgeBaseStore) -> None:
    """A reconcile stuck in the controller's loop stops its heartbeat (so `apply --wait` stops waiting for it),
    a statement the server runs for it counts as progress, and the heartbeat comes back when the loop moves."""
    release = threading.Event()
    log = _Blocks(lambda: release.wait(120))
    ctl, stop, thread = _run_with(store, log)
    try:
        store.apply(parse_manifests(kb("stuck"), "kb.yaml"), wait=False)
        assert log.entered.wait(60)
        deadline = time.monotonic() + 60
        while store.db.controllers_alive(3):
            assert time.monotonic() < deadline, "a stuck controller kept heartbeating"
            time.sleep(0.2)
        release.set()
        assert store.wait("stuck", timeout=60)
        deadline = time.monotonic() + 60
        while not store.db.controllers_alive(3):
            assert time.monotonic() < deadline, "the heartbeat did not come back"
            time.sleep(0.2)
    finally:
        release.set()
        stop.set()
        thread.join(timeout=30)
        ctl.db.close()


def test_a_long_statement_counts_as_progress(store: KnowledgeBaseStore) -> None:
    """While the server runs a statement of the controller's reconcile (12 s here, like a long publish), the
    heartbeat stays fresh although no event is reported for longer than the stall limit."""
    holder: list[Controller] = []
    log = _Blocks(lambda: holder[0].db.connection.execute("SELECT pg_sleep(12)"))
    ctl, stop, thread = _run_with(store, log)
    holder.append(ctl)
    try:
        store.apply(parse_manifests(kb("slow-publish"), "kb.yaml"), wait=False)
        assert log.entered.wait(60)
        time.sleep(8)  # past the 1 s stall limit by more than the 5 s window below, still inside the statement
        assert store.db.controllers_alive(5)
        assert store.wait("slow-publish", timeout=60)
    finally:
        stop.set()
        thread.join(timeout=30)
        ctl.db.close()
