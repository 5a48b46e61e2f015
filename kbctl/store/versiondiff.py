"""What changed between two versions of a knowledge base: its sources added, removed, changed and unchanged, with
a bounded text diff of each changed source; and, for the version history, each version's counts against the one
before it.

Two versions compare by the revision each serves per source (`sameText` tells a text change from a chunking one);
a revision's text is rebuilt from its overlapping chunks (it may differ from the document in blank lines, never in
words). Everything is bounded (`DiffBounds`, from kbctl.defaults: cut sources are flagged `diffTruncated`, the diff
`truncated`); `version_changes` reads no text. With a `reader`, each version is what that caller may read of it
(kbctl.inputs.access.may_read); without one, every source.

Design: docs/architecture.md#comparing-versions.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from kbctl.defaults import (
    DIFF_SOURCE_BYTES,
    DIFF_SOURCE_CHARS,
    DIFF_SOURCE_LINES,
    DIFF_TOTAL_BYTES,
    DIFF_TOTAL_CHARS,
    DIFF_TOTAL_LINES,
)
from kbctl.errors import NotFoundError, UsageError
from kbctl.inputs.access import Reader, may_read
from kbctl.store.connection import Connected

__all__ = ["ChangeKind", "DiffBounds", "SourceDiff", "VersionChange", "VersionDiff", "VersionDiffs"]

ChangeKind = Literal["added", "removed", "changed", "unchanged"]


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class SourceDiff(_Model):
    """One source of either version: how it changed, its size on each side (None: not on that side) and, changed,
    the unified diff of its text."""

    name: str
    change: ChangeKind
    from_chunks: int | None = None
    from_chars: int | None = None
    to_chunks: int | None = None
    to_chars: int | None = None
    same_text: bool | None = Field(
        default=None, description="Changed only: the same text, chunked anew (another chunking or model)."
    )
    diff: list[str] = Field(default_factory=list, description="Changed only: the unified diff of its text, bounded.")
    diff_truncated: bool = Field(default=False, description="The diff was cut, or not read (a total bound).")


class VersionDiff(_Model):
    """Two versions of a knowledge base compared (`kbctl rollout diff`): the sources of the newer version in its
    order, then those it no longer has."""

    knowledge_base: str
    from_version: int
    to_version: int
    added: int
    removed: int
    changed: int
    unchanged: int
    sources: list[SourceDiff]
    truncated: bool = Field(description="Some source's diff was cut or left out by a bound.")


class VersionChange(_Model):
    """A retained version against the newest retained one before it: how many sources it added, removed and
    changed (None for the oldest retained version when earlier ones were pruned: nothing to compare with)."""

    number: int
    previous: int | None = Field(description="The version compared with; None for the oldest retained one.")
    added: int | None
    removed: int | None
    changed: int | None
    unchanged: int | None


@dataclass(frozen=True)
class DiffBounds:
    """How much a version diff reads and shows (kbctl.defaults' DIFF_*)."""

    source_lines: int = DIFF_SOURCE_LINES
    source_bytes: int = DIFF_SOURCE_BYTES
    total_lines: int = DIFF_TOTAL_LINES
    total_bytes: int = DIFF_TOTAL_BYTES
    source_chars: int = DIFF_SOURCE_CHARS
    total_chars: int = DIFF_TOTAL_CHARS

    def __post_init__(self) -> None:
        if min(self.source_lines, self.source_bytes, self.total_lines, self.total_bytes) < 1:
            raise UsageError("a diff's line and byte bounds must be at least 1")
        if min(self.source_chars, self.total_chars) < 1:
            raise UsageError("a diff's character bounds must be at least 1")


@dataclass(frozen=True)
class _Served:
    """A source of a version as the diff reads it."""

    name: str
    revision_id: int | None
    content_sha256: str | None
    chars: int
    chunks: int


def _check_kept(name: str, number: int, kept: Sequence[int]) -> None:
    if number not in kept:
        listed = ", ".join(str(n) for n in kept) or "none"
        raise NotFoundError(f'knowledgebase "{name}" has no version {number} (versions kept: {listed})')


@dataclass
class _Budget:
    """What is left of a diff's total bounds."""

    lines: int
    bytes: int
    chars: int


def _bounded(lines: Sequence[str], bounds: DiffBounds, budget: _Budget) -> tuple[list[str], bool]:
    """The diff lines that fit the per-source and remaining total bounds (a line too long for what is left is cut);
    and whether anything was left out."""
    max_lines = min(bounds.source_lines, budget.lines)
    max_bytes = min(bounds.source_bytes, budget.bytes)
    kept: list[str] = []
    used = 0
    cut = False
    for line in lines:
        size = len(line.encode()) + 1  # and its line break
        if len(kept) >= max_lines or used + size > max_bytes:
            room = max_bytes - used - 1
            if len(kept) < max_lines and room > 0:  # the start of a line too long for what is left
                kept.append(line.encode()[:room].decode(errors="ignore"))
                used = max_bytes
            cut = True
            break
        kept.append(line)
        used += size
    budget.lines -= len(kept)
    budget.bytes -= used
    return kept, cut


def _compare(old: Sequence[_Served], new: Sequence[_Served]) -> list[tuple[ChangeKind, _Served | None, _Served | None]]:
    """Each source of `new` in order, then each of `old` that `new` lacks: its change and its two sides."""
    before = {s.name: s for s in old}
    after = {s.name for s in new}
    pairs: list[tuple[ChangeKind, _Served | None, _Served | None]] = []
    for s in new:
        was = before.get(s.name)
        if was is None:
            pairs.append(("added", None, s))
        else:
            pairs.append(("unchanged" if was.revision_id == s.revision_id else "changed", was, s))
    pairs += [("removed", s, None) for s in old if s.name not in after]
    return pairs


_KINDS: tuple[ChangeKind, ...] = ("added", "removed", "changed", "unchanged")


class VersionDiffs(Connected):
    """Differences between two versions of a knowledge base."""

    def _retained_versions(self, name: str) -> tuple[int, int | None, list[int]]:
        """(kb id, current version, the retained version numbers ascending); NotFoundError when there is no such
        knowledge base."""
        row = self._conn.execute(
            "SELECT k.id, k.current_version, coalesce(array_agg(v.number ORDER BY v.number)"
            " FILTER (WHERE v.number IS NOT NULL), '{}') FROM kb_knowledge_bases k"
            " LEFT JOIN kb_versions v ON v.kb_id = k.id WHERE k.name = %s GROUP BY k.id",
            (name,),
        ).fetchone()
        if row is None:
            raise NotFoundError(f'knowledgebase "{name}" not found')
        return int(row[0]), row[1], [int(n) for n in row[2]]

    def _served_sources(self, kb_id: int, number: int, reader: Reader | None) -> list[_Served]:
        """The sources of a version in manifest order, those `reader` may read (every one without a reader)."""
        rows = self._conn.execute(
            "SELECT vs.source_name, vs.revision_id, r.content_sha256, coalesce(r.char_count, 0),"
            " coalesce(r.chunk_count, 0), vs.readers, vs.reader_labels"
            " FROM kb_versions v JOIN kb_version_sources vs ON vs.version_id = v.id"
            " LEFT JOIN kb_source_revisions r ON r.id = vs.revision_id"
            " WHERE v.kb_id = %s AND v.number = %s ORDER BY vs.position",
            (kb_id, number),
        ).fetchall()
        return [
            _Served(str(r[0]), r[1], r[2], int(r[3]), int(r[4]))
            for r in rows
            if reader is None or may_read(reader, r[5], r[6])
        ]

    def revision_text(self, revision_id: int, limit: int) -> tuple[str, bool]:
        """The text of a revision rebuilt from its chunks (see the module's docstring), its first `limit` characters;
        and whether it was cut there."""
        rows = self._conn.execute(
            "SELECT content, char_start, char_end FROM kb_chunks WHERE revision_id = %s AND char_start < %s"
            " ORDER BY char_start, ordinal",
            (revision_id, limit),
        ).fetchall()
        parts: list[str] = []
        end = size = 0
        for content, start, stop in rows:
            if not parts or start >= end:
                if parts and start > end:  # whitespace no chunk keeps
                    parts.append("\n" if start - end == 1 else "\n\n")
                piece = content
            elif stop > end:
                piece = content[end - start :]  # past the overlap
            else:
                continue  # inside what is already there
            parts.append(piece)
            size += len(piece)
            end = stop
            if size > limit:
                break
        text = "".join(parts)
        later = self._conn.execute(
            "SELECT EXISTS (SELECT 1 FROM kb_chunks WHERE revision_id = %s AND char_end > %s)", (revision_id, end)
        ).fetchone()
        return text[:limit], len(text) > limit or bool(later and later[0])

    def _text_diff(
        self, name: str, numbers: tuple[int, int], old: _Served, new: _Served, bounds: DiffBounds, budget: _Budget
    ) -> tuple[list[str], bool]:
        """The bounded unified diff of a changed source's text (nothing when no bound is left to read or show it)."""
        if budget.lines < 1 or budget.bytes < 1 or budget.chars < 1:
            return [], True
        texts = []
        cut = False
        for side in (old, new):
            limit = min(bounds.source_chars, max(budget.chars, 0))
            if side.revision_id is None or limit < 1:
                texts.append("")
                cut = cut or side.revision_id is not None
                continue
            text, was_cut = self.revision_text(side.revision_id, limit)
            budget.chars -= len(text)
            texts.append(text)
            cut = cut or was_cut
        lines = list(
            difflib.unified_diff(
                texts[0].splitlines(),
                texts[1].splitlines(),
                fromfile=f"{name}@{numbers[0]}",
                tofile=f"{name}@{numbers[1]}",
                lineterm="",
            )
        )
        kept, dropped = _bounded(lines, bounds, budget)
        return kept, cut or dropped

    def diff_versions(
        self,
        name: str,
        from_version: int | None = None,
        to_version: int | None = None,
        *,
        reader: Reader | None = None,
        bounds: DiffBounds | None = None,
    ) -> VersionDiff:
        """Compare two retained versions of knowledge base `name` (default: the newest before `to_version`, and the
        serving version), in one snapshot. NotFoundError when there is no such knowledge base, no published version, no
        version before the serving one to compare with, or a version that is not retained (the message lists those
        kept)."""
        bounds = bounds or DiffBounds()
        with self.read_only():
            kb_id, current, kept = self._retained_versions(name)
            if to_version is None:
                if current is None:
                    raise NotFoundError(f'knowledgebase "{name}" has no published version yet')
                to_version = int(current)
            _check_kept(name, to_version, kept)
            if from_version is None:
                from_version = max((n for n in kept if n < to_version), default=None)
                if from_version is None:
                    raise NotFoundError(f'knowledgebase "{name}" has no version before {to_version} to compare with')
            _check_kept(name, from_version, kept)
            numbers = (from_version, to_version)
            pairs = _compare(
                self._served_sources(kb_id, from_version, reader), self._served_sources(kb_id, to_version, reader)
            )
            budget = _Budget(bounds.total_lines, bounds.total_bytes, bounds.total_chars)
            sources = []
            for change, old, new in pairs:
                source = SourceDiff(name=(new or old).name, change=change)  # type: ignore[union-attr]
                if old is not None:
                    source.from_chunks, source.from_chars = old.chunks, old.chars
                if new is not None:
                    source.to_chunks, source.to_chars = new.chunks, new.chars
                if change == "changed" and old is not None and new is not None:
                    source.same_text = old.content_sha256 is not None and old.content_sha256 == new.content_sha256
                    if not source.same_text:
                        source.diff, source.diff_truncated = self._text_diff(
                            source.name, numbers, old, new, bounds, budget
                        )
                sources.append(source)
        counts: dict[str, Any] = {kind: sum(s.change == kind for s in sources) for kind in _KINDS}
        return VersionDiff(
            knowledge_base=name,
            from_version=from_version,
            to_version=to_version,
            sources=sources,
            truncated=any(s.diff_truncated for s in sources),
            **counts,
        )

    def version_changes(self, name: str, *, reader: Reader | None = None) -> list[VersionChange]:
        """Each retained version of knowledge base `name`, newest first (as `list_versions`), with its counts against
        the newest retained version before it; read from the versions' source rows alone (no text). NotFoundError when
        there is no such knowledge base."""
        with self.read_only():
            kb_id, _, kept = self._retained_versions(name)
            rows = self._conn.execute(
                "SELECT v.number, vs.source_name, vs.revision_id, vs.readers, vs.reader_labels"
                " FROM kb_versions v JOIN kb_version_sources vs ON vs.version_id = v.id WHERE v.kb_id = %s",
                (kb_id,),
            ).fetchall()
        served: dict[int, dict[str, int | None]] = {n: {} for n in kept}
        for number, source, revision, readers, labels in rows:
            if reader is None or may_read(reader, readers, labels):
                served[int(number)][str(source)] = revision
        changes = []
        previous: int | None = None
        for number in kept:
            now = served[number]
            if previous is None:
                known = number == 1  # the first version: every source is new; an older one pruned: unknown
                changes.append(
                    VersionChange(
                        number=number,
                        previous=None,
                        added=len(now) if known else None,
                        removed=0 if known else None,
                        changed=0 if known else None,
                        unchanged=0 if known else None,
                    )
                )
            else:
                before = served[previous]
                common = now.keys() & before.keys()
                changes.append(
                    VersionChange(
                        number=number,
                        previous=previous,
                        added=len(now.keys() - before.keys()),
                        removed=len(before.keys() - now.keys()),
                        changed=sum(now[s] != before[s] for s in common),
                        unchanged=sum(now[s] == before[s] for s in common),
                    )
                )
            previous = number
        return changes[::-1]
