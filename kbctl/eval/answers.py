"""Answer evaluation (`kbctl eval --answers`): the generation half, measured apart from retrieval.

Every question of the eval set is asked (`ask`) once per chat model. Per model it reports:
- answered: the share of answerable questions that got an answer (not "not covered");
- refused: the share of noAnswer questions answered "not covered" (no context, or the model declined);
- citation validity: the share of the answers' citations that name a passage the model was given;
- uncited: answers that cite no passage at all;
- must-contain: the share of `mustContain` strings found (any case) in the answers that have them;
- faithfulness: with a judge model, the share of each answer's claims the judge finds supported by the
  passages (supported / all claims), averaged over the judged answers; unsupported and contradicted claims
  are counted.
A chat failure on one question is recorded on that question (and counted), never dropped silently.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from kbctl.answer import AskResult
from kbctl.chat import ChatModel
from kbctl.errors import KbctlError, UsageError
from kbctl.eval.evalset import EvalQuery, EvalSet
from kbctl.eval.gates import Shortfall, shortfall
from kbctl.eval.judge import Claim, judge_answer
from kbctl.inputs.access import Reader
from kbctl.query.options import QueryOptions

__all__ = ["AnswerOutcome", "AnswerReport", "AskStore", "answer_shortfalls", "evaluate_answers"]


class AskStore(Protocol):
    """A store that answers questions and builds chat models (`kbctl.client.KnowledgeBaseStore` is one)."""

    def ask(
        self,
        name: str,
        question: str,
        options: QueryOptions | None = None,
        *,
        model: str | None = None,
        reader: Reader | None = None,
    ) -> AskResult:
        """The grounded answer to `question` (see `kbctl.client.KnowledgeBaseStore.ask`)."""
        ...

    def chat_model(self, model_id: str) -> ChatModel:
        """The chat model of a model id."""
        ...


class AnswerOutcome(BaseModel):
    """How one question was answered by one model."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    id: str
    question: str
    no_answer: bool
    reason: str | None  # answered, noContext, notCovered; None when the chat call failed
    answer: str | None
    expected_answer: str | None = None
    citations: list[int] = []  # valid passage ids cited
    invalid_citations: list[int] = []
    uncited: bool = False
    must_contain_found: list[str] = []
    must_contain_missing: list[str] = []
    claims: list[Claim] | None = None  # the judge's verdicts; None when not judged
    faithfulness: float | None = None  # supported claims / claims
    error: str | None = None  # the chat (or judge) call failed

    @property
    def refused(self) -> bool:
        return self.reason in ("noContext", "notCovered")

    @property
    def missed(self) -> bool:
        """Wrong in a way the report should list: refused an answerable question, answered a noAnswer one,
        an invalid or missing citation, a missing mustContain string, an unsupported claim, or an error."""
        if self.error is not None:
            return True
        if self.no_answer:
            return not self.refused
        return (
            self.refused
            or bool(self.invalid_citations)
            or self.uncited
            or bool(self.must_contain_missing)
            or (self.faithfulness is not None and self.faithfulness < 1.0)
        )


class AnswerReport(BaseModel):
    """The answer metrics of one chat model over the eval set."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    model: str | None = Field(description="The chat model asked for (None: each knowledge base's own).")
    judge: str | None
    queries: int
    answerable: int
    no_answer_queries: int
    answered: float | None = Field(description="Share of answerable questions that got an answer.")
    refused: float | None = Field(description="Share of noAnswer questions answered 'not covered'.")
    citation_validity: float | None = Field(description="Share of citations naming a passage that was given.")
    uncited_answers: int
    must_contain: float | None = Field(description="Share of mustContain strings found in the answers.")
    faithfulness: float | None = Field(description="Mean share of supported claims per judged answer.")
    claims: int
    unsupported_claims: int
    contradicted_claims: int
    errors: int
    results: list[AnswerOutcome]

    @property
    def label(self) -> str:
        return self.model or "spec.answer"

    @property
    def misses(self) -> list[AnswerOutcome]:
        return [r for r in self.results if r.missed]


def answer_shortfalls(
    reports: Sequence[AnswerReport], *, min_faithfulness: float | None = None, min_refusal: float | None = None
) -> list[Shortfall]:
    """Every model's faithfulness below `min_faithfulness` and refusal rate below `min_refusal`."""
    found = []
    for r in reports:
        scope = f"with model {r.model}" if r.model else ""
        found += [
            shortfall(
                "faithfulness",
                "--min-faithfulness",
                r.faithfulness,
                min_faithfulness,
                scope=scope,
                lacking="a judge model",
            ),
            shortfall(
                "refusal rate", "--min-refusal", r.refused, min_refusal, scope=scope, lacking="noAnswer questions"
            ),
        ]
    return [s for s in found if s is not None]


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _outcome(query: EvalQuery, result: AskResult, judge: ChatModel | None) -> AnswerOutcome:
    answer = result.answer or ""
    folded = answer.casefold()
    outcome = AnswerOutcome(
        id=query.id,
        question=query.question,
        no_answer=query.no_answer,
        reason=result.reason,
        answer=result.answer,
        expected_answer=query.expected_answer,
        citations=[c.number for c in result.citations],
        invalid_citations=result.invalid_citations,
        uncited=result.uncited,
        must_contain_found=[s for s in query.must_contain if s.casefold() in folded],
        must_contain_missing=[s for s in query.must_contain if s.casefold() not in folded],
    )
    if judge is None or result.reason != "answered" or result.context is None:
        return outcome
    try:
        claims = judge_answer(judge, result.context, answer)
    except KbctlError as exc:
        return outcome.model_copy(update={"error": f"judge: {exc}"})
    supported = sum(1 for c in claims if c.verdict == "supported")
    return outcome.model_copy(update={"claims": claims, "faithfulness": _share(supported, len(claims))})


def evaluate_answers(
    store: AskStore,
    name: str,
    evalset: EvalSet,
    *,
    models: Sequence[str | None] = (None,),
    judge: str | None = None,
    options: QueryOptions | None = None,
    reader: Reader | None = None,
) -> list[AnswerReport]:
    """Ask every question of `evalset` of knowledge base `name` once per chat model (None: the knowledge base's
    own, spec.answer), as `reader` (document-level access), judge the answers with `judge` when one is given, and
    report each model apart."""
    judge_model = store.chat_model(judge) if judge is not None else None
    reports = []
    for model in dict.fromkeys(models):
        results: list[AnswerOutcome] = []
        for query in evalset.queries:
            try:
                result = store.ask(name, query.question, options, model=model, reader=reader)
            except UsageError:
                raise  # e.g. a question too long to ask, or rerank asked of a knowledge base without one: stop
            except KbctlError as exc:
                results.append(
                    AnswerOutcome(
                        id=query.id,
                        question=query.question,
                        no_answer=query.no_answer,
                        reason=None,
                        answer=None,
                        error=str(exc),
                    )
                )
                continue
            results.append(_outcome(query, result, judge_model))
        reports.append(_report(model, judge, results))
    return reports


def _report(model: str | None, judge: str | None, results: list[AnswerOutcome]) -> AnswerReport:
    answerable = [r for r in results if not r.no_answer]
    unanswerable = [r for r in results if r.no_answer]
    answered = [r for r in results if r.reason == "answered"]  # noAnswer questions answered too: their citations count
    cited = sum(len(r.citations) + len(r.invalid_citations) for r in answered)
    valid = sum(len(r.citations) for r in answered)
    expected = sum(len(r.must_contain_found) + len(r.must_contain_missing) for r in answerable)
    found = sum(len(r.must_contain_found) for r in answerable)
    judged = [r.faithfulness for r in results if r.faithfulness is not None]
    claims = [c for r in results for c in r.claims or []]
    return AnswerReport(
        model=model,
        judge=judge,
        queries=len(results),
        answerable=len(answerable),
        no_answer_queries=len(unanswerable),
        answered=_share(sum(1 for r in answerable if r.reason == "answered"), len(answerable)),
        refused=_share(sum(1 for r in unanswerable if r.refused), len(unanswerable)),
        citation_validity=_share(valid, cited),
        uncited_answers=sum(1 for r in answered if r.uncited),
        must_contain=_share(found, expected),
        faithfulness=sum(judged) / len(judged) if judged else None,
        claims=len(claims),
        unsupported_claims=sum(1 for c in claims if c.verdict == "unsupported"),
        contradicted_claims=sum(1 for c in claims if c.verdict == "contradicted"),
        errors=sum(1 for r in results if r.error is not None),
        results=results,
    )
