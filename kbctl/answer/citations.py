"""The citations of an answer: which passage ids it cites, which of those were never given, and refusals.

A citation is a bracketed passage id, as the rules ask ([1], [2][3]); lists and the word "passage" are read
too ([1, 3], [passages 2 and 4]), since models write them. An answer that says the knowledge base does not
cover the question and cites nothing is a refusal.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

from kbctl.answer.prompt import NOT_COVERED

__all__ = ["CitationCheck", "check_citations", "cited_ids", "is_refusal", "strip_citations"]

_NUMBER = r"\d{1,4}"
_SEPARATOR = r"\s*(?:,|;|&|\band\b)\s*(?:passages?\s*)?"
_CITATION = re.compile(rf"\[\s*(?:passages?\s*|id\s*=?\s*)?({_NUMBER}(?:{_SEPARATOR}{_NUMBER})*)\s*\]", re.IGNORECASE)
_REFUSAL = re.compile(
    r"\b(?:does not|doesn't|do not|don't|cannot|can't|can not)\s+(?:cover|contain|include|mention|address|answer|say)"
    r"|\bnot\s+(?:covered|mentioned|addressed|(?:found\s+)?in\s+the\s+(?:passages|documents|knowledge base|reference))"
    r"|\bno\s+(?:relevant\s+)?information\b",
    re.IGNORECASE,
)


def cited_ids(text: str) -> list[int]:
    """Every passage id `text` cites, in order of first citation."""
    found: dict[int, None] = {}
    for match in _CITATION.finditer(text):
        for number in re.findall(_NUMBER, match.group(1)):
            found.setdefault(int(number), None)
    return list(found)


def strip_citations(text: str) -> str:
    """`text` without its citations (for judging the claims themselves)."""
    return re.sub(r"\s+([.,;:!?])", r"\1", _CITATION.sub("", text)).strip()


def is_refusal(text: str) -> bool:
    """Whether the answer says the knowledge base does not cover the question (and cites nothing)."""
    if " ".join(text.split()).casefold() == NOT_COVERED.casefold():
        return True
    return not cited_ids(text) and _REFUSAL.search(text) is not None


@dataclass(frozen=True)
class CitationCheck:
    """An answer's citations against the passages it was given."""

    cited: tuple[int, ...]  # ids of given passages it cites, in order of first citation
    invalid: tuple[int, ...]  # ids it cites that no given passage has
    refusal: bool  # it says the knowledge base does not cover the question

    @property
    def uncited(self) -> bool:
        """An answer (not a refusal) that cites no passage at all."""
        return not self.refusal and not self.cited and not self.invalid


def check_citations(text: str, given: Collection[int]) -> CitationCheck:
    """Check the citations of `text` against the ids of the passages given to the model."""
    ids = cited_ids(text)
    return CitationCheck(
        cited=tuple(i for i in ids if i in given),
        invalid=tuple(i for i in ids if i not in given),
        refusal=is_refusal(text),
    )
