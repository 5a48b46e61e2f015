"""Keyword search is Okapi BM25 with the serving version's statistics, kept right as versions change."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pytest

from kbctl.client import KnowledgeBaseStore
from kbctl.manifest import parse_manifests
from kbctl.store import bm25
from tests.support.manifests import knowledge_base, text_source

ZEBRA = "A zebra was seen near the river."
APPLES = [
    "Apples grow in the orchard.",
    "The apple harvest starts in autumn.",
    "Apple trees need pruning in winter.",
    "An apple pie needs apples, butter and flour.",
]


def apply(store: KnowledgeBaseStore, *sources: dict[str, Any], **spec: Any) -> None:
    manifest = knowledge_base("fruit", *sources, retrieval={"mode": "keyword"}, **spec)
    store.apply(parse_manifests(manifest, "kb.yaml"))


def version_id(store: KnowledgeBaseStore) -> int:
    target = store.db.query_target("fruit")
    assert target is not None and target.version_id is not None
    return target.version_id


def recount(store: KnowledgeBaseStore, version: int) -> tuple[dict[str, int], int, int]:
    """The version's statistics counted from its chunks: df per lexeme, chunks, total analyzed length."""
    conn = store.db.connection
    rows = conn.execute(
        "SELECT u.lexeme, count(*) FROM kb_version_sources vs JOIN kb_chunks c ON c.revision_id = vs.revision_id,"
        " unnest(c.tsv) u WHERE vs.version_id = %s GROUP BY u.lexeme",
        (version,),
    ).fetchall()
    totals = conn.execute(
        "SELECT count(*), coalesce(sum(length), 0) FROM (SELECT (SELECT sum(array_length(u.positions, 1))"
        " FROM unnest(c.tsv) u) AS length FROM kb_version_sources vs JOIN kb_chunks c ON c.revision_id ="
        " vs.revision_id WHERE vs.version_id = %s) t",
        (version,),
    ).fetchone()
    assert totals is not None
    return {str(lexeme): int(n) for lexeme, n in rows}, int(totals[0]), int(totals[1])


def stored(store: KnowledgeBaseStore, version: int) -> tuple[dict[str, int], int, int]:
    """The version's statistics as stored at publish (its document frequencies: its base's rows with its own)."""
    conn = store.db.connection
    totals = conn.execute("SELECT chunk_count, term_count FROM kb_versions WHERE id = %s", (version,)).fetchone()
    assert totals is not None
    return bm25.version_frequencies(conn, version), int(totals[0]), int(totals[1])


def layout(store: KnowledgeBaseStore, version: int) -> tuple[int | None, int]:
    """How a version's document frequencies are stored: (its base, or None when whole; the rows it holds)."""
    row = store.db.connection.execute(
        "SELECT v.terms_base, (SELECT count(*) FROM kb_version_terms t WHERE t.version_id = v.id)"
        " FROM kb_versions v WHERE v.id = %s",
        (version,),
    ).fetchone()
    assert row is not None
    return (None if row[0] is None else int(row[0])), int(row[1])


def all_versions(store: KnowledgeBaseStore) -> list[int]:
    rows = store.db.connection.execute("SELECT id FROM kb_versions ORDER BY number").fetchall()
    return [int(r[0]) for r in rows]


def many_sources(prefix: str, count: int) -> list[dict[str, Any]]:
    """`count` sources, each with words of its own (a reference code) beside words they share."""
    return [
        text_source(f"{prefix}{i}", f"Invoice {prefix}{i}code{i} concerns apples and pears, batch {i}.")
        for i in range(count)
    ]


def reference_scores(store: KnowledgeBaseStore, version: int, question: str) -> dict[int, float]:
    """BM25 of every chunk of the version, computed here from its tsvectors (the formula of kbctl.store.bm25)."""
    conn = store.db.connection
    words = Counter(
        {
            str(lexeme): len(positions)
            for lexeme, positions in conn.execute(
                "SELECT lexeme, positions FROM unnest(to_tsvector('english', %s))", (question,)
            ).fetchall()
        }
    )
    chunks: dict[int, Counter[str]] = {}
    for chunk_id, lexeme, positions in conn.execute(
        "SELECT c.id, u.lexeme, u.positions FROM kb_version_sources vs JOIN kb_chunks c ON c.revision_id ="
        " vs.revision_id, unnest(c.tsv) u WHERE vs.version_id = %s",
        (version,),
    ).fetchall():
        chunks.setdefault(int(chunk_id), Counter())[str(lexeme)] = len(positions)
    n = len(chunks)
    avgdl = sum(sum(tf.values()) for tf in chunks.values()) / n
    df = {w: sum(w in tf for tf in chunks.values()) for w in words}
    scores = {}
    for chunk_id, tf in chunks.items():
        length = sum(tf.values())
        score = 0.0
        for w, qtf in words.items():
            if tf[w]:
                idf = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))
                score += qtf * idf * tf[w] * (bm25.K1 + 1) / (tf[w] + bm25.K1 * (1 - bm25.B + bm25.B * length / avgdl))
        if score:
            scores[chunk_id] = score
    return scores


def test_statistics_follow_every_version(store: KnowledgeBaseStore) -> None:
    """Each published version's document frequencies and lengths equal a recount of its chunks: after a first
    apply, a changed source, a removed one and an added one (the statistics are carried from version to version)."""
    sources = [text_source(f"s{i}", text) for i, text in enumerate([ZEBRA, *APPLES])]
    apply(store, *sources)
    first = version_id(store)
    assert stored(store, first) == recount(store, first)
    apply(store, text_source("s0", "Zebras and apples, again and again."), *sources[2:], text_source("new", "Pears."))
    second = version_id(store)
    assert second != first
    assert stored(store, second) == recount(store, second)
    assert stored(store, first) == recount(store, first)  # the older version keeps its own
    assert stored(store, second)[0]["pear"] == 1 and "river" not in stored(store, second)[0]


def test_a_small_change_stores_its_difference_and_a_large_one_the_whole(store: KnowledgeBaseStore) -> None:
    """A version published after a small change holds only the lexemes whose counts changed, on top of its
    predecessor's base; one whose difference outgrows an eighth of the base's rows is written whole and becomes the
    base of the next. Every version's statistics equal a recount of its chunks, and keyword search ranks by them."""
    sources = many_sources("s", 40)
    apply(store, *sources)
    first = version_id(store)
    base_layout = layout(store, first)
    assert base_layout[0] is None and stored(store, first) == recount(store, first)
    apply(store, *sources[1:], text_source("s0", "Invoice s0code0 concerns plums now."))  # one source changed
    second = version_id(store)
    assert layout(store, second)[0] == first
    assert 0 < layout(store, second)[1] <= base_layout[1] * bm25.BASE_FRACTION
    assert stored(store, second) == recount(store, second)
    assert stored(store, second)[0]["plum"] == 1 and stored(store, second)[0]["pear"] == 39
    apply(store, *sources[:20], *many_sources("t", 20))  # half replaced: written whole
    third = version_id(store)
    assert layout(store, third)[0] is None and stored(store, third) == recount(store, third)
    apply(store, *sources[:20], *many_sources("t", 19))  # one removed: a difference from the third
    fourth = version_id(store)
    assert layout(store, fourth)[0] == third and stored(store, fourth) == recount(store, fourth)
    assert all(stored(store, v) == recount(store, v) for v in all_versions(store))
    found = store.query("fruit", "plums t3code3", mode="keyword", top_k=5, max_tokens=10_000).hits
    assert [h.source for h in found] == ["t3"]  # s0's plums are gone from the serving version


def test_pruning_a_base_hands_its_rows_to_the_versions_that_used_it(store: KnowledgeBaseStore) -> None:
    """When the history drops a base, the oldest version kept that used it is written whole and the others' differences
    are rebased on it: every kept version's statistics still equal a recount, with no row left behind."""

    sources = many_sources("s", 200)
    apply(store, *sources, versionHistory=10)
    for i in range(5):  # five small changes, each a difference from the first version
        apply(store, *sources[: 199 - i], versionHistory=10)
    versions = all_versions(store)
    assert [layout(store, v)[0] for v in versions] == [None] + [versions[0]] * 5
    before = {v: stored(store, v) for v in versions}
    row = store.db.get_kb("fruit")
    assert row is not None
    assert store.db.prune_history(row.id, 4) == 2  # the base and the first version after it
    kept = all_versions(store)
    assert kept == versions[2:]
    assert layout(store, kept[0])[0] is None and all(layout(store, v)[0] == kept[0] for v in kept[1:])
    assert all(stored(store, v) == before[v] == recount(store, v) for v in kept)
    zero = store.db.connection.execute("SELECT count(*) FROM kb_version_terms WHERE chunks = 0").fetchone()
    assert zero is not None and zero[0] == 0
    apply(store, *sources[:190], versionHistory=10)  # the next publish builds on the new base
    assert stored(store, version_id(store)) == recount(store, version_id(store))


def test_ranking_is_bm25(store: KnowledgeBaseStore) -> None:
    """The keyword list is every chunk holding a word of the question, ordered by BM25 with the version's statistics
    (a rare word outweighs a common one), with the scores a reference computation gives."""
    apply(store, *(text_source(f"s{i}", text) for i, text in enumerate([ZEBRA, *APPLES])))
    question = "zebra apple apple"
    result = store.query("fruit", question, mode="keyword", top_k=10, max_tokens=10_000)
    expected = reference_scores(store, version_id(store), question)
    found = store.db.keyword_ranking(version_id(store), "english", question, [0.0] * 384, 10).hits
    assert [h.chunk_id for h in found] == sorted(expected, key=lambda c: (-expected[c], c))
    assert [h.keyword_score for h in found] == [pytest.approx(expected[h.chunk_id]) for h in found]
    assert next(h.source for h in result.hits) == "s0"  # the only zebra, though apple is asked twice
    assert len(result.hits) == 5


def test_common_words_stop_selecting_beyond_the_postings_budget(
    store: KnowledgeBaseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a postings budget smaller than the common words' postings, the rarest word selects the chunks, every
    word still scores them, and the list is filled from chunks holding any word when it comes back short."""
    apply(store, *(text_source(f"s{i}", text) for i, text in enumerate([ZEBRA, *APPLES])))
    terms = bm25.question_terms(store.db.connection, version_id(store), "english", "zebra near apple")
    assert bm25.selecting_words(terms, budget=2) == ["near", "zebra"]  # rarest first (df 1 each), then by name
    assert bm25.selecting_words(terms, budget=1) == ["near"]
    assert sorted(bm25.selecting_words(terms)) == ["appl", "near", "zebra"]
    monkeypatch.setattr(bm25, "MATCH_POSTINGS", 1)
    found = store.db.keyword_ranking(version_id(store), "english", "zebra apple", [0.0] * 384, 3).hits
    assert next(h.source_name for h in found) == "s0" and len(found) == 3  # two apples from the last resort


def test_selected_chunks_are_found_through_the_index_and_the_scan_setting_is_left_as_it_was(
    store: KnowledgeBaseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Words selected within the postings budget find their chunks through the full-text index (no scan is
    allowed while they are read, and a random page read costs INDEXED_PAGE_COST), with the same ranking as the
    planner's own choice; afterwards both settings are what they were, inside a caller's transaction (changed or
    not) and outside one."""
    apply(store, *(text_source(f"s{i}", text) for i, text in enumerate([ZEBRA, *APPLES])))
    version, conn = version_id(store), store.db.connection
    question = "zebra apple pie"

    def setting() -> tuple[str, str]:
        row = conn.execute("SELECT current_setting('enable_seqscan'), current_setting('random_page_cost')").fetchone()
        assert row is not None
        return str(row[0]), str(row[1])

    default = setting()
    assert default[0] == "on" and default[1] != bm25.INDEXED_PAGE_COST
    seen: list[tuple[str, str]] = []  # the settings each selecting statement runs under (noted as it is built)
    tsquery = bm25._tsquery
    monkeypatch.setattr(bm25, "_tsquery", lambda lexemes: seen.append(setting()) or tsquery(lexemes))
    through_index = store.db.keyword_ranking(version, "english", question, [0.0] * 384, 10).hits
    assert seen == [("off", bm25.INDEXED_PAGE_COST)] and setting() == default
    with conn.transaction():
        store.db.keyword_ranking(version, "english", question, [0.0] * 384, 10)
        assert seen[-1] == ("off", bm25.INDEXED_PAGE_COST) and setting() == default
        conn.execute("SET LOCAL enable_seqscan = off")  # as an indexed vector search leaves it in hybrid mode
        conn.execute("SET LOCAL random_page_cost = 2")
        store.db.keyword_ranking(version, "english", question, [0.0] * 384, 10)
        assert seen[-1] == ("off", bm25.INDEXED_PAGE_COST) and setting() == ("off", "2")
    assert setting() == default
    scored = bm25._scored
    monkeypatch.setattr(bm25, "_scored", lambda *args, by_index=False, **kwargs: scored(*args, **kwargs))
    planned = store.db.keyword_ranking(version, "english", question, [0.0] * 384, 10).hits
    assert seen[-1] == default  # the planner's own choice
    assert [(h.chunk_id, h.keyword_score) for h in planned] == [(h.chunk_id, h.keyword_score) for h in through_index]
    assert len(planned) == 5


def test_only_stop_words_or_unknown_words_find_nothing(store: KnowledgeBaseStore) -> None:
    apply(store, text_source("s0", ZEBRA))
    assert store.db.keyword_ranking(version_id(store), "english", "the of and", [0.0] * 384, 5).hits == []
    assert store.db.keyword_ranking(version_id(store), "english", "quokka", [0.0] * 384, 5).hits == []


def test_every_word_common_scores_the_vector_list(store: KnowledgeBaseStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """When even the rarest word of the question is held by more chunks than the postings budget, the chunks given
    (in hybrid mode, the vector list) are the ones scored, by BM25, and come back without being read again; with
    none given, the budget's worth of chunks holding the rarest word is scored."""
    apply(store, *(text_source(f"s{i}", text) for i, text in enumerate([ZEBRA, *APPLES])))
    version = version_id(store)
    vector = store.embedder("local/all-MiniLM-L6-v2").embed(["apple"], purpose="query")[0]
    listed = store.db.search(version, vector, 10)
    by_source = {h.source_name: h for h in listed}
    among = [by_source["s2"], by_source["s4"], by_source["s0"]]  # s0 holds no apple: it scores nothing
    expected = reference_scores(store, version, "apple")
    monkeypatch.setattr(bm25, "MATCH_POSTINGS", 2)  # apple is in 4 chunks
    found = store.db.keyword_ranking(version, "english", "apple", vector, 10, among).hits
    assert {h.source_name for h in found} == {"s2", "s4"}
    assert [h.keyword_score for h in found] == [pytest.approx(expected[h.chunk_id]) for h in found]
    assert all(h.vector is by_source[h.source_name].vector for h in found)  # the vector list's rows, not re-read
    assert len(store.db.keyword_ranking(version, "english", "apple", vector, 10).hits) == 2  # no list: the budget's 2


def test_chunks_already_read_come_back_unchanged(store: KnowledgeBaseStore) -> None:
    """Passing the vector list changes nothing in the keyword list but which rows are read: the same chunks, order,
    BM25 scores and cosine similarities."""
    apply(store, *(text_source(f"s{i}", text) for i, text in enumerate([ZEBRA, *APPLES])))
    version = version_id(store)
    vector = store.embedder("local/all-MiniLM-L6-v2").embed(["apple pie"], purpose="query")[0]
    listed = store.db.search(version, vector, 3)
    alone = store.db.keyword_ranking(version, "english", "zebra apple pie", vector, 10).hits
    beside = store.db.keyword_ranking(version, "english", "zebra apple pie", vector, 10, listed).hits
    assert [(h.chunk_id, h.keyword_score) for h in beside] == [(h.chunk_id, h.keyword_score) for h in alone]
    assert [h.score for h in beside] == [pytest.approx(h.score, abs=1e-5) for h in alone]


def test_deleted_versions_leave_no_statistics(store: KnowledgeBaseStore) -> None:
    """A version pruned from the history, the revisions no version serves any more, and everything of a deleted
    knowledge base take their term rows with them (kbctl deletes them: no foreign key does, so publishing need not
    check one per row)."""

    def count(sql: str) -> int:
        row = store.db.connection.execute(sql).fetchone()
        assert row is not None
        return int(row[0])

    def orphans() -> int:
        return count(
            "SELECT count(*) FROM kb_version_terms t WHERE NOT EXISTS (SELECT 1 FROM kb_versions v WHERE v.id ="
            " t.version_id)"
        ) + count(
            "SELECT count(*) FROM kb_revision_terms t WHERE NOT EXISTS (SELECT 1 FROM kb_source_revisions r WHERE"
            " r.id = t.revision_id)"
        )

    for text in (ZEBRA, *APPLES):
        apply(store, text_source("s0", text))
    row = store.db.get_kb("fruit")
    assert row is not None
    assert count("SELECT count(DISTINCT version_id) FROM kb_version_terms") == 5
    assert count("SELECT count(DISTINCT revision_id) FROM kb_revision_terms") == 5
    assert store.db.prune_history(row.id, 2) == 3
    assert orphans() == 0
    assert count("SELECT count(DISTINCT version_id) FROM kb_version_terms") == 2
    assert count("SELECT count(DISTINCT revision_id) FROM kb_revision_terms") == 2  # the two the kept versions serve
    assert store.db.delete_kb("fruit") is not None
    assert count("SELECT count(*) FROM kb_version_terms") == 0
    assert count("SELECT count(*) FROM kb_revision_terms") == 0
