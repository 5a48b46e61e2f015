"""One rule for a source's state (kbctl.store.rows.source_state), one word per state in both tables.

A source whose last read failed while earlier content still serves is `stale` everywhere: in the live status, in
the version it is published in, in describe, in rollout history and in apply's result. The database refuses a
version row against the rule, and migration 15 rewrites the rows an older kbctl wrote as `failed`.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from kbctl.client import KnowledgeBaseStore
from kbctl.errors import StoreError
from kbctl.manifest import parse_manifests
from kbctl.store.migrations import MIGRATIONS
from kbctl.store.rows import SOURCE_STATES, source_state
from tests.support.httpserver import HTTPTestServer, fetch_policy_for, serve
from tests.support.manifests import knowledge_base, url_source


def test_the_rule() -> None:
    assert source_state(read=True, serving=True) == source_state(read=True, serving=False) == "ready"
    assert source_state(read=False, serving=True) == "stale"
    assert source_state(read=False, serving=False) == "failed"
    assert set(SOURCE_STATES) == {"ready", "stale", "failed"}


@pytest.fixture
def site() -> Iterator[HTTPTestServer]:
    with serve() as srv:
        srv.route("/a.md", body="# Refunds\n\nRefunds are paid within 14 days.", content_type="text/markdown")
        srv.route("/b.md", body="# Hours\n\nThe office opens at nine.", content_type="text/markdown")
        yield srv


@pytest.fixture
def stale_version(store: KnowledgeBaseStore, site: HTTPTestServer) -> KnowledgeBaseStore:
    """Version 2 of `site`: page a changed, page b failed to fetch but serves its version-1 content."""
    store.fetch_policy = fetch_policy_for(site, retries=0)
    manifest = knowledge_base("site", url_source("a", site.url("/a.md")), url_source("b", site.url("/b.md")))
    first = store.apply(parse_manifests(manifest, "kb.yaml"))
    assert not first.failed
    site.route("/a.md", body="# Refunds\n\nRefunds are paid within 30 days.", content_type="text/markdown")
    site.route("/b.md", status=500, body="down")
    refreshed = store.refresh(["site"])
    [result] = refreshed.results
    assert result.version == 2
    assert {s.name: s.state for s in result.sources} == {"a": "ready", "b": "stale"}
    return store


def test_a_failed_source_that_still_serves_is_stale_in_both_tables(stale_version: KnowledgeBaseStore) -> None:
    store = stale_version
    conn = store.db.connection
    stored = dict(
        conn.execute(
            "SELECT vs.source_name, vs.state FROM kb_version_sources vs JOIN kb_versions v ON v.id = vs.version_id"
            " WHERE v.number = 2"
        ).fetchall()
    )
    live = dict(conn.execute("SELECT source_name, state FROM kb_source_status").fetchall())
    assert stored == live == {"a": "ready", "b": "stale"}
    assert {s.name: s.state for s in store.describe("site").source_status} == {"a": "ready", "b": "stale"}
    newest = store.db.list_versions("site")[0]
    assert (newest.number, newest.sources, newest.failed_sources) == (2, 2, 1)  # rollout history: 1/2 ready


def test_the_database_refuses_a_version_row_against_the_rule(stale_version: KnowledgeBaseStore) -> None:
    conn = stale_version.db.connection
    for state, revision in (("failed", "revision_id"), ("stale", "NULL")):
        with pytest.raises(StoreError) as refused, conn.transaction():  # the store's connections translate errors
            conn.execute(f"UPDATE kb_version_sources SET state = '{state}', revision_id = {revision}")
        assert isinstance(refused.value.__cause__, psycopg.errors.CheckViolation)


def test_migration_15_rewrites_what_an_older_kbctl_wrote(stale_version: KnowledgeBaseStore) -> None:
    """Before migration 15 a version said `failed` for a source that served its earlier content."""
    conn = stale_version.db.connection
    [sql] = [sql for number, _, sql in MIGRATIONS if number == 15]
    with conn.transaction():
        conn.execute("ALTER TABLE kb_version_sources DROP CONSTRAINT kb_version_sources_state_check")
        conn.execute("UPDATE kb_version_sources SET state = 'failed' WHERE state = 'stale'")
        conn.execute(
            "ALTER TABLE kb_version_sources ADD CONSTRAINT kb_version_sources_state_check"
            " CHECK (state IN ('ready', 'failed'))"
        )
        conn.execute(sql.encode())
    states = conn.execute(
        "SELECT source_name, state, revision_id IS NOT NULL FROM kb_version_sources ORDER BY version_id, source_name"
    ).fetchall()
    assert states == [("a", "ready", True), ("b", "ready", True), ("a", "ready", True), ("b", "stale", True)]
