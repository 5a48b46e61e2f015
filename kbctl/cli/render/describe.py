"""The long views: `describe` of a knowledge base and of a Sync, `rollout diff` between two versions, and
`explain`'s field tree."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from kbctl.cli.render.tables import _redacted, age, events_table, span, table
from kbctl.cli.terminal import inert
from kbctl.defaults import ANSWER_FLOOR_MARGIN, BACKGROUND_CEILING, BACKGROUND_MARGIN, KEYWORD_FLOOR, KEYWORD_MARGIN

if TYPE_CHECKING:  # imported by the commands that print them (a command's start-up pays only for its own)
    from kbctl import KnowledgeBaseDetail, SyncDetail, VersionDiff
    from kbctl.manifest.explain import FieldDoc


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
    """The relevance gate queries use by default, and where its lines come from."""
    if d.relevance_threshold is None:
        return "<none> (no version published yet)"
    if d.retrieval.get("similarityThreshold") is not None:
        return f"{d.relevance_threshold:g} (spec.retrieval.similarityThreshold)"
    if d.background_similarity is None and d.chunks == 0:  # a caller who may read none of the version's chunks
        return f"{d.relevance_threshold:g} (the model's: no chunk of version {d.version} is readable here)"
    floor = f"; an answer's chunks are those down to {ANSWER_FLOOR_MARGIN:g} below the model's"
    if d.background_similarity is None:
        return f"{d.relevance_threshold:g} (the model's; version {d.version} was published before calibration{floor})"
    scored = f"version {d.version}'s background questions score {d.background_similarity:.2f}"
    line = d.background_similarity + BACKGROUND_MARGIN
    if line > d.relevance_threshold + 1e-4:
        why = f"the ceiling, the model's plus {BACKGROUND_CEILING:g}: {scored}, plus {BACKGROUND_MARGIN:g} is higher"
    elif line < d.relevance_threshold - 1e-4:
        why = f"the model's: {scored}, plus {BACKGROUND_MARGIN:g} is lower"
    else:
        why = f"calibrated: {scored}, plus {BACKGROUND_MARGIN:g}"
    if d.keyword_threshold is not None and d.background_keyword is not None:
        why += (
            f"; or a keyword share of {d.keyword_threshold:g} (their keyword share {d.background_keyword:.2f}, plus"
            f" {KEYWORD_MARGIN:g}, at least {KEYWORD_FLOOR:g})"
        )
    return f"{d.relevance_threshold:g} ({why}{floor})"


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
