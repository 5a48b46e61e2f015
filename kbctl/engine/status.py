"""What the store holds: the list behind `get` and the detail behind `describe`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from kbctl.defaults import DESCRIBE_EVENTS
from kbctl.engine.conditions import Condition, is_true, status_word
from kbctl.engine.results import DescribedSource
from kbctl.errors import NotFoundError
from kbctl.inputs.access import Reader, may_read
from kbctl.manifest.sync import SYNC_APPLYSET_PREFIX
from kbctl.sources import source_of
from kbctl.store.database import Database, KnowledgeBaseRow, LiveSourceRow, VersionRow, VersionSourceRow
from kbctl.store.events import KnowledgeBaseEvent
from kbctl.store.rows import shown_row, source_state
from kbctl.store.syncs import SyncStatus

__all__ = [
    "KnowledgeBaseDetail",
    "KnowledgeBaseSummary",
    "SyncDetail",
    "describe_knowledge_base",
    "describe_sync",
    "knowledge_base_resource",
    "list_knowledge_bases",
    "resource_list",
]


class KnowledgeBaseSummary(BaseModel):
    """A row of `kbctl get knowledgebases` (camelCase with `model_dump(by_alias=True)`, as the HTTP API shows it)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    name: str
    description: str  # what an agent reads to choose a knowledge base
    labels: dict[str, str]
    ready: bool
    status: str  # the conditions in one word (kbctl.engine.conditions.status_word): Ready, Degraded, Stale, ...
    generation: int
    observed_generation: int
    conditions: list[Condition]
    version: int | None
    model: str  # of the serving version (else of the spec)
    sources: int
    ready_sources: int
    chunks: int
    created_at: datetime
    updated_at: datetime


class RefreshStatus(BaseModel):
    """The schedule of `spec.refresh`: its interval, and the last and next run of `kbctl controller`."""

    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)

    interval: str
    last_at: datetime | None  # the last refresh (scheduled or `kbctl refresh`), None before the first
    next_at: datetime | None  # when a controller runs the next one (None until the spec has been reconciled)


class KnowledgeBaseDetail(KnowledgeBaseSummary):
    """`kbctl describe knowledgebase NAME`: the spec in force and the state of every source."""

    chunking: dict[str, Any]
    retrieval: dict[str, Any]
    answer: dict[str, Any] | None = None  # spec.answer (`kbctl ask`), None when the spec has none
    # What a query that sets no threshold needs one candidate to reach for anything to be returned (QueryResult's
    # relevance_threshold): the spec's threshold, else the serving version's calibrated line
    # (kbctl.embedding.background); with that version's background similarity (None: published before calibration).
    relevance_threshold: float | None = None
    background_similarity: float | None = None
    # The gate's second line, on a question's keyword share (kbctl.embedding.background), with the version's
    # background keyword share: None when a threshold is set, or the version has none (published before it, or
    # restricting sources).
    keyword_threshold: float | None = None
    background_keyword: float | None = None
    refresh: RefreshStatus | None = None  # spec.refresh and its schedule, None when the spec has none
    embedded: int
    reused: int
    version_created_at: datetime | None
    source_status: list[DescribedSource]
    events: list[KnowledgeBaseEvent] = []  # the newest DESCRIBE_EVENTS, oldest first


def _source_status(
    name: str, kind: str, served: VersionSourceRow | None, live: LiveSourceRow | None
) -> DescribedSource:
    """One source as describe shows it: what the serving version holds (nothing before the first version),
    with the live state of its last read when there is one."""
    shown = shown_row(served, live)  # the live row wins over the version's (kbctl.store.rows)
    return DescribedSource(
        name=name,
        kind=kind,
        state=shown.state if shown else source_state(read=False, serving=False),
        message=shown.message if shown else None,
        origin=(served.origin if served else None) or (live.origin if live else None),
        title=served.title if served else None,
        chunks=served.chunk_count if served else 0,
        embedded=served.embedded_count if served else 0,
        reused=served.reused_count if served else 0,
        content_sha256=served.content_sha256 if served else None,
        updated_at=served.revision_created_at if served else None,
        fetched_at=live.fetched_at if live else None,
        checked_at=live.checked_at if live else None,
    )


def _row_fields(row: KnowledgeBaseRow) -> dict[str, Any]:
    """What `get` and `describe` show straight from the stored row: identity, generations, conditions."""
    return {
        "name": row.name,
        "labels": row.labels,
        "ready": is_true(row.conditions, "Ready"),
        "status": status_word(row.conditions),
        "generation": row.generation,
        "observed_generation": row.observed_generation,
        "conditions": [Condition.model_validate(c) for c in row.conditions],
        "version": row.current_version,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
    }


def _detail(db: Database, row: KnowledgeBaseRow, reader: Reader | None = None) -> KnowledgeBaseDetail:
    with db.read_only():
        version = db.get_version(row.id, row.current_version) if row.current_version else None
        live = db.source_statuses(row.id)
        served = db.version_sources(version.id) if version else []
        schedule = db.read_schedule(row.id)
        events = db.list_events([row.name], limit=DESCRIBE_EVENTS, kind="KnowledgeBase")
        hidden = 0
        if reader is not None:
            readable = [s for s in served if may_read(reader, s.readers, s.reader_labels)]
            hidden, served = len(served) - len(readable), readable
        # The line calibrated on what is described: the version, or the part of it the reader may read (text it
        # may not read moves no number it is shown: kbctl.store.access).
        background = version.background_similarity if version is not None else None
        if hidden and version is not None and reader is not None:
            background = db.readable_background(version.id, reader)
    # The spec in force: the serving version's, else the one last recorded; read through the models, so
    # every default comes from kbctl/manifest/models.py.
    from kbctl.manifest import KnowledgeBase

    spec = KnowledgeBase.from_manifest(version.manifest if version else db.last_manifest(row.id)).spec
    kinds = {s.name: s.kind for s in spec.sources}
    line, background, keyword_line, keyword = _thresholds(spec.retrieval.similarity_threshold, version, background)
    if version is not None:
        sources = [
            # A document of a path source is named SOURCE/ID: its kind is its source's.
            _source_status(s.source_name, kinds.get(source_of(s.source_name), "text"), s, live.get(s.source_name))
            for s in served
        ]
    else:
        order = {s.name: i for i, s in enumerate(spec.sources)}
        names = sorted((n for n in live if source_of(n) in order), key=lambda n: (order[source_of(n)], n))
        sources = [_source_status(n, kinds[source_of(n)], None, live[n]) for n in names]
    if hidden:  # a reader's view: what it may not read is not named, counted or described
        return _readers_view(
            KnowledgeBaseDetail(
                **_row_fields(row),
                sources=len(sources),
                ready_sources=sum(1 for s in sources if s.state == "ready"),
                chunks=sum(s.chunk_count for s in served),
                description=spec.description,
                model=version.model if version else spec.embedding.model,
                chunking=spec.chunking.model_dump(by_alias=True, mode="json"),
                retrieval=spec.retrieval.model_dump(by_alias=True, mode="json"),
                answer=spec.answer.model_dump(by_alias=True, mode="json") if spec.answer else None,
                relevance_threshold=line,
                background_similarity=background,
                embedded=sum(s.embedded_count for s in served),
                reused=sum(s.reused_count for s in served),
                version_created_at=version.created_at if version else None,
                source_status=sources,
            )
        )
    return KnowledgeBaseDetail(
        **_row_fields(row),
        sources=len(sources),
        ready_sources=sum(1 for s in sources if s.state == "ready"),
        chunks=version.chunk_count if version else 0,
        description=spec.description,
        model=version.model if version else spec.embedding.model,
        chunking=spec.chunking.model_dump(by_alias=True, mode="json"),
        retrieval=spec.retrieval.model_dump(by_alias=True, mode="json"),
        answer=spec.answer.model_dump(by_alias=True, mode="json") if spec.answer else None,
        relevance_threshold=line,
        background_similarity=background,
        keyword_threshold=keyword_line,
        background_keyword=keyword,
        refresh=None
        if spec.refresh is None
        else RefreshStatus(
            interval=spec.refresh.interval,
            last_at=schedule.last_at if schedule else None,
            next_at=schedule.next_at if schedule else None,
        ),
        embedded=version.embedded_count if version else 0,
        reused=version.reused_count if version else 0,
        version_created_at=version.created_at if version else None,
        source_status=sources,
        events=events,
    )


def _thresholds(
    spec: float | None, version: VersionRow | None, background: float | None
) -> tuple[float | None, float | None, float | None, float | None]:
    """The relevance gate of a query that sets no threshold: its similarity line (the spec's threshold, else the line
    of the serving version's `background` similarity; None without a version) and that background similarity, then
    its keyword line and the version's background keyword share (None when the spec sets a threshold, or the version
    has none), the backgrounds as stored (a float4) to 4 decimals."""
    if spec is not None or version is None:
        return spec, None if background is None else round(background, 4), None, None
    from kbctl.embedding.background import keyword_threshold, version_threshold  # not for `kbctl get`

    keyword = version.background_keyword
    return (
        version_threshold(version.model, background),
        None if background is None else round(background, 4),
        keyword_threshold(keyword),
        None if keyword is None else round(keyword, 4),
    )


_T = TypeVar("_T", bound=KnowledgeBaseSummary)


def _readers_view(summary: _T) -> _T:
    """A knowledge base as a caller who may not read some of its sources sees it: the counts are of what it may
    read (set by the caller), and the conditions keep their status and reason but not their messages, which may
    name a source."""
    conditions = [c.model_copy(update={"message": ""}) for c in summary.conditions]
    return summary.model_copy(update={"conditions": conditions})


def list_knowledge_bases(db: Database, reader: Reader | None = None) -> list[KnowledgeBaseSummary]:
    """Every knowledge base with its current version and counts, by name (counted in the store: no manifest is
    read, so listing costs the same however much text the knowledge bases hold). With a `reader`, a knowledge
    base that restricts sources it may not read shows the counts of what it may read (`_readers_view`)."""
    counts = db.readable_counts(reader) if reader is not None else {}
    found = []
    for row in db.list_summaries():
        sources, ready, chunks, hidden = counts.get(row.name, (row.sources, row.ready_sources, row.chunks, 0))
        summary = KnowledgeBaseSummary(
            **_row_fields(row),
            description=row.description,
            model=row.model,
            sources=sources,
            ready_sources=ready,
            chunks=chunks,
        )
        found.append(_readers_view(summary) if hidden else summary)
    return found


def describe_knowledge_base(db: Database, name: str, reader: Reader | None = None) -> KnowledgeBaseDetail:
    """The detail of one knowledge base; NotFoundError when there is none called `name`. With a `reader`, the
    sources it may not read are left out, with their chunks, events and condition messages (`_readers_view`)."""
    row = db.get_kb(name)
    if row is None:
        raise NotFoundError(f'knowledgebase "{name}" not found')
    return _detail(db, row, reader)


class SyncDetail(SyncStatus):
    """`kbctl describe sync NAME`: the Sync's spec and last pass (repository, ref, path, the commit last applied and
    when, the last error), the knowledge bases it applied (its apply set) and its newest events, oldest first."""

    knowledge_bases: list[KnowledgeBaseSummary] = Field(default_factory=list)
    events: list[KnowledgeBaseEvent] = Field(default_factory=list)


def describe_sync(db: Database, name: str) -> SyncDetail:
    """The detail of one Sync; NotFoundError when there is none called `name`."""
    status = next((s for s in db.list_syncs() if s.name == name), None)
    if status is None:
        raise NotFoundError(f'sync "{name}" not found')
    members = {row.name for row in db.list_kbs() if row.applyset == f"{SYNC_APPLYSET_PREFIX}{name}"}
    return SyncDetail(
        **dict(status),
        knowledge_bases=[s for s in list_knowledge_bases(db) if s.name in members],
        events=db.list_events([name], limit=DESCRIBE_EVENTS, kind="Sync"),
    )


def _timestamp(when: datetime | None) -> str | None:
    return None if when is None else when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def knowledge_base_resource(db: Database, name: str) -> dict[str, Any]:
    """A knowledge base as a Kubernetes-style object (`kbctl get kb NAME -o yaml`): apiVersion, kind, metadata
    (name, labels, generation, creationTimestamp), the spec as applied with every default filled in, and status
    (observedGeneration, serving version, conditions, sources; appliedFrom, the folder its path: sources were read
    from). Applying it again, from any folder, changes nothing: apply ignores status and the metadata kbctl writes,
    save appliedFrom, which it honours for the path sources read there (kbctl.engine.located). The spec is the one
    waiting for a controller when a change is pending, else the one last applied (which may not serve yet: see the
    Ready condition)."""
    from kbctl.manifest import KnowledgeBase

    row = db.get_kb(name)
    if row is None:
        raise NotFoundError(f'knowledgebase "{name}" not found')
    detail = _detail(db, row)
    stored = (db.desired_manifest(row.id) if row.pending else None) or db.last_manifest(row.id)
    manifest = KnowledgeBase.from_manifest(stored).applicable_manifest()
    described = detail.model_dump(by_alias=True, mode="json")
    metadata = {
        **manifest["metadata"],
        "generation": row.generation,
        "creationTimestamp": _timestamp(row.created_at),
    }
    status = {
        "observedGeneration": row.observed_generation,
        "version": row.current_version,
        "versionCreatedAt": _timestamp(detail.version_created_at),
        "model": detail.model,
        "relevanceThreshold": detail.relevance_threshold,
        "backgroundSimilarity": detail.background_similarity,
        "keywordThreshold": detail.keyword_threshold,
        "backgroundKeyword": detail.background_keyword,
        "chunks": detail.chunks,
        "embedded": detail.embedded,
        "reused": detail.reused,
        "readySources": detail.ready_sources,
        "applySet": row.applyset,
        "refresh": described["refresh"],
        "conditions": described["conditions"],
        "sources": described["sourceStatus"],
    }
    folder = db.applied_from(name) if any("path" in s for s in manifest["spec"]["sources"]) else None
    if folder is not None:
        status["appliedFrom"] = folder  # where path: sources were read (kbctl.engine.located): applies anywhere
    return {
        "apiVersion": manifest["apiVersion"],
        "kind": manifest["kind"],
        "metadata": metadata,
        "spec": manifest["spec"],
        "status": status,
    }


def resource_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Several objects as kubectl prints them: `kind: List` with the objects as items."""
    return {"apiVersion": "v1", "kind": "List", "items": items}
