"""An eval set: questions about a knowledge base with what a good retrieval returns, read from YAML or JSON Lines.

Each query has an `id` and a `question`, and says what a good retrieval returns (`expectedSources`,
`expectedText`), or that nothing should be (`noAnswer`), which sources to leave out before scoring
(`ignoredSources`) and, for `kbctl eval --answers`, what a good answer holds (`mustContain`, `expectedAnswer`).
The set may carry a `name` (what `kbctl eval --record` records) and a `knowledgeBase` (the command line's wins).

`load_evalset` and `parse_evalset` raise `kbctl.errors.EvalSetError` listing every problem with file:line.
The format, with examples: docs/eval.md.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any, Final, Protocol, TextIO

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from kbctl.defaults import EVAL_SET_NAME_CHARS
from kbctl.errors import EvalSetError, ManifestProblem
from kbctl.inputs.bounds import (
    MAX_DEPTH,
    MAX_FILE_BYTES,
    UnreadableFile,
    nesting_depth,
    read_bounded_stream,
    read_bounded_text,
    too_deep_message,
)
from kbctl.inputs.problems import problems_from
from kbctl.inputs.yaml_lines import SyntaxProblem, YamlDocument, load_documents, locate

__all__ = [
    "JSONL_SUFFIXES",
    "STDIN_PATH",
    "EvalQuery",
    "EvalSet",
    "HitLike",
    "load_evalset",
    "parse_evalset",
]

STDIN_PATH: Final = "<stdin>"
JSONL_SUFFIXES: Final = (".jsonl", ".ndjson")
_TOP_LEVEL_KEYS: Final = ("queries", "knowledgeBase", "knowledge_base", "name")
NAME_MAX_CHARS: Final = EVAL_SET_NAME_CHARS  # an eval set's `name:`, which `kbctl eval --record` keeps with each run


class HitLike(Protocol):
    """What the metrics read from a retrieved chunk (`kbctl.query.results.QueryHit` is one)."""

    @property
    def source(self) -> str: ...

    @property
    def text(self) -> str: ...


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
    ignored_sources: list[str] = Field(
        default_factory=list,
        description="Sources whose hits are left out before scoring (BEIR: a query that is itself a document).",
    )
    expected_answer: str | None = Field(
        default=None, max_length=4000, description="A good answer, for people reading the answer report."
    )
    must_contain: list[str] = Field(
        default_factory=list, description="Substrings (any case) a good answer contains (`kbctl eval --answers`)."
    )

    @field_validator("id", mode="before")
    @classmethod
    def _id_from_number(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("id", "question")
    @classmethod
    def _valid_text(cls, value: str) -> str:
        return _not_blank(value)

    @field_validator("expected_sources", "expected_text", "ignored_sources", "must_contain")
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
        if self.no_answer and (self.must_contain or self.expected_answer):
            raise ValueError("noAnswer: true cannot be combined with mustContain or expectedAnswer")
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

    name: str | None = Field(
        default=None,
        max_length=NAME_MAX_CHARS,
        description="What `kbctl eval --record` records the runs under (default: the eval set file's name).",
    )
    knowledge_base: str | None = Field(default=None, description="Default knowledge base (the CLI argument wins).")
    queries: list[EvalQuery] = Field(min_length=1)

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str | None) -> str | None:
        if value is None:
            return None
        _not_blank(value)
        if any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise ValueError("must not hold control characters")
        if "/" in value or "\\" in value:
            raise ValueError("is a name, not a path: no / or \\")
        return value


def _read(path: str, stdin: TextIO | None) -> str:
    """The text of an eval set file (a regular file of at most MAX_FILE_BYTES) or of stdin for "-"."""
    try:
        if path == "-":
            return read_bounded_stream(stdin if stdin is not None else sys.stdin, MAX_FILE_BYTES)
        return read_bounded_text(path, MAX_FILE_BYTES, expected="an eval set file")
    except UnreadableFile as error:
        raise EvalSetError([ManifestProblem(STDIN_PATH if path == "-" else path, None, "", str(error))]) from None


def load_evalset(path: str, *, stdin: TextIO | None = None) -> EvalSet:
    """Load an eval set from a YAML or JSON Lines file (`.jsonl`/`.ndjson`, or sniffed), or "-" for stdin.

    Raises EvalSetError listing every problem with file:line.
    """
    return parse_evalset(_read(path, stdin), STDIN_PATH if path == "-" else path)


def _looks_like_jsonl(text: str) -> bool:
    """True when the first non-blank line is, on its own, a JSON object with a question."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    try:
        data = json.loads(first)
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and "question" in data


def parse_evalset(text: str, path: str = "<evalset>", *, jsonl: bool | None = None) -> EvalSet:
    """Parse an eval set; `path` only labels the problems; `jsonl` None guesses from the suffix and content."""
    if jsonl is None:
        jsonl = path.lower().endswith(JSONL_SUFFIXES) or _looks_like_jsonl(text)
    return _parse_jsonl(text, path) if jsonl else _parse_yaml(text, path)


def _parse_yaml(text: str, path: str) -> EvalSet:
    documents = list(load_documents(text.removeprefix("\ufeff"), known_keys=_TOP_LEVEL_KEYS))
    if not documents:
        raise EvalSetError([ManifestProblem(path, None, "", "no eval set found (the file is empty)")])
    if len(documents) > 1:
        extra = documents[1]
        line = extra.line
        raise EvalSetError([ManifestProblem(path, line, "", "expected one YAML document, found another here")])
    document = documents[0]
    if isinstance(document, SyntaxProblem):
        raise EvalSetError([ManifestProblem(path, document.line, "", document.message)])
    if not isinstance(document.data, dict) or not any(key in document.data for key in _TOP_LEVEL_KEYS):
        # Also a mapping of other keys: naming them could echo a file that is no eval set (a password file).
        message = "expected a mapping with queries (and optionally knowledgeBase)"
        raise EvalSetError([ManifestProblem(path, document.line, "", message)])
    try:
        evalset = EvalSet.model_validate(document.data)
    except ValidationError as invalid:
        raise EvalSetError(problems_from(invalid, EvalSet, document, path)) from None
    duplicates = _duplicate_ids(evalset.queries)
    if duplicates:
        problems = []
        for index, first in duplicates:
            _, line = locate(document, [("queries",), index, ("id",)])
            field = f"queries[{index}].id"
            problems.append(ManifestProblem(path, line, field, f"duplicate id {evalset.queries[index].id!r} ({first})"))
        raise EvalSetError(problems)
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
        except RecursionError:
            problems.append(ManifestProblem(path, number, "", too_deep_message()))
            continue
        if nesting_depth(data) > MAX_DEPTH:
            problems.append(ManifestProblem(path, number, "", too_deep_message()))
            continue
        if not isinstance(data, dict):
            problems.append(ManifestProblem(path, number, "", "expected a JSON object (one query per line)"))
            continue
        try:
            query = EvalQuery.model_validate(data)
        except ValidationError as invalid:
            # Plain data, not a YAML tree: every field is on line `number`.
            document = YamlDocument(tree=data, data=data, offset=number - 1, line=number)
            problems.extend(problems_from(invalid, EvalQuery, document, path))
            continue
        if query.id in first_line:
            message = f"duplicate id {query.id!r} (also line {first_line[query.id]})"
            problems.append(ManifestProblem(path, number, "id", message))
            continue
        first_line[query.id] = number
        queries.append(query)
    if problems:
        raise EvalSetError(problems)
    if not queries:
        raise EvalSetError([ManifestProblem(path, None, "", "no queries found (the file is empty)")])
    return EvalSet(queries=queries)
