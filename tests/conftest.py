"""Real services for the tests: the embedded PostgreSQL + pgvector (or KBCTL_TEST_DATABASE_URL) and the local model."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings
from kbctl.store.embedded import embedded_url, stop_server

TABLES = (
    "kb_version_sources, kb_versions, kb_chunks, kb_source_revisions, kb_embeddings, kb_source_status,"
    " kb_knowledge_bases, kb_controllers, kb_texts, kb_version_terms, kb_revision_terms, kb_events, kb_syncs,"
    " kb_version_rule_terms, kb_retrievals, kb_eval_runs"
)


@pytest.fixture(scope="session")
def kbctl_home() -> Iterator[Path]:
    """One KBCTL_HOME for the session; the embedded server started in it is stopped at the end."""
    home = Path(tempfile.mkdtemp(prefix="kbctl-test-"))
    os.environ["KBCTL_HOME"] = str(home)
    external = os.environ.get("KBCTL_TEST_DATABASE_URL")
    if external:
        os.environ["KBCTL_DATABASE_URL"] = external
    try:
        yield home
    finally:
        if not external:
            stop_server(home / "pg")


@contextmanager
def fresh_home(prefix: str = "kbctl-test-home-") -> Iterator[Path]:
    """A KBCTL_HOME for an embedded server of its own; the server stopped and the folder removed afterwards.

    Not under pytest's tmp_path: run as root, the embedded server runs as another system user, and every pytest
    session that starts sets pytest's base folder back to owner-only (0700), which shut that user out of the
    folders of a session already running (two suites at once: initdb, or a restart, failed with exit status 1)."""
    home = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield home
    finally:
        if (home / "pg").exists():
            stop_server(home / "pg")
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def server_home() -> Iterator[Path]:
    """A KBCTL_HOME for a test that starts an embedded server of its own (`fresh_home`)."""
    with fresh_home() as home:
        yield home


@pytest.fixture(scope="session")
def database_url(kbctl_home: Path) -> str:
    """The URL of the database the tests use: an external one, or the embedded server (started once)."""
    return os.environ.get("KBCTL_DATABASE_URL") or embedded_url(kbctl_home / "pg")


@pytest.fixture
def store(database_url: str, kbctl_home: Path) -> Iterator[KnowledgeBaseStore]:
    """A store with no knowledge bases in it (tables emptied before the test)."""
    s = KnowledgeBaseStore(settings=Settings(home=kbctl_home, database_url=database_url))
    s.db._conn.execute(f"TRUNCATE {TABLES} RESTART IDENTITY CASCADE")
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def cli(store: KnowledgeBaseStore, database_url: str) -> CliRunner:
    """A CLI runner whose commands reach the same (emptied) store as `store`."""
    return CliRunner(env={"KBCTL_DATABASE_URL": database_url, "KBCTL_HOME": str(store.settings.home)})
