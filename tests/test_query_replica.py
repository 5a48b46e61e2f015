"""KBCTL_QUERY_DATABASE_URL: queries read a second database (a read replica), never migrated; the rest, the main one."""

from __future__ import annotations

from urllib.parse import quote

import psycopg
import pytest

from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings, effective_config
from kbctl.errors import StoreError
from kbctl.manifest import parse_manifests
from tests.support.manifests import knowledge_base, text_source

MANIFEST = knowledge_base(
    "office", text_source("invoices", "Invoices are kept for seven years after the end of the financial year.")
)


def with_options(url: str, options: str) -> str:
    """`url` with libpq `options` (server settings for the session) added."""
    return url + ("&" if "?" in url else "?") + "options=" + quote(options)


def test_queries_read_the_query_database_read_only(store: KnowledgeBaseStore, database_url: str) -> None:
    """With a read-only query URL, apply writes through the main URL and queries answer through the other."""
    store.apply(parse_manifests(MANIFEST, "kb.yaml"))
    replica = with_options(database_url, "-c default_transaction_read_only=on")
    settings = Settings(home=store.settings.home, database_url=database_url, query_database_url=replica)
    with KnowledgeBaseStore(settings=settings) as split:
        result = split.query("office", "how long are invoices kept?")
        assert result.hits and result.hits[0].source == "invoices"
        assert split._query_database is not split.db
        with pytest.raises(StoreError) as refused:  # the store's connections translate driver errors
            split._query_database.connection.execute("CREATE TABLE kb_replica_probe (x int)")
        assert isinstance(refused.value.__cause__, psycopg.errors.ReadOnlySqlTransaction)
        assert split.apply(parse_manifests(MANIFEST, "kb.yaml")).results[0].action == "unchanged"


def test_the_query_database_is_not_migrated(store: KnowledgeBaseStore, database_url: str) -> None:
    """A query URL naming an empty database is used as it is: queries fail there, nothing is created in it."""
    store.apply(parse_manifests(MANIFEST, "kb.yaml"))
    admin = store.db.connection
    admin.execute("DROP DATABASE IF EXISTS kbctl_empty_replica")
    admin.execute("CREATE DATABASE kbctl_empty_replica")
    try:
        empty = psycopg.conninfo.make_conninfo(database_url, dbname="kbctl_empty_replica")
        settings = Settings(home=store.settings.home, database_url=database_url, query_database_url=empty)
        with KnowledgeBaseStore(settings=settings) as split:
            with pytest.raises(StoreError, match="a query database must be a replica of one that kbctl has migrated"):
                split.query("office", "how long are invoices kept?")
            assert split.describe("office").name == "office"  # everything but queries uses the main database
        with psycopg.connect(empty) as conn:
            assert conn.execute("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'kb\\_%'").fetchone() == (0,)
    finally:
        admin.execute("DROP DATABASE IF EXISTS kbctl_empty_replica WITH (FORCE)")


def test_config_view_redacts_the_query_database_password(tmp_path: object) -> None:
    """`config view` shows the query database with its password hidden."""
    settings = Settings(home=tmp_path, query_database_url="postgresql://reader:hunter2secret@replica.internal/kb")  # type: ignore[arg-type]
    shown = str(effective_config(settings))
    assert "hunter2secret" not in shown and "replica.internal" in shown
