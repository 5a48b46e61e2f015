"""A real streaming replica of the embedded PostgreSQL, for tests: `pg_basebackup -R` of a running primary into a
second data folder, started with the same binaries and as the same system user, socket only.

`streaming_standby` yields it once it is in recovery and streaming, and stops it and removes its folder afterwards
(even when the test fails). The waits are bounded by generous timeouts and never measured: a busy machine only
makes them slower.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from kbctl.store.embedded import _pgserver
from tests.support.serveproc import free_port

__all__ = ["Standby", "current_wal_lsn", "streaming_standby"]

WAIT = 600.0  # seconds: a bound for every wait, far above what it takes (a few seconds on a busy machine)


def _server(primary_pgdata: Path) -> Any:
    """The embedded server library's handle of the running primary (its binaries folder and system user)."""
    return _pgserver().get_server(primary_pgdata, cleanup_mode=None, start=False)


def _run(bin_path: Path, user: str | None, command: str, *args: str) -> str:
    """Run one of the server's programs with `args` (a list, no shell) as the server's system user (None: this
    process's), like the embedded server runs pg_ctl; its output. A failure raises with the program's stderr.
    Output goes through files, not pipes: a server pg_ctl starts would hold a pipe open."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        done = subprocess.run(
            [str(bin_path / command), *args], stdout=out, stderr=err, text=True, user=user, timeout=WAIT, check=False
        )
        out.seek(0)
        err.seek(0)
        if done.returncode != 0:
            raise RuntimeError(f"{command} {' '.join(args)} exited with {done.returncode}: {err.read().strip()}")
        return out.read()


def wait_until(check: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    """Poll `check` until it is true; TimeoutError naming `what` after `timeout` seconds. Connection errors while
    a server comes up count as not yet."""
    deadline = time.monotonic() + timeout
    while True:
        with suppress(psycopg.OperationalError):
            if check():
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


def _value(url: str, sql: str, params: tuple[Any, ...] = ()) -> Any:
    """The first column of the first row of `sql` on a fresh autocommit connection to `url`."""
    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        row = conn.execute(sql, params).fetchone()
        assert row is not None
        return row[0]


def current_wal_lsn(primary_url: str) -> str:
    """Where the primary's WAL ends now: everything committed so far lies before it."""
    return str(_value(primary_url, "SELECT pg_current_wal_lsn()::text"))


@dataclass(frozen=True)
class Standby:
    """A running streaming replica: its data folder (which holds its socket) and port."""

    pgdata: Path
    port: int

    def url_as(self, user: str) -> str:
        """The URL of the standby's database `postgres` for role `user` (any local role is trusted)."""
        return f"postgresql://{user}@/postgres?host={self.pgdata}&port={self.port}"

    @property
    def url(self) -> str:
        """The URL of the standby for the superuser."""
        return self.url_as("postgres")

    def value(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        """The first column of the first row of `sql` run on the standby."""
        return _value(self.url, sql, params)

    def in_recovery(self) -> bool:
        """Whether the standby is (still) a replica: replaying WAL, refusing writes."""
        return bool(self.value("SELECT pg_is_in_recovery()"))

    def wait_for_replay(self, lsn: str) -> None:
        """Until the standby has replayed the primary's WAL up to `lsn` (and so every commit before it)."""
        wait_until(
            lambda: bool(self.value("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,))), f"replay to {lsn}"
        )

    def wait_for_receipt(self, lsn: str) -> None:
        """Until the standby has received (written and flushed) the primary's WAL up to `lsn`, replayed or not."""
        wait_until(
            lambda: bool(self.value("SELECT pg_last_wal_receive_lsn() >= %s::pg_lsn", (lsn,))), f"receipt of {lsn}"
        )

    def pause_replay(self) -> None:
        """Stop applying WAL (it is still received): until `resume_replay`, the standby shows what it shows now."""
        self.value("SELECT pg_wal_replay_pause()::text")
        wait_until(lambda: self.value("SELECT pg_get_wal_replay_pause_state()") == "paused", "replay to pause")

    def resume_replay(self) -> None:
        """Apply WAL again."""
        self.value("SELECT pg_wal_replay_resume()::text")
        wait_until(lambda: self.value("SELECT pg_get_wal_replay_pause_state()") == "not paused", "replay to resume")


def _check_replication_allowed(primary_url: str) -> None:
    """The primary must write WAL a replica can replay, have WAL senders, and let a local replication connection
    in (the embedded server's defaults: wal_level replica, max_wal_senders 10, `local replication all trust`)."""
    with psycopg.connect(primary_url, autocommit=True, connect_timeout=10) as conn:
        wal_level = conn.execute("SHOW wal_level").fetchone()
        senders = conn.execute("SHOW max_wal_senders").fetchone()
        local = conn.execute(
            "SELECT count(*) FROM pg_hba_file_rules WHERE type = 'local' AND 'replication' = ANY(database)"
            " AND error IS NULL"
        ).fetchone()
    if wal_level is None or wal_level[0] not in ("replica", "logical"):
        raise RuntimeError(f"the primary's wal_level is {wal_level}: a replica needs replica or logical")
    if senders is None or int(senders[0]) == 0:
        raise RuntimeError("the primary's max_wal_senders is 0: no replica can connect")
    if local is None or local[0] == 0:
        raise RuntimeError("the primary's pg_hba.conf has no local replication entry")


def _conf_value(value: str) -> str:
    """`value` quoted for postgresql.conf."""
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def _stop(bin_path: Path, user: str | None, pgdata: Path) -> None:
    """Stop the server of `pgdata` if it runs: fast shutdown, else immediate."""
    if not (pgdata / "postmaster.pid").exists():
        return
    try:
        _run(bin_path, user, "pg_ctl", "-w", "-t", str(int(WAIT)), "-D", str(pgdata), "-m", "fast", "stop")
    except (RuntimeError, subprocess.SubprocessError):
        _run(bin_path, user, "pg_ctl", "-w", "-t", str(int(WAIT)), "-D", str(pgdata), "-m", "immediate", "stop")


@contextmanager
def streaming_standby(primary_pgdata: Path, primary_url: str, pgdata: Path) -> Iterator[Standby]:
    """A streaming replica of the running embedded server of `primary_pgdata` (reached at `primary_url`), in the
    new folder `pgdata`: yielded in recovery and streaming, then stopped and its folder removed."""
    server = _server(primary_pgdata)
    bin_path: Path = server.bin_path
    user: str | None = server.system_user  # set when running as root: the server runs as that user
    _check_replication_allowed(primary_url)
    pgdata.mkdir(mode=0o700)
    try:
        if user is not None:
            import pwd

            entry = pwd.getpwnam(user)
            os.chown(pgdata, entry.pw_uid, entry.pw_gid)
        # -R: standby.signal and primary_conninfo (the primary's socket); fast checkpoint: no wait for a spread one
        _run(
            bin_path,
            user,
            "pg_basebackup",
            "-d",
            primary_url,
            "-D",
            str(pgdata),
            "-R",
            "-X",
            "stream",
            "--checkpoint=fast",
            "--no-sync",
        )
        port = free_port()  # the standby listens on its socket only; the port names that socket
        # Like the embedded server: no TCP, a socket in its own data folder (here under a port of its own).
        with (pgdata / "postgresql.conf").open("a") as conf:
            conf.write(
                "\n# a streaming replica for tests\n"
                f"port = {port}\nlisten_addresses = ''\nunix_socket_directories = {_conf_value(str(pgdata))}\n"
                "hot_standby = on\n"
            )
        log = pgdata / "standby.log"
        try:
            _run(bin_path, user, "pg_ctl", "-w", "-t", str(int(WAIT)), "-l", str(log), "-D", str(pgdata), "start")
        except RuntimeError as exc:
            shown = log.read_text(errors="replace")[-4000:] if log.exists() else "(no log)"
            raise RuntimeError(f"{exc}\nstandby log:\n{shown}") from exc
        standby = Standby(pgdata, port)
        wait_until(standby.in_recovery, "the standby to accept connections in recovery")
        wait_until(
            lambda: standby.value("SELECT coalesce(max(status), '') FROM pg_stat_wal_receiver") == "streaming",
            "the standby to stream from the primary",
        )
        yield standby
    finally:
        try:
            _stop(bin_path, user, pgdata)
        finally:
            shutil.rmtree(pgdata, ignore_errors=True)
