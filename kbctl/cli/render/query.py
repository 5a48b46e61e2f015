"""The hits of `query` (one knowledge base or fused across several) and the sources `ask` cites."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from kbctl.cli.terminal import inert

if TYPE_CHECKING:  # imported by the commands that print them (a command's start-up pays only for its own)
    from kbctl import AskResult, FederatedResult, QueryResult


def _hit_lines(head: str, text: str) -> list[str]:
    """A hit as query prints it: its head line, its text indented, a blank line."""
    return [inert(head), "   " + text.replace("\n", "\n   "), ""]


def hits_text(result: QueryResult) -> str:
    """`kbctl query NAME`: each hit (rank, source, section, chunk, scores, tokens) and its text, the result's
    message, then with --explain each stage's first 15 candidates."""
    lines = []
    for hit in result.hits:
        where = " > ".join(hit.heading_path) or "(no heading)"
        rerank_score = "" if hit.rerank_score is None else f" | rerank {hit.rerank_score:.3f}"
        head = (
            f"{hit.rank}. {hit.source} | {where} | chunk {hit.position} | "
            f"similarity {hit.similarity:.3f}{rerank_score} | {hit.tokens} tokens"
        )
        lines += _hit_lines(head, hit.text)
    lines.append(inert(result.message))
    if result.trace is not None and result.mode != "keyword" and result.relevance_threshold is not None:
        lines.append(gate_text(result))
    for stage in result.trace or []:
        lines.append(f"\n{stage.stage} ({stage.ms:.1f} ms)")
        for e in stage.entries[:15]:
            entry = f"  {e.rank:>3}. {e.source} chunk {e.position}  score {e.score:.3f}  {e.detail}"
            lines.append(inert(entry.rstrip()))
        if len(stage.entries) > 15:
            lines.append(f"  ... {len(stage.entries) - 15} more (all of them with -o json)")
    return "\n".join(lines)


def gate_text(result: QueryResult) -> str:
    """The relevance gate's decision, each signal against its line (--explain)."""
    similar = result.relevant_by == "similarity"
    best = "none" if result.best_score is None else f"{result.best_score:.3f}"
    line = result.relevance_threshold or 0.0
    excepted = similar and (result.best_score is None or result.best_score < line)
    verdict = "passes (by an exception: agreement, an identifier, every word)" if excepted else "passes"
    parts = [f"similarity {best} / line {line:g}: {verdict if similar else 'fails'}"]
    if result.keyword_threshold is not None:
        share, line = result.keyword_share or 0.0, result.keyword_threshold
        parts.append(f"keyword share {share:.2f} / line {line:g}: {'passes' if share >= line else 'fails'}")
    outcome = f"relevant by {result.relevant_by}" if result.relevant_by else "nothing relevant"
    return f"\nrelevance gate: {'; '.join(parts)} ({outcome})"


def fused_hit_lines(result: FederatedResult) -> Iterator[str]:
    """`kbctl query NAME,NAME`: each fused hit, naming its knowledge base, and its text (the message apart)."""
    for hit in result.hits:
        where = " > ".join(hit.heading_path) or "(no heading)"
        head = (
            f"{hit.rank}. {hit.knowledge_base} | {hit.source} | {where} | chunk {hit.position} | "
            f"similarity {hit.similarity:.3f} | {hit.tokens} tokens"
        )
        yield from _hit_lines(head, hit.text)


def not_queried_lines(result: FederatedResult) -> Iterator[str]:
    """The knowledge bases a fused query could not read (no published version), each with why (for stderr)."""
    for outcome in result.results:
        if outcome.version is None:
            yield inert(f"{outcome.knowledge_base}: {outcome.message}")


def cited_sources_text(result: AskResult) -> str:
    """`kbctl ask`: after a blank line, `Sources:` and a line per cited passage (number, source, section, origin,
    character range); "" when the answer cites none."""
    lines = []
    for c in result.citations:
        section = " > ".join(c.heading_path) or "(no heading)"
        lines.append(inert(f"  [{c.number}] {c.source} | {section} | {c.origin} | chars {c.char_start}-{c.char_end}"))
    return "\n".join(["\nSources:", *lines]) if lines else ""
