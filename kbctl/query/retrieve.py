"""Query a knowledge base: full-text and vector candidates fused by reciprocal rank, cut by threshold and budget.

Modes: `vector` ranks by cosine similarity; `keyword` by PostgreSQL full-text rank (ts_rank_cd over the
words of the question, any of them); `hybrid` (the default) takes the best 30 of each and fuses their
ranks with weighted reciprocal rank fusion, w/(60 + rank) summed over the lists (w = 1 for vectors,
0.3 for full text).

The similarity threshold applies to every candidate's cosine similarity, with two exceptions that keep
exact terms findable. A chunk passes even when its similarity is low when it contains
- an identifier of the question: a token with a digit or an underscore (ERR_4092, ISO-27001, form B12)
  or an acronym of two or more capitals (SLA, DPO); or
- every word of the question, as full-text search reads it (stemmed, stop words dropped), when there are
  at least two such words ("What is the wind-down fee and what is its cap?": wind, down, fee, cap).
In keyword mode the threshold does not apply (a full-text match is the evidence).

With `spec.retrieval.rerank`, the best `candidates` (default 30) of the fused list that pass the threshold
rule are scored by the reranker and reordered by its score (the rest are cut); `minScore`, when set, cuts
those scoring below it. Then topK, near-duplicates and the token budget apply, in the reranked order. If
the reranker fails (endpoint down, model missing) the query still answers, in fused order, and says so in
`rerank.error`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel

from kbctl.embedding import Embedder
from kbctl.errors import NotFoundError, RerankError
from kbctl.rerank import Reranker
from kbctl.store.database import ChunkHit, Database

__all__ = [
    "QueryHit",
    "QueryResult",
    "RerankInfo",
    "TraceEntry",
    "TraceStage",
    "identifiers",
    "query_knowledge_base",
]


class QueryHit(BaseModel):
    """One chunk of context, in rank order."""

    rank: int
    source: str
    title: str | None
    origin: str
    heading_path: list[str]
    position: int
    char_start: int
    char_end: int
    score: float  # cosine similarity to the question
    vector_rank: int | None = None  # 1-based rank among the vector candidates, None if not one
    keyword_rank: int | None = None  # 1-based rank among the full-text candidates, None if not one
    fused_score: float = 0.0  # reciprocal rank fusion score (hybrid), else 1/(60 + rank)
    rerank_score: float | None = None  # the reranker's score, None when no reranker ran
    matched_identifiers: list[str] = []
    all_words: bool = False  # the chunk contains every word of the question (full-text reading)
    tokens: int
    text: str


class TraceEntry(BaseModel):
    """One candidate as a stage saw it."""

    chunk_id: int
    source: str
    position: int
    rank: int
    score: float
    detail: str = ""


class TraceStage(BaseModel):
    """What one stage of a query did and how long it took."""

    stage: str
    ms: float
    entries: list[TraceEntry] = []


class RerankInfo(BaseModel):
    """What the reranker did for one query."""

    model: str
    candidates: int  # how many candidates were sent to it
    min_score: float | None
    applied: bool  # False when it failed and the fused order was kept
    below_min_score: int = 0
    best_score: float | None = None
    error: str | None = None


class QueryResult(BaseModel):
    """The answer to a query: the chunks kept, and why the others were not."""

    knowledge_base: str
    version: int
    model: str
    question: str
    mode: str
    identifiers: list[str]
    top_k: int
    similarity_threshold: float
    max_context_tokens: int
    hits: list[QueryHit]
    candidates: int
    below_threshold: int
    over_budget: int
    tokens: int
    best_score: float | None
    duplicates: int = 0
    rerank: RerankInfo | None = None
    trace: list[TraceStage] | None = None

    @property
    def message(self) -> str:
        """A plain sentence on the outcome, honest when nothing relevant was found."""
        kb = f"KnowledgeBase/{self.knowledge_base}"
        if self.hits:
            noun = "chunk" if len(self.hits) == 1 else "chunks"
            return f"{len(self.hits)} {noun} from {kb} (version {self.version}), {self.tokens} tokens"
        if self.candidates == 0:
            if self.mode == "keyword":
                return f"nothing relevant found in {kb}: no chunk contains a word of the question"
            return f"nothing relevant found: {kb} has no chunks"
        if self.rerank is not None and self.rerank.candidates and self.rerank.below_min_score == self.rerank.candidates:
            best = self.rerank.best_score
            return (
                f"nothing relevant found in {kb}: the best rerank score is {best:.2f}, "
                f"below the rerank minScore {self.rerank.min_score:.2f}"
            )
        if self.below_threshold == self.candidates:
            return (
                f"nothing relevant found in {kb}: the best match scores {self.best_score:.2f}, "
                f"below the similarity threshold {self.similarity_threshold:.2f}"
            )
        return f"nothing fits the token budget of {self.max_context_tokens} tokens in {kb}"


CANDIDATES = 30
RRF_K = 60
# Weight of the full-text list in hybrid fusion (vector: 1). Measured with `kbctl eval` on examples/eval
# (67 questions, mostly reworded): MRR@10 0.89 / 0.97 at weight 1, 0.93 / 0.98 at 0.5, 0.95 / 0.98 at
# 0.3, vector alone 0.96 / 1.00. Exact terms do not depend on it: identifiers pass the threshold anyway.
KEYWORD_WEIGHT = 0.3
DUPLICATE_COSINE = 0.99


class _Clock:
    """Times the stages of a query and, when explaining, keeps what each saw."""

    def __init__(self, explain: bool) -> None:
        self.explain = explain
        self.stages: list[TraceStage] = []
        self._last = time.perf_counter()

    def stage(self, name: str, entries: list[TraceEntry] | None = None) -> None:
        now = time.perf_counter()
        if self.explain:
            self.stages.append(TraceStage(stage=name, ms=round((now - self._last) * 1000, 2), entries=entries or []))
        self._last = now


def _array(vector: Any) -> Any:
    """A stored vector as a float32 numpy array (pgvector hands back its own Vector type)."""
    return np.asarray(vector.to_numpy() if hasattr(vector, "to_numpy") else vector, dtype=np.float32)


def _entry(c: ChunkHit, rank: int, score: float, detail: str = "") -> TraceEntry:
    return TraceEntry(
        chunk_id=c.chunk_id, source=c.source_name, position=c.ordinal, rank=rank, score=round(score, 4), detail=detail
    )


_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-./]*[A-Za-z0-9_]|[A-Za-z0-9]")


def identifiers(question: str) -> list[str]:
    """Exact terms of a question: tokens of 3+ characters with a digit or '_', and acronyms (2+ capitals)."""
    found = []
    for token in _TOKEN.findall(question):
        if (len(token) >= 3 and any(ch.isdigit() or ch == "_" for ch in token)) or (
            len(token) >= 2 and token.isupper() and token.isalpha()
        ):
            found.append(token)
    return list(dict.fromkeys(found))


def _contains(text: str, term: str) -> bool:
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(term)}(?![A-Za-z0-9_])", text, re.IGNORECASE) is not None


@dataclass
class _Ranks:
    """A candidate's place in each list and its fused score."""

    vector_rank: int | None = None
    keyword_rank: int | None = None
    fused_score: float = 0.0


def _fuse(
    by_vector: Sequence[ChunkHit], by_keyword: Sequence[ChunkHit], keyword_weight: float
) -> list[tuple[ChunkHit, _Ranks]]:
    """Candidates of both lists (either may be empty) by weighted reciprocal rank fusion, best first."""
    ranks: dict[int, _Ranks] = {}
    hits: dict[int, ChunkHit] = {}
    for rank, hit in enumerate(by_vector, start=1):
        hits.setdefault(hit.chunk_id, hit)
        entry = ranks.setdefault(hit.chunk_id, _Ranks())
        entry.vector_rank, entry.fused_score = rank, entry.fused_score + 1.0 / (RRF_K + rank)
    for rank, hit in enumerate(by_keyword, start=1):
        hits.setdefault(hit.chunk_id, hit)
        entry = ranks.setdefault(hit.chunk_id, _Ranks())
        entry.keyword_rank, entry.fused_score = rank, entry.fused_score + keyword_weight / (RRF_K + rank)
    order = sorted(ranks, key=lambda cid: (-ranks[cid].fused_score, -hits[cid].score, cid))
    return [(hits[cid], ranks[cid]) for cid in order]


def _rerank_text(c: ChunkHit) -> str:
    """What the reranker reads of a chunk: its heading path, then its text (as the embedder did)."""
    return (" > ".join(c.heading_path) + "\n\n" + c.content) if c.heading_path else c.content


@dataclass
class _Candidate:
    """A candidate that passed the threshold rule, with what the later stages need."""

    chunk: ChunkHit
    fused_rank: int  # 1-based place in the fused list, before the threshold
    ranks: _Ranks
    matched: list[str]
    all_words: bool
    rerank_score: float | None = None


def _rerank(
    pool: list[_Candidate], question: str, reranker: Reranker, spec: dict[str, Any]
) -> tuple[list[_Candidate], RerankInfo, list[TraceEntry]]:
    """The first `candidates` of the pool reordered by the reranker and cut by minScore; the rest are cut.

    A failing reranker leaves the pool as it was and says why in the RerankInfo."""
    limit = int(spec.get("candidates", 30))
    min_score = spec.get("minScore")
    sent, rest = pool[:limit], pool[limit:]
    info = RerankInfo(model=reranker.model_id, candidates=len(sent), min_score=min_score, applied=False)
    try:
        scores = reranker.rerank(question, [_rerank_text(c.chunk) for c in sent])
    except RerankError as exc:
        info.error = str(exc)
        return pool, info, [_entry(c.chunk, r, c.chunk.score, "kept in fused order") for r, c in enumerate(pool, 1)]
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
            entries.append(_entry(c.chunk, rank, score, f"cut: rerank score below minScore {min_score}"))
        else:
            kept.append(c)
            entries.append(_entry(c.chunk, rank, score, f"fused rank {c.fused_rank}"))
    for rank, c in enumerate(rest, start=len(sent) + 1):
        entries.append(_entry(c.chunk, rank, c.chunk.score, f"cut: beyond the {limit} rerank candidates"))
    return kept, info, entries


def query_knowledge_base(
    db: Database,
    name: str,
    question: str,
    embedder_for: Callable[[str], Embedder],
    *,
    top_k: int | None = None,
    threshold: float | None = None,
    max_tokens: int | None = None,
    mode: str | None = None,
    explain: bool = False,
    rerank: bool | None = None,
    reranker_for: Callable[[str], Reranker] | None = None,
) -> QueryResult:
    """Retrieve the chunks of the current version of `name` most relevant to `question`.

    Candidates are ranked as the mode says (see the module docstring) and kept while they pass the
    threshold rule; with a reranker (the spec's `retrieval.rerank`, unless `rerank` is False; `rerank`
    True requires one) the best of them are reordered by its scores. They are then kept in order up to
    `top_k`, and while their tokens fit the budget (the first chunk that does not fit ends the list); a
    chunk whose vector is a near-duplicate (cosine >= 0.99) of one already kept is dropped, so one fact is
    not sent twice. With `explain`, `trace` records every stage's candidates, ranks, scores, verdicts and
    time. Unset limits and the mode come from the version's `spec.retrieval`; the question is embedded
    with the model of the version, whatever the manifest says now.
    """
    if not question.strip():
        raise ValueError("question must not be empty")
    row = db.get_kb(name)
    if row is None:
        raise NotFoundError(f'knowledgebase "{name}" not found')
    if row.current_version is None:
        raise NotFoundError(f'knowledgebase "{name}" has no published version yet (is a controller running?)')
    version = db.get_version(row.id, row.current_version)
    assert version is not None
    retrieval = version.manifest["spec"]["retrieval"]
    k = top_k if top_k is not None else int(retrieval["topK"])
    th = threshold if threshold is not None else float(retrieval["similarityThreshold"])
    budget = max_tokens if max_tokens is not None else int(retrieval["maxContextTokens"])
    chosen = mode or str(retrieval.get("mode", "hybrid"))
    if chosen not in ("hybrid", "vector", "keyword"):
        raise ValueError(f"mode must be hybrid, vector or keyword, got {chosen!r}")
    if k < 1 or budget < 1:
        raise ValueError("top_k and max_tokens must be at least 1")
    rerank_spec: dict[str, Any] | None = retrieval.get("rerank")
    if rerank and rerank_spec is None:
        raise ValueError(f"KnowledgeBase/{name} (version {version.number}) has no spec.retrieval.rerank")
    reranker = None
    if rerank_spec is not None and rerank is not False:
        if reranker_for is None:
            raise ValueError("a reranker is configured but no reranker_for was given")
        reranker = reranker_for(str(rerank_spec["model"]))
    clock = _Clock(explain)
    embedder = embedder_for(version.model)
    [vector] = embedder.embed([question], purpose="query")
    clock.stage("embed question")
    pool = max(CANDIDATES, k)
    by_vector = db.search(version.id, vector, pool) if chosen != "keyword" else []
    clock.stage("vector", [_entry(c, r, c.score) for r, c in enumerate(by_vector, start=1)])
    language = str(retrieval.get("language", "english"))
    by_keyword = db.keyword_search(version.id, language, question, vector, pool) if chosen != "vector" else []
    clock.stage("keyword", [_entry(c, r, c.score) for r, c in enumerate(by_keyword, start=1)])
    terms = identifiers(question)
    # Alone, the keyword list orders by its own rank: its weight only matters beside the vector list.
    candidates = _fuse(by_vector, by_keyword, KEYWORD_WEIGHT if chosen == "hybrid" else 1.0)
    clock.stage("fuse", [_entry(c, r, x.fused_score) for r, (c, x) in enumerate(candidates, start=1)])
    weak = [c.chunk_id for c, _ in candidates if c.score < th] if chosen != "keyword" else []
    all_words = db.containing_all_words(weak, language, question)
    passing: list[_Candidate] = []
    cuts: list[TraceEntry] = []
    for rank, (c, ranks) in enumerate(candidates, start=1):
        matched = [t for t in terms if _contains(c.content, t) or _contains(" ".join(c.heading_path), t)]
        if chosen != "keyword" and c.score < th and not matched and c.chunk_id not in all_words:
            cuts.append(_entry(c, rank, c.score, f"cut: similarity below {th}"))
        else:
            passing.append(_Candidate(c, rank, ranks, matched, c.chunk_id in all_words))
    clock.stage("threshold", cuts)
    info = None
    if reranker is not None and rerank_spec is not None:
        passing, info, entries = _rerank(passing, question, reranker, rerank_spec)
        clock.stage("rerank", entries)
    hits: list[QueryHit] = []
    kept: list[Any] = []
    over = duplicates = used = 0
    verdicts: list[TraceEntry] = []
    for rank, cand in enumerate(passing, start=1):
        c, ranks, matched = cand.chunk, cand.ranks, cand.matched
        why = [f"identifier {', '.join(matched)}"] if matched else []
        why += ["every word of the question"] if cand.all_words else []
        if len(hits) >= k:
            verdict = f"cut: beyond topK {k}"
        elif any(float(np.dot(_array(c.vector), v)) >= DUPLICATE_COSINE for v in kept):
            duplicates += 1
            verdict = f"cut: near-duplicate (cosine >= {DUPLICATE_COSINE}) of a kept chunk"
        elif over or used + c.token_count > budget:
            over += 1
            verdict = f"cut: token budget {budget}"
        else:
            used += c.token_count
            kept.append(_array(c.vector))
            verdict = f"kept as {len(hits) + 1}" + (f" ({'; '.join(why)})" if why else "")
            hits.append(
                QueryHit(
                    rank=len(hits) + 1,
                    source=c.source_name,
                    title=c.title,
                    origin=c.origin,
                    heading_path=list(c.heading_path),
                    position=c.ordinal,
                    char_start=c.char_start,
                    char_end=c.char_end,
                    score=round(float(c.score), 4),
                    vector_rank=ranks.vector_rank,
                    keyword_rank=ranks.keyword_rank,
                    fused_score=round(ranks.fused_score, 6),
                    rerank_score=None if cand.rerank_score is None else round(cand.rerank_score, 4),
                    matched_identifiers=matched,
                    all_words=cand.all_words,
                    tokens=c.token_count,
                    text=c.content,
                )
            )
        verdicts.append(_entry(c, rank, c.score, verdict))
    clock.stage("select", verdicts)
    best = max((c.score for c, _ in candidates), default=None)
    return QueryResult(
        knowledge_base=name,
        version=version.number,
        model=version.model,
        question=question,
        mode=chosen,
        identifiers=terms,
        top_k=k,
        similarity_threshold=th,
        max_context_tokens=budget,
        hits=hits,
        candidates=len(candidates),
        below_threshold=len(cuts),
        over_budget=over,
        tokens=used,
        best_score=round(float(best), 4) if best is not None else None,
        duplicates=duplicates,
        rerank=info,
        trace=clock.stages if explain else None,
    )
