"""A refusal benchmark from public data: which rule says "nothing relevant" best, measured on questions that have an
answer in the knowledge base asked (in-domain) and questions that have none (out-of-domain), per model.

    python bench/refusal.py --beir HOME [--beir HOME ...] [--limit 300] [--features FILE] [--exempt PREFIX]

Each HOME is a store kept by `python bench/retrieval.py DIR --keep HOME [--model MODEL]`: one public BEIR dataset
imported as a knowledge base (embedded with the model its import named) and its test questions (eval.jsonl). The
homes are grouped by model; within a group each knowledge base is asked:
- in-domain: its own first `--limit` test questions, each with at least one relevant document in it;
- out-of-domain: `--limit` questions spread over the test questions of the group's other datasets, plus every
  question of examples/eval (policies of a consulting firm: no answer in a public research set).
examples/kb is applied with the group's model into a fresh store of its own, and each of its two knowledge bases
is asked its eval set (answerable questions, and the no-answer questions every rule must refuse) and, as
out-of-domain, `--limit` questions spread over the group's public datasets.

Each question is asked three times: at the defaults (topK 10, 3,000 tokens, no threshold set: the version's
calibrated gate, its similarity line or its keyword line, decides whether anything is relevant, and an answer's
chunks are those at the answer floor, 0.2 below the model's threshold: the rule kbctl ships), at the model's
threshold alone (the rule it shipped before the versions were calibrated), and uncut (the hybrid list of 100
candidates, each chunk's cosine similarity and its ranks in the vector and the keyword lists).
Its vector is compared with a fixed sample of `--sample` chunk vectors of the knowledge base (the question's
background: mean and standard deviation of its similarities), and the sample's vectors with each other (the
knowledge base's background, what a publish could compute and store with the version). `--features FILE` saves all
of it (or, when FILE exists, reads it instead of asking again), so rules can be tried without a store.

Rules, each a question-level decision (answer the top 10, or nothing), each swept over its parameter:
- shipped: what kbctl answers (the version's calibrated gate: similarity line with identifiers and agreement, or
  keyword line; an answer's chunks at the answer floor);
- the model's threshold: what kbctl answered before versions were calibrated;
- absolute: the best chunk's similarity >= t;
- absolute with agreement: the same, or the chunk first in both lists scoring >= t - 0.1 (kbctl's rule, as a gate);
- knowledge base z: (best - the knowledge base's mean pair similarity) / its deviation >= z;
- question z: (best - the question's mean similarity to the sample) / that deviation >= z;
- question margin: best - the question's mean similarity to the sample >= m;
- question z with agreement: question z >= z, or first in both lists with question z >= z - 1.

For each rule and parameter: the share of in-domain questions answered (of all, and of those whose top 10 uncut holds
a relevant document: the questions an answer can help) and of out-of-domain questions refused per knowledge base,
examples/eval's no-answer questions answered (of 8) and answerable ones left empty, and document nDCG@10 at the
rule (a refused question scores 0). The table prints, per rule, the parameter that answers the most
in-domain questions on the worst dataset while refusing >= --target-refused of the out-of-domain questions on every
knowledge base (but those named by --exempt) and every no-answer question of examples/eval; and the shipped rule.

A second table tries gates with lexical evidence (the keyword side), each calibrated per knowledge base on the
background questions as a publish could: the question's words with their document frequencies in the knowledge
base and the best BM25 score of a keyword search are recorded; `kw share` is that score over the sum of the words'
idf (about the idf-weighted share of the question one chunk holds), `coverage` the idf-weighted share of its words
some chunk holds. Rules: the similarity gate alone; or lexical (kw share at least a background quantile plus a
margin, or a fixed line); z-scores of both against the background, summed. Each in two arms: the chunks of an
answered question cut at the model's threshold (as shipped before), or not cut (topK and the budget only).

The calibrated rules ask each knowledge base kbctl's background questions (kbctl/embedding/background-questions.txt,
99 everyday questions written for no dataset), as a publish asks them of a new version; a knowledge base's line is a
quantile of their best similarities (plus a margin), alone or never below the model's threshold. The shipped row
meets each version's gate as kbctl's own code calibrates it (retrieval.as_published: Database.background_similarity
and background_keyword), also in stores imported before versions were calibrated.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from retrieval import NAME, as_published, examples_store  # bench/retrieval.py

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings
from kbctl.defaults import (
    AGREEMENT_MARGIN,
    BACKGROUND_CEILING,
    BACKGROUND_MARGIN,
    BACKGROUND_QUANTILE,
    KEYWORD_FLOOR,
    KEYWORD_MARGIN,
    KEYWORD_QUANTILE,
)
from kbctl.embedding.background import background_questions, keyword_share
from kbctl.embedding.local import calibrated_threshold
from kbctl.eval.evalset import EvalQuery, load_evalset
from kbctl.eval.metrics import ndcg_at_k
from kbctl.eval.run import distinct_sources
from kbctl.query.options import QueryOptions
from kbctl.store.bm25 import QuestionTerms, keyword_ranking, question_terms
from kbctl.store.embedded import stop_server

ROOT = Path(__file__).resolve().parent.parent
POOL = 100
TOP_K = 10
BUDGET = 3000
FLOORS = (0.1, 0.15, 0.2, 0.25, 0.3, 0.35)  # per-chunk similarity floors measured for an answer's chunks
UNCUT = QueryOptions(mode="hybrid", top_k=POOL, threshold=-1.0, max_tokens=1_000_000)


@dataclass
class Asked:
    """One question asked of one knowledge base, and what each rule needs of it."""

    kb: str  # the knowledge base asked (a dataset's name, or an examples/kb name)
    origin: str  # where the question comes from (a dataset, or examples/eval)
    kind: str  # "in" (has an answer here), "out" (has none), "none" (examples/eval's no-answer questions)
    shipped_answered: bool
    shipped_ndcg: float
    best: float  # the best cosine similarity among the candidates
    agreed: float | None  # the similarity of the chunk first in both lists, if there is one
    q_mean: float
    q_std: float
    kb_mean: float
    kb_std: float
    topic: float  # the question's similarity to the knowledge base's centroid (the sample's normalised mean)
    topic_mean: float  # the mean and deviation of the sample's chunks' similarities to that centroid
    topic_std: float
    ndcg: float  # document nDCG@10 of the top 10 (within the budget), uncut; 0 for questions without an answer
    model: str = ""
    before_answered: bool = False  # at the model's threshold, as kbctl answered before calibration
    before_ndcg: float = 0.0
    line: float = 0.0  # the version's calibrated threshold (the shipped rule's)
    # Lexical evidence (the keyword side): the question's words as full text reads them, each with the knowledge
    # base's document frequency, the number of chunks, and the best BM25 score of a keyword search.
    dfs: list[int] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    chunks: int = 0
    kw_best: float = 0.0
    all_words: bool = False  # the best vector candidate holds every word of the question
    # The similarities of the vector list's first TOP_K chunks, best first (query performance prediction: how well
    # the best few chunks match, not the best alone)
    top: list[float] = field(default_factory=list)
    kw_top: list[float] = field(default_factory=list)  # the keyword list's first TOP_K BM25 scores, best first
    # Document nDCG@10 of the top 10 (within the budget) of the uncut list cut at a per-chunk similarity floor, by
    # floor ("0.2": the chunks of similarity >= 0.2 alone; exceptions not applied)
    floor_ndcg: dict[str, float] = field(default_factory=dict)

    @cached_property
    def idfs(self) -> list[float]:
        """Each question word's BM25 idf in the knowledge base, as kbctl computes it (a word no chunk holds: df 0)."""
        return QuestionTerms((), (), tuple(self.dfs), self.chunks, 0.0).idf()

    @cached_property
    def kw_share(self) -> float:
        """The question's keyword share, as kbctl computes it (kbctl.embedding.background.keyword_share)."""
        return keyword_share(self.kw_best, sum(self.idfs))

    def top_mean(self, k: int) -> float:
        """The mean similarity of the vector list's first `k` chunks (fewer when the list is shorter)."""
        return float(np.mean(self.top[:k])) if self.top else self.best

    @cached_property
    def coverage(self) -> float:
        """The idf-weighted share of the question's words that some chunk of the knowledge base holds."""
        total = sum(self.idfs)
        return sum(w for w, df in zip(self.idfs, self.dfs, strict=True) if df > 0) / total if total else 0.0


@dataclass
class Group:
    """The questions of one model."""

    model: str
    asked: list[Asked] = field(default_factory=list)


def vectors_of(store: KnowledgeBaseStore, kb: str, sample: int) -> np.ndarray:
    """A fixed sample of the chunk vectors of `kb`'s current version, normalised, one per row."""
    rows = store.db.connection.execute(
        "SELECT e.embedding::text FROM kb_knowledge_bases k"
        " JOIN kb_versions v ON v.kb_id = k.id AND v.number = k.current_version"
        " JOIN kb_version_sources vs ON vs.version_id = v.id"
        " JOIN kb_chunks c ON c.revision_id = vs.revision_id"
        " JOIN kb_embeddings e ON e.id = c.embedding_id"
        " WHERE k.name = %s ORDER BY md5(c.id::text) LIMIT %s",
        (kb, sample),
    ).fetchall()
    matrix = np.array([json.loads(r[0]) for r in rows], dtype=np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def pair_background(matrix: np.ndarray) -> tuple[float, float]:
    """The mean and deviation of the similarities of distinct chunks of the sample."""
    similarities = matrix @ matrix.T
    values = similarities[~np.eye(len(matrix), dtype=bool)]
    return float(values.mean()), float(values.std())


def budgeted(hits: Sequence[Any]) -> list[Any]:
    """The first TOP_K hits, ending at the first that does not fit the token budget (as kbctl cuts)."""
    kept, tokens = [], 0
    for hit in hits[:TOP_K]:
        if tokens + hit.tokens > BUDGET and kept:
            break
        kept.append(hit)
        tokens += hit.tokens
    return kept


class Asker:
    """Asks the questions of one knowledge base of one store."""

    def __init__(self, store: KnowledgeBaseStore, kb: str, sample: int) -> None:
        self.store, self.kb = store, kb
        description = store.describe(kb)
        self.model = description.model
        self.embedder = store.embedder(self.model)
        self.sample = vectors_of(store, kb, sample)
        self.kb_mean, self.kb_std = pair_background(self.sample)
        centroid = self.sample.mean(axis=0)
        self.centroid = centroid / np.linalg.norm(centroid)
        to_centroid = self.sample @ self.centroid
        self.topic_mean, self.topic_std = float(to_centroid.mean()), float(to_centroid.std())
        # The imported public knowledge bases set similarityThreshold -1 (ranking), and a store kept before versions
        # were calibrated has no background: the serving version is made to look as a publish now makes it, so the
        # defaults below are kbctl's own (the store is the benchmark's).
        calibration = as_published(store, kb)
        self.line, self.version_id, self.language = calibration.line, calibration.version_id, calibration.language
        self.defaults = QueryOptions(mode="hybrid", top_k=TOP_K, max_tokens=BUDGET)
        self.before = QueryOptions(
            mode="hybrid", top_k=TOP_K, max_tokens=BUDGET, threshold=calibrated_threshold(self.model)
        )
        print(
            f"{self.model}: {kb}: calibrated threshold {self.line:.3f} (background {calibration.background}), keyword"
            f" line {calibration.keyword_line} (background keyword share {calibration.keyword_background})",
            flush=True,
        )

    def ask(self, question: str, query: EvalQuery | None, origin: str, kind: str) -> Asked:
        shipped = self.store.query(self.kb, question, self.defaults).hits
        before = self.store.query(self.kb, question, self.before).hits
        uncut = self.store.query(self.kb, question, UNCUT).hits
        [vector] = self.embedder.embed([question], purpose="query")
        q = np.asarray(vector, dtype=np.float32)
        q = q / np.linalg.norm(q)
        similarities = self.sample @ q
        agreed = next((h.similarity for h in uncut if h.vector_rank == 1 and h.keyword_rank == 1), None)
        terms = question_terms(self.store.db.connection, self.version_id, self.language, question)
        keyword = keyword_ranking(
            self.store.db.connection, self.version_id, self.language, question, vector, TOP_K
        ).hits
        first = min(uncut, key=lambda h: h.vector_rank or POOL + 1, default=None)
        relevant = query is not None and kind == "in"
        return Asked(
            kb=self.kb,
            origin=origin,
            kind=kind,
            shipped_answered=bool(shipped),
            shipped_ndcg=ndcg_at_k(query, distinct_sources(shipped)) if relevant and query else 0.0,
            best=max((h.similarity for h in uncut), default=-1.0),
            agreed=agreed,
            q_mean=float(similarities.mean()),
            q_std=float(similarities.std()),
            kb_mean=self.kb_mean,
            kb_std=self.kb_std,
            topic=float(q @ self.centroid),
            topic_mean=self.topic_mean,
            topic_std=self.topic_std,
            ndcg=ndcg_at_k(query, distinct_sources(budgeted(uncut))) if relevant and query else 0.0,
            model=self.model,
            before_answered=bool(before),
            before_ndcg=ndcg_at_k(query, distinct_sources(before)) if relevant and query else 0.0,
            line=self.line,
            dfs=list(terms.chunks_with),
            counts=list(terms.counts),
            chunks=terms.chunks,
            kw_best=max((h.keyword_score or 0.0 for h in keyword), default=0.0),
            all_words=bool(first and first.all_words),
            kw_top=[h.keyword_score or 0.0 for h in keyword],
            top=[h.similarity for h in sorted((h for h in uncut if h.vector_rank), key=lambda h: h.vector_rank)][
                :TOP_K
            ],
            floor_ndcg={
                f"{f:g}": ndcg_at_k(query, distinct_sources(budgeted([h for h in uncut if h.similarity >= f])))
                if relevant and query
                else 0.0
                for f in FLOORS
            },
        )


def spread(pools: Sequence[Sequence[str]], total: int) -> list[str]:
    """About `total` questions taken evenly from each pool, deterministically (every n-th of each)."""
    if not pools:
        return []
    each = max(1, total // len(pools))
    taken: list[str] = []
    for pool in pools:
        step = max(1, len(pool) // each)
        taken += list(pool[::step][:each])
    return taken


@contextmanager
def opened(home: Path) -> Iterator[KnowledgeBaseStore]:
    settings = Settings.from_env(home=home)
    try:
        with KnowledgeBaseStore(settings=settings) as store:
            yield store
    finally:
        if not settings.database_url:
            stop_server(settings.pgdata)


def examples_questions() -> dict[str, list[tuple[str, bool]]]:
    """examples/eval's questions by knowledge base: (question, has no answer)."""
    found: dict[str, list[tuple[str, bool]]] = {}
    for path in sorted((ROOT / "examples" / "eval").glob("*.yaml")):
        evalset = load_evalset(str(path))
        kb = evalset.knowledge_base or path.stem
        found[kb] = [(q.question, bool(q.no_answer)) for q in evalset.queries]
    return found


def ask_group(model: str, homes: list[Path], limit: int, sample: int, background: list[str]) -> Group:
    """Every question of the benchmark asked of every knowledge base of one model."""
    group = Group(model)
    questions = {home.name: load_evalset(str(home / "eval.jsonl")).queries for home in homes}
    examples = examples_questions()
    example_texts = [q for qs in examples.values() for q, _ in qs]
    for home in homes:
        own = questions[home.name][:limit]
        others = spread([[q.question for q in questions[h.name]] for h in homes if h != home], limit) if limit else []
        print(
            f"{model}: {home.name}: {len(own)} in-domain, {len(others) + len(example_texts)} out-of-domain", flush=True
        )
        with opened(home) as store:
            asker = Asker(store, NAME, sample)
            for query in own:
                group.asked.append(asker.ask(query.question, query, home.name, "in"))
            for text in others:
                group.asked.append(asker.ask(text, None, "beir", "out"))
            for text in example_texts:
                group.asked.append(asker.ask(text, None, "examples/eval", "out"))
            for text in background:
                group.asked.append(asker.ask(text, None, "background", "background"))
        for a in group.asked:
            if a.kb == NAME:
                a.kb = home.name
    with examples_store(model) as store:  # examples/kb with this model, in a store of its own
        beir = spread([[q.question for q in qs] for qs in questions.values()], limit) if limit else []
        for kb, qs in examples.items():
            print(f"{model}: {kb}: {len(qs)} of examples/eval, {len(beir)} out-of-domain", flush=True)
            asker = Asker(store, kb, sample)
            for text, no_answer in qs:
                group.asked.append(asker.ask(text, None, "examples/eval", "none" if no_answer else "answerable"))
            for text in beir:
                group.asked.append(asker.ask(text, None, "beir", "out"))
            for text in background:
                group.asked.append(asker.ask(text, None, "background", "background"))
    return group


# ---------------------------------------------------------------- rules

Rule = Callable[[Asked, float], bool]


def first_in_both(a: Asked, floor: float) -> bool:
    return a.agreed is not None and a.agreed >= floor


def q_z(a: Asked) -> float:
    return (a.best - a.q_mean) / max(a.q_std, 1e-6)


def topic_z(a: Asked) -> float:
    return (a.topic - a.topic_mean) / max(a.topic_std, 1e-6)


THRESHOLDS = [round(0.05 * i, 2) for i in range(2, 17)]
TOPIC_ZS = [round(-0.5 * i, 1) for i in range(0, 13)]

# Rules of two parameters: (rule, first values, second values).
PAIRED: dict[str, tuple[Callable[[Asked, float, float], bool], list[float], list[float]]] = {
    "absolute t and topic z: best >= t and (question-centroid - mean) / sd >= z": (
        lambda a, t, z: a.best >= t and topic_z(a) >= z,
        THRESHOLDS,
        TOPIC_ZS,
    ),
    "absolute t with agreement, and topic z": (
        lambda a, t, z: (a.best >= t or first_in_both(a, t - AGREEMENT_MARGIN)) and topic_z(a) >= z,
        THRESHOLDS,
        TOPIC_ZS,
    ),
}

RULES: dict[str, tuple[Rule, list[float]]] = {
    "topic z: (question-centroid - mean) / sd >= z": (lambda a, z: topic_z(a) >= z, TOPIC_ZS),
    "absolute: best >= t": (lambda a, t: a.best >= t, THRESHOLDS),
    "absolute with agreement": (lambda a, t: a.best >= t or first_in_both(a, t - AGREEMENT_MARGIN), THRESHOLDS),
    "knowledge base z: (best - mean pair) / sd >= z": (
        lambda a, z: (a.best - a.kb_mean) / max(a.kb_std, 1e-6) >= z,
        [0.5 * i for i in range(0, 17)],
    ),
    "question z: (best - question mean) / sd >= z": (lambda a, z: q_z(a) >= z, [0.5 * i for i in range(2, 21)]),
    "question margin: best - question mean >= m": (
        lambda a, m: a.best - a.q_mean >= m,
        [round(0.05 * i, 2) for i in range(1, 15)],
    ),
    "question z with agreement": (
        lambda a, z: q_z(a) >= z or (a.agreed is not None and (a.agreed - a.q_mean) / max(a.q_std, 1e-6) >= z - 1),
        [0.5 * i for i in range(2, 21)],
    ),
}


@dataclass(frozen=True)
class Outcome:
    answered_in: dict[str, float]  # per dataset: share of in-domain questions answered
    answered_found: dict[str, float]  # per dataset: the same, of those whose top 10 uncut holds a relevant document
    refused_out: dict[str, float]  # per knowledge base: share of out-of-domain questions refused
    ndcg: dict[str, float]  # per dataset: document nDCG@10 at the rule
    none_answered: int  # examples/eval's no-answer questions answered
    none_total: int
    answerable_empty: int  # examples/eval's answerable questions left empty
    answerable_total: int


def outcome(asked: list[Asked], answers: Callable[[Asked], bool], ndcg_of: Callable[[Asked], float]) -> Outcome:
    kbs = list(dict.fromkeys(a.kb for a in asked))
    answered_in, answered_found, refused_out, ndcg = {}, {}, {}, {}
    for kb in kbs:
        inside = [a for a in asked if a.kb == kb and a.kind == "in"]
        if inside:
            answered_in[kb] = sum(map(answers, inside)) / len(inside)
            found = [a for a in inside if a.ndcg > 0]
            answered_found[kb] = sum(map(answers, found)) / max(1, len(found))
            ndcg[kb] = sum(ndcg_of(a) if answers(a) else 0.0 for a in inside) / len(inside)
        outside = [a for a in asked if a.kb == kb and a.kind == "out"]
        if outside:
            refused_out[kb] = sum(not answers(a) for a in outside) / len(outside)
    none = [a for a in asked if a.kind == "none"]
    answerable = [a for a in asked if a.kind == "answerable"]
    return Outcome(
        answered_in,
        answered_found,
        refused_out,
        ndcg,
        sum(map(answers, none)),
        len(none),
        sum(not answers(a) for a in answerable),
        len(answerable),
    )


def row(label: str, o: Outcome) -> str:
    def cells(values: dict[str, float]) -> str:
        return " / ".join(f"{v:.2f}" for v in values.values())

    return (
        f"| {label} | {cells(o.answered_in)} | {cells(o.answered_found)} | {cells(o.refused_out)} |"
        f" {o.none_answered} of {o.none_total} |"
        f" {o.answerable_empty} of {o.answerable_total} | {' / '.join(f'{v:.3f}' for v in o.ndcg.values())} |"
    )


def calibrated_lines(asked: list[Asked]) -> dict[str, Callable[[float], float]]:
    """Per knowledge base, the quantile function of its background questions' best similarities: what a publish
    could compute by asking the fixed background questions of the new version (none without them)."""
    found: dict[str, Callable[[float], float]] = {}
    for kb in dict.fromkeys(a.kb for a in asked):
        bests = np.array([a.best for a in asked if a.kb == kb and a.kind == "background"])
        if bests.size:
            found[kb] = lambda q, b=bests: float(np.quantile(b, q, method="higher"))
    return found if len(found) == len({a.kb for a in asked}) else {}


def report(group: Group, target: float, exempt: Sequence[str] = ()) -> None:
    asked = group.asked
    kbs_in = list(dict.fromkeys(a.kb for a in asked if a.kind == "in"))
    kbs_out = list(dict.fromkeys(a.kb for a in asked if a.kind == "out"))
    print(f"\n### {group.model}\n")
    print(f"answered (in-domain): {' / '.join(kbs_in)}; refused (out-of-domain): {' / '.join(kbs_out)}\n")
    print(
        "| rule | in-domain answered | of them found uncut, answered | out-of-domain refused | no-answer answered"
        " | answerable empty | doc nDCG@10 |"
    )
    print("|---|---|---|---|---:|---:|---|")
    print(
        row(
            "shipped: the version's calibrated gate (similarity or keyword share), chunks at the answer floor",
            outcome(asked, lambda a: a.shipped_answered, lambda a: a.shipped_ndcg),
        )
    )
    print(
        row(
            "before: the model's threshold per chunk, identifiers, agreement",
            outcome(asked, lambda a: a.before_answered, lambda a: a.before_ndcg),
        )
    )
    print(row("nothing cut (never refuses)", outcome(asked, lambda a: True, lambda a: a.ndcg)))
    candidates: list[tuple[str, list[tuple[str, Callable[[Asked], bool]]]]] = [
        (label, [(f"{v:g}", lambda a, v=v, r=rule: r(a, v)) for v in values]) for label, (rule, values) in RULES.items()
    ]
    candidates += [
        (label, [(f"{v:g}, {w:g}", lambda a, v=v, w=w, r=rule: r(a, v, w)) for v in first for w in second])
        for label, (rule, first, second) in PAIRED.items()
    ]
    lines = calibrated_lines(asked)
    if lines:
        candidates.append(
            (
                "calibrated per knowledge base: best >= quantile q of its background questions' best + m",
                [
                    (f"q {q:g}, m {m:g}", lambda a, q=q, m=m: a.best >= lines[a.kb](q) + m)
                    for q in (0.8, 0.9, 0.95, 0.99, 1.0)
                    for m in (0.0, 0.02, 0.05, 0.08, 0.1, 0.15)
                ],
            )
        )
        floor = calibrated_threshold(group.model)
        candidates.append(
            (
                f"calibrated, never below the model's threshold ({floor:g}): best >= max(it, quantile q + m)",
                [
                    (f"q {q:g}, m {m:g}", lambda a, q=q, m=m: a.best >= max(floor, lines[a.kb](q) + m))
                    for q in (0.8, 0.9, 0.95, 0.99, 1.0)
                    for m in (0.0, 0.02, 0.05, 0.08, 0.1, 0.15)
                ],
            )
        )
    for label, settings in candidates:
        best: tuple[float, str, Outcome] | None = None
        for setting, answers in settings:
            o = outcome(asked, answers, lambda a: a.ndcg)
            bound = [v for kb, v in o.refused_out.items() if not kb.startswith(tuple(exempt))]
            feasible = o.none_answered == 0 and min(bound) >= target
            worst = min(o.answered_in.values())
            if feasible and (best is None or worst > best[0]):
                best = (worst, setting, o)
        if best is None:
            print(f"| {label}: no value refuses {target:.2f} everywhere | | | | | | |")
        else:
            print(row(f"{label} ({best[1]})", best[2]))


# ---------------------------------------------------------------- lexical evidence (issue: a second signal)


@dataclass(frozen=True)
class Background:
    """A knowledge base's background questions, as a publish would measure them: each signal's values (`best`,
    `share`, `cover`), with their quantiles and moments computed once."""

    best: np.ndarray
    share: np.ndarray
    cover: np.ndarray
    quantiles: dict[tuple[str, float], float] = field(default_factory=dict, compare=False)
    moments: dict[str, tuple[float, float]] = field(default_factory=dict, compare=False)

    def q(self, which: str, quantile: float) -> float:
        """The signal's quantile (the nearest observed value at or above it)."""
        if (which, quantile) not in self.quantiles:
            self.quantiles[which, quantile] = float(np.quantile(getattr(self, which), quantile, method="higher"))
        return self.quantiles[which, quantile]

    def z(self, which: str, x: float) -> float:
        """How many deviations `x` lies above the signal's mean."""
        if which not in self.moments:
            values = getattr(self, which)
            self.moments[which] = float(values.mean()), max(float(values.std()), 1e-6)
        mean, deviation = self.moments[which]
        return (x - mean) / deviation


def backgrounds(asked: list[Asked]) -> dict[str, Background]:
    found = {}
    for kb in dict.fromkeys(a.kb for a in asked):
        mine = [a for a in asked if a.kb == kb and a.kind == "background"]
        if mine:
            found[kb] = Background(
                np.array([a.best for a in mine]),
                np.array([a.kw_share for a in mine]),
                np.array([a.coverage for a in mine]),
            )
    return found


def lexical_report(group: Group, target: float, exempt: Sequence[str] = ()) -> None:
    """Gates with a second, lexical signal, each calibrated per knowledge base on the background questions, in two
    arms: the chunks of an answered question cut at the model's threshold (as before), or not cut (topK and budget
    only). Per rule the setting answering most in-domain questions on the worst dataset among those that refuse
    `target` of the out-of-domain questions of every non-exempt knowledge base and every no-answer question."""
    asked = group.asked
    bg = backgrounds(asked)
    if len(bg) < len({a.kb for a in asked}):
        print("\n(no background questions recorded: no lexical report)")
        return
    floor = calibrated_threshold(group.model)

    def sim_gate(a: Asked, q: float = 0.9, m: float = 0.05) -> bool:
        b = bg[a.kb]
        return a.best >= max(floor, b.q("best", q) + m) or first_in_both(a, max(floor, b.q("best", q) + m) - 0.1)

    gates: dict[str, list[tuple[str, Callable[[Asked], bool]]]] = {
        "similarity: best >= max(model threshold, background q + m) (shipped's gate)": [
            (f"q {q:g}, m {m:g}", lambda a, q=q, m=m: sim_gate(a, q, m))
            for q in (0.8, 0.9, 0.95)
            for m in (0.0, 0.03, 0.05, 0.08)
        ],
        "similarity, or lexical: kw share >= background quantile qk + mk": [
            (
                f"q {q:g}, m {m:g}; qk {qk:g}, mk {mk:g}",
                lambda a, q=q, m=m, qk=qk, mk=mk: sim_gate(a, q, m) or a.kw_share >= bg[a.kb].q("share", qk) + mk,
            )
            for q in (0.8, 0.9, 0.95)
            for m in (0.0, 0.05, 0.08, 0.12)
            for qk in (0.9, 0.95, 1.0)
            for mk in (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6)
        ],
        "similarity, or lexical and similar: kw share >= bg qk + mk and best >= bg median + s": [
            (
                f"q {q:g}, m {m:g}; qk {qk:g}, mk {mk:g}, s {s:g}",
                lambda a, q=q, m=m, qk=qk, mk=mk, s=s: (
                    sim_gate(a, q, m)
                    or (a.kw_share >= bg[a.kb].q("share", qk) + mk and a.best >= bg[a.kb].q("best", 0.5) + s)
                ),
            )
            for q in (0.9, 0.95)
            for m in (0.05, 0.08, 0.12)
            for qk in (0.5, 0.8, 0.9, 0.95)
            for mk in (0.0, 0.05, 0.1)
            for s in (0.0, 0.05, 0.1)
        ],
        "similarity, or a fixed lexical line: kw share >= k and best >= s": [
            (
                f"q {q:g}, m {m:g}; k {k:g}, s {s:g}",
                lambda a, q=q, m=m, k=k, s=s: sim_gate(a, q, m) or (a.kw_share >= k and a.best >= s),
            )
            for q in (0.9, 0.95)
            for m in (0.05, 0.08, 0.12)
            for k in (0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0)
            for s in (-1.0, floor - 0.1, floor, floor + 0.05)
        ],
        "z sum: z(best) + w * z(kw share) >= c, both against the background": [
            (
                f"w {w:g}, c {c:g}",
                lambda a, w=w, c=c: bg[a.kb].z("best", a.best) + w * bg[a.kb].z("share", a.kw_share) >= c,
            )
            for w in (0.0, 0.25, 0.5, 0.75, 1.0, 1.5)
            for c in [round(0.25 * i, 2) for i in range(0, 21)]
        ],
        "z sum with coverage: z(best) + w * z(kw share) + v * z(coverage) >= c": [
            (
                f"w {w:g}, v {v:g}, c {c:g}",
                lambda a, w=w, v=v, c=c: (
                    bg[a.kb].z("best", a.best)
                    + w * bg[a.kb].z("share", a.kw_share)
                    + v * bg[a.kb].z("cover", a.coverage)
                    >= c
                ),
            )
            for w in (0.25, 0.5, 1.0)
            for v in (0.25, 0.5, 1.0)
            for c in [round(0.25 * i, 2) for i in range(0, 21)]
        ],
    }
    arms: dict[str, tuple[Callable[[Asked], bool], Callable[[Asked], float]]] = {
        "chunks at the model's threshold": (lambda a: a.before_answered, lambda a: a.before_ndcg),
        "chunks not cut": (lambda a: True, lambda a: a.ndcg),
    }
    print(f"\n#### {group.model}: gates with lexical evidence (background-calibrated per knowledge base)\n")
    print(
        "| rule (arm; setting) | in-domain answered | of them found uncut, answered | out-of-domain refused"
        " | no-answer answered | answerable empty | doc nDCG@10 |"
    )
    print("|---|---|---|---|---:|---:|---|")
    print(row("nothing cut (never refuses)", outcome(asked, lambda a: True, lambda a: a.ndcg)))
    for arm, (passes, ndcg_of) in arms.items():
        for label, settings in gates.items():
            best: tuple[float, float, str, Outcome] | None = None
            for setting, gate in settings:
                o = outcome(asked, lambda a, g=gate, p=passes: g(a) and p(a), ndcg_of)
                bound = [v for kb, v in o.refused_out.items() if not kb.startswith(tuple(exempt))]
                if o.none_answered or min(bound) < target:
                    continue
                key = (min(o.answered_in.values()), sum(o.ndcg.values()))
                if best is None or key > best[:2]:
                    best = (*key, setting, o)
            if best is None:
                print(f"| {label} ({arm}): no setting refuses {target:.2f} everywhere | | | | | | |")
            else:
                print(row(f"{label} ({arm}; {best[2]})", best[3]))


def shipped_neighbours(group: Group) -> None:
    """The shipped gate's neighbours, every one printed (not only the best): its similarity margin and keyword
    quantile, margin and floor moved one at a time, and signals added to it (first in both lists; every word of the
    question in the nearest chunk; the keyword share above its background with a similarity above the background's),
    with the chunks not cut; then the shipped gate with an answer's chunks cut at each similarity floor (the answer
    floor's choice). What each buys in answers and costs in refusals."""
    asked = group.asked
    bg = backgrounds(asked)
    if len(bg) < len({a.kb for a in asked}):
        return
    floor = calibrated_threshold(group.model)

    def sim(a: Asked, m: float = BACKGROUND_MARGIN) -> bool:
        line = min(floor + BACKGROUND_CEILING, max(floor, bg[a.kb].q("best", BACKGROUND_QUANTILE) + m))
        return a.best >= line or first_in_both(a, line - AGREEMENT_MARGIN)

    def kw(a: Asked, q: float = KEYWORD_QUANTILE, m: float = KEYWORD_MARGIN, low: float = KEYWORD_FLOOR) -> bool:
        return a.kw_share >= max(low, bg[a.kb].q("share", q) + m)

    combined: dict[tuple[str, float], float] = {}

    def joint(a: Asked, w: float, m: float) -> bool:
        """best + w * kw share at least its background's 95th percentile plus m (a third line beside the two)."""
        if (a.kb, w) not in combined:
            scores = [b.best + w * b.kw_share for b in asked if b.kb == a.kb and b.kind == "background"]
            combined[a.kb, w] = float(np.quantile(scores, 0.95, method="higher"))
        return a.best + w * a.kw_share >= combined[a.kb, w] + m

    rules: dict[str, Callable[[Asked], bool]] = {
        "shipped: similarity line, or keyword line": lambda a: sim(a) or kw(a),
        "similarity line alone": lambda a: sim(a),
        **{f"similarity margin {m:g}, or keyword line": lambda a, m=m: sim(a, m) or kw(a) for m in (0.03, 0.04, 0.08)},
        **{
            f"keyword quantile {q:g} + {m:g}": lambda a, q=q, m=m: sim(a) or kw(a, q, m)
            for q, m in ((0.9, 0.2), (0.9, 0.3), (0.95, 0.1), (0.95, 0.4), (1.0, 0.1))
        },
        **{f"keyword floor {low:g}": lambda a, low=low: sim(a) or kw(a, low=low) for low in (0.0, 0.8, 1.0)},
        "or first in both lists, any similarity": lambda a: sim(a) or kw(a) or a.agreed is not None,
        "or first in both lists at the model's threshold": lambda a: (
            sim(a) or kw(a) or (a.agreed is not None and a.agreed >= floor)
        ),
        "or every word in the nearest chunk": lambda a: sim(a) or kw(a) or a.all_words,
        **{
            f"or a third line: best + {w:g} * kw share >= its background's 95th percentile + {m:g}": (
                lambda a, w=w, m=m: sim(a) or kw(a) or joint(a, w, m)
            )
            for w in (0.25, 0.5, 1.0)
            for m in (0.1, 0.2, 0.3)
        },
        "or keyword share >= its 90th percentile and similarity >= the background's 90th": lambda a: (
            sim(a)
            or kw(a)
            or (a.kw_share >= bg[a.kb].q("share", 0.9) and a.best >= bg[a.kb].q("best", BACKGROUND_QUANTILE))
        ),
    }
    print(f"\n#### {group.model}: the shipped gate and its neighbours (every rule printed)\n")
    floors = sorted({f for a in asked for f in a.floor_ndcg})
    print(
        "| rule | in-domain answered | of them found uncut, answered | out-of-domain refused | no-answer answered"
        " | answerable empty | doc nDCG@10 |"
    )
    print("|---|---|---|---|---:|---:|---|")
    for label, rule in rules.items():
        print(row(label, outcome(asked, rule, lambda a: a.ndcg)))
    for f in floors:  # the shipped gate, an answer's chunks cut at a similarity floor (no exceptions)
        shipped = rules["shipped: similarity line, or keyword line"]
        print(row(f"shipped, chunks cut at {f}", outcome(asked, shipped, lambda a, f=f: a.floor_ndcg.get(f, 0.0))))


def auc(inside: Sequence[float], outside: Sequence[float]) -> float:
    """The area under the ROC curve: the chance that an in-domain question scores above a foreign one (ties half)."""
    out = np.sort(np.asarray(outside))
    below = np.searchsorted(out, inside, side="left")
    ties = np.searchsorted(out, inside, side="right") - below
    return float(np.mean((below + 0.5 * ties) / max(1, len(out))))


def signals_report(group: Group) -> None:
    """How well each signal tells a knowledge base's own questions from foreign ones (ROC AUC, per knowledge base
    with in-domain questions): the best similarity, the mean of the vector list's first k, the keyword share, and
    the keyword list's first k scores' mean over the question's idf sum."""
    asked = group.asked
    if not any(a.top and a.kw_top for a in asked):
        return
    signals: dict[str, Callable[[Asked], float]] = {
        "best similarity": lambda a: a.best,
        **{f"mean of the first {k} similarities": lambda a, k=k: a.top_mean(k) for k in (3, 10)},
        "keyword share": lambda a: a.kw_share,
        **{
            f"keyword share over the first {k}": lambda a, k=k: keyword_share(
                float(np.mean((a.kw_top + [0.0] * k)[:k])), sum(a.idfs)
            )
            for k in (3, 10)
        },
    }
    kbs = list(dict.fromkeys(a.kb for a in asked if a.kind == "in"))
    print(f"\n#### {group.model}: each signal's ROC AUC, own questions against foreign ones\n")
    print("| signal | " + " | ".join(kbs) + " |")
    print("|---|" + "---:|" * len(kbs))
    for label, signal in signals.items():
        cells = [
            auc(
                [signal(a) for a in asked if a.kb == kb and a.kind == "in"],
                [signal(a) for a in asked if a.kb == kb and a.kind == "out"],
            )
            for kb in kbs
        ]
        print(f"| {label} | " + " | ".join(f"{c:.3f}" for c in cells) + " |")


def top_report(group: Group, target: float, exempt: Sequence[str] = ()) -> None:
    """The similarity line read over the vector list's first k chunks (their mean) instead of the best alone: a
    query performance predictor (how well the best few chunks match). Calibrated as the shipped line is (the
    background questions' quantile q of the same mean, plus a margin m, never below the model's threshold, identifiers
    and agreement as shipped), with the shipped keyword line beside it, chunks not cut. Per k and q the lowest margin
    refusing `target` of every non-exempt knowledge base's out-of-domain questions and every no-answer question."""
    asked = group.asked
    bg = backgrounds(asked)
    if len(bg) < len({a.kb for a in asked}) or not any(a.top for a in asked):
        return
    floor = calibrated_threshold(group.model)
    quantiles: dict[tuple[str, int, float], float] = {}

    def line(a: Asked, k: int, q: float, m: float) -> float:
        if (a.kb, k, q) not in quantiles:
            means = [b.top_mean(k) for b in asked if b.kb == a.kb and b.kind == "background"]
            quantiles[a.kb, k, q] = float(np.quantile(means, q, method="higher"))
        return min(floor + BACKGROUND_CEILING, max(floor, quantiles[a.kb, k, q] + m))

    def kw(a: Asked) -> bool:
        return a.kw_share >= max(KEYWORD_FLOOR, bg[a.kb].q("share", KEYWORD_QUANTILE) + KEYWORD_MARGIN)

    def gate(a: Asked, k: int, q: float, m: float) -> bool:
        at = line(a, k, q, m)
        return a.top_mean(k) >= at or first_in_both(a, at - AGREEMENT_MARGIN) or kw(a)

    print(f"\n#### {group.model}: the similarity line over the first k chunks' mean (or the keyword line)\n")
    print(
        "| k, quantile q, margin m | in-domain answered | of them found uncut, answered | out-of-domain refused"
        " | no-answer answered | answerable empty | doc nDCG@10 |"
    )
    print("|---|---|---|---|---:|---:|---|")
    for k in (1, 2, 3, 5, 10):
        for q in (0.8, 0.9, 0.95):
            for m in [round(0.01 * i, 2) for i in range(0, 16)]:
                o = outcome(asked, lambda a, k=k, q=q, m=m: gate(a, k, q, m), lambda a: a.ndcg)
                bound = [v for kb, v in o.refused_out.items() if not kb.startswith(tuple(exempt))]
                if o.none_answered == 0 and min(bound) >= target:
                    print(row(f"k {k}, q {q:g}, m {m:g}", o))
                    break
            else:
                print(f"| k {k}, q {q:g}: no margin up to 0.15 refuses {target:.2f} everywhere | | | | | | |")
    print(
        "\nWith the answers known, per knowledge base: the two lines (mean of the first k chunks' similarities, keyword"
        " share) passing a question by either that answer the most of its own questions while refusing"
        f" {target:.2f} of its out-of-domain questions and every no-answer question (answered, doc nDCG@10):\n"
    )
    ks = (1, 3, 5, 10)
    print("| knowledge base | " + " | ".join(f"k {k}" for k in ks) + " |")
    print("|---|" + "---:|" * len(ks))
    for kb in dict.fromkeys(a.kb for a in asked):
        mine = [a for a in asked if a.kb == kb]
        cells = []
        for k in ks:
            answered, lines = either_line(mine, target, lambda a, k=k: a.top_mean(k))
            own = [a for a in mine if a.kind == "in"]
            ndcg = sum(a.ndcg for a in own if a.top_mean(k) > lines[0] or a.kw_share > lines[1]) / max(1, len(own))
            cells.append(f"{answered:.2f}, {ndcg:.3f}" if own else f"{answered:.2f}")
        print(f"| {kb} | " + " | ".join(cells) + " |")


def best_line(mine: Sequence[Asked], score: Callable[[Asked], float], target: float) -> tuple[float, float]:
    """With the answers known: the lowest line on `score` that refuses `target` of a knowledge base's out-of-domain
    questions and every no-answer question, and the share of its own questions at or above it."""
    outside = [score(a) for a in mine if a.kind == "out"]
    own = np.array([score(a) for a in mine if a.kind in ("in", "answerable")])
    refused = [float(np.quantile(outside, target, method="higher")), *(score(a) for a in mine if a.kind == "none")]
    line = max(refused) + 1e-6
    return line, float(np.mean(own >= line))


def per_knowledge_base(group: Group, target: float) -> None:
    """What a threshold set per knowledge base could do at best: the lowest that refuses `target` of its
    out-of-domain questions (and every no-answer question), and the share of its own questions it then answers.
    It is found with the answers known, so it bounds what a calibration computed at publish could reach."""
    print(f"\nPer knowledge base, the best absolute threshold refusing {target:.2f} of its out-of-domain questions:\n")
    print(
        "| knowledge base | threshold | its questions answered | out-of-domain best p50 / p95"
        " | its questions p10 / p50 |"
    )
    print("|---|---:|---:|---|---|")
    for kb in dict.fromkeys(a.kb for a in group.asked):
        mine = [a for a in group.asked if a.kb == kb]
        outside = np.array([a.best for a in mine if a.kind == "out"])
        own = np.array([a.best for a in mine if a.kind in ("in", "answerable")])
        line, answered = best_line(mine, lambda a: a.best, target)
        print(
            f"| {kb} | {line:.3f} | {answered:.2f} |"
            f" {np.quantile(outside, 0.5):.3f} / {np.quantile(outside, 0.95):.3f} |"
            f" {np.quantile(own, 0.1):.3f} / {np.quantile(own, 0.5):.3f} |"
        )
    print(
        f"\nThe same bound for one line on a combined score, similarity + w * kw share (lexical evidence), and for two"
        f" lines passing a question by either (the shipped gate's form), refusing {target:.2f} of each knowledge base's"
        f" out-of-domain questions and every no-answer question:\n"
    )
    weights = (0.0, 0.25, 0.5, 1.0, 2.0)
    print(
        "| knowledge base | "
        + " | ".join(f"w {w:g}: its questions answered" for w in weights)
        + " | similarity line or keyword line: answered (lines) |"
    )
    print("|---|" + "---:|" * (len(weights) + 1))
    for kb in dict.fromkeys(a.kb for a in group.asked):
        mine = [a for a in group.asked if a.kb == kb]
        cells = [f"{best_line(mine, lambda a, w=w: a.best + w * a.kw_share, target)[1]:.2f}" for w in weights]
        answered, lines = either_line(mine, target)
        print(f"| {kb} | " + " | ".join(cells) + f" | {answered:.2f} ({lines[0]:.3f}, {lines[1]:.2f}) |")


def either_line(
    mine: Sequence[Asked], target: float, similarity: Callable[[Asked], float] = lambda a: a.best
) -> tuple[float, tuple[float, float]]:
    """With the answers known: the pair of lines (`similarity`, the best by default; keyword share) passing a
    question by either that refuses `target` of a knowledge base's out-of-domain questions and every no-answer
    question while answering the most of its own; tried at every value its refused questions take (the highest 80
    of each)."""
    refused = [a for a in mine if a.kind in ("out", "none")]
    own = [a for a in mine if a.kind in ("in", "answerable")]
    found: tuple[float, tuple[float, float]] = (0.0, (math.inf, math.inf))
    for s in sorted({similarity(a) for a in refused})[-80:]:
        for k in sorted({a.kw_share for a in refused})[-80:]:
            passes = [similarity(a) > s or a.kw_share > k for a in refused]
            if any(p for a, p in zip(refused, passes, strict=True) if a.kind == "none"):
                continue
            outside = [p for a, p in zip(refused, passes, strict=True) if a.kind == "out"]
            if outside and 1 - sum(outside) / len(outside) < target:
                continue
            answered = sum(similarity(a) > s or a.kw_share > k for a in own) / max(1, len(own))
            if answered > found[0]:
                found = (answered, (s, k))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--beir", type=Path, action="append", default=[], metavar="HOME")
    parser.add_argument("--limit", type=int, default=300, help="in-domain and out-of-domain questions per set")
    parser.add_argument("--sample", type=int, default=500, help="chunk vectors per knowledge base's background")
    parser.add_argument("--target-refused", type=float, default=0.95, help="out-of-domain share to refuse")
    parser.add_argument("--features", type=Path, default=None, help="save the questions' features here (or read)")
    parser.add_argument(
        "--exempt",
        action="append",
        default=[],
        metavar="PREFIX",
        help="knowledge bases (by name prefix) whose out-of-domain refusals do not bind the choice (still printed)",
    )
    args = parser.parse_args()
    background = list(background_questions())
    groups: list[Group] = []
    if args.features and args.features.exists():
        groups = [Group(g["model"], [Asked(**a) for a in g["asked"]]) for g in json.loads(args.features.read_text())]
    elif args.beir:
        by_model: dict[str, list[Path]] = {}
        for home in args.beir:
            with opened(home) as store:
                by_model.setdefault(store.describe(NAME).model, []).append(home)
        groups = [ask_group(model, homes, args.limit, args.sample, background) for model, homes in by_model.items()]
        if args.features:
            args.features.write_text(
                json.dumps([{"model": g.model, "asked": [asdict(a) for a in g.asked]} for g in groups])
            )
    for group in groups:
        report(group, args.target_refused, args.exempt)
        lexical_report(group, args.target_refused, args.exempt)
        shipped_neighbours(group)
        per_knowledge_base(group, args.target_refused)
        top_report(group, args.target_refused, args.exempt)
        signals_report(group)
    if any(math.isnan(a.best) for g in groups for a in g.asked):
        print("warning: some questions had no candidates")


if __name__ == "__main__":
    main()
