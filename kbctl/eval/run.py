"""Measure retrieval quality against an eval set: recall@k, MRR@10, nDCG@10, hit rate and no-answer accuracy.

An eval set is a YAML document (or JSON Lines, one query per line) of questions with what a good answer
retrieves:

    knowledgeBase: client-service-policy        # optional; the name given on the command line wins
    queries:
      - id: cancel-two-weeks
        question: What share of the deposit comes back if we cancel two weeks before the start?
        expectedSources: [refunds]              # relevant: a hit from one of these sources ...
        expectedText: ["14 to 29 days"]         # ... or whose text contains one of these (any case)
      - id: cafeteria
        question: What is on the cafeteria menu on Fridays?
        noAnswer: true                          # correct when nothing at all is returned

The metrics are pure functions of a query and its ranked hits (`recall_at_k`, `reciprocal_rank`,
`ndcg_at_k`, `hit_at_k`); `evaluate` runs an eval set through any `store_query(question, mode)` callable
and `evaluate_store` through a `KnowledgeBaseStore`.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, TextIO

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from kbctl.errors import KbctlError, ManifestError, ManifestProblem
from kbctl.manifest._problems import problems_from
from kbctl.manifest._yaml_lines import Document, SyntaxProblem, load_documents, locate

if TYPE_CHECKING:  # the metrics need no database
    from kbctl.client import KnowledgeBaseStore

__all__ = [
    "MRR_DEPTH",
    "NDCG_DEPTH",
    "EvalQuery",
    "EvalReport",
    "EvalSet",
    "HitLike",
    "ModeReport",
    "QueryOutcome",
    "Shortfall",
    "evaluate",
    "evaluate_store",
    "hit_at_k",
    "ideal_relevant",
    "load_evalset",
    "ndcg_at_k",
    "parse_evalset",
    "recall_at_k",
    "reciprocal_rank",
    "score_query",
    "split_mode",
]

MRR_DEPTH: Final = 10
NDCG_DEPTH: Final = 10
STDIN_PATH: Final = "<stdin>"
JSONL_SUFFIXES: Final = (".jsonl", ".ndjson")


class HitLike(Protocol):
    """What the metrics read from a retrieved chunk (`kbctl.query.retrieve.QueryHit` is one)."""

    @property
    def source(self) -> str: ...

    @property
    def text(self) -> str: ...


StoreQuery = Callable[[str, str | None], Sequence[HitLike]]


# ---------------------------------------------------------------- the eval set


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, alias_generator=to_camel, frozen=True)


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty or whitespace-only")
    return value


class EvalQuery(_Model):
    """One question and what a good retrieval returns for it."""

    id: str = Field(description="Unique within the eval set; names the query in reports.")
    question: str
    expected_sources: list[str] = Field(default_factory=list, description="Sources that hold the answer.")
    expected_text: list[str] = Field(
        default_factory=list, description="Substrings (any case) of a chunk that answers the question."
    )
    no_answer: bool = Field(default=False, description="The knowledge base has no answer: nothing should be returned.")

    @field_validator("id", mode="before")
    @classmethod
    def _id_from_number(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("id", "question")
    @classmethod
    def _valid_text(cls, value: str) -> str:
        return _not_blank(value)

    @field_validator("expected_sources", "expected_text")
    @classmethod
    def _valid_items(cls, value: list[str]) -> list[str]:
        for item in value:
            _not_blank(item)
        return list(dict.fromkeys(value))  # duplicates would count twice in recall

    @model_validator(mode="after")
    def _has_expectation(self) -> EvalQuery:
        expects = bool(self.expected_sources or self.expected_text)
        if self.no_answer and expects:
            raise ValueError("noAnswer: true cannot be combined with expectedSources or expectedText")
        if not self.no_answer and not expects:
            raise ValueError("set expectedSources, expectedText or noAnswer: true")
        return self

    def is_relevant(self, hit: HitLike) -> bool:
        """A hit is relevant when it comes from an expected source or contains an expected text (any case)."""
        if hit.source in self.expected_sources:
            return True
        text = hit.text.casefold()
        return any(t.casefold() in text for t in self.expected_text)


class EvalSet(_Model):
    """Questions about one knowledge base."""

    knowledge_base: str | None = Field(default=None, description="Default knowledge base (the CLI argument wins).")
    queries: list[EvalQuery] = Field(min_length=1)


def _read(path: str, stdin: TextIO | None) -> str:
    if path == "-":
        return (stdin if stdin is not None else sys.stdin).read()
    try:
        with open(path, encoding="utf-8-sig") as handle:
            return handle.read()
    except FileNotFoundError:
        message = "no such file or directory"
    except IsADirectoryError:
        message = "is a directory, expected an eval set file"
    except UnicodeDecodeError:
        message = "cannot read: not valid UTF-8"
    except OSError as error:
        message = f"cannot read: {error.strerror or error}"
    raise ManifestError([ManifestProblem(path, None, "", message)])


def load_evalset(path: str, *, stdin: TextIO | None = None) -> EvalSet:
    """Load an eval set from a YAML or JSON Lines file (`.jsonl`/`.ndjson`, or sniffed), or "-" for stdin.

    Raises ManifestError listing every problem with file:line.
    """
    return parse_evalset(_read(path, stdin), STDIN_PATH if path == "-" else path)


def _looks_like_jsonl(text: str) -> bool:
    """True when the first non-blank line is, on its own, a JSON object with a question."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    try:
        data = json.loads(first)
    except ValueError:
        return False
    return isinstance(data, dict) and "question" in data


def parse_evalset(text: str, path: str = "<evalset>", *, jsonl: bool | None = None) -> EvalSet:
    """Parse an eval set; `path` only labels the problems; `jsonl` None guesses from the suffix and content."""
    if jsonl is None:
        jsonl = path.lower().endswith(JSONL_SUFFIXES) or _looks_like_jsonl(text)
    return _parse_jsonl(text, path) if jsonl else _parse_yaml(text, path)


def _parse_yaml(text: str, path: str) -> EvalSet:
    documents = list(load_documents(text.removeprefix("\ufeff")))
    if not documents:
        raise ManifestError([ManifestProblem(path, None, "", "no eval set found (the file is empty)")])
    if len(documents) > 1:
        extra = documents[1]
        line = extra.line
        raise ManifestError([ManifestProblem(path, line, "", "expected one YAML document, found another here")])
    document = documents[0]
    if isinstance(document, SyntaxProblem):
        raise ManifestError([ManifestProblem(path, document.line, "", document.message)])
    if not isinstance(document.data, dict):
        message = "expected a mapping with queries (and optionally knowledgeBase)"
        raise ManifestError([ManifestProblem(path, document.line, "", message)])
    try:
        evalset = EvalSet.model_validate(document.data)
    except ValidationError as invalid:
        raise ManifestError(problems_from(invalid, EvalSet, document, path)) from None
    duplicates = _duplicate_ids(evalset.queries)
    if duplicates:
        problems = []
        for index, first in duplicates:
            _, line = locate(document, [("queries",), index, ("id",)])
            field = f"queries[{index}].id"
            problems.append(ManifestProblem(path, line, field, f"duplicate id {evalset.queries[index].id!r} ({first})"))
        raise ManifestError(problems)
    return evalset


def _duplicate_ids(queries: Sequence[EvalQuery]) -> list[tuple[int, str]]:
    """(index, where the id was first used) of every query reusing an earlier id."""
    first: dict[str, int] = {}
    duplicates = []
    for index, query in enumerate(queries):
        if query.id in first:
            duplicates.append((index, f"also queries[{first[query.id]}]"))
        else:
            first[query.id] = index
    return duplicates


def _parse_jsonl(text: str, path: str) -> EvalSet:
    queries: list[EvalQuery] = []
    problems: list[ManifestProblem] = []
    first_line: dict[str, int] = {}
    for number, line in enumerate(text.removeprefix("\ufeff").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError as error:
            problems.append(ManifestProblem(path, number, "", f"invalid JSON: {getattr(error, 'msg', error)}"))
            continue
        if not isinstance(data, dict):
            problems.append(ManifestProblem(path, number, "", "expected a JSON object (one query per line)"))
            continue
        try:
            query = EvalQuery.model_validate(data)
        except ValidationError as invalid:
            document = Document(tree=data, data=data, offset=number - 1, line=number)  # plain data: every line = number
            problems.extend(problems_from(invalid, EvalQuery, document, path))
            continue
        if query.id in first_line:
            message = f"duplicate id {query.id!r} (also line {first_line[query.id]})"
            problems.append(ManifestProblem(path, number, "id", message))
            continue
        first_line[query.id] = number
        queries.append(query)
    if problems:
        raise ManifestError(problems)
    if not queries:
        raise ManifestError([ManifestProblem(path, None, "", "no queries found (the file is empty)")])
    return EvalSet(queries=queries)


# ---------------------------------------------------------------- the metrics (pure)


def _check_k(k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")


def recall_at_k(query: EvalQuery, hits: Sequence[HitLike], k: int) -> float:
    """The fraction of the expected sources among the top k hits; without expected sources (only
    expected text), 1.0 when any of the top k hits is relevant, else 0.0."""
    _check_k(k)
    top = hits[:k]
    if not query.expected_sources:
        return 1.0 if any(query.is_relevant(h) for h in top) else 0.0
    found = {h.source for h in top}
    return sum(s in found for s in query.expected_sources) / len(query.expected_sources)


def reciprocal_rank(query: EvalQuery, hits: Sequence[HitLike], k: int = MRR_DEPTH) -> float:
    """1/rank of the first relevant hit among the top k (MRR@k is its mean), 0.0 when there is none."""
    _check_k(k)
    return next((1.0 / rank for rank, h in enumerate(hits[:k], start=1) if query.is_relevant(h)), 0.0)


def hit_at_k(query: EvalQuery, hits: Sequence[HitLike], k: int) -> float:
    """1.0 when any of the top k hits is relevant, else 0.0 (hit rate@k is its mean)."""
    _check_k(k)
    return 1.0 if any(query.is_relevant(h) for h in hits[:k]) else 0.0


def ideal_relevant(query: EvalQuery, k: int = NDCG_DEPTH) -> int:
    """How many relevant hits a perfect ranking has: one per expected source (one in all for a query
    that expects only text), at most k."""
    return min(k, len(query.expected_sources) or 1)


def ndcg_at_k(query: EvalQuery, hits: Sequence[HitLike], k: int = NDCG_DEPTH) -> float:
    """Normalised discounted cumulative gain of the top k hits with binary relevance.

    A relevant hit gains 1/log2(rank + 1) when its source is not already counted above it (several
    chunks of one expected source count once), up to `ideal_relevant` gains; the ideal DCG puts that
    many gains at ranks 1, 2, ... So one expected source found at rank 2 scores 1/log2(3) ≈ 0.631, and
    the result is always within [0, 1].
    """
    _check_k(k)
    ideal = ideal_relevant(query, k)
    seen: set[str] = set()
    dcg = 0.0
    for rank, hit in enumerate(hits[:k], start=1):
        if len(seen) == ideal:
            break
        if hit.source not in seen and query.is_relevant(hit):
            seen.add(hit.source)
            dcg += 1.0 / math.log2(rank + 1)
    idcg = sum(1.0 / math.log2(rank + 1) for rank in range(1, ideal + 1))
    return dcg / idcg


# ---------------------------------------------------------------- reports


class QueryOutcome(BaseModel):
    """How one query fared in one mode. Ranking metrics are None for noAnswer queries, `correct` is
    None for the others."""

    id: str
    question: str
    no_answer: bool
    retrieved: list[str] = Field(description="Sources of the hits, in rank order.")
    relevant_ranks: list[int] = Field(description="1-based ranks of the relevant hits.")
    missing_sources: list[str] = Field(description="Expected sources not among the top k hits.")
    recall: float | None
    reciprocal_rank: float | None
    ndcg: float | None
    hit: float | None
    correct: bool | None

    @property
    def missed(self) -> bool:
        """A noAnswer query that got hits, or an answerable one not fully recalled in the top k."""
        if self.no_answer:
            return not self.correct
        return (self.recall or 0.0) < 1.0


class ModeReport(BaseModel):
    """The metrics of one retrieval mode over the whole eval set (means over the answerable queries)."""

    mode: str | None = Field(description="The mode asked for; None means the knowledge base's default.")
    resolved_mode: str | None = Field(default=None, description="The mode the store says it used, when it says.")
    queries: int
    answerable: int
    no_answer_queries: int
    recall: float | None = Field(description="Mean recall@k.")
    mrr: float | None = Field(description="Mean reciprocal rank within the top 10.")
    ndcg: float | None = Field(description="Mean nDCG@10.")
    hit_rate: float | None = Field(description="Share of queries with a relevant hit in the top k.")
    no_answer_accuracy: float | None = Field(description="Share of noAnswer queries that got no hit at all.")
    results: list[QueryOutcome]

    @property
    def label(self) -> str:
        """The mode for people: `hybrid`, or `default` / `hybrid (default)` when none was asked for."""
        if self.mode is not None:
            return self.mode
        return f"{self.resolved_mode} (default)" if self.resolved_mode else "default"

    @property
    def misses(self) -> list[QueryOutcome]:
        """The queries that did not fully succeed, in eval-set order."""
        return [r for r in self.results if r.missed]


class Shortfall(BaseModel):
    """A metric below the minimum asked for (`--min-recall`, `--min-ndcg`)."""

    metric: str
    option: Literal["--min-recall", "--min-ndcg"]
    mode: str | None
    value: float | None
    minimum: float

    @property
    def message(self) -> str:
        """One line, e.g. `recall@5 0.62 is below --min-recall 0.80` (with ` in mode vector` when one was asked)."""
        suffix = f" in mode {self.mode}" if self.mode is not None else ""
        if self.value is None:
            return f"{self.metric} cannot be measured without answerable queries, {self.option} {self.minimum}{suffix}"
        value, minimum = _distinct(self.value, self.minimum)
        return f"{self.metric} {value} is below {self.option} {minimum}{suffix}"


def _distinct(value: float, minimum: float) -> tuple[str, str]:
    """Both numbers with two decimals, or as many more as it takes to tell them apart."""
    for digits in range(2, 7):
        a, b = f"{value:.{digits}f}", f"{minimum:.{digits}f}"
        if a != b:
            return a, b
    return repr(value), repr(minimum)


class EvalReport(BaseModel):
    """The result of an eval set against one knowledge base, one entry per mode."""

    knowledge_base: str | None
    k: int
    modes: list[ModeReport]

    def shortfalls(self, *, min_recall: float | None = None, min_ndcg: float | None = None) -> list[Shortfall]:
        """Every mode's recall@k below min_recall and nDCG@10 below min_ndcg (unmeasurable counts as below)."""
        found: list[Shortfall] = []
        for m in self.modes:
            gates: list[tuple[str, Literal["--min-recall", "--min-ndcg"], float | None, float | None]] = [
                (f"recall@{self.k}", "--min-recall", m.recall, min_recall),
                (f"nDCG@{NDCG_DEPTH}", "--min-ndcg", m.ndcg, min_ndcg),
            ]
            for metric, option, value, minimum in gates:
                if minimum is not None and (value is None or value < minimum):
                    found.append(Shortfall(metric=metric, option=option, mode=m.mode, value=value, minimum=minimum))
        return found


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def score_query(query: EvalQuery, hits: Sequence[HitLike], k: int) -> QueryOutcome:
    """The outcome of one query from its ranked hits."""
    retrieved = [h.source for h in hits]
    relevant = [rank for rank, h in enumerate(hits, start=1) if query.is_relevant(h)]
    common: dict[str, Any] = {"id": query.id, "question": query.question, "no_answer": query.no_answer}
    if query.no_answer:
        return QueryOutcome(
            **common,
            retrieved=retrieved,
            relevant_ranks=[],
            missing_sources=[],
            recall=None,
            reciprocal_rank=None,
            ndcg=None,
            hit=None,
            correct=not hits,
        )
    top = set(retrieved[:k])
    return QueryOutcome(
        **common,
        retrieved=retrieved,
        relevant_ranks=relevant,
        missing_sources=[s for s in query.expected_sources if s not in top],
        recall=recall_at_k(query, hits, k),
        reciprocal_rank=reciprocal_rank(query, hits),
        ndcg=ndcg_at_k(query, hits),
        hit=hit_at_k(query, hits, k),
        correct=None,
    )


def evaluate(
    store_query: StoreQuery,
    evalset: EvalSet,
    *,
    k: int = 5,
    modes: Sequence[str | None] = (None,),
    knowledge_base: str | None = None,
) -> EvalReport:
    """Run every query of the eval set once per mode through `store_query(question, mode)` (which
    returns the ranked hits; at least max(k, 10) of them are needed for the @10 metrics) and score them."""
    _check_k(k)
    if not modes:
        raise ValueError("modes must name at least one mode (None for the knowledge base's default)")
    reports = []
    for mode in dict.fromkeys(modes):
        results = [score_query(q, store_query(q.question, mode), k) for q in evalset.queries]
        ranked = [r for r in results if not r.no_answer]
        unanswerable = [r for r in results if r.no_answer]
        reports.append(
            ModeReport(
                mode=mode,
                queries=len(results),
                answerable=len(ranked),
                no_answer_queries=len(unanswerable),
                recall=_mean([r.recall or 0.0 for r in ranked]),
                mrr=_mean([r.reciprocal_rank or 0.0 for r in ranked]),
                ndcg=_mean([r.ndcg or 0.0 for r in ranked]),
                hit_rate=_mean([r.hit or 0.0 for r in ranked]),
                no_answer_accuracy=_mean([1.0 if r.correct else 0.0 for r in unanswerable]),
                results=results,
            )
        )
    return EvalReport(knowledge_base=knowledge_base or evalset.knowledge_base, k=k, modes=reports)


@dataclass
class _StoreQuery:
    """store.query as a `store_query` callable, noting the mode the store says it used."""

    store: KnowledgeBaseStore
    name: str
    top_k: int
    resolved: dict[str | None, str]
    threshold: float | None = None
    max_tokens: int | None = None

    def __call__(self, question: str, mode: str | None) -> Sequence[HitLike]:
        base, rerank = split_mode(mode)
        result = self.store.query(
            self.name,
            question,
            top_k=self.top_k,
            mode=base,
            threshold=self.threshold,
            max_tokens=self.max_tokens,
            rerank=rerank,
        )
        if result.rerank is not None and result.rerank.error:
            raise KbctlError(f"mode {mode or 'default'}: {result.rerank.error}")
        self.resolved.setdefault(mode, result.mode + ("+rerank" if result.rerank is not None else ""))
        return result.hits


def split_mode(mode: str | None) -> tuple[str | None, bool | None]:
    """(retrieval mode, rerank) of an eval mode: `hybrid` is hybrid without a reranker, `hybrid+rerank`
    with the spec's reranker, None the spec's mode and reranker."""
    if mode is None:
        return None, None
    base, plus, suffix = mode.partition("+")
    if plus and suffix != "rerank":
        raise ValueError(f"mode must be hybrid, vector or keyword, optionally with +rerank, got {mode!r}")
    return base, bool(plus)


def evaluate_store(
    store: KnowledgeBaseStore,
    name: str,
    evalset: EvalSet,
    *,
    k: int = 5,
    modes: Sequence[str | None] = (None,),
    threshold: float | None = None,
    max_tokens: int | None = None,
) -> EvalReport:
    """Evaluate knowledge base `name` of a store: each question is asked with top_k=max(k, 10) and the
    spec's threshold and token budget (or `threshold` / `max_tokens` when given), in each mode (None:
    the spec's default mode and reranker; `hybrid` is measured without a reranker, `hybrid+rerank` with
    the spec's; a reranker that fails fails the evaluation rather than measure the fused order).

    Raises KbctlError when the eval set expects a source the knowledge base does not have (a typo
    would otherwise just read as poor recall).
    """
    _check_k(k)
    known = {s.name for s in store.describe(name).source_status}
    unknown: dict[str, str] = {}
    for query in evalset.queries:
        for source in query.expected_sources:
            if source not in known:
                unknown.setdefault(source, query.id)
    if unknown:
        listed = ", ".join(f"{s} (query {i})" for s, i in unknown.items())
        raise KbctlError(f"KnowledgeBase/{name} has no source {listed}; it has: {', '.join(sorted(known))}")
    store_query = _StoreQuery(store, name, max(k, MRR_DEPTH, NDCG_DEPTH), {}, threshold, max_tokens)
    report = evaluate(store_query, evalset, k=k, modes=modes, knowledge_base=name)
    for m in report.modes:
        m.resolved_mode = store_query.resolved.get(m.mode)
    return report
