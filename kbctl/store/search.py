"""Vector search SQL: the nearest chunks of a version, through an HNSW index per model or an exact scan.

Keyword search (BM25) is kbctl.store.bm25.

Vectors live once per (model, text) in `kb_embeddings`; each model gets its own partial HNSW index in half
precision, its candidates re-ranked by the exact cosine. A version's nearest chunks come from an exact scan (at
most EXACT_SCAN_MAX chunks, a few milliseconds; models without an index; the fallback) or from the index,
over-fetched in proportion to the model's vectors the version holds (`index_candidates`), read again twice as deep
when short, and answered exactly past MAX_OVERFETCH: the index never makes an answer shorter. `build_vector_index`
builds it in one pass once a model has INDEX_MIN_VECTORS vectors.

Design and figures: docs/architecture.md#vector-index, bench/README.md (bench/hnsw_build.py, bench/ef_search.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql
from psycopg.rows import class_row

from kbctl.defaults import EF_SEARCH, EXACT_SCAN_MAX, INDEX_BUILD_MEMORY, INDEX_MIN_VECTORS, MAX_OVERFETCH
from kbctl.errors import StoreError
from kbctl.inputs.access import Reader
from kbctl.store.access import Rule, readable, readable_params
from kbctl.store.rows import ChunkHit

if TYPE_CHECKING:
    from kbctl.embedding import Vector

__all__ = [
    "EF_SEARCH",
    "EXACT_SCAN_MAX",
    "INDEX_MIN_VECTORS",
    "VectorIndex",
    "as_float32",
    "build_vector_index",
    "exact_search",
    "index_candidates",
    "index_settings",
    "indexed_query",
    "indexed_search",
    "pgvector_version",
    "vector_index",
]

EF_SEARCH_MAX = 1_000  # pgvector's largest hnsw.ef_search
HALFVEC_MAX_DIMENSIONS = 4_000  # pgvector indexes halfvec up to 4,000 dimensions
HALFVEC_VERSION = (0, 7, 0)  # the first pgvector with halfvec (older ones: no index, exact scans)
ITERATIVE_SCAN_VERSION = (0, 8, 0)  # the first pgvector with hnsw.iterative_scan

# The chunks of a version, with their source, place, vector and cosine similarity to %(q)s. Rows come back in
# binary: a vector parsed from its text form costs ~0.15 ms, 4 ms of a 30-chunk search.
_HITS = (
    "SELECT c.id AS chunk_id, vs.source_name, r.origin, r.title, c.ordinal, c.char_start,"
    " c.char_end, c.heading_path, c.content, c.token_count, e.embedding AS vector,"
    " 1 - (e.embedding <=> %(q)s) AS score"
)


@dataclass(frozen=True)
class VectorIndex:
    """The HNSW index of one model's vectors: its name, the dimensions it casts to, and its size in vectors."""

    name: str
    dimensions: int
    vectors: int


def _index_prefix(model: str) -> str:
    """The name every index of `model` starts with (PostgreSQL names hold 63 bytes; a model id may hold more)."""
    return "kb_embeddings_hnsw_" + hashlib.sha256(model.encode()).hexdigest()[:16] + "_"


def as_float32(vector: Vector | Any) -> Any:
    """A vector as a float32 numpy array: what pgvector sends, and what a stored vector read back (pgvector's own
    Vector type, or an array) becomes. numpy is imported here, by the commands that search."""
    import numpy as np

    return np.asarray(vector.to_numpy() if hasattr(vector, "to_numpy") else vector, dtype=np.float32)


def vector_index(conn: psycopg.Connection[Any], model: str) -> VectorIndex | None:
    """The valid HNSW index of `model`'s vectors, or None (not built yet, or a build that did not finish).

    Its size is estimated from the catalog, without counting: the index's row count as of its last count (its
    build, a VACUUM that cleaned it up, an ANALYZE), scaled by how much the index has grown since, in pages (its
    file's size now against its pages at that count; HNSW grows by about one page per few vectors). The count
    alone lags: after applies that added 1.6% more vectors, the searches of a version holding 98.4% of them read
    the 100 nearest expecting all to be its own, came back short and read 200 again (vector p50 ~40 ms instead of
    ~22 at 90,910 chunks); `count(*)` costs ~50 ms there. Scaling by the table's rows instead (its live rows
    against its own last count) goes wrong when autovacuum updates the table's count and skips the index's: the
    index then looked as it was when counted (on a store with 0.7% more vectors since, half of the hybrid searches
    read twice: p50 ~33 ms instead of ~18)."""
    row = conn.execute(
        "SELECT c.relname, greatest(c.reltuples, 0)::bigint, c.relpages,"
        " pg_relation_size(c.oid) / current_setting('block_size')::bigint"
        " FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid"
        " WHERE c.relname LIKE %s AND i.indisvalid AND i.indisready ORDER BY c.relname LIMIT 1",
        (_index_prefix(model) + "%",),
    ).fetchone()
    if row is None:
        return None
    name, counted, counted_pages, pages = str(row[0]), int(row[1]), int(row[2]), int(row[3])
    grown = round(counted * pages / counted_pages) if counted_pages > 0 else counted
    return VectorIndex(name, int(name.rsplit("_", 1)[1]), max(counted, grown))


def build_vector_index(conn: psycopg.Connection[Any], model: str) -> VectorIndex | None:
    """Build the HNSW index of `model` when it has INDEX_MIN_VECTORS vectors of one size and none yet; return the
    index built, or None. `conn` must be in autocommit mode (CREATE INDEX CONCURRENTLY: writes go on meanwhile).
    """
    if vector_index(conn, model) is not None or pgvector_version(conn) < HALFVEC_VERSION:
        return None  # built already; or a pgvector without halfvec: searches stay exact
    row = conn.execute(
        "SELECT count(*), min(vector_dims(embedding)), max(vector_dims(embedding)) FROM kb_embeddings WHERE model = %s",
        (model,),
    ).fetchone()
    assert row is not None
    count, low, high = int(row[0]), row[1], row[2]
    if count < INDEX_MIN_VECTORS or low != high or not 1 <= int(low) <= HALFVEC_MAX_DIMENSIONS:
        return None
    name = sql.Identifier(f"{_index_prefix(model)}{int(low)}")
    # A build interrupted earlier (its connection lost) leaves an invalid index behind: drop it, then build again.
    conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(name))
    conn.execute(sql.SQL("SET maintenance_work_mem = {}").format(sql.Literal(INDEX_BUILD_MEMORY)))
    try:
        conn.execute(
            sql.SQL(
                "CREATE INDEX CONCURRENTLY {name} ON kb_embeddings USING hnsw"
                " ((embedding::halfvec({dims})) halfvec_cosine_ops) WHERE model = {model}"
            ).format(name=name, dims=sql.Literal(int(low)), model=sql.Literal(model))
        )
    except (psycopg.Error, StoreError):  # the driver's, or as a store connection translates it
        # A failed CREATE INDEX CONCURRENTLY leaves its index invalid: never leave one behind where the connection
        # still allows it (searches ignore it, but every write of the table still maintains it).
        with contextlib.suppress(psycopg.Error, StoreError):
            conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(name))
        raise
    finally:
        with contextlib.suppress(psycopg.Error, StoreError):
            conn.execute("RESET maintenance_work_mem")
    conn.execute("ANALYZE kb_embeddings")  # the planner's costs of the new index
    return vector_index(conn, model)


def exact_search(
    conn: psycopg.Connection[Any], version_id: int, vector: Vector, limit: int, reader: Reader | Rule | None = None
) -> list[ChunkHit]:
    """The `limit` chunks of a version nearest to `vector` by cosine distance, best first: every chunk compared
    (every chunk `reader` may read, when given: kbctl.store.access)."""
    with conn.cursor(row_factory=class_row(ChunkHit)) as cur:
        return cur.execute(
            _HITS + " FROM kb_version_sources vs"
            " JOIN kb_source_revisions r ON r.id = vs.revision_id"
            " JOIN kb_chunks c ON c.revision_id = vs.revision_id"
            " JOIN kb_embeddings e ON e.id = c.embedding_id"
            " WHERE vs.version_id = %(v)s" + readable(reader) + " ORDER BY e.embedding <=> %(q)s, c.id LIMIT %(n)s",
            {"q": as_float32(vector), "v": version_id, "n": limit, **readable_params(reader)},
            binary=True,
        ).fetchall()


def pgvector_version(conn: psycopg.Connection[Any]) -> tuple[int, ...]:
    """The installed pgvector's version, e.g. (0, 8, 5)."""
    row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    return tuple(int(part) for part in str(row[0]).split(".") if part.isdigit()) if row else ()


def index_settings(conn: psycopg.Connection[Any], ef_search: int, *, iterative: bool = True) -> None:
    """Settings of an indexed search, until the end of the caller's transaction: `ef_search`, an iterative scan (so
    a scan can return more than `ef_search` vectors; pgvector 0.8 or later) and no sequential scan of the vectors:
    the plan was chosen because the version is large, where comparing every vector of the model costs far more."""
    scan = ", set_config('hnsw.iterative_scan', 'relaxed_order', true)" if iterative else ""
    conn.execute(
        "SELECT set_config('hnsw.ef_search', %s, true), set_config('enable_seqscan', 'off', true)" + scan,
        (str(ef_search),),
    )


def indexed_query(model: str, dimensions: int, reader: Reader | Rule | None = None) -> sql.Composed:
    """The indexed plan's statement: the `%(m)s` nearest vectors of `model` by the index's own expression (so the
    planner can use it), then the version's chunks among them (those `reader` may read, when given), re-ranked by
    full-precision cosine."""
    return sql.SQL(
        "WITH near AS MATERIALIZED ("
        " SELECT id, embedding FROM kb_embeddings WHERE model = {model}"
        " ORDER BY embedding::halfvec({dims}) <=> %(q)s::vector::halfvec({dims}) LIMIT %(m)s)"
        " " + _HITS + " FROM near e JOIN kb_chunks c ON c.embedding_id = e.id"
        " JOIN kb_version_sources vs ON vs.revision_id = c.revision_id AND vs.version_id = %(v)s"
        + readable(reader)
        + " JOIN kb_source_revisions r ON r.id = vs.revision_id"
        " ORDER BY e.embedding <=> %(q)s, c.id LIMIT %(n)s"
    ).format(model=sql.Literal(model), dims=sql.Literal(dimensions))


def indexed_search(
    conn: psycopg.Connection[Any],
    index: VectorIndex,
    model: str,
    version_id: int,
    version_chunks: int,
    vector: Vector,
    limit: int,
    ef_search: int = EF_SEARCH,
    pgvector: tuple[int, ...] = ITERATIVE_SCAN_VERSION,
    reader: Reader | Rule | None = None,
) -> list[ChunkHit] | None:
    """The `limit` chunks of a version nearest to `vector` through the model's HNSW index, best first (exact cosine),
    or None when the index cannot answer in full (then search exactly). Runs inside the caller's transaction.

    With a `reader`, only the chunks it may read count, and `version_chunks` is how many of them there are: the
    candidates read grow with the share the reader may read, so a filter never makes the answer shorter."""
    share = min(1.0, version_chunks / max(1, index.vectors))
    fetch = index_candidates(limit, share)
    iterative = pgvector >= ITERATIVE_SCAN_VERSION
    query = indexed_query(model, index.dimensions, reader)
    params = readable_params(reader)
    # Past MAX_OVERFETCH candidates, or more candidates than the version has chunks, an exact scan costs less.
    while fetch <= min(MAX_OVERFETCH, version_chunks):
        # ef_search covers the candidates read, so the scan need not iterate past its first pass (that costs more
        # than a wider first pass); an iterative scan (pgvector 0.8 or later) remains the safety net.
        index_settings(conn, min(EF_SEARCH_MAX, max(ef_search, fetch)), iterative=iterative)
        with conn.cursor(row_factory=class_row(ChunkHit)) as cur:
            hits = cur.execute(
                query, {"q": as_float32(vector), "m": fetch, "v": version_id, "n": limit, **params}, binary=True
            ).fetchall()
        if len(hits) >= min(limit, version_chunks):
            return hits
        fetch *= 2  # fewer of the candidates belonged to the version than its share promised: read more
    return None


def index_candidates(limit: int, share: float) -> int:
    """How many of the model's nearest vectors to read so that `limit` of them belong to a version holding a
    `share` of the model's vectors, but for bad luck: the mean of a binomial draw less three standard deviations
    reaches `limit`. Exactly `limit` when the version holds every vector of its model (share 1)."""
    p = max(share, 1e-9)
    spread = 3 * math.sqrt(p * (1 - p))
    root = (spread + math.sqrt(spread * spread + 4 * p * limit)) / (2 * p)
    return max(limit, math.ceil(root * root))
