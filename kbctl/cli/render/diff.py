"""What `diff` and `apply --dry-run` say would change, source by source, and `apply`'s one-line summary."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING

from kbctl.cli.render.tables import MINUS, count
from kbctl.cli.terminal import inert

if TYPE_CHECKING:  # imported by the commands that print them (a command's start-up pays only for its own)
    from kbctl import ApplyReport, DiffedSource, DiffReport


def _diff_source_line(s: DiffedSource) -> str:
    head = f"source {s.name}" if s.change == "unchanged" else f"source {s.name} {s.change}"
    if s.fetch:
        return f"{head} would be fetched" if s.change == "unchanged" else f"{head}: would be fetched"
    numbers = [f"+{s.chunks_added}"] if s.chunks_added else []
    numbers += [f"{MINUS}{s.chunks_removed}"] if s.chunks_removed else []
    details = []
    if numbers:
        single = numbers in (["+1"], [f"{MINUS}1"])
        details.append(" ".join(numbers) + (" chunk" if single else " chunks"))
    if s.tokens_to_embed:
        details.append(f"~{count(s.tokens_to_embed, 'token')} to embed")
    if not details and s.change == "changed":
        details.append("same chunks")  # re-chunked (e.g. a chunking setting changed) into the same texts
    if s.truncated:
        details.append(f"warning: {count(s.truncated, 'chunk')} longer than the model reads")
    return f"{head}: {', '.join(details)}" if details else head


def _value(value: object) -> str:
    return "<none>" if value is None else json.dumps(value, ensure_ascii=False)


def diff_lines(report: DiffReport, suffix: str = "") -> Iterator[str]:
    """The human form of a diff: a line per knowledge base, then its changes indented (unchanged ones omitted)."""
    return (inert(line) for line in _diff_lines(report, suffix))


def _diff_lines(report: DiffReport, suffix: str) -> Iterator[str]:
    for kb in report.results:
        yield f"KnowledgeBase/{kb.name} {kb.action}{suffix}"
        for f in kb.fields:
            yield f"  {f.path}: {_value(f.old)} → {_value(f.new)}"
        for s in kb.sources:
            if s.differs:
                yield f"  {_diff_source_line(s)}"
        if kb.calibrates:
            yield f"  version {kb.version} would be calibrated (published before its relevance gate was)"
        for reason in kb.fails:
            yield f"  would fail: {reason}"


def would_fail_lines(report: DiffReport) -> Iterator[str]:
    """Each reason a diff found that apply would fail for, naming its knowledge base (what `diff` says on stderr
    before it exits 2)."""
    return (inert(f"KnowledgeBase/{kb.name} would fail: {reason}") for kb in report.results for reason in kb.fails)


def applied_line(report: ApplyReport) -> str:
    """The summary of `apply --wait`: `applied 3 resources`, with the failures named when there are any
    (`applied 1 resource, 1 failed`), so the line agrees with the exit code."""
    n, failed = len(report.results), sum(r.failed for r in report.results)
    return f"applied {count(n, 'resource')}" + (f", {failed} failed" if failed else "")
