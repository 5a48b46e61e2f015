"""What `ask` returns: the answer (or why there is none), the passages it cites, and what it cost."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, PrivateAttr

from kbctl.query.context import GroundedContext
from kbctl.query.results import API_MODEL, QueryResult

__all__ = ["AnswerUsage", "AskResult", "AskTimings", "Citation", "Reason"]

# answered: the model answered from the passages; noContext: nothing passed the threshold, no model was called;
# notCovered: the model was given passages and said they do not cover the question.
Reason = Literal["answered", "noContext", "notCovered"]


class Citation(BaseModel):
    """A passage the answer cites, with where it comes from."""

    model_config = API_MODEL

    number: int  # the passage id the answer cites, as in [1]
    source: str
    title: str | None
    origin: str  # the URL, or "inline"
    heading_path: list[str]
    char_start: int
    char_end: int


class AnswerUsage(BaseModel):
    """Tokens of the chat call, as the server counted them (None when it did not say)."""

    model_config = API_MODEL

    prompt_tokens: int | None
    completion_tokens: int | None


class AskTimings(BaseModel):
    """Milliseconds per stage of one ask."""

    model_config = API_MODEL

    retrieve_ms: float
    generate_ms: float  # 0 when no model was called
    first_text_ms: float | None = None  # a streamed answer: from the request to its first piece
    total_ms: float


class AskResult(BaseModel):
    """The answer to a question from one knowledge base, grounded in its passages, or an honest none."""

    model_config = API_MODEL

    knowledge_base: str
    version: int
    question: str
    answer: str | None  # None with reason noContext: no model was called
    reason: Reason
    message: str  # one plain sentence on the outcome
    model: str | None  # the chat model as kbctl names it (provider/name), None when none was called
    served_by: str | None = None  # the model the server says answered (a proxy may map names)
    citations: list[Citation] = []
    invalid_citations: list[int] = []  # ids the answer cites that were not given to it
    uncited: bool = False  # an answer that cites no passage at all
    truncated: bool = False  # the model stopped at maxTokens
    attempts: int = 0  # chat requests sent (retries included)
    usage: AnswerUsage | None = None
    timings: AskTimings
    retrieval: QueryResult
    _context: GroundedContext | None = PrivateAttr(default=None)

    @property
    def text(self) -> str:
        """What to show a reader: the answer, or kbctl's own sentence that the knowledge base does not cover the
        question (NOT_COVERED) when no model was called."""
        from kbctl.answer.prompt import NOT_COVERED

        return self.answer if self.answer is not None else NOT_COVERED

    @property
    def context(self) -> GroundedContext | None:
        """The passages the model was given (not part of the JSON: `retrieval` holds the hits)."""
        return self._context

    @property
    def warnings(self) -> list[str]:
        """What a reader should be told about the answer's grounding."""
        found: list[str] = []
        if self.invalid_citations:
            ids = ", ".join(f"[{i}]" for i in self.invalid_citations)
            given = len(self._context.passages) if self._context is not None else 0
            found.append(f"the answer cites {ids}, which no passage has (it was given {given})")
        if self.uncited:
            found.append("the answer cites no passage: check it against the sources before relying on it")
        if self.truncated:
            found.append("the answer was cut at the token limit (spec.answer.maxTokens)")
        return found
