"""Controller recovery: the embedded server stopped during a reconcile's fetch, embedding or publish.

    python bench/controller_recovery.py [--sections 100] [--runs 1]

A controller serves in a thread over a fresh embedded store; one knowledge base of a ~100-chunk inline source and
three pages on a loopback HTTP server is submitted; at the chosen stage (an engine event, seen on the controller's
own thread) the server is stopped, and nothing but the controller starts it again. Prints, per stage, the seconds
from the stop to the server being up again (the controller restarted it), and from then to the version being
published, i.e. the pending work finished after the database's return.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings
from kbctl.engine.events import Event, WorkProgress
from kbctl.errors import StoreError
from kbctl.manifest import parse_manifests
from kbctl.store.database import Database
from kbctl.store.embedded import running_url, stop_server
from tests.support.httpserver import serve
from tests.support.manifests import knowledge_base, text_source, url_source


class StopAt:
    """A reporter that runs `act` on the first event `when` picks and remembers when."""

    def __init__(self, when: Callable[[Event], bool], act: Callable[[], None]) -> None:
        self.when, self.act = when, act
        self.stopped_at: float | None = None

    def report(self, event: Event) -> None:
        if self.stopped_at is None and self.when(event):
            self.act()
            self.stopped_at = time.monotonic()


def published(pgdata: Path) -> bool:
    url = running_url(pgdata)
    if url is None:
        return False
    try:
        with Database(url, migrate=False) as db:
            row = db.get_kb("big")
            return row is not None and row.current_version == 1 and row.observed_generation >= row.generation
    except StoreError:
        return False


def lock_then_stop(pgdata: Path) -> None:
    """Lock kb_versions against writes; a thread stops the server once a publish waits on the lock."""
    url = running_url(pgdata)
    assert url is not None
    db = Database(url, migrate=False)
    db.connection.execute("BEGIN")
    db.connection.execute("LOCK TABLE kb_versions IN EXCLUSIVE MODE")

    def stop() -> None:
        while not db.connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
        ).fetchone()[0]:  # type: ignore[index]
            time.sleep(0.05)
        stop_server(pgdata)

    threading.Thread(target=stop, daemon=True).start()


def run(stage: str, sections: int) -> tuple[float, float]:
    home = Path(tempfile.mkdtemp(prefix="kbctl-bench-"))
    settings = Settings(home=home)
    text = "\n\n".join(
        f"## Clause {i}\n\n" + " ".join(f"Record {j} of clause {i} is kept, then archived." for j in range(14))
        for i in range(sections)
    )
    stop_db = lambda: stop_server(settings.pgdata)  # noqa: E731
    embedding = lambda last: lambda e: (  # noqa: E731
        isinstance(e, WorkProgress) and e.stage == "embedding" and (e.done == e.total if last else 0 < e.done < e.total)
    )
    reporter = {
        "fetch": StopAt(lambda e: isinstance(e, WorkProgress) and e.stage == "fetching", stop_db),
        "embedding": StopAt(embedding(False), stop_db),
        "publish": StopAt(embedding(True), lambda: lock_then_stop(settings.pgdata)),
    }[stage]
    sources = [text_source("clauses", text, format="markdown")]
    with serve() as srv, KnowledgeBaseStore(settings=settings) as store:
        for i in range(3):
            srv.route(f"/p{i}", body=f"<h1>P{i}</h1><p>Travel {i} is booked.</p>", content_type="text/html",
                      delay=1.0 if i else 0.0)
            sources.append(url_source(f"p{i}", srv.url(f"/p{i}")))
        own = KnowledgeBaseStore(settings=settings)
        ctl = own.controller(reporter=reporter)
        stop = threading.Event()
        thread = threading.Thread(target=ctl.run, args=(stop,), kwargs={"poll_seconds": 0.5})
        thread.start()
        store.apply(parse_manifests(knowledge_base("big", *sources), "kb.yaml"), wait=False)
        while reporter.stopped_at is None:
            time.sleep(0.01)
        while running_url(settings.pgdata) is not None:  # the publish stage stops from a thread
            time.sleep(0.01)
        down = time.monotonic()
        while running_url(settings.pgdata) is None:
            time.sleep(0.05)
        back = time.monotonic()
        while not published(settings.pgdata):
            time.sleep(0.1)
        done = time.monotonic()
        stop.set()
        thread.join(timeout=60)
        own.close()
    stop_server(settings.pgdata)
    return back - down, done - back


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", type=int, default=100)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    print(f"{'stage stopped':<16}{'stop -> server up (s)':>24}{'server up -> published (s)':>30}")
    for _ in range(args.runs):
        for stage in ("fetch", "embedding", "publish"):
            restarted, finished = run(stage, args.sections)
            print(f"{stage:<16}{restarted:>24.1f}{finished:>30.1f}")


if __name__ == "__main__":
    main()
