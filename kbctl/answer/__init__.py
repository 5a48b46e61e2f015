"""Answers grounded in a knowledge base: the stage after retrieval (`kbctl ask`).

`prepare_ask` retrieves; `answer_ask` answers `NOT_COVERED` itself when nothing passed the threshold, otherwise
it asks a chat model (`kbctl.chat`) with rules that confine it to the passages and make it cite them, then
checks each citation against the passages it was given.
"""

from __future__ import annotations

from kbctl.answer.ask import AskPlan, answer_ask, chat_model_ref, prepare_ask
from kbctl.answer.citations import CitationCheck, check_citations, cited_ids, is_refusal
from kbctl.answer.prompt import DEFAULT_INSTRUCTIONS, NOT_COVERED, instructions_for, messages_for
from kbctl.answer.results import AnswerUsage, AskResult, AskTimings, Citation, Reason

__all__ = [
    "DEFAULT_INSTRUCTIONS",
    "NOT_COVERED",
    "AnswerUsage",
    "AskPlan",
    "AskResult",
    "AskTimings",
    "Citation",
    "CitationCheck",
    "Reason",
    "answer_ask",
    "chat_model_ref",
    "check_citations",
    "cited_ids",
    "instructions_for",
    "is_refusal",
    "messages_for",
    "prepare_ask",
]
