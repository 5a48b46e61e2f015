"""KBCTL_QUERY_DATABASE_URL on a real streaming replica (issue 44): a second embedded PostgreSQL, a `pg_basebackup -R`
of the first, replays what kbctl publishes there. Queries pointed at it serve a version once it is replayed, and
whole versions only: with replay paused and the next version's WAL already received, they still answer from the
previous version, complete, and from the new one after replay."""

from __future__ import annotations

from pathlib import Path

from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings
from kbctl.manifest import parse_manifests
from kbctl.query.results import QueryResult
from kbctl.store.embedded import embedded_url
from tests.support.manifests import knowledge_base, text_source
from tests.support.standby import Standby, current_wal_lsn, streaming_standby

SEVEN = "Invoices are kept for seven years after the end of the financial year."
TEN = "Invoices are kept for ten years after the end of the financial year."
RECEIPTS = "Receipts for expenses are kept with the invoice they belong to."
CONTRACTS = "Contracts with suppliers are kept for ten years after they end."

VERSION_1 = knowledge_base("office", text_source("invoices", SEVEN), text_source("receipts", RECEIPTS))
VERSION_2 = knowledge_base(
    "office", text_source("invoices", TEN), text_source("receipts", RECEIPTS), text_source("contracts", CONTRACTS)
)
# What each version holds, source by source (each text is one chunk).
CONTENT = {
    1: {"invoices": SEVEN, "receipts": RECEIPTS},
    2: {"invoices": TEN, "receipts": RECEIPTS, "contracts": CONTRACTS},
}

QUESTION = "how long are invoices kept?"
READER = "kb_reader"  # the role queries use on the replica: SELECT on kbctl's tables and nothing else


def ask(store: KnowledgeBaseStore) -> QueryResult:
    """The question, by vector with no threshold and room for every chunk: every chunk of the version served is a
    candidate and a hit, so the answer shows the whole version."""
    return store.query("office", QUESTION, mode="vector", threshold=0.0, top_k=10)


def chunk_counts(standby: Standby, number: int) -> tuple[int, int]:
    """On the standby: the chunk count version `number` records, and the chunks its sources actually hold there."""
    row = standby.value(
        "SELECT ARRAY[v.chunk_count, (SELECT count(*) FROM kb_version_sources vs JOIN kb_chunks c"
        " ON c.revision_id = vs.revision_id WHERE vs.version_id = v.id)::int]"
        " FROM kb_versions v JOIN kb_knowledge_bases k ON k.id = v.kb_id WHERE k.name = 'office' AND v.number = %s",
        (number,),
    )
    return row[0], row[1]


def assert_whole_version(result: QueryResult, standby: Standby, number: int) -> None:
    """`result` is version `number`, all of it and nothing of another: its hits are that version's sources with that
    version's texts, and every chunk the version records is there on the standby and was a candidate."""
    assert result.version == number
    assert {hit.source: hit.text for hit in result.hits} == CONTENT[number]
    assert chunk_counts(standby, number) == (len(CONTENT[number]), len(CONTENT[number]))
    assert result.candidates == len(CONTENT[number])


def test_a_streaming_replica_serves_whole_versions_once_replayed(server_home: Path) -> None:
    """Apply on the primary, query the replica as a role that may only SELECT: version 1 after replay; version 2
    published while replay is paused is received but not served (version 1, complete, still is); after resuming
    and replay, version 2 is served."""
    primary = embedded_url(server_home / "pg")
    with streaming_standby(server_home / "pg", primary, server_home / "standby") as standby:
        settings = Settings(home=server_home, database_url=primary, query_database_url=standby.url_as(READER))
        with KnowledgeBaseStore(settings=settings) as store:  # migrates the primary; the replica gets it by WAL
            store.db.connection.execute(f"CREATE ROLE {READER} LOGIN")
            store.db.connection.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {READER}")
            applied = store.apply(parse_manifests(VERSION_1, "kb.yaml")).results[0]
            assert (applied.action, applied.version) == ("created", 1)
            standby.wait_for_replay(current_wal_lsn(primary))
            first = ask(store)
            assert_whole_version(first, standby, 1)
            query_connection = store._query_database.connection
            assert query_connection.execute("SELECT pg_is_in_recovery(), current_user").fetchone() == (True, READER)
            assert store.db.connection.execute("SELECT pg_is_in_recovery()").fetchone() == (False,)

            standby.pause_replay()
            applied = store.apply(parse_manifests(VERSION_2, "kb.yaml")).results[0]
            assert (applied.action, applied.version) == ("configured", 2)
            published = current_wal_lsn(primary)
            standby.wait_for_receipt(published)  # the standby holds version 2's WAL, not yet replayed
            assert store.describe("office").version == 2  # the primary serves version 2 ...
            paused = ask(store)
            assert_whole_version(paused, standby, 1)  # ... the replica still version 1, whole
            assert standby.value("SELECT count(*) FROM kb_versions WHERE number = 2") == 0
            assert standby.value("SELECT current_version FROM kb_knowledge_bases WHERE name = 'office'") == 1

            standby.resume_replay()
            standby.wait_for_replay(published)
            second = ask(store)
            assert_whole_version(second, standby, 2)
            assert store._query_database.connection is query_connection  # the same replica connection throughout
            assert query_connection.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
        assert standby.in_recovery()
