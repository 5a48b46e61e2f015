"""The reports of `kbctl eval` (retrieval metrics, answers) and `import beir`."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kbctl.cli.render.tables import table
from kbctl.cli.terminal import inert
from kbctl.defaults import MRR_DEPTH, NDCG_DEPTH

if TYPE_CHECKING:  # imported by the commands that print them (a command's start-up pays only for its own)
    from kbctl import BeirImport, EvalReport, EvalRun


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def eval_text(report: EvalReport, verbose: bool) -> str:
    """`kbctl eval`: a row of metrics per mode, the count of queries, and with `verbose` each mode's misses."""
    k = report.k
    headers = [
        "MODE",
        "QUERIES",
        f"RECALL@{k}",
        f"MRR@{MRR_DEPTH}",
        f"NDCG@{NDCG_DEPTH}",
        f"HIT@{k}",
        "NO-ANSWER",
        f"DOC-RECALL@{k}",
        f"DOC-NDCG@{NDCG_DEPTH}",
    ]
    rows = [
        [
            m.label,
            m.queries,
            _num(m.recall),
            _num(m.mrr),
            _num(m.ndcg),
            _num(m.hit_rate),
            _num(m.no_answer_accuracy),
            _num(m.document_recall),
            _num(m.document_ndcg),
        ]
        for m in report.modes
    ]
    first = report.modes[0]
    lines = [
        table(headers, rows),
        f"KnowledgeBase/{report.knowledge_base}: {first.queries} queries "
        f"({first.answerable} with an answer, {first.no_answer_queries} without)",
    ]
    if not verbose:
        return "\n".join(lines)
    for m in report.modes:
        misses = m.misses
        lines.append(f"\nmisses in mode {m.label}: {len(misses) or 'none'}")
        for r in misses:
            got = ", ".join(r.retrieved) or "nothing"
            if r.no_answer:
                lines.append(inert(f"  {r.id}: expected no answer, got {got}"))
            else:
                rank = f"first relevant at rank {r.relevant_ranks[0]}" if r.relevant_ranks else "no relevant hit"
                missing = ", ".join(r.missing_sources) or "-"
                lines.append(inert(f"  {r.id}: recall@{k} {_num(r.recall)}, {rank}; missing {missing}; got {got}"))
            lines.append("    " + inert(r.question))
    return "\n".join(lines)


def eval_answers_text(report: EvalReport, verbose: bool) -> str:
    """`kbctl eval --answers`: after a blank line, a row per chat model, who judged, and with `verbose` the misses."""
    reports = report.answers or []
    headers = [
        "CHAT MODEL",
        "ANSWERED",
        "REFUSED",
        "CITATIONS-VALID",
        "UNCITED",
        "MUST-CONTAIN",
        "FAITHFUL",
        "UNSUPPORTED",
        "CONTRADICTED",
        "ERRORS",
    ]
    rows = [
        [
            r.label,
            _num(r.answered),
            _num(r.refused),
            _num(r.citation_validity),
            r.uncited_answers,
            _num(r.must_contain),
            _num(r.faithfulness),
            r.unsupported_claims if r.judge else "-",
            r.contradicted_claims if r.judge else "-",
            r.errors,
        ]
        for r in reports
    ]
    judge = reports[0].judge
    lines = [
        "",
        table(headers, rows),
        f"answers judged by {judge}" if judge else "faithfulness not measured: no --judge-model (chat.judgeModel)",
    ]
    if not verbose:
        return "\n".join(lines)
    for r in reports:
        misses = r.misses
        lines.append(f"\nanswer misses with {r.label}: {len(misses) or 'none'}")
        for o in misses:
            if o.error is not None:
                why = f"error: {o.error}"
            elif o.no_answer:
                why = "expected 'not covered', got an answer"
            elif o.refused:
                why = f"answered 'not covered' ({o.reason})"
            else:
                parts = []
                if o.invalid_citations:
                    parts.append("cites " + ", ".join(f"[{i}]" for i in o.invalid_citations) + " (not given)")
                if o.uncited:
                    parts.append("cites nothing")
                if o.must_contain_missing:
                    parts.append("lacks " + ", ".join(repr(m) for m in o.must_contain_missing))
                bad = [c for c in o.claims or [] if c.verdict != "supported"]
                parts.extend(f"{c.verdict}: {c.claim}" for c in bad)
                why = "; ".join(parts)
            lines.append(inert(f"  {o.id}: {why}"))
            lines.append("    " + inert(o.question))
    return "\n".join(lines)


def eval_recorded_line(runs: Sequence[EvalRun], eval_set: str, name: str) -> str:
    """What `kbctl eval --record` kept: how many runs of which eval set, against which versions."""
    versions = ", ".join(str(v) for v in dict.fromkeys(r.version for r in runs))
    what = f"{len(runs)} run{'s' if len(runs) != 1 else ''} of eval set {eval_set}"
    return inert(f"recorded {what} against KnowledgeBase/{name} version {versions}")


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word if n == 1 else plural or word + 's'}"


def beir_import_text(result: BeirImport) -> str:
    """`kbctl import beir`: what became of the dataset, where the eval set (and the manifest) went, and what to run
    next."""
    version = result.report.results[0].version
    skipped = f"; {result.skipped_queries} without a relevant document skipped" if result.skipped_queries else ""
    if result.unknown_documents:
        skipped += f"; {_plural(result.unknown_documents, 'judgement')} of documents not in the corpus skipped"
    lines = [
        f"BEIR dataset {inert(result.folder)} ({inert(result.split)}): {result.documents} of "
        f"{_plural(result.corpus_documents, 'document')} in KnowledgeBase/{result.name}"
        f"{'' if version is None else f' version {version}'}, {result.report.embedded} embedded",
        f"eval set {inert(result.eval_file)}: {_plural(result.queries, 'query', 'queries')}, "
        f"{_plural(result.judgements, 'relevant judgement')}{skipped}",
    ]
    if result.manifest_file:
        lines.append(f"manifest {inert(result.manifest_file)}")
    modes = "-m hybrid -m vector -m keyword"
    lines.append(f"next: kbctl eval {result.name} -f {inert(shlex.quote(result.eval_file))} -k 10 {modes}")
    return "\n".join(lines)
