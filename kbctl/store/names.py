"""Knowledge-base names read in a hurry (shell completion): bounded in time, never starting a server, [] on failure.

A completion runs on every TAB, so waiting is worse than offering nothing: the lookup connects without migrating
anything, reads one indexed column, and gives up when the whole of it (connecting included) takes longer than
its timeout. libpq counts a connect timeout in whole seconds (two at least), so the bound is kept by waiting for
the lookup on a daemon thread: an abandoned lookup dies with the process.
"""

from __future__ import annotations

import threading
from pathlib import Path

from kbctl.errors import UsageError

__all__ = ["LOOKUP_TIMEOUT", "knowledge_base_names", "reachable_url"]

LOOKUP_TIMEOUT = 1.0
"""Seconds a name lookup may take in all (connecting included) before it gives up with no names."""


def reachable_url(database_url: str | None, pgdata: Path) -> str | None:
    """The store's URL without starting anything: `database_url` when set, else the embedded server's socket URL
    when that server is up in `pgdata`, else None."""
    if database_url:
        return database_url
    from kbctl.store.embedded import running_url

    return running_url(pgdata)


def knowledge_base_names(url: str, prefix: str = "", *, timeout: float = LOOKUP_TIMEOUT) -> list[str]:
    """The names of the knowledge bases at `url` that start with `prefix`, sorted; [] when the database cannot be
    reached, answers with an error (no kbctl schema, a bad URL) or takes longer than `timeout` seconds."""
    if timeout <= 0:
        raise UsageError(f"timeout must be positive, got {timeout!r}")
    found: list[list[str]] = []
    done = threading.Event()

    def look() -> None:
        try:
            found.append(_read_names(url, prefix, timeout))
        except Exception:  # any failure means no names: psycopg.Error, OSError, a malformed URL
            pass
        finally:
            done.set()  # a refused connection answers at once: no need to wait out the timeout

    threading.Thread(target=look, name="kbctl-names", daemon=True).start()
    return found[0] if done.wait(timeout) and found else []


def _read_names(url: str, prefix: str, timeout: float) -> list[str]:
    import psycopg

    # libpq's smallest connect timeout is 2 s: the thread's wait is the real bound. The statement timeout is set
    # once connected (an `options` parameter would replace the URL's own, such as a search_path).
    with psycopg.connect(url, autocommit=True, connect_timeout=max(2, int(timeout + 0.999))) as conn:
        conn.execute("SELECT set_config('statement_timeout', %s, false)", (f"{max(1, int(timeout * 1000))}ms",))
        rows = conn.execute(
            "SELECT name FROM kb_knowledge_bases WHERE starts_with(name, %s) ORDER BY name", (prefix,)
        ).fetchall()
    return [str(row[0]) for row in rows]
