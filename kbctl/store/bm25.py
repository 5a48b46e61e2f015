"""Keyword search: Okapi BM25 over PostgreSQL full text, with the term statistics of each version kept incrementally.

Scores a version's chunks for a question by BM25 (Lucene's idf), reading N, df and avgdl from statistics written at
publish: per source revision (`kb_revision_terms`, `kb_source_revisions.term_count`) and per version as the sums
over its revisions, stored as a difference from a base version (`kb_version_terms`, `kb_versions.terms_base`,
BASE_FRACTION, `rebase_terms`). Which chunks are scored: those holding the question's words, rarest first, within
MATCH_POSTINGS postings (else the vector list's candidates, or the rarest word's chunks; LAST_RESORT_RANKED).

Formula and design: docs/architecture.md ("Keyword search: BM25").
Figures: bench/README.md#bm25-statistics-by-difference and #the-keyword-search-2000-postings-and-pages-costed-as-cached.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

import psycopg
from psycopg import sql
from psycopg.pq import TransactionStatus
from psycopg.rows import class_row

from kbctl.defaults import BM25_B as B  # length normalization
from kbctl.defaults import BM25_K1 as K1  # term frequency saturation
from kbctl.defaults import LAST_RESORT_RANKED, MATCH_POSTINGS
from kbctl.inputs.access import Reader
from kbctl.store.access import HIDDEN_RULES, delete_rule_statistics, readable, readable_params, readable_size
from kbctl.store.rows import ChunkHit
from kbctl.store.search import as_float32

if TYPE_CHECKING:
    from kbctl.embedding import Vector

__all__ = [
    "K1",
    "LAST_RESORT_RANKED",
    "MATCH_POSTINGS",
    "TERM_COUNT",
    "B",
    "KeywordRanking",
    "QuestionTerms",
    "containing_all_words",
    "delete_revision_terms",
    "delete_version_terms",
    "keyword_ranking",
    "question_terms",
    "rebase_terms",
    "revision_statistics",
    "selecting_words",
    "version_frequencies",
    "version_statistics",
]

# The planner's cost of a random page read while a keyword search reads its chunks through the full-text index.
INDEXED_PAGE_COST = "1.1"

# A version's document frequencies are written as a difference from its base while the difference has at most this
# share of the base's rows; beyond it, whole (a new base). Publishing copies the difference each time, so the bound
# trades a copy of up to an eighth of the base per publish against a whole copy every few large changes.
BASE_FRACTION = 0.125

# The rows holding a version's document frequency of lexeme u.lexeme: its own, and its base's (kb_versions.terms_base).
_DF = (
    "(SELECT sum(t.chunks) FROM kb_version_terms t WHERE t.lexeme = u.lexeme"
    " AND t.version_id = ANY(ARRAY[%(v)s, (SELECT terms_base FROM kb_versions WHERE id = %(v)s)]))"
)

# Per new revision: its chunks' total analyzed length, and how many of its chunks hold each lexeme.
_REVISION_LENGTHS = (
    "UPDATE kb_source_revisions r SET term_count = s.total"
    " FROM (SELECT revision_id, sum(term_count) AS total FROM kb_chunks WHERE revision_id = ANY(%(ids)s)"
    " GROUP BY revision_id) s WHERE r.id = s.revision_id"
)
_REVISION_TERMS = (
    "INSERT INTO kb_revision_terms (lexeme, revision_id, chunks)"
    " SELECT u.lexeme, c.revision_id, count(*) FROM kb_chunks c, unnest(c.tsv) u"
    " WHERE c.revision_id = ANY(%(ids)s) GROUP BY u.lexeme, c.revision_id ORDER BY 1, 2"  # in the primary key's order
)

# The analyzed length of a tsvector `tsv`: every occurrence of every lexeme (a lexeme stored without positions
# counts once).
TERM_COUNT = "(SELECT coalesce(sum(coalesce(array_length(u.positions, 1), 1)), 0) FROM unnest(tsv) u)"


def revision_statistics(conn: psycopg.Connection[Any], revision_ids: Sequence[int]) -> None:
    """Write the BM25 statistics of newly inserted revisions (their chunks are stored): lengths and lexemes."""
    if revision_ids:
        params = {"ids": list(revision_ids)}
        conn.execute(_REVISION_LENGTHS, params)
        conn.execute(_REVISION_TERMS, params)


@dataclass(frozen=True)
class QuestionTerms:
    """The words of a question as full text reads them, with the version's statistics of each."""

    lexemes: tuple[str, ...]  # stemmed, stop words dropped, each once
    counts: tuple[int, ...]  # how often each occurs in the question
    chunks_with: tuple[int, ...]  # df: chunks of the version holding each
    chunks: int  # N: chunks of the version
    mean_length: float  # avgdl: their mean analyzed length

    def idf(self) -> list[float]:
        """Each word's inverse document frequency, Lucene's BM25 form."""
        n = self.chunks
        return [math.log1p((n - df + 0.5) / (df + 0.5)) for df in self.chunks_with]


@dataclass(frozen=True)
class KeywordRanking:
    """A keyword search's chunks, best first, and the sum of the question's words' idf."""

    hits: list[ChunkHit]
    idf_total: float

    @property
    def best_score(self) -> float | None:
        """The best chunk's BM25 score (None: no chunk holds any word of the question)."""
        return self.hits[0].keyword_score if self.hits else None


def question_terms(
    conn: psycopg.Connection[Any], version_id: int, language: str, question: str, reader: Reader | None = None
) -> QuestionTerms:
    """The question's words (in `language`) and the version's statistics of them: of the part `reader` may read,
    when given (summed over its revisions, so a document the caller may not read weighs on no score)."""
    if reader is not None:
        return _readable_terms(conn, version_id, language, question, reader)
    # Each word's df is looked up by its own key (a subquery per word): joined instead, a version published after
    # the last ANALYZE looked like one of a single row, and the planner merged all of its 109,000 rows (~110 ms).
    row = conn.execute(
        "WITH q AS (SELECT u.lexeme, coalesce(array_length(u.positions, 1), 1) AS n,"
        " " + _DF + " AS df"
        " FROM unnest(to_tsvector(%(l)s::regconfig, %(q)s)) u)"
        " SELECT array_agg(q.lexeme ORDER BY q.lexeme), array_agg(q.n ORDER BY q.lexeme),"
        " array_agg(coalesce(q.df, 0) ORDER BY q.lexeme),"
        " (SELECT chunk_count FROM kb_versions WHERE id = %(v)s), (SELECT term_count FROM kb_versions WHERE id = %(v)s)"
        " FROM q",
        {"l": language, "q": question, "v": version_id},
    ).fetchone()
    assert row is not None
    lexemes, counts, dfs, chunks, length = row
    return QuestionTerms(
        lexemes=tuple(lexemes or ()),
        counts=tuple(int(c) for c in counts or ()),
        chunks_with=tuple(int(d) for d in dfs or ()),
        chunks=int(chunks or 0),
        mean_length=float(length or 0) / max(1, int(chunks or 0)),
    )


def _readable_terms(
    conn: psycopg.Connection[Any], version_id: int, language: str, question: str, reader: Reader
) -> QuestionTerms:
    """question_terms over the part of a version that `reader` may read: the version's statistics minus those of
    the access rules it does not pass (kbctl.store.access)."""
    row = conn.execute(
        "WITH hidden AS MATERIALIZED (" + HIDDEN_RULES + "),"
        " q AS (SELECT u.lexeme, coalesce(array_length(u.positions, 1), 1) AS n,"
        " " + _DF + " AS df,"
        " (SELECT sum(t.chunks) FROM kb_version_rule_terms t WHERE t.version_id = %(v)s AND t.lexeme = u.lexeme"
        " AND t.rule IN (SELECT rule FROM hidden)) AS unread"
        " FROM unnest(to_tsvector(%(l)s::regconfig, %(q)s)) u)"
        " SELECT array_agg(q.lexeme ORDER BY q.lexeme), array_agg(q.n ORDER BY q.lexeme),"
        " array_agg(coalesce(q.df, 0) - coalesce(q.unread, 0) ORDER BY q.lexeme) FROM q",
        {"l": language, "q": question, "v": version_id, **readable_params(reader)},
    ).fetchone()
    assert row is not None
    lexemes, counts, dfs = row
    chunks, length = readable_size(conn, version_id, reader)
    return QuestionTerms(
        lexemes=tuple(lexemes or ()),
        counts=tuple(int(c) for c in counts or ()),
        chunks_with=tuple(int(d) for d in dfs or ()),
        chunks=chunks,
        mean_length=float(length) / max(1, chunks),
    )


# A new version's statistics: its total length, and its document frequencies. Those are the base's rows plus a
# difference (`_DIFFERENCE`): the predecessor's own difference (when it has a base), plus the terms of the revisions
# it adds, minus those of the revisions it drops.
_VERSION_LENGTH = (
    "UPDATE kb_versions SET term_count = (SELECT coalesce(sum(r.term_count), 0) FROM kb_version_sources vs"
    " JOIN kb_source_revisions r ON r.id = vs.revision_id WHERE vs.version_id = %(v)s) WHERE id = %(v)s"
)
_DIFFERENCE = (
    "WITH old AS (SELECT revision_id FROM kb_version_sources WHERE version_id = %(p)s AND revision_id IS NOT NULL),"
    " new AS (SELECT revision_id FROM kb_version_sources WHERE version_id = %(v)s AND revision_id IS NOT NULL),"
    " added AS (SELECT revision_id FROM new EXCEPT ALL SELECT revision_id FROM old),"
    " dropped AS (SELECT revision_id FROM old EXCEPT ALL SELECT revision_id FROM new)"
    " INSERT INTO kb_version_terms (version_id, lexeme, chunks)"
    " SELECT %(v)s, d.lexeme, sum(d.chunks) FROM ("
    " SELECT lexeme, chunks FROM kb_version_terms WHERE version_id = %(own)s"
    " UNION ALL SELECT t.lexeme, t.chunks FROM added a CROSS JOIN LATERAL"
    " (SELECT lexeme, chunks FROM kb_revision_terms WHERE revision_id = a.revision_id OFFSET 0) t"
    " UNION ALL SELECT t.lexeme, -t.chunks FROM dropped a CROSS JOIN LATERAL"
    " (SELECT lexeme, chunks FROM kb_revision_terms WHERE revision_id = a.revision_id OFFSET 0) t"
    " UNION ALL SELECT lexeme, chunks FROM kb_version_terms WHERE version_id = %(b)s"
    ") d GROUP BY d.lexeme HAVING sum(d.chunks) {keep}"
)
_AS_DIFFERENCE = _DIFFERENCE.format(keep="<> 0")  # %(b)s NULL: the difference alone
_WHOLE = _DIFFERENCE.format(keep="> 0")  # %(b)s the base: its rows with the difference


# The statistics deleted with their owner (no foreign key does it, so publishing checks none per row: migrations 12
# and 14): table, its key, and the owner's table, which names its knowledge base by kb_id.
_TERMS_OF = {
    "version": ("kb_version_terms", "version_id", "kb_versions"),
    "revision": ("kb_revision_terms", "revision_id", "kb_source_revisions"),
}


def _delete_terms(
    conn: psycopg.Connection[Any], owner: Literal["version", "revision"], ids: Sequence[int], kb_id: int | None
) -> None:
    table, key, owners = (sql.Identifier(name) for name in _TERMS_OF[owner])
    if kb_id is not None:
        conn.execute(
            sql.SQL("DELETE FROM {} WHERE {} IN (SELECT id FROM {} WHERE kb_id = %s)").format(table, key, owners),
            (kb_id,),
        )
    if ids:
        conn.execute(sql.SQL("DELETE FROM {} WHERE {} = ANY(%s)").format(table, key), (list(ids),))


def delete_version_terms(
    conn: psycopg.Connection[Any], version_ids: Sequence[int] = (), *, kb_id: int | None = None
) -> None:
    """Delete the statistics of versions being deleted, `version_ids` or every version of the knowledge base
    `kb_id`."""
    _delete_terms(conn, "version", version_ids, kb_id)
    delete_rule_statistics(conn, version_ids, kb_id=kb_id)


def delete_revision_terms(
    conn: psycopg.Connection[Any], revision_ids: Sequence[int] = (), *, kb_id: int | None = None
) -> None:
    """Delete the statistics of revisions being deleted, `revision_ids` or every revision of the knowledge base
    `kb_id`."""
    _delete_terms(conn, "revision", revision_ids, kb_id)


def version_statistics(conn: psycopg.Connection[Any], kb_id: int, version_id: int) -> None:
    """Write the BM25 statistics of a version whose sources are stored (inside the publishing transaction): its
    length, and its document frequencies as a difference from its predecessor's base, or whole when there is no
    predecessor or the difference has outgrown BASE_FRACTION of the base."""
    # Rows left under this id by versions deleted outside kbctl (no foreign key removes them) must not collide.
    delete_version_terms(conn, [version_id])
    conn.execute(_VERSION_LENGTH, {"v": version_id})
    prev = conn.execute(
        "SELECT id, terms_base FROM kb_versions WHERE kb_id = %s AND id <> %s ORDER BY number DESC LIMIT 1",
        (kb_id, version_id),
    ).fetchone()
    params: dict[str, Any] = {"v": version_id, "p": None, "own": None, "b": None}
    base: int | None = None
    if prev is not None:
        base = int(prev[1]) if prev[1] is not None else int(prev[0])
        params.update(p=prev[0], own=prev[0] if prev[1] is not None else None)
        written = conn.execute(_AS_DIFFERENCE, params).rowcount
        if written <= _base_rows(conn, base) * BASE_FRACTION:
            conn.execute(
                "UPDATE kb_versions SET terms_base = %s, term_rows = %s WHERE id = %s", (base, written, version_id)
            )
            return
        conn.execute("DELETE FROM kb_version_terms WHERE version_id = %s", (version_id,))
    written = conn.execute(_WHOLE, {**params, "b": base}).rowcount
    conn.execute("UPDATE kb_versions SET terms_base = NULL, term_rows = %s WHERE id = %s", (written, version_id))


def _base_rows(conn: psycopg.Connection[Any], base: int) -> int:
    """How many lexemes a base version holds (counted once for a version published before they were recorded)."""
    row = conn.execute("SELECT term_rows FROM kb_versions WHERE id = %s", (base,)).fetchone()
    if row is not None and row[0] is not None:
        return int(row[0])
    counted = conn.execute("SELECT count(*) FROM kb_version_terms WHERE version_id = %s", (base,)).fetchone()
    rows = int(counted[0]) if counted is not None else 0
    conn.execute("UPDATE kb_versions SET term_rows = %s WHERE id = %s", (rows, base))
    return rows


def rebase_terms(conn: psycopg.Connection[Any], gone: Sequence[int]) -> None:
    """Before the versions `gone` and their term rows are deleted: the versions whose base is one of them get a new
    one. The oldest of each base's dependents is written whole (the base's rows with its difference); the others'
    differences become differences from it."""
    dependents = conn.execute(
        "SELECT id, terms_base FROM kb_versions WHERE terms_base = ANY(%s) AND NOT id = ANY(%s) ORDER BY number",
        (list(gone), list(gone)),
    ).fetchall()
    heirs: dict[int, int] = {}
    for version, base in dependents:
        heir = heirs.setdefault(int(base), int(version))
        if heir != version:  # its difference from the old base, less the heir's
            _add_rows(conn, int(version), heir, -1)
            conn.execute("UPDATE kb_versions SET terms_base = %s WHERE id = %s", (heir, version))
    for base, heir in heirs.items():  # last: the others read the heir's difference first
        _add_rows(conn, heir, base, 1)
        conn.execute("UPDATE kb_versions SET terms_base = NULL WHERE id = %s", (heir,))
    for version in {int(v) for v, _ in dependents}:
        conn.execute("DELETE FROM kb_version_terms WHERE version_id = %s AND chunks = 0", (version,))
        conn.execute(
            "UPDATE kb_versions SET term_rows = (SELECT count(*) FROM kb_version_terms WHERE version_id = %s)"
            " WHERE id = %s",
            (version, version),
        )


def _add_rows(conn: psycopg.Connection[Any], version: int, source: int, sign: int) -> None:
    """Add `sign` times `source`'s term rows to `version`'s."""
    conn.execute(
        "INSERT INTO kb_version_terms (version_id, lexeme, chunks)"
        " SELECT %(v)s, lexeme, %(sign)s * chunks FROM kb_version_terms WHERE version_id = %(s)s"
        " ON CONFLICT (version_id, lexeme) DO UPDATE SET chunks = kb_version_terms.chunks + excluded.chunks",
        {"v": version, "s": source, "sign": sign},
    )


def version_frequencies(conn: psycopg.Connection[Any], version_id: int) -> dict[str, int]:
    """Every lexeme's document frequency in a version (its base's rows with its own): for checks and tests."""
    rows = conn.execute(
        "SELECT lexeme, sum(chunks) FROM kb_version_terms"
        " WHERE version_id = ANY(ARRAY[%(v)s, (SELECT terms_base FROM kb_versions WHERE id = %(v)s)])"
        " GROUP BY lexeme HAVING sum(chunks) <> 0",
        {"v": version_id},
    ).fetchall()
    return {str(lexeme): int(n) for lexeme, n in rows}


def _tsquery(lexemes: Sequence[str]) -> str:
    """A tsquery text matching any of `lexemes` (each quoted as a literal)."""
    return " | ".join("'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'" for lexeme in lexemes)


# The BM25 score of a chunk `c` for the question's words %(lex)s (weights %(w)s: qtf · idf · (K1 + 1)): its
# tsvector cut to those words (setweight marks them, ts_filter keeps the marked), each word's tf saturated.
_SCORE = (
    "(SELECT sum((%(w)s::float8[])[array_position(%(lex)s::text[], u.lexeme)]"
    " * u.tf / (u.tf + %(k1)s * (1 - %(b)s + %(b)s * c.term_count / %(avgdl)s)))"
    " FROM (SELECT lexeme, coalesce(array_length(positions, 1), 1)::float8 AS tf"
    " FROM unnest(ts_filter(setweight(c.tsv, 'A', %(lex)s::text[]), '{a}'))) u)"
)


# Which chunks are scored: those of the version matching %(match)s, at most %(cap)s of them; or those of %(ids)s.
def _in_version(reader: Reader | None) -> str:
    return (
        "SELECT c.id, c.tsv, c.term_count FROM kb_version_sources vs JOIN kb_chunks c ON c.revision_id = vs.revision_id"
        " WHERE vs.version_id = %(v)s" + readable(reader) + " AND c.tsv @@ %(match)s::tsquery LIMIT %(cap)s"
    )


_AMONG = (
    "SELECT c.id, c.tsv, c.term_count FROM kb_chunks c"
    " WHERE c.id = ANY(%(ids)s::bigint[]) AND c.tsv @@ %(match)s::tsquery"
)


def _scored(
    conn: psycopg.Connection[Any],
    version_id: int,
    terms: QuestionTerms,
    matching: Sequence[str],
    limit: int,
    cap: int | None,
    among: Sequence[int] | None = None,
    *,
    by_index: bool = False,
    reader: Reader | None = None,
) -> list[tuple[int, float]]:
    """The best `limit` (chunk id, BM25 score) of a version's chunks holding any of `matching`, among at most
    `cap` of them (all when None), or among the chunks `among` when given, scored by every word of the question.
    `by_index`: the chunks are found through the full-text index, never by a scan (see keyword_ranking), inside the
    caller's transaction (a query's snapshot) or one opened here; the scan setting is then as it was. With a
    `reader`, only the chunks it may read (`among` holds only such chunks already)."""
    weights = [count * idf * (K1 + 1) for count, idf in zip(terms.counts, terms.idf(), strict=True)]
    chosen = _in_version(reader) if among is None else _AMONG
    inside = conn.info.transaction_status != TransactionStatus.IDLE
    with nullcontext() if inside or not by_index else conn.transaction():
        before = None
        if by_index:
            # Through the index, and with the chunks' pages taken as cached (random_page_cost 1.1, the value
            # commonly advised for data in memory or on SSD): at PostgreSQL's default of 4, a version of 85,921
            # one-chunk sources was read whole into a hash to check ~2,000 chunks' membership (20 ms against 11).
            row = conn.execute(
                "SELECT current_setting('enable_seqscan'), current_setting('random_page_cost'),"
                " set_config('enable_seqscan', 'off', true), set_config('random_page_cost', %s, true)",
                (INDEXED_PAGE_COST,),
            ).fetchone()
            before = (str(row[0]), str(row[1])) if row is not None else None
        # Planned for its words, never prepared: a rare word wants the GIN index, a common one a scan, and the
        # generic plan of a statement psycopg had prepared scanned for every word (~100 ms for a rare one at
        # 100,000 chunks).
        rows = conn.execute(
            f"SELECT c.id, {_SCORE} AS score FROM ({chosen}) c ORDER BY score DESC, c.id LIMIT %(n)s",
            {
                "lex": list(terms.lexemes),
                "w": weights,
                "v": version_id,
                "match": _tsquery(matching),
                "cap": cap,
                "ids": list(among or ()),
                "k1": K1,
                "b": B,
                "avgdl": max(terms.mean_length, 1.0),
                "n": limit,
                **readable_params(reader),
            },
            prepare=False,
        ).fetchall()
        if before is not None:  # the next statements (the last resort's scan of common words) are planned as before
            conn.execute(
                "SELECT set_config('enable_seqscan', %s, true), set_config('random_page_cost', %s, true)", before
            )
    return [(int(i), float(s)) for i, s in rows]


def selecting_words(terms: QuestionTerms, budget: int | None = None) -> list[str]:
    """The words whose chunks are scored: rarest first while their postings fit `budget` (MATCH_POSTINGS unless
    given; at least one word held by a chunk); the words no chunk of the version holds select nothing."""
    budget = MATCH_POSTINGS if budget is None else budget
    held = sorted((df, lexeme) for lexeme, df in zip(terms.lexemes, terms.chunks_with, strict=True) if df > 0)
    chosen: list[str] = []
    postings = 0
    for df, lexeme in held:
        if chosen and postings + df > budget:
            break
        chosen.append(lexeme)
        postings += df
    return chosen


def keyword_ranking(
    conn: psycopg.Connection[Any],
    version_id: int,
    language: str,
    question: str,
    vector: Vector,
    limit: int,
    among: Sequence[ChunkHit] = (),
    reader: Reader | None = None,
) -> KeywordRanking:
    """The `limit` chunks of a version with the best BM25 score for `question`, best first, each with its BM25
    score (`keyword_score`) and its cosine similarity to `vector` (`score`), with the sum of the question's words'
    idf (what its keyword share is measured against: kbctl.embedding.background.keyword_share).

    `among` (in hybrid mode, the vector list) are chunks of the version already read: those the keyword search
    finds too are not read again. When every word of the question is common (even the rarest is in more than
    MATCH_POSTINGS chunks), no word can select chunks: the chunks `among` are the ones scored, when given;
    otherwise MATCH_POSTINGS of the chunks holding the rarest word. With a `reader`, only the chunks it may read are
    scored, by the statistics of those alone (kbctl.store.access)."""
    terms = question_terms(conn, version_id, language, question, reader)
    idf_total = sum(terms.idf())
    selecting = selecting_words(terms)
    if not selecting:
        return KeywordRanking([], idf_total)  # only stop words, or words no chunk holds
    known = {hit.chunk_id: hit for hit in among}
    if known and min(terms.chunks_with[terms.lexemes.index(word)] for word in selecting) > MATCH_POSTINGS:
        ranked = _scored(conn, version_id, terms, terms.lexemes, limit, None, list(known), reader=reader)
    else:
        # Words selected within the postings budget are found through the index: the planner's estimate for many
        # words joined by OR is far too high (an ArguAna question's 130 selecting words hold 3,452 of 11,511 chunks:
        # it scanned every chunk's tsvector against all of them, 200 ms where the index takes 20).
        postings = sum(terms.chunks_with[terms.lexemes.index(word)] for word in selecting)
        ranked = _scored(
            conn,
            version_id,
            terms,
            selecting,
            limit,
            MATCH_POSTINGS,
            by_index=postings <= MATCH_POSTINGS,
            reader=reader,
        )
    if len(ranked) < limit and len(selecting) < sum(df > 0 for df in terms.chunks_with):
        kept = {i for i, _ in ranked}
        more = _scored(conn, version_id, terms, terms.lexemes, limit, LAST_RESORT_RANKED, reader=reader)
        ranked += [(i, s) for i, s in more if i not in kept][: limit - len(ranked)]
        ranked.sort(key=lambda item: (-item[1], item[0]))
    unread = [(i, s) for i, s in ranked if i not in known]
    read = {hit.chunk_id: hit for hit in _chunk_hits(conn, version_id, vector, unread, reader)}
    return KeywordRanking([replace(known[i], keyword_score=s) if i in known else read[i] for i, s in ranked], idf_total)


def _chunk_hits(
    conn: psycopg.Connection[Any],
    version_id: int,
    vector: Vector,
    ranked: Sequence[tuple[int, float]],
    reader: Reader | None = None,
) -> list[ChunkHit]:
    """The chunks `ranked` (chunk id, BM25 score) of a version, each with its cosine similarity to `vector` (those
    `reader` may read, when given)."""
    if not ranked:
        return []
    with conn.cursor(row_factory=class_row(ChunkHit)) as cur:
        return cur.execute(
            "SELECT c.id AS chunk_id, vs.source_name, r.origin, r.title, c.ordinal, c.char_start,"
            " c.char_end, c.heading_path, c.content, c.token_count, e.embedding AS vector,"
            " 1 - (e.embedding <=> %(q)s) AS score, best.bm25 AS keyword_score"
            " FROM unnest(%(ids)s::bigint[], %(scores)s::float8[]) AS best(id, bm25)"
            " JOIN kb_chunks c ON c.id = best.id"
            " JOIN kb_source_revisions r ON r.id = c.revision_id"
            " JOIN kb_version_sources vs ON vs.revision_id = c.revision_id AND vs.version_id = %(v)s"
            + readable(reader)
            + " JOIN kb_embeddings e ON e.id = c.embedding_id",
            {
                "q": as_float32(vector),
                "v": version_id,
                "ids": [i for i, _ in ranked],
                "scores": [s for _, s in ranked],
                **readable_params(reader),
            },
            binary=True,
        ).fetchall()


def containing_all_words(
    conn: psycopg.Connection[Any], chunk_ids: Sequence[int], language: str, question: str
) -> set[int]:
    """Those of `chunk_ids` whose full text holds every word of `question` (as `plainto_tsquery` reads it: stemmed,
    stop words dropped); none when the question has fewer than two such words."""
    if not chunk_ids:
        return set()
    rows = conn.execute(
        "SELECT id FROM kb_chunks WHERE id = ANY(%(ids)s) AND tsv @@ plainto_tsquery(%(l)s::regconfig, %(q)s)"
        " AND coalesce(array_length(tsvector_to_array(to_tsvector(%(l)s::regconfig, %(q)s)), 1), 0) >= 2",
        {"ids": list(chunk_ids), "l": language, "q": question},
    ).fetchall()
    return {r[0] for r in rows}
