"""The retrieval log of `kbctl serve`: each query, context and ask it served (when serve.retrievalLog is enabled),
with the caller's name, the question as redacted, the version read, the latency and the result with its trace.

Written in batches by the server's writer thread (kbctl.serve.retrievals) and read by the console and the Python
API (`KnowledgeBaseStore.retrievals`). A row's result is the QueryResult JSON (with `trace`), or a federated
query's FederatedResult, cut to a bound in bytes (`bounded_result`) and flagged when it was cut. Reading is scoped
as every other read of a caller: a run by the knowledge bases it read, its hits and trace entries by the sources
the viewer may read in the version the run read (kbctl.inputs.access.may_read), hidden when that cannot be checked.

What a run records, the bounds and who reads what: docs/serve.md#retrieval-log.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from kbctl.errors import UsageError
from kbctl.inputs.access import Reader, may_read
from kbctl.store.connection import Connected

__all__ = ["RETRIEVALS_LIST_MAX", "Channel", "NewRetrieval", "Operation", "Retrieval", "Retrievals", "bounded_result"]

Channel = Literal["http", "mcp"]
Operation = Literal["query", "context", "ask", "federated"]
RETRIEVALS_LIST_MAX: Final = 500  # runs one listing returns at most
_CALLER_CHARS: Final = 300  # a caller's name as stored (a token's name, or oidc: and a JWT's subject)

ViewerScope = Callable[[str, Mapping[str, str]], bool]


@dataclass(frozen=True)
class NewRetrieval:
    """A run to record (`KnowledgeBaseStore.record_retrievals`): `result` is the JSON of what was returned, the
    question redacted in it (None for a failure); it is cut to the log's bound when recorded."""

    channel: str
    operation: str
    knowledge_bases: Sequence[str]
    version: int | None
    caller: str
    question: str  # as redacted
    nothing_relevant: bool
    hits: int
    best_similarity: float | None
    latency_ms: float
    status: str  # "ok", or the failure's problem type (not-found, bad-request, timeout, ...)
    result: dict[str, Any] | None = None


class Retrieval(BaseModel):
    """One run of the retrieval log as a viewer sees it (camelCase with `model_dump(by_alias=True)`).

    `hits` and `bestSimilarity` are of what the viewer may read; `hiddenHits` counts the hits left out for it.
    `result` is None in listings, and for a failure; `resultCut` says it was cut to fit the log's bound."""

    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)

    id: int
    at: datetime
    channel: str
    operation: str
    knowledge_bases: list[str]
    version: int | None
    caller: str
    question: str
    nothing_relevant: bool
    hits: int
    best_similarity: float | None
    latency_ms: float
    status: str
    result: dict[str, Any] | None = None
    result_cut: bool = False
    hidden_hits: int = 0


# ---------------------------------------------------------------- bounding


def _size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def _stage_lists(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The trace stages of a result: a query's own, or each member's of a federated query."""
    stages: list[dict[str, Any]] = []
    for item in result.get("trace") or []:
        stages.extend(item.get("stages", []) if "stages" in item else [item])
    return stages


def bounded_result(result: dict[str, Any], max_bytes: int) -> tuple[dict[str, Any] | None, bool]:
    """`result` cut to at most `max_bytes` of JSON, and whether it was cut: the hit texts shortened first (each
    to the same length, halved until it fits, to nothing), then the trace entries dropped (the largest stage's
    first); None when even that does not fit. `result` itself is not changed."""
    if _size(result) <= max_bytes:
        return result, False
    cut = json.loads(json.dumps(result))  # a deep copy, of JSON values only
    hits = cut.get("hits") or []
    texts = [str(h.get("text", "")) for h in hits]
    limit = max((len(t) for t in texts), default=0)
    while limit > 0 and _size(cut) > max_bytes:
        limit //= 2
        for hit, text in zip(hits, texts, strict=True):
            hit["text"] = text if len(text) <= limit else text[:limit] + "…"
    stages = sorted(_stage_lists(cut), key=lambda s: len(s.get("entries", [])), reverse=True)
    for stage in stages:
        if _size(cut) <= max_bytes:
            break
        stage["entries"] = []
    return (cut, True) if _size(cut) <= max_bytes else (None, True)


# ---------------------------------------------------------------- writing


# ---------------------------------------------------------------- reading

_COLUMNS: Final = (
    "id, at, channel, operation, knowledge_bases, version, caller, question, nothing_relevant, hits,"
    " best_similarity, latency_ms, status, result_cut"
)

# (knowledge base, version) -> source -> (readers, reader_labels); absent: the version cannot be checked.
_Rules = dict[tuple[str, int], dict[str, tuple[list[str] | None, list[str] | None]]]


def _member_versions(row: Sequence[Any], result: dict[str, Any] | None) -> set[tuple[str, int]]:
    """The (knowledge base, version) pairs a run read: its own, or each member's of a federated query."""
    pairs = {(row[4][0], row[5])} if row[5] is not None and row[4] else set()
    for outcome in (result or {}).get("results") or []:
        if outcome.get("version") is not None:
            pairs.add((str(outcome.get("knowledgeBase")), int(outcome["version"])))
    for hit in (result or {}).get("hits") or []:
        if hit.get("knowledgeBase") is not None and hit.get("version") is not None:
            pairs.add((str(hit["knowledgeBase"]), int(hit["version"])))
    return pairs


def _view(row: Sequence[Any], result: dict[str, Any] | None, reader: Reader | None, rules: _Rules) -> Retrieval:
    """A stored run as `reader` may see it (None: everything, as the owner of the store)."""
    kb, version = (row[4][0] if row[4] else ""), row[5]
    fields: dict[str, Any] = dict(
        id=row[0],
        at=row[1],
        channel=row[2],
        operation=row[3],
        knowledge_bases=list(row[4]),
        version=version,
        caller=row[6],
        question=row[7],
        nothing_relevant=row[8],
        hits=row[9],
        best_similarity=row[10],
        latency_ms=row[11],
        status=row[12],
        result_cut=row[13],
    )
    if reader is None:
        return Retrieval(**fields, result=result)

    def readable(name: str, number: int | None, source: str) -> bool:
        found = rules.get((name, number)) if number is not None else None
        if found is None or source not in found:
            return False  # the version is gone: nothing can be checked
        readers, labels = found[source]
        return may_read(reader, readers, labels)

    def every_source(name: str, number: int) -> bool:
        found = rules.get((name, number))
        return found is not None and all(may_read(reader, r, lb) for r, lb in found.values())

    whole = all(every_source(n, v) for n, v in _member_versions(row, result))
    if whole:
        return Retrieval(**fields, result=result)
    # Some source of a version read is not the viewer's: its hits and trace entries go, and the best similarity
    # becomes that of the hits it sees (the stored one may be a restricted chunk's).
    shown = dict(result) if result is not None else None
    hidden = 0
    best: float | None = None
    if shown is not None:
        kept = []
        for hit in shown.get("hits") or []:
            if readable(str(hit.get("knowledgeBase", kb)), hit.get("version", version), str(hit.get("source"))):
                kept.append(hit)
                similarity = hit.get("similarity")
                best = similarity if best is None or (similarity is not None and similarity > best) else best
            else:
                hidden += 1
        shown["hits"] = kept
        if "bestScore" in shown:
            shown["bestScore"] = best
        if isinstance(shown.get("rerank"), dict):
            shown["rerank"] = {**shown["rerank"], "bestScore": None}
        trace = []
        for item in shown.get("trace") or []:
            if "stages" in item:  # a federated query's member
                name, number = str(item.get("knowledgeBase")), item.get("version")
                member = functools.partial(readable, name, number)
                trace.append({**item, "stages": [_kept_stage(s, member) for s in item["stages"]]})
            else:
                trace.append(_kept_stage(item, lambda source: readable(kb, version, source)))
        if shown.get("trace") is not None:
            shown["trace"] = trace
        if "candidates" in shown:  # one knowledge base's result: its counts as the viewer's candidates alone
            _recount(shown)
    else:
        hidden = row[9]  # a result dropped whole to fit the bound: none of its hits can be checked
    fields.update(hits=row[9] - hidden, best_similarity=best)
    return Retrieval(**fields, result=shown, hidden_hits=hidden)


def _recount(shown: dict[str, Any]) -> None:
    """A QueryResult's counts (candidates, below the line, over the budget, near-duplicates, tokens) over what is
    left of its hits and trace, so the numbers say nothing of the candidates a viewer may not read."""
    stages = {str(s.get("stage")): s.get("entries") or [] for s in shown.get("trace") or [] if "stage" in s}
    hits = shown.get("hits") or []
    verdicts = [str(e.get("detail", "")) for e in stages.get("select", [])]
    shown["tokens"] = sum(int(h.get("tokens") or 0) for h in hits)
    shown["belowThreshold"] = len(stages.get("threshold", []))
    shown["overBudget"] = sum("token budget" in v for v in verdicts)
    shown["duplicates"] = sum("near-duplicate" in v for v in verdicts)
    fused = stages.get("fuse") or stages.get("vector") or stages.get("keyword")
    shown["candidates"] = len(fused) if fused is not None else len(hits)


def _kept_stage(stage: dict[str, Any], readable: Callable[[str], bool]) -> dict[str, Any]:
    return {**stage, "entries": [e for e in stage.get("entries") or [] if readable(str(e.get("source")))]}


# Each filter of `list_retrievals` given (not None), by its parameter's name in the statement: the condition it adds.
_FILTERS: Final = {
    "kb": "%(kb)s = ANY(knowledge_bases)",
    "caller": "caller = %(caller)s",
    "since": "at >= %(since)s",
    "until": "at < %(until)s",
    "before": "id < %(before)s",
}


class Retrievals(Connected):
    """The retrieval log (kb_retrievals)."""

    def record_retrievals(self, runs: Sequence[NewRetrieval], *, max_result_bytes: int) -> None:
        """Record runs, in one statement per batch, each result cut to `max_result_bytes` (`bounded_result`)."""
        if not runs:
            return
        bounded = [bounded_result(r.result, max_result_bytes) if r.result is not None else (None, False) for r in runs]
        with self._conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO kb_retrievals (channel, operation, knowledge_bases, version, caller, question,"
                " nothing_relevant, hits, best_similarity, latency_ms, status, result, result_cut)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb, %s)",
                [
                    (
                        r.channel,
                        r.operation,
                        list(r.knowledge_bases),
                        r.version,
                        r.caller[:_CALLER_CHARS],
                        r.question,
                        r.nothing_relevant,
                        r.hits,
                        r.best_similarity,
                        r.latency_ms,
                        r.status,
                        None if result is None else json.dumps(result, separators=(",", ":")),
                        cut,
                    )
                    for r, (result, cut) in zip(runs, bounded, strict=True)
                ],
            )

    def prune_retrievals(self, *, days: int, max_rows: int) -> int:
        """Delete the runs older than `days` and those beyond the newest `max_rows`; how many were deleted."""
        conn = self._conn
        with conn.transaction():
            old = conn.execute("DELETE FROM kb_retrievals WHERE at < now() - make_interval(days => %s)", (days,))
            over = conn.execute(
                "DELETE FROM kb_retrievals WHERE id <= (SELECT id FROM kb_retrievals ORDER BY id"
                " DESC OFFSET %s LIMIT 1)",
                (max_rows,),
            )
        return (old.rowcount or 0) + (over.rowcount or 0)

    def _visible_names(self, scope: ViewerScope, names: Sequence[str] | None = None) -> list[str]:
        """Of `names` (None: every knowledge base some run read), those `scope` lets the viewer see, each with its
        labels (a deleted knowledge base has none)."""
        conn = self._conn
        if names is None:
            names = [
                r[0] for r in conn.execute("SELECT DISTINCT unnest(knowledge_bases) FROM kb_retrievals").fetchall()
            ]
        rows = conn.execute(
            "SELECT name, labels FROM kb_knowledge_bases WHERE name = ANY(%s)", (list(names),)
        ).fetchall()
        labels = {str(r[0]): r[1] for r in rows}
        return [name for name in names if scope(name, labels.get(name) or {})]

    def _retrieval_rules(self, pairs: set[tuple[str, int, datetime]]) -> _Rules:
        """The access rules of each source of the versions runs read, (knowledge base, version, the run's time): a
        knowledge base created after the run is another one of the same name, whose versions are not the run's."""
        if not pairs:
            return {}
        rows = self._conn.execute(
            "SELECT p.name, p.number, vs.source_name, vs.readers, vs.reader_labels"
            " FROM unnest(%s::text[], %s::integer[], %s::timestamptz[]) AS p(name, number, at)"
            " JOIN kb_knowledge_bases k ON k.name = p.name AND k.created_at <= p.at"
            " JOIN kb_versions v ON v.kb_id = k.id AND v.number = p.number"
            " JOIN kb_version_sources vs ON vs.version_id = v.id",
            ([p[0] for p in pairs], [p[1] for p in pairs], [p[2] for p in pairs]),
        ).fetchall()
        rules: _Rules = {}
        for name, number, source, readers, labels in rows:
            rules.setdefault((name, number), {})[source] = (readers, labels)
        return rules

    def _viewed_retrievals(
        self, rows: Sequence[Sequence[Any]], reader: Reader | None, *, results: bool
    ) -> list[Retrieval]:
        """The rows (each with its result last) as `reader` sees them; without `results`, without their result."""
        parsed = [(row, row[-1]) for row in rows]
        pairs = set()
        if reader is not None:
            for row, result in parsed:
                pairs |= {(name, number, row[1]) for name, number in _member_versions(row, result)}
        rules = self._retrieval_rules(pairs)
        viewed = [_view(row, result, reader, rules) for row, result in parsed]
        return viewed if results else [v.model_copy(update={"result": None}) for v in viewed]

    def list_retrievals(
        self,
        *,
        knowledge_base: str | None = None,
        caller: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        nothing_relevant: bool = False,
        limit: int = 50,
        before: int | None = None,
        scope: ViewerScope | None = None,
        reader: Reader | None = None,
    ) -> list[Retrieval]:
        """The runs newest first (at most `limit`, 1 - RETRIEVALS_LIST_MAX; `before`: those with a smaller id, the
        next page after the last id listed), without their results: those that read `knowledge_base`, of `caller`,
        at or after `since` and before `until`, and only those that found nothing relevant with `nothing_relevant`.
        `scope` and `reader` as the module docstring says (None: every run, every hit)."""
        if not 1 <= limit <= RETRIEVALS_LIST_MAX:
            raise UsageError(f"limit must be between 1 and {RETRIEVALS_LIST_MAX}, got {limit}")
        given = {"kb": knowledge_base, "caller": caller, "since": since, "until": until, "before": before}
        args: dict[str, Any] = {"limit": limit} | {key: value for key, value in given.items() if value is not None}
        conditions = [condition for key, condition in _FILTERS.items() if key in args]
        if nothing_relevant:
            conditions.append("nothing_relevant")
        if scope is not None:
            conditions.append("knowledge_bases <@ %(visible)s::text[] AND cardinality(knowledge_bases) > 0")
            args["visible"] = self._visible_names(scope)
        where = "WHERE " + " AND ".join(conditions) if conditions else ""
        rows = self._conn.execute(
            f"SELECT {_COLUMNS}, result - 'trace' FROM kb_retrievals {where} ORDER BY id DESC LIMIT %(limit)s",
            args,
        ).fetchall()
        return self._viewed_retrievals(rows, reader, results=False)

    def get_retrieval(
        self, run_id: int, *, scope: ViewerScope | None = None, reader: Reader | None = None
    ) -> Retrieval | None:
        """One run with its result, as the viewer sees it; None when there is none, or it is out of `scope`."""
        row = self._conn.execute(f"SELECT {_COLUMNS}, result FROM kb_retrievals WHERE id = %s", (run_id,)).fetchone()
        if row is None:
            return None
        if scope is not None and (not row[4] or len(self._visible_names(scope, row[4])) < len(set(row[4]))):
            return None
        return self._viewed_retrievals([row], reader, results=True)[0]
