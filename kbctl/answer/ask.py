"""Ask a knowledge base: retrieve, and only when something passes the threshold, let a chat model answer.

The stages: plan the query and read the serving version's `spec.answer` (one snapshot), retrieve, build the
grounded context, and then either answer `NOT_COVERED` without calling any model (nothing passed the
threshold: no cost, no chance to make something up) or call the chat model with the rules and the passages,
and check the citations of what it says against the passages it was given.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kbctl.answer.citations import check_citations
from kbctl.answer.prompt import instructions_for, messages_for
from kbctl.answer.results import AnswerUsage, AskResult, AskTimings, Citation, Reason
from kbctl.chat import ChatModel, ChatOptions
from kbctl.embedding import Embedder
from kbctl.errors import ChatError, UsageError
from kbctl.inputs.access import Reader
from kbctl.manifest import Answer
from kbctl.manifest.models import read_stored
from kbctl.query.context import GroundedContext, build_context
from kbctl.query.options import QueryOptions
from kbctl.query.results import QueryResult
from kbctl.query.retrieve import Visible, clean_question, plan_query, run_query
from kbctl.rerank import Reranker
from kbctl.store.database import Database

__all__ = ["MAX_QUESTION_CHARS", "AskPlan", "answer_ask", "chat_model_ref", "prepare_ask"]

MAX_QUESTION_CHARS = 16_000  # a question sent to a chat model (with at most maxContextTokens of passages)


def chat_model_ref(name: str, spec: Answer, model: str | None, default: str | None = None) -> str:
    """The chat model to ask: `model` (the caller's), else the spec's model or profile, else `default` (the
    configuration's chat.defaultModel); ChatError when there is none."""
    ref = model or spec.ref or default
    if ref is None:
        raise ChatError(
            f"KnowledgeBase/{name} names no chat model: give --model provider/name (e.g. openai/gpt-4o-mini), "
            "set spec.answer.model or spec.answer.profile, or chat.defaultModel in kbctl's configuration"
        )
    return ref


@dataclass(frozen=True)
class AskPlan:
    """A question ready for the chat model: what was retrieved, which model, with which rules."""

    model: str  # the chat model's id (provider/name or profile:NAME)
    chat: ChatModel
    spec: Answer  # the serving version's spec.answer
    retrieval: QueryResult
    grounded: GroundedContext
    started: float  # time.perf_counter() when the ask began
    retrieve_ms: float


def _citations(grounded: GroundedContext, ids: tuple[int, ...]) -> list[Citation]:
    by_id = {p.id: p for p in grounded.passages}
    return [
        Citation(
            number=i,
            source=by_id[i].source,
            title=by_id[i].title,
            origin=by_id[i].origin,
            heading_path=by_id[i].heading_path,
            char_start=by_id[i].char_start,
            char_end=by_id[i].char_end,
        )
        for i in ids
    ]


def _ms(start: float, end: float) -> float:
    return round((end - start) * 1000, 1)


def prepare_ask(
    db: Database,
    name: str,
    question: str,
    embedder_for: Callable[[str], Embedder],
    chat_for: Callable[[str], ChatModel],
    options: QueryOptions | None = None,
    *,
    model: str | None = None,
    default_model: str | None = None,
    reranker_for: Callable[[str], Reranker] | None = None,
    visible: Visible | None = None,
    reader: Reader | None = None,
) -> AskPlan:
    """Retrieve for `question` from the serving version of `name` and choose the chat model, in one snapshot of
    `db` (not needed after: a server gives its connection back before `answer_ask` calls the model).

    The chat model is `model` (a `provider/name` or `profile:NAME`), else the version's `spec.answer`, else
    `default_model`; none of them is a ChatError, even when nothing would be retrieved. Retrieval takes
    `options` like `query`; `visible` is the caller's scope and `reader` its groups, as for `query_knowledge_base`.
    """
    question = clean_question(question)
    if len(question) > MAX_QUESTION_CHARS:
        raise UsageError(f"question is longer than {MAX_QUESTION_CHARS:,} characters")
    started = time.perf_counter()
    with db.read_only():
        plan = plan_query(db, name, options or QueryOptions(), visible, reader)
        spec = read_stored(Answer, db.answer_spec(plan.version_id), f"spec.answer of KnowledgeBase/{name}")
        ref = chat_model_ref(name, spec, model, default_model)
        chat = chat_for(ref)  # an unknown provider or profile fails here, before any retrieval
        retrieval = run_query(db, plan, question, embedder_for, reranker_for)
    return AskPlan(
        model=ref,
        chat=chat,
        spec=spec,
        retrieval=retrieval,
        grounded=build_context(retrieval),
        started=started,
        retrieve_ms=_ms(started, time.perf_counter()),
    )


def answer_ask(plan: AskPlan, on_text: Callable[[str], None] | None = None) -> AskResult:
    """The answer of a prepared question: `NOT_COVERED` without any model call when nothing was retrieved,
    else the chat model's, streamed to `on_text` when it is given, with its citations checked."""
    grounded = plan.grounded
    if not grounded.found:
        timings = AskTimings(retrieve_ms=plan.retrieve_ms, generate_ms=0.0, total_ms=plan.retrieve_ms)
        return _result(plan, "noContext", None, timings)
    asked = time.perf_counter()
    first: list[float] = []

    def piece(text: str) -> None:
        if not first:
            first.append(time.perf_counter())
        if on_text is not None:
            on_text(text)

    completion = plan.chat.complete(
        messages_for(grounded, instructions_for(plan.retrieval.knowledge_base, plan.spec.instructions)),
        ChatOptions(temperature=plan.spec.temperature, max_tokens=plan.spec.max_tokens),
        on_text=piece if on_text is not None else None,
    )
    done = time.perf_counter()
    check = check_citations(completion.text, {p.id for p in grounded.passages})
    timings = AskTimings(
        retrieve_ms=plan.retrieve_ms,
        generate_ms=_ms(asked, done),
        first_text_ms=_ms(asked, first[0]) if first else None,
        total_ms=_ms(plan.started, done),
    )
    return _result(
        plan,
        "notCovered" if check.refusal else "answered",
        completion.text,
        timings,
        served_by=completion.model,
        citations=_citations(grounded, check.cited),
        invalid_citations=list(check.invalid),
        uncited=check.uncited,
        truncated=completion.finish_reason == "length",
        attempts=completion.attempts,
        usage=AnswerUsage(prompt_tokens=completion.prompt_tokens, completion_tokens=completion.completion_tokens),
    )


def _message(plan: AskPlan, reason: Reason) -> str:
    retrieval, passages = plan.retrieval, len(plan.grounded.passages)
    kb = f"KnowledgeBase/{retrieval.knowledge_base} (version {retrieval.version})"
    if reason == "noContext":
        return f"{retrieval.message}; no model was asked"
    if reason == "notCovered":
        return f"{plan.model} found no answer in the {passages} passages of {kb} it was given."
    return f"answered by {plan.model} from {passages} passages of {kb}"


def _result(plan: AskPlan, reason: Reason, answer: str | None, timings: AskTimings, **called: Any) -> AskResult:
    """The result of an ask; `called` holds what the chat call adds (citations, usage...) when there was one."""
    retrieval = plan.retrieval
    result = AskResult(
        knowledge_base=retrieval.knowledge_base,
        version=retrieval.version,
        question=retrieval.question,
        answer=answer,
        reason=reason,
        message=_message(plan, reason),
        model=plan.model if reason != "noContext" else None,
        timings=timings,
        retrieval=retrieval,
        **called,
    )
    result._context = plan.grounded
    return result
