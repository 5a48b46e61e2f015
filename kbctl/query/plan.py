"""A query's plan: `plan_query` resolves the QueryOptions against the serving version's stored `spec.retrieval`
(defaults: kbctl.defaults) into a frozen `QueryPlan`, within the caller's scope; kbctl.query.retrieve runs it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kbctl.defaults import (  # the tuning constants, what they are and why: kbctl.defaults
    CANDIDATES,
    EF_SEARCH,
    FUSION,
    KEYWORD_WEIGHT,
)
from kbctl.embedding.background import answer_floor, keyword_threshold, version_threshold
from kbctl.engine.conditions import condition
from kbctl.errors import NotFoundError, UsageError
from kbctl.inputs.access import Reader
from kbctl.manifest import Rerank, Retrieval
from kbctl.manifest.models import Fusion, read_stored
from kbctl.query.options import Mode, QueryOptions
from kbctl.store.database import Database

# ---------------------------------------------------------------- plan: options + the stored spec


@dataclass(frozen=True)
class QueryPlan:
    """What one query does: the version it reads, and each option as given or else as its spec says."""

    name: str
    version_id: int
    version: int  # the serving version's number
    model: str  # the embedding model the version was built with
    chunks: int  # chunks the version serves (small versions are searched exactly, large ones through the index)
    ef_search: int  # HNSW candidates per layer of an indexed vector search
    candidates: int  # chunks each list gathers (at least top_k: see pool)
    fusion: Fusion
    keyword_weight: float  # the keyword list's weight in hybrid fusion (vector: 1)
    mode: Mode
    top_k: int
    threshold: float  # the chunks' similarity threshold (set nowhere: the answer floor, below the gate)
    gate: float  # what the question's best evidence must reach for any chunk to be returned (>= threshold)
    max_tokens: int
    language: str  # PostgreSQL text search configuration of the full-text stages
    rerank: Rerank | None  # the spec's reranker, None when there is none or the options skip it
    explain: bool
    reader: Reader | None = None  # the caller, whose access filters every candidate; None: the version restricts none
    keyword_gate: float | None = None  # the gate's second line, on the question's keyword share; None: none

    @property
    def answer_floor(self) -> bool:
        """Whether `threshold` is the answer floor (set nowhere: it lies below the gate; a threshold set is both), see
        kbctl.query.stages.apply_threshold."""
        return self.threshold < self.gate

    @property
    def pool(self) -> int:
        """How many candidates each search stage gathers: `candidates`, or top_k when larger."""
        return max(self.candidates, self.top_k)


Visible = Callable[[str, Mapping[str, str]], bool]  # may the caller see the knowledge base (name, labels)?


def plan_query(
    db: Database, name: str, options: QueryOptions, visible: Visible | None = None, reader: Reader | None = None
) -> QueryPlan:
    """The plan of a query of `name`: its serving version, with the options that are unset taken from the
    version's `spec.retrieval` (validated by `kbctl.manifest.Retrieval`, which fills in the defaults; a field it leaves
    unset takes kbctl.defaults'). A threshold set nowhere is two: the version's own, calibrated when it was published
    (`version_threshold`), is the plan's `gate`, which the question's best evidence must reach for anything to be
    returned, or else the question's keyword share must reach its keyword line (`keyword_threshold`; hybrid mode,
    a version that restricts no source); an answer's chunks are then those at the answer floor, well below the
    model's threshold (`answer_floor`), and those holding words of the question when it passed by them. A
    threshold set is both the gate and the chunks' cut. A knowledge base that `visible` refuses is not found, exactly
    as one that does not exist.

    `reader` is the caller (None: one without groups or claims). When the version restricts some of its sources
    (`access`), the plan reads only what the caller may read, and its chunk count and calibrated line are of those
    alone."""
    target = db.query_target(name)
    if target is None or (visible is not None and not visible(name, target.labels)):
        raise NotFoundError(f'knowledgebase "{name}" not found')
    if target.version_id is None or target.number is None or target.model is None or target.chunk_count is None:
        # The Ready condition says why (a failed reconcile, no content, a generation waiting for a controller).
        ready = condition(target.conditions, "Ready")
        why = f": {ready['message']}" if ready.get("message") else ""
        raise NotFoundError(f'knowledgebase "{name}" has no published version yet{why}')
    spec = read_stored(
        Retrieval, target.retrieval or {}, f"spec.retrieval of KnowledgeBase/{name} version {target.number}"
    )
    if options.rerank and spec.rerank is None:
        raise UsageError(f"KnowledgeBase/{name} (version {target.number}) has no spec.retrieval.rerank")
    chosen = options.threshold if options.threshold is not None else spec.similarity_threshold
    mode = options.mode if options.mode is not None else spec.mode
    # Set nowhere: the version's calibrated lines decide whether anything is relevant, and an answer's chunks are
    # those at the answer floor (kbctl.embedding.background).
    threshold = chosen if chosen is not None else answer_floor(target.model)
    caller = (reader if reader is not None else Reader()) if target.restricted_chunks else None
    gate, keyword_gate = chosen, None
    if gate is None:  # the line of what the caller may read: text it may not read moves it not (kbctl.store.access)
        background = (
            target.background_similarity if caller is None else db.readable_background(target.version_id, caller)
        )
        gate = version_threshold(target.model, background)
        if mode == "hybrid" and caller is None:
            keyword_gate = keyword_threshold(target.background_keyword)
    chunks = db.readable_chunks(target.version_id, caller) if caller is not None else target.chunk_count
    return QueryPlan(
        name=name,
        version_id=target.version_id,
        version=target.number,
        model=target.model,
        chunks=chunks,
        ef_search=spec.ef_search or EF_SEARCH,
        candidates=spec.candidates or CANDIDATES,
        fusion=spec.fusion or FUSION,
        keyword_weight=KEYWORD_WEIGHT if spec.keyword_weight is None else spec.keyword_weight,
        mode=mode,
        top_k=options.top_k if options.top_k is not None else spec.top_k,
        threshold=threshold,
        gate=gate,  # at least `threshold`
        keyword_gate=keyword_gate,
        max_tokens=options.max_tokens if options.max_tokens is not None else spec.max_context_tokens,
        language=spec.language,
        rerank=spec.rerank if options.rerank is not False else None,
        explain=options.explain,
        reader=caller,
    )
