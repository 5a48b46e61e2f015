"""`kbctl serve` (or `kbctl mcp`) as a real subprocess on a free loopback port, for the tests of the server."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings
from kbctl.manifest import parse_manifests
from tests.conftest import TABLES

__all__ = ["Served", "free_port", "kbctl_env", "seeded", "serving", "serving_with_config"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def kbctl_env(home: Path, database_url: str | None, **extra: str) -> dict[str, str]:
    """The environment of a kbctl subprocess: this one's, with its home, database and `extra` variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KBCTL_")}
    env["KBCTL_HOME"] = str(home)
    if database_url:
        env["KBCTL_DATABASE_URL"] = database_url
    env.update(extra)
    return env


@dataclass
class Served:
    """A running server: its base URL, and its log (stderr) once it has stopped."""

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


@contextmanager
def serving(env: Mapping[str, str], log_path: Path, *args: str, startup: float = 90.0) -> Iterator[Served]:
    """Start `kbctl serve` with `args` on a free port, wait until /healthz answers, stop it (SIGTERM) at the end."""
    port = free_port()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "kbctl", "serve", "--port", str(port), *args],
            env=dict(env),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    served = Served(f"http://127.0.0.1:{port}", process, log_path)
    try:
        deadline = time.monotonic() + startup
        while True:
            if process.poll() is not None:
                raise AssertionError(f"kbctl serve exited with {process.returncode}:\n{served.log()}")
            try:
                if httpx.get(served.url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"kbctl serve did not answer within {startup:g} s:\n{served.log()}")
            time.sleep(0.2)
        yield served
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextmanager
def seeded(database_url: str, home: Path, *manifests: str) -> Iterator[KnowledgeBaseStore]:
    """The session's store emptied, then these manifests applied (for a module of server tests)."""
    store = KnowledgeBaseStore(settings=Settings(home=home, database_url=database_url))
    store.db.connection.execute(f"TRUNCATE {TABLES} RESTART IDENTITY CASCADE")
    store.apply(parse_manifests("\n---\n".join(manifests), "kb.yaml"))
    try:
        yield store
    finally:
        store.close()


@contextmanager
def serving_with_config(home: Path, database_url: str, folder: Path, config: str, **variables: str) -> Iterator[Served]:
    """`kbctl serve` reading the configuration file `config` (written in `folder`), with `variables` set."""
    path = folder / "config.yaml"
    path.write_text(config)
    env = kbctl_env(home, database_url, KBCTL_CONFIG=str(path), **variables)
    with serving(env, folder / "serve.log") as served:
        yield served
