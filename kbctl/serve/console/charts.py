"""What the console draws, as data and as SVG made on the server (no chart library, readable without JavaScript).

`candidates` reads a query's trace into one row per candidate: its rank in each list, its fused rank, its cosine
similarity against the relevance line, and what became of it (kept, cut by the line, by topK, by the token
budget, by the reranker). `trace_svg` draws those rows as bars against the line; `quality_svg` plots recall, nDCG
and no-answer accuracy per version. Every label is escaped: a source's name comes from a manifest.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Final

from kbctl import TraceStage

__all__ = ["Candidate", "QualityPoint", "candidates", "outcome_class", "quality_svg", "trace_svg"]

TRACE_ROWS_MAX: Final = 60  # candidates drawn in one chart (the table lists them all)
_KEPT = re.compile(r"^kept as (\d+)")


@dataclass(frozen=True)
class Candidate:
    """One candidate of a query, across its stages."""

    chunk_id: int
    source: str
    position: int
    fused_rank: int
    vector_rank: int | None
    keyword_rank: int | None
    similarity: float | None
    outcome: str  # the stage's own words: "kept as 2", "cut: similarity below 0.35", "cut: token budget 3000"
    kept: int | None  # its rank among the hits when kept


def outcome_class(outcome: str) -> str:
    """A CSS class of an outcome: kept, line (cut by the relevance line), budget, topk, rerank, other."""
    if outcome.startswith("kept"):
        return "kept"
    if "similarity below" in outcome or "calibrated threshold" in outcome:
        return "line"
    if "token budget" in outcome:
        return "budget"
    if "topK" in outcome:
        return "topk"
    if "rerank" in outcome:
        return "rerank"
    return "other"


def candidates(trace: Sequence[TraceStage] | None) -> list[Candidate]:
    """The candidates of a query's trace (QueryResult.trace) in fused order (empty without a trace)."""
    stages = {s.stage: s for s in trace or []}
    vector = {e.chunk_id: e.rank for e in stages["vector"].entries} if "vector" in stages else {}
    keyword = {e.chunk_id: e.rank for e in stages["keyword"].entries} if "keyword" in stages else {}
    rows: dict[int, Candidate] = {}
    fused = stages.get("fuse") or stages.get("vector") or stages.get("keyword")
    order = {e.chunk_id: e for e in fused.entries} if fused is not None else {}
    for stage in ("threshold", "rerank", "select"):
        for e in stages[stage].entries if stage in stages else []:
            kept = _KEPT.match(e.detail)
            first = order.get(e.chunk_id, e)
            rows[e.chunk_id] = Candidate(
                chunk_id=e.chunk_id,
                source=e.source,
                position=e.position,
                fused_rank=first.rank,
                vector_rank=vector.get(e.chunk_id),
                keyword_rank=keyword.get(e.chunk_id),
                similarity=e.score if stage != "rerank" else _similarity(stages, e.chunk_id),
                outcome=e.detail or "passed",
                kept=int(kept.group(1)) if kept else None,
            )
    for e in order.values():  # a candidate no later stage named (none should be; shown rather than lost)
        rows.setdefault(
            e.chunk_id,
            Candidate(
                e.chunk_id,
                e.source,
                e.position,
                e.rank,
                vector.get(e.chunk_id),
                keyword.get(e.chunk_id),
                None,
                "not reached",
                None,
            ),
        )
    return sorted(rows.values(), key=lambda c: c.fused_rank)


def _similarity(stages: Mapping[str, TraceStage], chunk_id: int) -> float | None:
    vector = stages.get("vector")
    for e in vector.entries if vector is not None else []:
        if e.chunk_id == chunk_id:
            return float(e.score)
    return None


def trace_svg(rows: Sequence[Candidate], line: float | None, *, title: str) -> str:
    """Each candidate's similarity as a bar (fused order, top to bottom), coloured by outcome, with the relevance
    `line` drawn across; an accessible SVG (role img, a title, a text label on every bar)."""
    shown = list(rows[:TRACE_ROWS_MAX])
    label_w, bar_w, row_h, top = 210, 420, 18, 28
    height = top + row_h * max(len(shown), 1) + 24
    width = label_w + bar_w + 70
    lo = min([0.0, *(r.similarity for r in shown if r.similarity is not None)])
    lo = max(-1.0, round(lo - 0.05, 1)) if lo < 0 else 0.0

    def x(value: float) -> float:
        return label_w + (value - lo) / (1.0 - lo) * bar_w

    parts = [
        f'<svg class="chart trace" role="img" viewBox="0 0 {width} {height}" width="100%" '
        f'preserveAspectRatio="xMinYMin meet" xmlns="http://www.w3.org/2000/svg" aria-labelledby="trace-title">',
        f'<title id="trace-title">{escape(title)}</title>',
    ]
    for tick in (lo, 0.25, 0.5, 0.75, 1.0) if lo == 0 else (lo, 0.0, 0.5, 1.0):
        parts.append(f'<line class="grid" x1="{x(tick):.1f}" x2="{x(tick):.1f}" y1="{top - 6}" y2="{height - 20}"/>')
        parts.append(f'<text class="tick" x="{x(tick):.1f}" y="{height - 6}" text-anchor="middle">{tick:.2f}</text>')
    for i, r in enumerate(shown):
        y = top + i * row_h
        label = f"{r.fused_rank}. {r.source} #{r.position}"
        parts.append(
            f'<text class="label" x="{label_w - 8}" y="{y + 12}" text-anchor="end">{escape(label[:34])}</text>'
        )
        if r.similarity is not None:
            start, end = x(min(0.0, r.similarity)), x(max(0.0, r.similarity))  # from 0: a negative bar goes left
            parts.append(
                f'<rect class="bar {outcome_class(r.outcome)}" x="{start:.1f}" y="{y + 2}" '
                f'width="{max(end - start, 1):.1f}" height="{row_h - 5}"><title>{escape(label)}: similarity '
                f"{r.similarity:.4f}, {escape(r.outcome)}</title></rect>"
            )
            parts.append(f'<text class="value" x="{end + 4:.1f}" y="{y + 12}">{r.similarity:.3f}</text>')
    if line is not None:
        parts.append(
            f'<line class="threshold" x1="{x(line):.1f}" x2="{x(line):.1f}" y1="{top - 10}" y2="{height - 20}"/>'
        )
        parts.append(f'<text class="threshold-label" x="{x(line) + 4:.1f}" y="{top - 14}">line {line:.3f}</text>')
    if len(rows) > len(shown):
        parts.append(f'<text class="tick" x="{label_w}" y="{height - 6}">(first {len(shown)} of {len(rows)})</text>')
    parts.append("</svg>")
    return "".join(parts)


@dataclass(frozen=True)
class QualityPoint:
    """One measurement of a version: the metrics plotted (0-1 each, None when not measured)."""

    version: int
    label: str
    recall: float | None
    ndcg: float | None
    no_answer: float | None


SERIES: Final = (("recall", "recall@k"), ("ndcg", "nDCG@10"), ("no_answer", "no-answer accuracy"))


def quality_svg(points: Sequence[QualityPoint], *, title: str) -> str:
    """Recall, nDCG and no-answer accuracy per version, a line each with a dot per measurement: a drop shows at
    the version that caused it."""
    width, height, left, right, top, bottom = 640, 240, 44, 150, 16, 32
    plot_w, plot_h = width - left - right, height - top - bottom
    n = len(points)

    def x(i: int) -> float:
        return left + (plot_w / 2 if n == 1 else i * plot_w / (n - 1))

    def y(v: float) -> float:
        return top + (1 - v) * plot_h

    parts = [
        f'<svg class="chart quality" role="img" viewBox="0 0 {width} {height}" width="100%" '
        f'xmlns="http://www.w3.org/2000/svg" aria-labelledby="quality-title">',
        f'<title id="quality-title">{escape(title)}</title>',
    ]
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<line class="grid" x1="{left}" x2="{left + plot_w}" y1="{y(tick):.1f}" y2="{y(tick):.1f}"/>')
        parts.append(f'<text class="tick" x="{left - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick:.2f}</text>')
    for i, p in enumerate(points):
        parts.append(
            f'<text class="tick" x="{x(i):.1f}" y="{height - 12}" text-anchor="middle">{escape(p.label)}</text>'
        )
    for k, (field, name) in enumerate(SERIES):
        values = [(i, getattr(p, field)) for i, p in enumerate(points) if getattr(p, field) is not None]
        if len(values) > 1:
            path = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in values)
            parts.append(f'<polyline class="series s{k}" points="{path}"/>')
        for i, v in values:
            parts.append(
                f'<circle class="dot s{k}" cx="{x(i):.1f}" cy="{y(v):.1f}" r="3.5">'
                f"<title>{escape(points[i].label)}: {name} {v:.3f}</title></circle>"
            )
        parts.append(f'<rect class="key s{k}" x="{left + plot_w + 14}" y="{top + k * 20}" width="12" height="12"/>')
        parts.append(f'<text class="tick" x="{left + plot_w + 32}" y="{top + k * 20 + 10}">{name}</text>')
    parts.append("</svg>")
    return "".join(parts)
