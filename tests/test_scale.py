"""Scale paths: the per-model HNSW index, bulk publishing, the manifest size setting, overlapping HTTP embedding."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from psycopg import sql
from psycopg.types.json import Jsonb

from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings
from kbctl.errors import KbctlError
from kbctl.inputs.bounds import MAX_FILE_BYTES, manifest_limit
from kbctl.manifest import load_manifests, parse_manifests
from kbctl.store import texts
from kbctl.store.database import ChunkRow, Database, NewRevision, VersionSourceRow
from kbctl.store.search import (
    EF_SEARCH,
    EXACT_SCAN_MAX,
    INDEX_MIN_VECTORS,
    index_candidates,
    index_settings,
    indexed_query,
    indexed_search,
    vector_index,
)
from tests.support.embedserver import serve_embeddings
from tests.support.manifests import knowledge_base, text_source

MODEL = "test/pseudo-32"
DIMS = 32


def vectors(n: int, seed: int) -> np.ndarray:
    """n deterministic unit vectors of DIMS dimensions."""
    values = np.random.default_rng(seed).standard_normal((n, DIMS)).astype(np.float32)
    return values / np.linalg.norm(values, axis=1, keepdims=True)


def publish(db: Database, name: str, vecs: np.ndarray, offset: int = 0) -> int:
    """Publish version 1 of `name` with one source of one chunk per vector; return the version's id."""
    hashes = [f"{name}-{offset + i}".encode().ljust(32, b"-")[:32] for i in range(len(vecs))]
    ids = db.store_embeddings(MODEL, list(zip(hashes, vecs, strict=True)))
    chunks = [ChunkRow(i, f"chunk {offset + i} of {name}", 0, 10, ("Doc",), 5, ids[h]) for i, h in enumerate(hashes)]
    manifest = {"apiVersion": "kbctl.dev/v1alpha1", "kind": "KnowledgeBase", "metadata": {"name": name}}
    db.record_desired(name, manifest)
    db.publish(
        name=name,
        manifest=manifest,
        manifest_sha256="x",
        model=MODEL,
        number=1,
        new_revisions=[NewRevision("doc", "key", "sha", "inline", None, 10, chunks)],
        sources=[
            VersionSourceRow(
                source_name="doc",
                state="ready",
                source_sha256="sha",
                revision_key="key",
                chunk_count=len(chunks),
                embedded_count=len(chunks),
            )
        ],
        statuses=[],
    )
    target = db.query_target(name)
    assert target is not None and target.version_id is not None and target.chunk_count == len(vecs)
    return target.version_id


@pytest.fixture
def indexed(store: KnowledgeBaseStore) -> Iterator[tuple[Database, int, np.ndarray]]:
    """A knowledge base of INDEX_MIN_VECTORS + 500 pseudo-vectors with its model's index built."""
    vecs = vectors(INDEX_MIN_VECTORS + 500, seed=1)
    version = publish(store.db, "big", vecs)
    assert store.db.build_vector_index(MODEL) is not None
    try:
        yield store.db, version, vecs
    finally:
        index = store.db.vector_index(MODEL)
        if index is not None:
            store.db.connection.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(index.name)))


def test_index_is_built_once_a_model_has_enough_vectors(store: KnowledgeBaseStore) -> None:
    """No index below INDEX_MIN_VECTORS vectors; one build at the line; a second call builds nothing."""
    db = store.db
    publish(db, "few", vectors(100, seed=2))
    assert db.build_vector_index(MODEL) is None and db.vector_index(MODEL) is None
    publish(db, "many", vectors(INDEX_MIN_VECTORS, seed=3), offset=100)
    try:
        built = db.build_vector_index(MODEL)
        assert built is not None and built.dimensions == DIMS and built.vectors >= INDEX_MIN_VECTORS
        assert db.build_vector_index(MODEL) is None  # already there
    finally:
        index = db.vector_index(MODEL)
        assert index is not None
        db.connection.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(index.name)))


def test_large_version_search_goes_through_the_index(indexed: tuple[Database, int, np.ndarray]) -> None:
    """The indexed plan scans the HNSW index (EXPLAIN names it) and finds what an exact scan finds."""
    db, version, vecs = indexed
    index = vector_index(db.connection, MODEL)
    assert index is not None
    with db.connection.transaction():
        index_settings(db.connection, 100)
        plan = db.connection.execute(
            b"EXPLAIN " + indexed_query(MODEL, index.dimensions).as_bytes(db.connection),
            {"q": vecs[0], "m": 150, "v": version, "n": 10},
        ).fetchall()
    assert any(f"Index Scan using {index.name}" in row[0] for row in plan)
    found = total = 0
    for q in vecs[:20]:
        approx = db.search(version, q, 10, model=MODEL, version_chunks=len(vecs))
        with db.exact_searches():
            exact = db.search(version, q, 10, model=MODEL, version_chunks=len(vecs))
        assert approx[0].content == exact[0].content and approx[0].score == pytest.approx(1.0, abs=1e-5)
        found += len({h.chunk_id for h in approx} & {h.chunk_id for h in exact})
        total += len(exact)
    assert found / total >= 0.9


def test_an_indexed_search_in_a_snapshot_or_alone_answers_alike_and_keeps_its_settings_in(
    indexed: tuple[Database, int, np.ndarray],
) -> None:
    """Inside a query's read-only snapshot the search's settings last until the snapshot ends (no savepoint of its
    own); alone it opens a transaction, so its settings end with it. The index it found is remembered: dropped
    meanwhile, the search still answers."""
    db, version, vecs = indexed
    ef = "SELECT current_setting('hnsw.ef_search')"
    default = db.connection.execute(ef).fetchone()
    alone = db.search(version, vecs[3], 10, model=MODEL, version_chunks=len(vecs))
    assert db.connection.execute(ef).fetchone() == default != (str(EF_SEARCH),)
    with db.read_only():
        inside = db.search(version, vecs[3], 10, model=MODEL, version_chunks=len(vecs))
        assert db.connection.execute(ef).fetchone() == (str(EF_SEARCH),)
    assert db.connection.execute(ef).fetchone() == default
    assert [h.chunk_id for h in inside] == [h.chunk_id for h in alone] and len(alone) == 10
    assert alone[0].content == "chunk 3 of big"
    index = vector_index(db.connection, MODEL)
    assert index is not None
    db.connection.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(index.name)))
    again = db.search(version, vecs[3], 10, model=MODEL, version_chunks=len(vecs))
    assert again[0].content == "chunk 3 of big" and len(again) == 10


def test_index_without_iterative_scans(indexed: tuple[Database, int, np.ndarray]) -> None:
    """On a pgvector before 0.8 (no iterative scans) the indexed plan asks ef_search for every candidate it needs."""
    db, version, vecs = indexed
    index = vector_index(db.connection, MODEL)
    assert index is not None
    with db.connection.transaction():
        hits = indexed_search(db.connection, index, MODEL, version, len(vecs), vecs[3], 10, pgvector=(0, 7, 4))
        setting = db.connection.execute("SELECT current_setting('hnsw.iterative_scan')").fetchone()
    assert hits is not None and len(hits) == 10 and hits[0].content == "chunk 3 of big"
    assert setting == ("off",)


def test_index_candidates_cover_the_version_share() -> None:
    """A version holding every vector of its model reads as many index candidates as chunks asked for; one holding
    a share of them reads more than limit / share (a margin of three standard deviations), the fewer the share."""
    assert index_candidates(100, 1.0) == 100
    half, tenth = index_candidates(100, 0.5), index_candidates(100, 0.1)
    assert 200 < half < 300 and 1000 < tenth < 1400 and index_candidates(10, 0.5) > 20
    assert index_candidates(100, 0.99) >= 100


def test_the_index_size_counts_vectors_stored_since_it_was_last_analyzed(
    indexed: tuple[Database, int, np.ndarray],
) -> None:
    """Vectors stored after the index was last counted count toward its size (through its pages), so a version
    holding all but those reads more candidates than it asks for instead of coming back short; also after a VACUUM
    that counted the table but skipped the index, as autovacuum does."""
    db, _, vecs = indexed
    conn = db.connection
    before = vector_index(conn, MODEL)
    assert before is not None and before.vectors == len(vecs)
    conn.execute("ALTER TABLE kb_embeddings SET (autovacuum_enabled = false)")  # no VACUUM updates the count now
    try:
        publish(db, "newer", vectors(500, seed=5), offset=20_000)  # not in the big version; no ANALYZE runs
        counted = conn.execute("SELECT reltuples FROM pg_class WHERE relname = %s", (before.name,)).fetchone()
    finally:
        conn.execute("ALTER TABLE kb_embeddings RESET (autovacuum_enabled)")
    assert counted is not None and counted[0] == len(vecs)  # the catalog's count has not moved
    after = vector_index(conn, MODEL)
    assert after is not None and abs(after.vectors - (len(vecs) + 500)) <= 0.05 * (len(vecs) + 500)
    assert index_candidates(10, len(vecs) / after.vectors) > 10
    conn.execute("VACUUM (INDEX_CLEANUP OFF) kb_embeddings")  # the table's count moves, the index's does not
    vacuumed = vector_index(conn, MODEL)
    assert vacuumed is not None and vacuumed.vectors == after.vectors


def test_ef_search_covers_the_candidates_read(indexed: tuple[Database, int, np.ndarray]) -> None:
    """Asked for more chunks than ef_search, the indexed plan raises ef_search to the candidates it reads (so the
    scan answers in its first pass) and still returns every chunk asked for."""
    db, version, vecs = indexed
    index = vector_index(db.connection, MODEL)
    assert index is not None
    with db.connection.transaction():
        hits = indexed_search(db.connection, index, MODEL, version, len(vecs), vecs[7], 300, ef_search=40)
        setting = db.connection.execute("SELECT current_setting('hnsw.ef_search')").fetchone()
    assert hits is not None and len(hits) == 300 and hits[0].content == "chunk 7 of big"
    assert setting is not None and int(setting[0]) >= 300


def test_a_version_holding_few_of_the_models_vectors_is_searched_exactly(
    indexed: tuple[Database, int, np.ndarray],
) -> None:
    """A small version beside a large one of the same model: the index declines, the exact plan answers in full."""
    db, _, _ = indexed
    small = vectors(40, seed=4)
    version = publish(db, "small", small, offset=10_000)
    index = vector_index(db.connection, MODEL)
    assert index is not None
    with db.connection.transaction():
        assert indexed_search(db.connection, index, MODEL, version, len(small), small[0], 10) is None
    hits = db.search(version, small[0], 10, model=MODEL, version_chunks=len(small))
    assert len(hits) == 10 and hits[0].content == "chunk 10000 of small"
    assert len(small) <= EXACT_SCAN_MAX


def test_manifest_limit_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A manifest over 8 MiB is refused unless KBCTL_MAX_MANIFEST_MIB allows it; a bad value is one clear error."""
    path = tmp_path / "big.yaml"
    path.write_text(knowledge_base("big", *(text_source(f"s{i}", "x" * 1000) for i in range(8_500))))
    assert path.stat().st_size > MAX_FILE_BYTES
    with pytest.raises(KbctlError, match="too large"):
        load_manifests([str(path)])
    monkeypatch.setenv("KBCTL_MAX_MANIFEST_MIB", "16")
    assert manifest_limit() == 16 * 1024 * 1024
    [loaded] = load_manifests([str(path)])
    assert len(loaded.kb.spec.sources) == 8_500
    monkeypatch.setenv("KBCTL_MAX_MANIFEST_MIB", "lots")
    with pytest.raises(KbctlError, match="KBCTL_MAX_MANIFEST_MIB must be a whole number of MiB"):
        load_manifests([str(path)])


def test_apply_overlaps_embedding_requests(
    store: KnowledgeBaseStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With maxConcurrency 4, an apply keeps several requests of 64 texts in flight at once (one call of 64 texts
    at a time sent one request after another)."""
    paragraphs = "\n\n".join(f"Paragraph {i}: rule {i} keeps record {i} for {i % 7 + 1} years." for i in range(200))
    text = knowledge_base(
        "overlap",
        text_source("rules", paragraphs),
        embedding={"model": "loop/all-MiniLM-L6-v2"},
        chunking={"maxChars": 100, "overlapChars": 0},
    )
    with serve_embeddings(model="none") as server:
        server.latency = 0.05
        config = tmp_path / "config.yaml"
        config.write_text(
            f"embedding:\n  providers:\n    loop: {{baseURL: '{server.url}', batchSize: 64, maxConcurrency: 4}}\n"
        )
        monkeypatch.setenv("KBCTL_CONFIG", str(config))
        settings = Settings.from_env(home=store.settings.home, database_url=store.settings.database_url)
        with KnowledgeBaseStore(settings=settings) as http_store:
            report = http_store.apply(parse_manifests(text, "kb.yaml"))
        chunks = report.results[0].sources[0].chunks
        assert not report.failed and report.embedded == chunks > 128
        assert server.content_request_count == -(-chunks // 64) and server.max_in_flight >= 2


def test_inline_texts_are_stored_once(store: KnowledgeBaseStore) -> None:
    """Stored manifests name inline texts by sha256; each distinct text is one row, whatever the copies."""
    text = "Invoices are kept for seven years after the end of the financial year."
    for name in ("one", "two"):
        kb = knowledge_base(name, text_source("a", text), text_source("b", text))
        store.apply(parse_manifests(kb, "kb.yaml"))
    conn = store.db.connection
    assert conn.execute("SELECT count(*) FROM kb_texts").fetchone() == (1,)
    stored = conn.execute(
        "SELECT manifest::text FROM kb_versions UNION ALL SELECT manifest::text FROM kb_knowledge_bases"
    )
    assert all(text not in m and "textSha256" in m for (m,) in stored.fetchall())
    row = store.db.get_kb("one")
    assert row is not None and row.current_version is not None
    version = store.db.get_version(row.id, row.current_version)
    assert version is not None and [s["text"] for s in version.manifest["spec"]["sources"]] == [text, text]


def test_an_apply_packs_its_manifest_once_and_an_unchanged_one_not_at_all(
    store: KnowledgeBaseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recording, the change cause and publishing share one pack of the manifest (each inline text hashed once);
    an apply that finds the manifest unchanged packs it not at all."""
    calls: list[int] = []  # packs that hashed inline texts (a stored manifest, packed already, holds none)
    real = texts.pack

    def counted(manifest: dict[str, Any]) -> texts.Packed:
        packed = real(manifest)
        calls.extend([1] if packed[1] else [])
        return packed

    monkeypatch.setattr(texts, "pack", counted)
    kb = knowledge_base("once", text_source("a", "Invoices are kept for seven years."))
    store.apply(parse_manifests(kb, "kb.yaml"))
    assert len(calls) == 1
    store.apply(parse_manifests(kb.replace("seven", "ten"), "kb.yaml"))  # recorded, compared, published
    assert len(calls) == 2
    store.apply(parse_manifests(kb.replace("seven", "ten"), "kb.yaml"))
    assert len(calls) == 2


def test_a_manifest_stored_before_packing_reads_back(store: KnowledgeBaseStore) -> None:
    """A version whose manifest holds its texts inline (stored by an earlier kbctl) is read as it is."""
    kb = knowledge_base("old", text_source("a", "Keys are rotated every month."))
    store.apply(parse_manifests(kb, "kb.yaml"))
    row = store.db.get_kb("old")
    assert row is not None and row.current_version is not None
    version = store.db.get_version(row.id, row.current_version)
    assert version is not None
    store.db.connection.execute(
        "UPDATE kb_versions SET manifest = %s WHERE id = %s", (Jsonb(version.manifest), version.id)
    )
    store.db.connection.execute("TRUNCATE kb_texts")
    again = store.db.get_version(row.id, row.current_version)
    assert again is not None and again.manifest["spec"]["sources"][0]["text"] == "Keys are rotated every month."
    assert store.describe("old").name == "old"


def last_analyze(store: KnowledgeBaseStore, table: str) -> Any:
    """When PostgreSQL's statistics of `table` were last gathered by ANALYZE (None: never)."""
    row = store.db.connection.execute(
        "SELECT last_analyze FROM pg_stat_user_tables WHERE relname = %s", (table,)
    ).fetchone()
    return row[0] if row else None


def estimated_rows(store: KnowledgeBaseStore, version: int) -> int:
    """How many sources the planner expects a version to hold."""
    row = store.db.connection.execute(
        "EXPLAIN (FORMAT JSON) SELECT * FROM kb_version_sources WHERE version_id = %s", (version,)
    ).fetchone()
    assert row is not None
    return int(row[0][0]["Plan"]["Plan Rows"])


def test_every_new_version_is_analyzed(store: KnowledgeBaseStore) -> None:
    """Publishing a version refreshes PostgreSQL's statistics of the versions' sources, so the planner does not take
    the new version for one of a few sources (it then read the whole version into a hash in every indexed search);
    an unchanged apply does not."""
    texts = [text_source(f"s{i:02d}", f"Source number {i} says fact {i}.") for i in range(40)]
    store.apply(parse_manifests(knowledge_base("many", *texts), "kb.yaml"))
    first = last_analyze(store, "kb_version_sources")
    assert first is not None
    changed = [*texts[:-1], text_source("s39", "Source number 39 now says something else.")]
    manifest = knowledge_base("many", *changed)
    store.apply(parse_manifests(manifest, "kb.yaml"))  # a one-source change: a new version of 40 sources
    after = last_analyze(store, "kb_version_sources")
    assert after is not None and after != first
    version = store.db.connection.execute("SELECT max(id) FROM kb_versions").fetchone()
    assert version is not None and estimated_rows(store, version[0]) >= 20  # 40 (unanalyzed, the planner guessed 1)
    store.apply(parse_manifests(manifest, "kb.yaml"))
    assert last_analyze(store, "kb_version_sources") == after


def test_chunks_are_analyzed_after_many_new_ones_relative_to_the_table(
    store: KnowledgeBaseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """New chunks refresh the chunks' statistics when they are many and a share of what the statistics know: a
    change to a large table (ANALYZE of 900,000 chunks took 66 s) leaves it to autovacuum."""
    import kbctl.engine.apply as engine_apply

    monkeypatch.setattr(engine_apply, "ANALYZE_AFTER_CHUNKS", 2)

    before = last_analyze(store, "kb_chunks")
    first = knowledge_base("first", text_source("a", "Alpha is first."), text_source("b", "Beta is second."))
    store.apply(parse_manifests(first, "kb.yaml"))
    after = last_analyze(store, "kb_chunks")
    assert after is not None and after != before and store.db.estimated_chunks() == 2
    monkeypatch.setattr(engine_apply, "ANALYZE_CHUNK_SHARE", 1.5)  # 2 new chunks are not 1.5 x the 2 known
    second = knowledge_base("second", text_source("c", "Gamma is third."), text_source("d", "Delta is fourth."))
    store.apply(parse_manifests(second, "kb.yaml"))
    assert last_analyze(store, "kb_chunks") == after
    monkeypatch.setattr(engine_apply, "ANALYZE_CHUNK_SHARE", 0.5)
    third = knowledge_base("third", text_source("e", "Epsilon is fifth."), text_source("f", "Zeta is sixth."))
    store.apply(parse_manifests(third, "kb.yaml"))
    assert last_analyze(store, "kb_chunks") != after


def test_store_embeddings_returns_the_id_of_every_vector_new_or_stored_before(store: KnowledgeBaseStore) -> None:
    """The ids come back from the insert itself; a vector stored before (by another apply) keeps its row and id."""
    vecs = vectors(6, seed=7)
    hashes = [bytes([i]) * 32 for i in range(6)]
    before = store.db.store_embeddings(MODEL, list(zip(hashes[:3], vecs[:3], strict=True)))
    ids = store.db.store_embeddings(MODEL, [*zip(hashes, vecs, strict=True), (hashes[5], vecs[5])])
    assert sorted(ids) == sorted(hashes)
    assert all(ids[h] == before[h] for h in hashes[:3])
    assert len(set(ids.values())) == 6
    assert ids == store.db.cached_embeddings(MODEL, hashes)
