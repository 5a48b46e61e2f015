"""The stages of a query, in order, each a function and a stage of the `--explain` trace: embed_question,
vector_candidates, keyword_candidates, fuse, apply_threshold, rerank_candidates and select_hits; the exact terms
of a question (`identifiers`). kbctl.query.retrieve runs them on a QueryPlan (kbctl.query.plan).
Design and figures: docs/architecture.md#retrieval ("Stages, scores and exact terms"), docs/eval.md."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kbctl.defaults import (  # the tuning constants, what they are and why: kbctl.defaults
    AGREEMENT_MARGIN,
    DUPLICATE_COSINE,
    EXACT_TERMS_MARGIN,
    EXACT_TERMS_MAX_WORDS,
    FIRST_READ,
    FUSION,
    RRF_K,
)
from kbctl.embedding import Embedder, Vector
from kbctl.errors import RerankError
from kbctl.manifest import Rerank
from kbctl.manifest.models import Fusion
from kbctl.query.options import Mode
from kbctl.query.plan import QueryPlan
from kbctl.query.results import QueryHit, Relevant, RerankInfo, TraceEntry
from kbctl.rerank import Reranker
from kbctl.store.bm25 import KeywordRanking
from kbctl.store.database import ChunkHit, Database
from kbctl.store.search import as_float32


def trace_entry(c: ChunkHit, rank: int, score: float, detail: str = "") -> TraceEntry:
    return TraceEntry(
        chunk_id=c.chunk_id, source=c.source_name, position=c.ordinal, rank=rank, score=round(score, 4), detail=detail
    )


def trace_entries(hits: Sequence[ChunkHit]) -> list[TraceEntry]:
    """A search stage's candidates as trace entries: rank and cosine similarity."""
    return [trace_entry(c, r, c.score) for r, c in enumerate(hits, start=1)]


_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-./]*[A-Za-z0-9_]|[A-Za-z0-9]")


def identifiers(question: str) -> list[str]:
    """Exact terms of a question:
    - tokens of 3+ characters with a digit or '_' (ERR_4092, v2.1, 2026);
    - 2-character codes of a letter and a digit (P1, S3, 4K), but not 2-digit numbers;
    - acronyms: 2+ capitals, which may be joined by '-', '/' or '.' (SLA, G-CSF, TCR/CD, U.S)."""
    found = []
    for token in _TOKEN.findall(question):
        letters = re.sub(r"[-./]", "", token)
        coded = any(ch.isdigit() or ch == "_" for ch in token)
        if (
            (len(token) >= 3 and coded)
            or (len(token) == 2 and any(ch.isdigit() for ch in token) and any(ch.isalpha() for ch in token))
            or (len(letters) >= 2 and letters.isupper() and letters.isalpha())
        ):
            found.append(token)
    return list(dict.fromkeys(found))


def _contains(text: str, term: str) -> bool:
    """Whether `text` holds `term` as a whole token, ignoring case (a substring test first: ~40x cheaper than the
    regular expression, which only confirms the token boundaries of a text that holds it)."""
    if term.casefold() not in text.casefold():
        return False
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(term)}(?![A-Za-z0-9_])", text, re.IGNORECASE) is not None


@dataclass
class _Ranks:
    """A candidate's place in each list and its fused score."""

    vector_rank: int | None = None
    keyword_rank: int | None = None
    fused_score: float = 0.0


@dataclass
class _Candidate:
    """A candidate that passed the threshold rule, with what the later stages need."""

    chunk: ChunkHit
    fused_rank: int  # 1-based place in the fused list, before the threshold
    ranks: _Ranks
    matched: list[str]
    all_words: bool
    agreed: bool = False  # first in both lists, passing below the threshold by AGREEMENT_MARGIN at most
    rerank_score: float | None = None


@dataclass
class _Selection:
    """What the select stage kept, what it cut and why."""

    hits: list[QueryHit] = field(default_factory=list)
    tokens: int = 0
    over_budget: int = 0
    duplicates: int = 0
    verdicts: list[tuple[ChunkHit, int, str]] = field(default_factory=list)  # (chunk, rank, verdict): the trace


# ---------------------------------------------------------------- the stages, in order


def embed_question(embedder: Embedder, question: str) -> Vector:
    """Stage `embed question`: the question's vector, by the model the version's chunks were embedded with."""
    [vector] = embedder.embed([question], purpose="query")
    return vector


def vector_candidates(db: Database, plan: QueryPlan, vector: Vector) -> list[ChunkHit]:
    """Stage `vector`: the plan's pool of chunks nearest to the question by cosine distance, best first
    (none in keyword mode).

    In vector mode without a reranker the pool is read in two steps: first twice topK chunks, and the rest of the
    pool only when those do not decide the answer (`decided`): at 90,910 chunks ~16 ms a query instead of ~22, and
    a short answer pays a second scan (~6 ms)."""
    if plan.mode == "keyword":
        return []

    def nearest(limit: int) -> list[ChunkHit]:
        return db.search(
            plan.version_id,
            vector,
            limit,
            model=plan.model,
            version_chunks=plan.chunks,
            ef_search=plan.ef_search,
            reader=plan.reader,
        )

    first = min(plan.pool, FIRST_READ * plan.top_k) if plan.mode == "vector" and plan.rerank is None else plan.pool
    hits = nearest(first)
    if first < plan.pool and len(hits) == first and not decided(hits, plan):
        hits = nearest(plan.pool)
    return hits


def decided(hits: Sequence[ChunkHit], plan: QueryPlan) -> bool:
    """Whether the nearest chunks `hits` (best first) decide a vector-mode answer whatever follows them: the
    select stage ends, by topK or by the token budget, among those at or above the similarity threshold. The
    chunks after them rank lower, and those below the threshold pass only by an exception (an identifier, every
    word), so they could only follow the answer."""
    if plan.mode != "keyword" and (not hits or hits[0].score < plan.gate):
        return False  # whether anything is relevant may rest on an exception further down the pool
    strong: list[_Candidate] = []
    for rank, hit in enumerate(hits, start=1):
        if hit.score < plan.threshold:
            break
        strong.append(_Candidate(hit, rank, _Ranks(vector_rank=rank), [], False))
    selection = select_hits(strong, plan.top_k, plan.max_tokens, plan.mode)
    return len(selection.hits) >= plan.top_k or selection.over_budget > 0


def keyword_candidates(
    db: Database, plan: QueryPlan, question: str, vector: Vector, by_vector: Sequence[ChunkHit] = ()
) -> KeywordRanking:
    """Stage `keyword`: the plan's pool of chunks with the best BM25 score for the words of the question (full
    text in the spec's language), best first, with the sum of the words' idf (none in vector mode). When every
    word of the question is common, the vector list's chunks `by_vector` are the ones scored (kbctl.store.bm25)."""
    if plan.mode == "vector":
        return KeywordRanking([], 0.0)
    return db.keyword_ranking(plan.version_id, plan.language, question, vector, plan.pool, by_vector, plan.reader)


def fuse(
    by_vector: Sequence[ChunkHit],
    by_keyword: Sequence[ChunkHit],
    keyword_weight: float,
    fusion: Fusion = FUSION,
    rrf_k: int = RRF_K,
) -> list[tuple[ChunkHit, _Ranks]]:
    """Stage `fuse`: candidates of both lists (either may be empty) in one ranking, best first.

    rrf: reciprocal rank fusion, 1/(rrf_k + rank) in the vector list plus keyword_weight/(rrf_k + rank) in the
    keyword list. convex: each list's scores (cosine similarity; BM25) scaled to 0-1 within the list (its best 1,
    its last 0), then vector + keyword_weight x keyword summed, a list that lacks a chunk giving it 0. Ties go to
    the higher cosine similarity.
    """
    ranks: dict[int, _Ranks] = {}
    hits: dict[int, ChunkHit] = {}
    lists = (
        (1.0, by_vector, [h.score for h in by_vector]),
        (keyword_weight, by_keyword, [h.keyword_score or 0.0 for h in by_keyword]),
    )
    for number, (weight, ranked, scores) in enumerate(lists):
        gains = _scaled(scores) if fusion == "convex" else [1.0 / (rrf_k + r) for r in range(1, len(ranked) + 1)]
        for rank, (hit, gain) in enumerate(zip(ranked, gains, strict=True), start=1):
            hits.setdefault(hit.chunk_id, hit)
            entry = ranks.setdefault(hit.chunk_id, _Ranks())
            if number == 0:
                entry.vector_rank = rank
            else:
                entry.keyword_rank = rank
            entry.fused_score += weight * gain
    order = sorted(ranks, key=lambda cid: (-ranks[cid].fused_score, -hits[cid].score, cid))
    return [(hits[cid], ranks[cid]) for cid in order]


def _scaled(scores: Sequence[float]) -> list[float]:
    """Scores scaled to 0-1 within their list: the best 1, the lowest 0 (all 1 when they are equal)."""
    if not scores:
        return []
    high, low = max(scores), min(scores)
    span = high - low
    return [(s - low) / span if span > 0 else 1.0 for s in scores]


def apply_threshold(
    db: Database,
    plan: QueryPlan,
    question: str,
    terms: Sequence[str],
    fused: Sequence[tuple[ChunkHit, _Ranks]],
    keyword_share: float | None = None,
) -> tuple[list[_Candidate], list[TraceEntry], Relevant]:
    """Stage `threshold`: the fused candidates that pass the threshold rule, the cuts, and by which signal the
    question passed the relevance gate (None: by none, or in keyword mode).

    A candidate passes a line with a cosine similarity of at least the line; or, scoring at least the line minus
    EXACT_TERMS_MARGIN in a question of at most EXACT_TERMS_MAX_WORDS words, when it contains one of the
    question's identifiers `terms` or every word of the question (full-text reading); or when it is first in
    both lists and scores at least the line minus AGREEMENT_MARGIN. In keyword mode every candidate passes.
    The candidates that pass the plan's threshold are kept when one of them passes its gate; or when the question's
    `keyword_share` reaches the plan's keyword gate, with those of the keyword list below the threshold when it is
    the answer floor (set nowhere: the words that made the question relevant are its evidence); else none is.
    """
    short = len(question.split()) <= EXACT_TERMS_MAX_WORDS
    low = plan.threshold - EXACT_TERMS_MARGIN
    # Every word of the question, the exception that needs a statement: looked up from below the gate's reach (an
    # answer floor passes a chunk of the keyword list anyway) or the threshold's.
    lowest = plan.gate - EXACT_TERMS_MARGIN if plan.answer_floor else low
    near = [c.chunk_id for c, _ in fused if short and lowest <= c.score < plan.gate] if plan.mode != "keyword" else []
    all_words = db.containing_all_words(near, plan.language, question)

    def passes(c: ChunkHit, ranks: _Ranks, matched: Sequence[str], line: float) -> tuple[bool, bool]:
        """Whether the candidate passes `line`, and whether only by agreement."""
        if plan.mode == "keyword" or c.score >= line:
            return True, False
        if short and c.score >= line - EXACT_TERMS_MARGIN and (matched or c.chunk_id in all_words):
            return True, False
        agreed = _first_in_both(ranks) and c.score >= line - AGREEMENT_MARGIN
        return agreed, agreed

    passing: list[_Candidate] = []
    lexical: list[_Candidate] = []  # below the answer floor, holding words of the question (the keyword list)
    cuts: list[TraceEntry] = []
    for rank, (c, ranks) in enumerate(fused, start=1):
        matched = [t for t in terms if _contains(c.content, t) or _contains(" ".join(c.heading_path), t)]
        ok, agreed = passes(c, ranks, matched, plan.threshold)
        if ok:
            passing.append(_Candidate(c, rank, ranks, matched, c.chunk_id in all_words, agreed))
            continue
        if plan.answer_floor and ranks.keyword_rank is not None:
            lexical.append(_Candidate(c, rank, ranks, matched, c.chunk_id in all_words))
        why = f"cut: similarity below {plan.threshold}"
        if matched:  # an identifier, but too far below the threshold or in too long a question
            limit = f"down to {low:.4g}" if short else f"in questions of up to {EXACT_TERMS_MAX_WORDS} words"
            why += f" (identifier {', '.join(matched)} passes only {limit})"
        cuts.append(trace_entry(c, rank, c.score, why))
    if plan.mode == "keyword":
        return passing, cuts, None
    if passing and (
        plan.gate <= plan.threshold or any(passes(p.chunk, p.ranks, p.matched, plan.gate)[0] for p in passing)
    ):
        return passing, cuts, "similarity"
    if plan.keyword_gate is not None and keyword_share is not None and keyword_share >= plan.keyword_gate:
        # Relevant by its words: the chunks holding them are the answer's too, whatever their similarity.
        kept = {p.chunk.chunk_id for p in lexical}
        merged = sorted(passing + lexical, key=lambda p: p.fused_rank)
        return merged, [e for e in cuts if e.chunk_id not in kept], "keyword" if merged else None
    why = f"cut: nothing relevant, no candidate reaches the version's calibrated threshold {plan.gate}"
    if plan.keyword_gate is not None:
        why += f", nor the question's keyword share ({keyword_share or 0.0:.2f}) its keyword line {plan.keyword_gate}"
    gated = [trace_entry(p.chunk, p.fused_rank, p.chunk.score, why) for p in passing]
    return [], sorted(cuts + gated, key=lambda e: e.rank), None


def _first_in_both(ranks: _Ranks) -> bool:
    """Whether a candidate is first in the vector list and first in the keyword list."""
    return ranks.vector_rank == 1 and ranks.keyword_rank == 1


def _rerank_text(c: ChunkHit) -> str:
    """What the reranker reads of a chunk: its heading path, then its text (as the embedder did)."""
    return (" > ".join(c.heading_path) + "\n\n" + c.content) if c.heading_path else c.content


def rerank_candidates(
    pool: list[_Candidate], question: str, reranker: Reranker, spec: Rerank
) -> tuple[list[_Candidate], RerankInfo, list[TraceEntry]]:
    """Stage `rerank`: the first `spec.candidates` of the pool reordered by the reranker and cut by
    `spec.min_score`; the rest are cut.

    A failing reranker leaves the pool as it was and says why in the RerankInfo."""
    limit, min_score = spec.candidates, spec.min_score
    sent, rest = pool[:limit], pool[limit:]
    info = RerankInfo(model=reranker.model_id, candidates=len(sent), min_score=min_score, applied=False)
    try:
        scores = reranker.rerank(question, [_rerank_text(c.chunk) for c in sent])
    except RerankError as exc:
        info.error = str(exc)
        return (
            pool,
            info,
            [trace_entry(c.chunk, r, c.chunk.score, "kept in fused order") for r, c in enumerate(pool, 1)],
        )
    info.applied = True
    for c, score in zip(sent, scores, strict=True):
        c.rerank_score = score
    ordered = sorted(sent, key=lambda c: -(c.rerank_score or 0.0))
    info.best_score = round(ordered[0].rerank_score or 0.0, 4) if ordered else None
    entries: list[TraceEntry] = []
    kept: list[_Candidate] = []
    for rank, c in enumerate(ordered, start=1):
        score = c.rerank_score or 0.0
        if min_score is not None and score < min_score:
            info.below_min_score += 1
            entries.append(trace_entry(c.chunk, rank, score, f"cut: rerank score below minScore {min_score}"))
        else:
            kept.append(c)
            entries.append(trace_entry(c.chunk, rank, score, f"fused rank {c.fused_rank}"))
    for rank, c in enumerate(rest, start=len(sent) + 1):
        entries.append(trace_entry(c.chunk, rank, c.chunk.score, f"cut: beyond the {limit} rerank candidates"))
    return kept, info, entries


def _score(cand: _Candidate, mode: Mode) -> float:
    """What orders the hits, so a hit's score never exceeds the one ranked before it: the reranker's score when it
    reordered them, else the fused score (hybrid), the BM25 score (keyword) or the cosine similarity (vector)."""
    if cand.rerank_score is not None:
        return round(cand.rerank_score, 4)
    if mode == "hybrid":
        return round(cand.ranks.fused_score, 6)
    if mode == "keyword":
        return round(cand.chunk.keyword_score or 0.0, 4)
    return round(float(cand.chunk.score), 4)


def _hit(cand: _Candidate, rank: int, mode: Mode) -> QueryHit:
    c, ranks = cand.chunk, cand.ranks
    return QueryHit(
        rank=rank,
        source=c.source_name,
        title=c.title,
        origin=c.origin,
        heading_path=list(c.heading_path),
        position=c.ordinal,
        char_start=c.char_start,
        char_end=c.char_end,
        score=_score(cand, mode),
        similarity=round(float(c.score), 4),
        vector_rank=ranks.vector_rank,
        keyword_rank=ranks.keyword_rank,
        fused_score=round(ranks.fused_score, 6),
        rerank_score=None if cand.rerank_score is None else round(cand.rerank_score, 4),
        matched_identifiers=cand.matched,
        all_words=cand.all_words,
        tokens=c.token_count,
        text=c.content,
    )


def select_hits(candidates: Sequence[_Candidate], top_k: int, max_tokens: int, mode: Mode) -> _Selection:
    """Stage `select`: candidates kept in order up to `top_k`, a near-duplicate (cosine >= 0.99) of a kept
    chunk dropped, and ended by the first chunk that would exceed the token budget `max_tokens`; each hit scored as
    `mode` orders them (`_score`)."""
    selection = _Selection()
    kept: Any = None  # the kept chunks' vectors, one row each (made at the first one: its length is the model's)
    for rank, cand in enumerate(candidates, start=1):
        c, matched = cand.chunk, cand.matched
        why = [f"identifier {', '.join(matched)}"] if matched else []
        why += ["every word of the question"] if cand.all_words else []
        why += ["first in both lists"] if cand.agreed else []
        n, vector = len(selection.hits), as_float32(c.vector)
        if n >= top_k:
            verdict = f"cut: beyond topK {top_k}"
        elif n and float((kept[:n] @ vector).max()) >= DUPLICATE_COSINE:
            selection.duplicates += 1
            verdict = f"cut: near-duplicate (cosine >= {DUPLICATE_COSINE}) of a kept chunk"
        elif selection.over_budget or selection.tokens + c.token_count > max_tokens:
            selection.over_budget += 1
            verdict = f"cut: token budget {max_tokens}"
        else:
            selection.tokens += c.token_count
            if kept is None:
                kept = np.empty((top_k, len(vector)), dtype=np.float32)
            kept[n] = vector
            verdict = f"kept as {len(selection.hits) + 1}" + (f" ({'; '.join(why)})" if why else "")
            selection.hits.append(_hit(cand, len(selection.hits) + 1, mode))
        selection.verdicts.append((c, rank, verdict))
    return selection
