"""The embedded PostgreSQL's memory: shared buffers sized to the machine when kbctl starts it."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from kbctl.store.embedded import embedded_url, shared_buffers_mb, stop_server


@pytest.mark.parametrize(
    ("memory_mb", "expected"), [(512, 128), (4096, 512), (8192, 1024), (65536, 2048), (None, None)]
)
def test_the_embedded_servers_shared_buffers_follow_the_machines_memory(
    memory_mb: int | None, expected: int | None
) -> None:
    """An eighth of the memory, within PostgreSQL's default 128 MB and 2 GB (the index of a million chunks is ~1 GB)."""
    if memory_mb is None:
        assert 128 <= shared_buffers_mb() <= 2048  # this machine's
    else:
        assert shared_buffers_mb(memory_mb << 20) == expected


def test_an_embedded_server_is_started_with_them_and_keeps_them(tmp_path: Path) -> None:
    """A server kbctl starts gets the machine's shared_buffers (restarted once when first made), and keeps them when
    started again: they are stored in its data directory."""
    pgdata = tmp_path / "pg"

    def shared_buffers(url: str) -> int:
        with psycopg.connect(url) as conn:
            row = conn.execute(
                "SELECT setting::bigint * 8 / 1024 FROM pg_settings WHERE name = 'shared_buffers'"
            ).fetchone()
            assert row is not None
            return int(row[0])

    try:
        assert shared_buffers(embedded_url(pgdata)) == shared_buffers_mb()
        assert stop_server(pgdata)
        assert "shared_buffers" in (pgdata / "postgresql.auto.conf").read_text()
        assert shared_buffers(embedded_url(pgdata)) == shared_buffers_mb()
    finally:
        stop_server(pgdata)
