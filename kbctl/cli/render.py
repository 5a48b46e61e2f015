"""The words kbctl prints for humans about what the store holds and what would change: tables, describe, diff
lines, ages, and every note, warning and error line a command prints (the apply and refresh log is
kbctl.cli.progress).

The engine reports typed events and returns typed results; this module alone turns them into text, so the
lines the README shows are made in one place. Every table cell, describe value and diff line is data made inert
(`kbctl.cli.terminal.inert`): a control character of a name, title or message prints escaped, on its one line.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from kbctl.cli.terminal import inert
from kbctl.defaults import BACKGROUND_CEILING, BACKGROUND_MARGIN, MRR_DEPTH, NDCG_DEPTH

if TYPE_CHECKING:  # imported by the commands that print them (a command's start-up pays only for its own)
    from kbctl import (
        ApplyReport,
        BeirImport,
        DeleteResult,
        DiffedSource,
        DiffReport,
        EvalReport,
        EvalRun,
        FederatedResult,
        GcResult,
        KnowledgeBaseDetail,
        KnowledgeBaseEvent,
        KnowledgeBaseSummary,
        ManifestSet,
        QueryResult,
        ServerStatus,
        SyncDetail,
        SyncStatus,
        VersionDiff,
        VersionInfo,
    )
    from kbctl.manifest.explain import FieldDoc

__all__ = [
    "age",
    "all_tables",
    "applied_line",
    "beir_import_text",
    "count",
    "deleted_line",
    "describe_sync_text",
    "describe_text",
    "diff_lines",
    "error_line",
    "eval_answers_text",
    "eval_recorded_line",
    "eval_text",
    "events_table",
    "explain_text",
    "fused_hit_lines",
    "headed_table",
    "history_table",
    "hits_text",
    "knowledge_base_rows",
    "knowledge_base_table",
    "label_column_title",
    "label_text",
    "no_versions_line",
    "not_found_line",
    "not_queried_lines",
    "nothing_found_line",
    "object_name",
    "server_status_line",
    "server_stopped_line",
    "syncs_table",
    "table",
    "table_body",
    "valid_lines",
    "version_diff_text",
    "version_line",
    "would_fail_lines",
]

MINUS = "\u2212"  # the minus sign (U+2212) of "+3 \u22122 chunks": ruff flags it written out


def count(n: int, noun: str) -> str:
    """`1 chunk`, `3 chunks`."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def gc_line(result: GcResult) -> str:
    """What `kbctl gc` removed, in one line."""
    line = f"removed {count(result.removed, 'unreferenced vector')}"
    return line + (f", {count(result.texts_removed, 'unused source text')}" if result.texts_removed else "")


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


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], indent: str = "") -> str:
    """Columns padded to their widest cell, three spaces apart (kubectl's layout); None prints empty, and a cell's
    control characters print escaped (`inert`), so no cell breaks its row."""
    cells = [list(headers), *[[("" if c is None else inert(str(c))) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join(indent + "   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def age(when: datetime) -> str:
    """A kubectl-style age: 42s, 5m, 3h, 2d."""
    return span((datetime.now(UTC) - when).total_seconds())


def span(seconds_float: float) -> str:
    """A kubectl-style span of time: 42s, 5m, 3h, 2d (negative counts as 0)."""
    seconds = max(0, int(seconds_float))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


AGE_COLUMN = 6
"""Where AGE is in every layout of knowledge_base_rows (a watch ignores it: it changes with the clock alone)."""


def label_text(labels: Mapping[str, str]) -> str:
    """Labels as kubectl's LABELS column shows them: k=v,k=v by key, or <none>."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "<none>"


def label_column_title(key: str) -> str:
    """The title of a `-L KEY` column, as kubectl makes it: the key's last /-part upper-cased."""
    return key.rsplit("/", 1)[-1].upper()


def knowledge_base_rows(
    items: Sequence[KnowledgeBaseSummary],
    *,
    wide: bool = False,
    show_labels: bool = False,
    label_columns: Sequence[str] = (),
) -> tuple[list[str], list[list[object]]]:
    """The headers and rows of `kbctl get kb` (see knowledge_base_table)."""
    headers = ["NAME", "READY", "STATUS", "VERSION", "SOURCES", "CHUNKS", "AGE"]
    rows: list[list[object]] = [
        [i.name, i.ready, i.status, i.version or "-", f"{i.ready_sources}/{i.sources}", i.chunks, age(i.created_at)]
        for i in items
    ]
    if wide:
        headers += ["MODEL", "LABELS", "DESCRIPTION"]
        for row, i in zip(rows, items, strict=True):
            row += [i.model, label_text(i.labels), i.description or "<none>"]
    headers += [label_column_title(key) for key in label_columns]
    for row, i in zip(rows, items, strict=True):
        row += [i.labels.get(key, "") for key in label_columns]
    if show_labels and not wide:  # wide has its LABELS column already
        headers.append("LABELS")
        for row, i in zip(rows, items, strict=True):
            row.append(label_text(i.labels))
    return headers, rows


def knowledge_base_table(
    items: Sequence[KnowledgeBaseSummary],
    *,
    wide: bool = False,
    no_headers: bool = False,
    show_labels: bool = False,
    label_columns: Sequence[str] = (),
) -> str:
    """`kbctl get kb`: name, Ready condition, the conditions in one word, serving version, sources ready/total,
    chunks, age; `-o wide` adds the model, the labels and the description (what an agent reads to choose a
    knowledge base). As in kubectl, `label_columns` (-L) add a column per label key, `show_labels` a LABELS
    column, and `no_headers` leaves the header line out."""
    headers, rows = knowledge_base_rows(items, wide=wide, show_labels=show_labels, label_columns=label_columns)
    return headed_table(headers, rows, no_headers=no_headers)


def headed_table(headers: Sequence[str], rows: Sequence[Sequence[object]], *, no_headers: bool = False) -> str:
    """`table`, or with `no_headers` its rows alone, padded to their own widths (kubectl's --no-headers)."""
    if not no_headers:
        return table(headers, rows)
    return table([""] * len(headers), rows).split("\n", 1)[1] if rows else ""


def table_body(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """The rows of `table(headers, rows)` without the header line, still padded as under it (what a watch prints
    below the table it printed first)."""
    return table(headers, rows).split("\n", 1)[1] if rows else ""


def _settings(values: dict[str, Any], prefix: str = "") -> str:
    """`key=value` pairs of a spec section, nested ones dotted (rerank.model=...), unset ones left out."""
    pairs = []
    for key, value in values.items():
        if isinstance(value, dict):
            pairs.append(_settings(value, f"{prefix}{key}."))
        elif value is not None:
            pairs.append(f"{prefix}{key}={value}")
    return " ".join(p for p in pairs if p)


def _threshold_line(d: KnowledgeBaseDetail) -> str:
    """The similarity threshold queries use by default, and where it comes from."""
    if d.relevance_threshold is None:
        return "<none> (no version published yet)"
    if d.retrieval.get("similarityThreshold") is not None:
        return f"{d.relevance_threshold:g} (spec.retrieval.similarityThreshold)"
    if d.background_similarity is None and d.chunks == 0:  # a caller who may read none of the version's chunks
        return f"{d.relevance_threshold:g} (the model's: no chunk of version {d.version} is readable here)"
    if d.background_similarity is None:
        return f"{d.relevance_threshold:g} (the model's; version {d.version} was published before calibration)"
    scored = f"version {d.version}'s background questions score {d.background_similarity:.2f}"
    line = d.background_similarity + BACKGROUND_MARGIN
    if line > d.relevance_threshold + 1e-4:
        return (
            f"{d.relevance_threshold:g} (the ceiling, the model's plus {BACKGROUND_CEILING:g}: {scored}, plus"
            f" {BACKGROUND_MARGIN:g} is higher; an answer's chunks are cut at the model's)"
        )
    if line < d.relevance_threshold - 1e-4:
        return f"{d.relevance_threshold:g} (the model's: {scored}, plus {BACKGROUND_MARGIN:g} is lower)"
    return (
        f"{d.relevance_threshold:g} (calibrated: {scored}, plus {BACKGROUND_MARGIN:g}; an answer's chunks are cut at"
        " the model's)"
    )


def _answer_settings(answer: dict[str, Any] | None) -> str:
    """spec.answer in one line, the instructions by their length (they are a whole system prompt)."""
    if not answer:
        return "<none> (kbctl ask uses --model or chat.defaultModel, with kbctl's default instructions)"
    shown = {k: v for k, v in answer.items() if k != "instructions"}
    instructions = answer.get("instructions")
    shown["instructions"] = f"<custom, {len(instructions)} chars>" if instructions else "<default>"
    return _settings(shown)


def _refresh_line(d: KnowledgeBaseDetail) -> str:
    if d.refresh is None:
        return "<none> (only `kbctl refresh`)"
    last = f"last {age(d.refresh.last_at)} ago" if d.refresh.last_at else "never yet"
    next_run = "" if d.refresh.next_at is None else f", next {_when(d.refresh.next_at)}"
    return f"every {d.refresh.interval} by a controller; {last}{next_run}"


def _when(at: datetime) -> str:
    left = (at - datetime.now(UTC)).total_seconds()
    return "now (due)" if left <= 0 else f"in {span(left)}"


def describe_text(d: KnowledgeBaseDetail) -> str:
    """`kbctl describe kb NAME`: the spec in force, the serving version, conditions and every source."""
    if d.version is None:
        version, chunks = "<none> (no version published yet: see Conditions)", "0"
    else:
        created = d.version_created_at.strftime("%Y-%m-%d %H:%M:%S %Z") if d.version_created_at else "-"
        version = f"{d.version} (published {created})"
        chunks = f"{d.chunks} ({d.embedded} embedded, {d.reused} reused in version {d.version})"
    fields = [
        ("Name", d.name),
        ("Labels", ",".join(f"{k}={v}" for k, v in sorted(d.labels.items())) or "<none>"),
        ("Description", d.description or "<none>"),
        ("Version", version),
        ("Model", d.model),
        ("Chunking", _settings(d.chunking)),
        ("Retrieval", _settings(d.retrieval)),
        ("Threshold", _threshold_line(d)),
        ("Answer", _answer_settings(d.answer)),
        ("Refresh", _refresh_line(d)),
        ("Chunks", chunks),
        ("Generation", f"{d.generation} (observed {d.observed_generation})"),
    ]
    lines = [f"{key + ':':<13}{inert(value)}" for key, value in fields]
    lines.append("Conditions:")
    lines.append(
        table(
            ["TYPE", "STATUS", "REASON", "SINCE", "MESSAGE"],
            [[c.type, c.status, c.reason, age(c.last_transition_time), c.message] for c in d.conditions],
            indent="  ",
        )
    )
    lines.append("Sources:")
    lines.append(
        table(
            ["NAME", "KIND", "STATE", "CHUNKS", "EMBEDDED", "REUSED", "MESSAGE"],
            [[s.name, s.kind, s.state, s.chunks, s.embedded, s.reused, s.message] for s in d.source_status],
            indent="  ",
        )
    )
    lines.append("Events:" if d.events else "Events:      <none>")
    if d.events:
        lines.append(events_table(d.events, indent="  "))
    return "\n".join(lines)


def events_table(events: Sequence[KnowledgeBaseEvent], *, indent: str = "", no_headers: bool = False) -> str:
    """`kbctl get events` and describe's Events: as kubectl lists them, a repeated one as `5m (x3 over 2h)`."""
    rows = []
    for e in events:
        seen = age(e.last_seen)
        if e.count > 1:
            seen += f" (x{e.count} over {age(e.first_seen)})"
        rows.append([seen, e.type, e.reason, f"{e.kind.lower()}/{e.name}", e.message])
    headers = ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    if no_headers:
        return "\n".join(indent + line for line in headed_table(headers, rows, no_headers=True).split("\n"))
    return table(headers, rows, indent=indent)


def _redacted(url: str) -> str:
    from kbctl.userconfig import redact

    return redact(url)


def syncs_table(syncs: Sequence[SyncStatus], *, no_headers: bool = False) -> str:
    """`kbctl get syncs`: where each Sync reads, how often, the commit it last applied and the last error."""
    rows = [
        [
            s.name,
            _redacted(s.url),
            s.ref or "<default>",
            s.path,
            s.interval + (" (suspended)" if s.suspend else ""),
            s.last_applied_revision[:12] if s.last_applied_revision else "-",
            age(s.last_applied_at) if s.last_applied_at else "-",
            s.last_error or "",
        ]
        for s in syncs
    ]
    headers = ["NAME", "URL", "REF", "PATH", "INTERVAL", "REVISION", "APPLIED", "ERROR"]
    return headed_table(headers, rows, no_headers=no_headers)


def describe_sync_text(d: SyncDetail) -> str:
    """`kbctl describe sync NAME`: where it reads, how often, its last pass, the knowledge bases it applied, and
    its events."""
    fields = [
        ("Name", d.name),
        ("URL", _redacted(d.url)),
        ("Ref", d.ref or "<default> (the repository's default branch)"),
        ("Path", d.path),
        ("Interval", d.interval + (" (suspended: no pass runs)" if d.suspend else "")),
        ("Prune", "true" if d.prune else "false"),
        ("Revision", d.last_applied_revision or "<none> (nothing applied yet)"),
        ("Applied", f"{age(d.last_applied_at)} ago" if d.last_applied_at else "<never>"),
        ("Attempted", d.last_attempted_revision or "<none>"),
        ("Error", d.last_error or "<none>"),
        ("Next pass", "<suspended>" if d.suspend else _when(d.next_at)),
    ]
    lines = [f"{key + ':':<13}{inert(value)}" for key, value in fields]
    lines.append("Knowledge Bases:" if d.knowledge_bases else "Knowledge Bases: <none>")
    if d.knowledge_bases:
        rows = [
            [k.name, k.ready, k.status, k.version or "-", f"{k.ready_sources}/{k.sources}"] for k in d.knowledge_bases
        ]
        lines.append(table(["NAME", "READY", "STATUS", "VERSION", "SOURCES"], rows, indent="  "))
    lines.append("Events:" if d.events else "Events:      <none>")
    if d.events:
        lines.append(events_table(d.events, indent="  "))
    return "\n".join(lines)


def history_table(versions: Sequence[VersionInfo]) -> str:
    """`kbctl rollout history`: newest first, * on the serving one, sources ready/total, what made each."""
    rows = [
        [
            *(v.number, "*" if v.current else "", f"{v.created_at.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}"),
            *(f"{v.sources - v.failed_sources}/{v.sources}", v.chunk_count, v.embedded_count, v.reused_count),
            v.change_cause,
        ]
        for v in versions
    ]
    return table(["VERSION", "CURRENT", "CREATED", "SOURCES", "CHUNKS", "EMBEDDED", "REUSED", "CHANGE"], rows)


def _sides(old: int | None, new: int | None) -> str:
    """`5 → 6`, `- → 3`, or `4` when both sides hold the same."""
    if old is not None and old == new:
        return f"{old:,}"
    return f"{'-' if old is None else f'{old:,}'} \u2192 {'-' if new is None else f'{new:,}'}"


def version_diff_text(d: VersionDiff) -> str:
    """`kbctl rollout diff`: a line of counts, the table of sources, then each changed source's text diff (every
    line of it data, made inert), with a note where a bound cut one."""
    lines = [
        f"KnowledgeBase/{d.knowledge_base} version {d.from_version} \u2192 {d.to_version}: {d.added} added, "
        f"{d.removed} removed, {d.changed} changed, {d.unchanged} unchanged"
    ]
    if d.sources:
        rows = [
            [s.name, s.change, _sides(s.from_chunks, s.to_chunks), _sides(s.from_chars, s.to_chars)] for s in d.sources
        ]
        lines += ["", table(["SOURCE", "CHANGE", "CHUNKS", "CHARS"], rows)]
    for s in d.sources:
        if s.change != "changed":
            continue
        lines.append("")
        if s.same_text:
            lines.append(inert(f"{s.name}: the same text, chunked anew"))
            continue
        lines += [inert(line) for line in s.diff]
        if s.diff_truncated:
            lines.append(inert(f"... the diff of {s.name} is cut here (kbctl.defaults DIFF_*)"))
    return "\n".join(lines)


def no_versions_line(d: KnowledgeBaseDetail) -> str:
    """Why a stored knowledge base has no version to list, from its Ready condition (cause and next step)."""
    ready = next((c for c in d.conditions if c.type == "Ready"), None)
    reason = f": {inert(ready.message)}" if ready is not None and ready.message else ""
    return f"KnowledgeBase/{d.name} has no published version yet{reason}"


def _field_line(f: FieldDoc) -> str:
    name = f.path.rsplit(".", 1)[-1]
    notes = ["required"] if f.required else []
    if f.has_default and f.default is not None:
        notes.append(f"default {json.dumps(f.default)}")
    if f.rules:
        notes.append(f.rules)
    return f"{name}\t<{f.type}>" + (f"  ({', '.join(notes)})" if notes else "")


def _field_tree(fields: Sequence[FieldDoc], indent: str, out: list[str]) -> None:
    for f in fields:
        out.append(indent + _field_line(f).replace("\t", "  "))
        if f.description:
            out.append(f"{indent}  {f.description}")
        _field_tree(f.fields, indent + "  ", out)


def explain_text(doc: FieldDoc) -> str:
    """`kbctl explain`: kubectl's layout (KIND, VERSION, FIELD, DESCRIPTION, FIELDS)."""
    from kbctl.manifest.models import API_VERSION

    lines = [f"KIND:     {doc.kind}", f"VERSION:  {API_VERSION}", ""]
    if "." in doc.path:
        lines += [f"FIELD: {_field_line(doc).replace(chr(9), ' ')}", ""]
    lines += ["DESCRIPTION:", f"  {doc.description or '<empty>'}"]
    if doc.fields:
        lines += ["", "FIELDS:"]
        _field_tree(doc.fields, "  ", lines)
    return "\n".join(lines)


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


# ---------------------------------------------------------------- the lines of get, describe, delete, query, validate


def object_name(kind: str, name: str) -> str:
    """kubectl's `-o name`: KIND/NAME (knowledgebase/NAME, sync/NAME)."""
    return inert(f"{kind}/{name}")


def nothing_found_line(what: str) -> str:
    """What a list with nothing to show says on stderr: `No knowledge bases found.`"""
    return f"No {what} found."


def not_found_line(kind: str, name: str) -> str:
    """kubectl's error for a name that does not exist: `Error: knowledgebase "NAME" not found`."""
    return f'Error: {kind} "{inert(name)}" not found'


def error_line(message: str) -> str:
    """An error a command reports and goes on past: `Error: MESSAGE`."""
    return f"Error: {inert(message)}"


def all_tables(kbs: Sequence[KnowledgeBaseSummary], syncs: Sequence[SyncStatus], *, no_headers: bool = False) -> str:
    """`kbctl get all`: a table per kind (knowledge bases, then Syncs), each object named KIND/NAME, a blank line
    between two tables; "" when there is nothing."""
    tables = []
    if kbs:
        headers, rows = knowledge_base_rows(kbs)
        tables.append(headed_table(headers, [[f"knowledgebase/{r[0]}", *r[1:]] for r in rows], no_headers=no_headers))
    if syncs:
        named = [s.model_copy(update={"name": f"sync/{s.name}"}) for s in syncs]
        tables.append(syncs_table(named, no_headers=no_headers))
    return "\n\n".join(tables)


def valid_lines(loaded: ManifestSet) -> Iterator[str]:
    """`kbctl validate`: FILE:LINE: KIND/NAME valid, for each object the files hold."""
    for m in loaded.manifests:
        yield inert(f"{m.path}:{m.line}: KnowledgeBase/{m.kb.name} valid")
    for s in loaded.syncs:
        yield inert(f"{s.path}:{s.line}: Sync/{s.sync.name} valid")


def deleted_line(
    kind: str, name: str, *, result: DeleteResult | None = None, dry_run: bool = False, consulted: bool = True
) -> str:
    """`kbctl delete`: KIND/NAME deleted, with what it removed, or that it was a dry run (one that named what to
    delete without a store: not `consulted`)."""
    if dry_run and not consulted:
        return f"{kind}/{name} deleted (dry run: client, the store was not consulted)"
    if dry_run:
        return f"{kind}/{name} deleted (dry run)"
    if result is not None:
        return f"{kind}/{name} deleted ({result.chunks} chunks, {result.vectors} vectors)"
    return f"{kind}/{name} deleted"


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
    for stage in result.trace or []:
        lines.append(f"\n{stage.stage} ({stage.ms:.1f} ms)")
        for e in stage.entries[:15]:
            entry = f"  {e.rank:>3}. {e.source} chunk {e.position}  score {e.score:.3f}  {e.detail}"
            lines.append(inert(entry.rstrip()))
        if len(stage.entries) > 15:
            lines.append(f"  ... {len(stage.entries) - 15} more (all of them with -o json)")
    return "\n".join(lines)


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


def server_status_line(status: ServerStatus) -> str:
    """`kbctl server status`: running (its pid, data folder and URL), or not."""
    if status.running:
        return f"running (pid {status.pid}) in {status.pgdata}: {status.url}"
    return f"not running ({status.pgdata})"


def server_stopped_line(stopped: bool, pgdata: object) -> str:
    """`kbctl server stop`: stopped, or it was not running."""
    return "stopped" if stopped else f"not running ({pgdata})"


def version_line(version: str) -> str:
    """`kbctl version`: kbctl VERSION."""
    return f"kbctl {version}"


# ------------------------------------------------- the lines apply, ask, wait, diff, rollout and every command share
# (their notes, warnings, waits, progress and errors: the commands print these and word none of their own)

if TYPE_CHECKING:
    from kbctl import AskResult

__all__ += [
    "cited_sources_text",
    "client_valid_line",
    "controller_started_line",
    "legacy_prune_warning",
    "lock_waiting_line",
    "no_controller_line",
    "nothing_collected_line",
    "pass_finished_line",
    "pruned_line",
    "read_here_line",
    "recorded_line",
    "rerank_skipped_line",
    "rolled_back_line",
    "rollout_stalled_line",
    "rollout_timed_out_line",
    "skipped_note",
    "sync_applied_line",
    "wait_met_line",
    "wait_timed_out_line",
    "warning_line",
]


def skipped_note(message: str) -> str:
    """What -f says on stderr of a file of another tool's objects it skipped: `note: MESSAGE`."""
    return f"note: {inert(message)}"


def warning_line(warning: str) -> str:
    """A warning a library result carries, as every command says it on stderr: `warning: ...`."""
    return f"warning: {inert(warning)}"


def rerank_skipped_line(error: str) -> str:
    """The reranker failed, so the answer is in fused order (stderr)."""
    return f"warning: rerank skipped, results are in fused order: {inert(error)}"


def lock_waiting_line(name: str) -> str:
    """What a command says on stderr while another one holds the knowledge base's lock."""
    return f"waiting for another apply, delete or rollback of KnowledgeBase/{name}"


def client_valid_line(name: str) -> str:
    """`apply --dry-run=client`: a manifest is valid, and no store was asked."""
    return f"KnowledgeBase/{name} valid (dry run: client, the store was not consulted)"


def pruned_line(name: str) -> str:
    """`apply --prune`: a member of the apply set the manifests no longer name was deleted."""
    return f"KnowledgeBase/{name} pruned"


def sync_applied_line(name: str, action: str) -> str:
    """`apply`: what became of a Sync of the manifests (`Sync/NAME created`)."""
    return f"Sync/{name} {action}"


def recorded_line(name: str, action: str, version: int | None, *, pending: bool) -> str:
    """`apply` without --wait: what was recorded for a controller (`KnowledgeBase/NAME configured (version 3
    pending)`), or that nothing was (`unchanged (version 3)`)."""
    state = f"version {version} pending" if pending else f"version {version}"
    return f"KnowledgeBase/{name} {action if pending else 'unchanged'} ({state})"


def read_here_line(names: Sequence[str]) -> str:
    """`apply` without --wait: the knowledge bases of path: sources, which this process applies (stderr)."""
    return f"{', '.join(names)}: path: sources are read here (as with --wait), not by a controller"


def no_controller_line() -> str:
    """`apply` without --wait, when work was recorded and no controller runs to do it."""
    return (
        "no controller is running, so nothing is ingested yet: run `kbctl controller` (or `kbctl controller "
        "--once`), or apply again with --wait"
    )


def legacy_prune_warning() -> str:
    """`--prune -l` without `--applyset` (kubectl's legacy prune), said on stderr."""
    return (
        "warning: --prune -l without --applyset prunes by labels alone (and never a member of an apply set); "
        "give each repository an apply set: --applyset NAME"
    )


def cited_sources_text(result: AskResult) -> str:
    """`kbctl ask`: after a blank line, `Sources:` and a line per cited passage (number, source, section, origin,
    character range); "" when the answer cites none."""
    lines = []
    for c in result.citations:
        section = " > ".join(c.heading_path) or "(no heading)"
        lines.append(inert(f"  [{c.number}] {c.source} | {section} | {c.origin} | chars {c.char_start}-{c.char_end}"))
    return "\n".join(["\nSources:", *lines]) if lines else ""


def pass_finished_line(done: int, failed: int) -> str:
    """`kbctl controller --once`: how many knowledge bases the pass reconciled, and how many failed."""
    plural = "s" if done != 1 else ""
    return f"reconciled {done} knowledge base{plural}" + (f", {failed} failed" if failed else "")


def controller_started_line(controller_id: str, port: int | None) -> str:
    """`kbctl controller`: it runs, and where its metrics are served (stderr)."""
    where = f"; metrics and /healthz on port {port}" if port is not None else ""
    return f"controller {controller_id} running{where}"


def wait_met_line(name: str, *, deleted: bool) -> str:
    """`kbctl wait`: a knowledge base has the condition (`knowledgebase/NAME condition met`), or is deleted."""
    return inert(f"knowledgebase/{name} {'deleted' if deleted else 'condition met'}")


def wait_timed_out_line(timeout: str, condition: tuple[str, bool] | None, left: Sequence[str]) -> str:
    """`kbctl wait`: the --timeout passed before the knowledge bases `left` had `condition` (None: were deleted)."""
    what = "the deletion of" if condition is None else f"{condition[0]}={condition[1]} on"
    names = ", ".join(f"knowledgebase/{n}" for n in left)
    return inert(f"Error: timed out after {timeout} waiting for {what} {names}")


def rollout_stalled_line(name: str, deadline: str, detail: str) -> str:
    """`kbctl rollout status`: the rollout made no progress for --progress-deadline, and why."""
    stuck = f'knowledgebase "{name}" exceeded its progress deadline ({deadline})'
    return f"Error: {inert(stuck)}: {inert(detail)}"


def rollout_timed_out_line(name: str, timeout: str, detail: str) -> str:
    """`kbctl rollout status`: --timeout passed before the rollout finished, and where it stands."""
    waited = f'timed out after {timeout} waiting for knowledgebase "{name}" rollout to finish'
    return f"Error: {inert(waited)}: {inert(detail)}"


def rolled_back_line(name: str, version: int) -> str:
    """`kbctl rollout undo`: the version now serving."""
    return f"KnowledgeBase/{name} rolled back to version {version}"


def nothing_collected_line() -> str:
    """`kbctl gc` while an apply or refresh runs: it does nothing."""
    return "skipped: an apply is in progress"
