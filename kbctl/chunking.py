"""Structure-aware splitting of a document into retrieval chunks.

`chunk_document` cuts a text into `Chunk`s of at most `max_chars` characters each: with `markdown=True` into
sections that no chunk crosses (each chunk carries its heading path), cut at the latest boundary that fits (section,
paragraph, line, sentence, word; a hard cut only inside a word longer than the window), the next chunk overlapping
the previous one by up to `overlap_chars` characters from a word start.

Every chunk's `text` is exactly `source[start:end]` with surrounding whitespace trimmed away, and
every non-whitespace character of the source lies in at least one chunk. Pure standard library (the default
sizes are kbctl.defaults') and deterministic. The rules in full: docs/architecture.md#chunking.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from functools import cached_property

from kbctl.defaults import CHUNK_MAX_CHARS, CHUNK_OVERLAP_CHARS
from kbctl.errors import UsageError

__all__ = ["Chunk", "chunk_document"]

_HEADING = re.compile(r"(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t\r]*$")
_FENCE = re.compile(r"[ \t]*(`{3,}|~{3,})")
_PARAGRAPH_END = re.compile(r"\n\s*\n")
_LINE_END = re.compile(r"\n")
_WORD = re.compile(r"\S+")
_NON_SPACE = re.compile(r"\S")
_DOTTED = re.compile(r"(?:[a-z]\.)+[a-z]")  # e.g, i.e, u.s, a.m
_CLOSERS = "\"'\u201d\u2019)]*_`"
_OPENERS = "\"'\u201c\u2018([*_`"
_ABBREVIATIONS = frozenset(
    {"al", "approx", "cf", "dr", "fig", "inc", "jr", "ltd", "mr", "mrs", "ms", "prof", "sr", "st", "vs"}
)
_FITS, _HARD = 0, 5  # cut levels: 0 = rest of section fits, 1..4 = _Cuts.levels, 5 = hard cut


@dataclass(frozen=True)
class Chunk:
    """One piece of a document: an exact slice of the source plus the headings enclosing it."""

    ordinal: int
    text: str
    start: int
    end: int
    heading_path: tuple[str, ...]

    @property
    def heading(self) -> str:
        """The heading path joined with " > ", or "" outside any heading."""
        return " > ".join(self.heading_path)

    @property
    def embed_text(self) -> str:
        """The text sent to the embedding model: the heading path, a blank line, then the text."""
        return f"{self.heading}\n\n{self.text}" if self.heading_path else self.text


@dataclass(frozen=True)
class _Section:
    start: int
    end: int
    body: int  # first non-space after the heading line(s) opening the section; == start without any
    path: tuple[str, ...]


class _Cuts:
    """Where a section may be cut, by kind in order of preference, and where its words start.

    `last` is known at once; the candidates are collected on first use, so a section that fits in one chunk
    (most of them) never lists its words.
    """

    def __init__(self, text: str, section: _Section) -> None:
        self._text = text
        self._section = section
        self.last = section.start + len(text[section.start : section.end].rstrip())  # end of its last non-space

    @cached_property
    def _words(self) -> list[tuple[int, int]]:
        return [m.span() for m in _WORD.finditer(self._text, self._section.start, self._section.end)]

    @cached_property
    def levels(self) -> tuple[list[int], list[int], list[int], list[int]]:
        """Candidate cuts: paragraph ends, line ends, sentence ends, word ends."""
        text, start, end = self._text, self._section.start, self._section.end
        paragraphs = [m.start() for m in _PARAGRAPH_END.finditer(text, start, end)]
        lines = [m.start() for m in _LINE_END.finditer(text, start, end)]
        # Only a word whose last character is a stop or a closer can end a sentence: test the others no further.
        sentences = [e for s, e in self._words if text[e - 1] in _SENTENCE_TAIL and _ends_sentence(text, s, e)]
        return paragraphs, lines, sentences, [e for _, e in self._words]

    @cached_property
    def word_starts(self) -> list[int]:
        return [s for s, _ in self._words]


def chunk_document(
    text: str, *, max_chars: int = CHUNK_MAX_CHARS, overlap_chars: int = CHUNK_OVERLAP_CHARS, markdown: bool = True
) -> list[Chunk]:
    """Split `text` into chunks of at most `max_chars` characters (see the module docstring)."""
    if max_chars < 1:
        raise UsageError(f"max_chars must be >= 1, got {max_chars}")
    if not 0 <= overlap_chars < max_chars:
        raise UsageError(f"overlap_chars must be >= 0 and < max_chars ({max_chars}), got {overlap_chars}")
    chunks: list[Chunk] = []
    for section in _sections(text, markdown):
        for start, end in _SectionSplitter(text, section, max_chars, overlap_chars).spans():
            chunks.append(Chunk(len(chunks), text[start:end], start, end, section.path))
    return chunks


def _headings(text: str) -> list[tuple[int, int, int, str]]:
    """Return (line start, line end, level, title) of every ATX heading outside fenced code."""
    found: list[tuple[int, int, int, str]] = []
    fence: str | None = None
    start = 0
    for line in text.split("\n"):
        fence_match = _FENCE.match(line)
        marker, rest = (fence_match.group(1), line[fence_match.end() :]) if fence_match else ("", "")
        if fence is not None:
            if marker[:1] == fence[0] and len(marker) >= len(fence) and not rest.strip():
                fence = None
        elif marker:
            fence = marker
        elif (heading := _HEADING.match(line)) and heading.group(2).strip():
            found.append((start, start + len(line), len(heading.group(1)), heading.group(2).strip()))
        start += len(line) + 1
    return found


def _sections(text: str, markdown: bool) -> list[_Section]:
    """Divide `text` at its headings; heading-only sections are merged into the next section."""
    if not markdown:
        return [_Section(0, len(text), 0, ())] if text.strip() else []
    headings = _headings(text)
    first = headings[0][0] if headings else len(text)
    sections = [_Section(0, first, 0, ())] if text[:first].strip() else []
    stack: list[tuple[int, str]] = []
    pending: int | None = None  # start of heading-only sections waiting to be merged forward
    for i, (start, line_end, level, title) in enumerate(headings):
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title))
        is_last = i + 1 == len(headings)
        end = len(text) if is_last else headings[i + 1][0]
        if not is_last and not text[line_end:end].strip():
            pending = start if pending is None else pending
            continue
        merged_start = start if pending is None else pending
        body = _NON_SPACE.search(text, line_end, end)
        body_start = body.start() if body else line_end
        sections.append(_Section(merged_start, end, body_start, tuple(t for _, t in stack)))
        pending = None
    return sections


_SENTENCE_TAIL = frozenset(".!?" + _CLOSERS)


def _ends_sentence(text: str, start: int, end: int) -> bool:
    """Whether the word text[start:end] ends a sentence (not "e.g.", "Dr.", "J." or a "2." list marker)."""
    word = text[start:end].rstrip(_CLOSERS)
    if not word or word[-1] not in ".!?":
        return False
    if word[-1] != ".":
        return True
    core = word.rstrip(".").lstrip(_OPENERS)
    lower = core.lower()
    if lower in _ABBREVIATIONS or _DOTTED.fullmatch(lower) or (len(core) == 1 and core.isalpha()):
        return False
    line_start = text.rfind("\n", 0, start) + 1
    return not (core.isdigit() and not text[line_start:start].strip())


def _first_between(positions: list[int], low: int, high: int) -> int | None:
    """The smallest position p with low <= p < high, if any."""
    i = bisect_left(positions, low)
    return positions[i] if i < len(positions) and positions[i] < high else None


class _SectionSplitter:
    """Cuts one section into (start, end) spans, following the module docstring's rules."""

    def __init__(self, text: str, section: _Section, max_chars: int, overlap_chars: int) -> None:
        self.text = text
        self.section = section
        self.max_chars = max_chars
        self.overlap_chars = overlap_chars
        self.cuts = _Cuts(text, section)

    def spans(self) -> list[tuple[int, int]]:
        """The section's chunks as (start, end) offsets, trimmed, in order."""
        spans: list[tuple[int, int]] = []
        fresh = self._skip_space(self.section.start)  # first character not yet in any chunk
        while fresh < self.cuts.last:
            floors = (max(fresh, self.section.body), fresh)
            cut, level = self._best_cut(fresh, floors)
            start = fresh
            if spans and self.overlap_chars:
                start, cut = self._pull_back(spans[-1], fresh, cut, level, floors)
            end = self._trim_end(start, cut)
            spans.append((start, end))
            fresh = self._skip_space(end)
        return spans

    def _best_cut(self, pos: int, floors: tuple[int, int]) -> tuple[int, int]:
        """(cut, level): the latest cut after a floor within the window at `pos`, best level first.

        The floors are tried in turn: the first keeps a section's heading from being a chunk of its own.
        """
        limit = pos + self.max_chars
        if self.cuts.last <= limit:
            return self.cuts.last, _FITS
        for floor in floors:
            for level, candidates in enumerate(self.cuts.levels, start=1):
                i = bisect_right(candidates, limit)
                if i and candidates[i - 1] > floor:
                    return candidates[i - 1], level
        return limit, _HARD

    def _pull_back(
        self, prev: tuple[int, int], fresh: int, cut: int, level: int, floors: tuple[int, int]
    ) -> tuple[int, int]:
        """(start, cut) of the chunk after `prev`, starting inside `prev` where the rules allow."""
        prev_start, prev_end = prev
        low = max(prev_end - self.overlap_chars, prev_start + 1, fresh + 1 - self.max_chars)
        start = _first_between(self.cuts.word_starts, low, prev_end)
        if start is None:
            return fresh, cut
        wider_cut, wider_level = self._best_cut(start, floors)
        if wider_level == level:
            return start, wider_cut
        end = self._trim_end(fresh, cut)
        start = _first_between(self.cuts.word_starts, max(low, end - self.max_chars), prev_end)
        return (fresh if start is None else start), cut

    def _skip_space(self, pos: int) -> int:
        """The first non-whitespace offset at or after `pos` (the section end if none)."""
        match = _NON_SPACE.search(self.text, pos, self.section.end)
        return match.start() if match else self.section.end

    def _trim_end(self, start: int, cut: int) -> int:
        """The end of text[start:cut] with trailing whitespace trimmed away."""
        return start + len(self.text[start:cut].rstrip())
