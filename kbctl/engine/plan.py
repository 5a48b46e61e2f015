"""Plan one knowledge base: from its manifest, the stored state and what was fetched, decide per source what it serves.

The plan is frozen data built without any database or network call, so `apply`, `apply --dry-run` and
`diff` consume the same object. Each source gets one decision:

- `Reuse`: serve a stored revision as it is (nothing to chunk or embed);
- `Ingest`: new content to chunk and embed into a new revision;
- `Fail`: the source could not be read; `keep` is the revision it goes on serving ("stale") while its spec
  is unchanged, None when it serves nothing ("failed");
- `NotFetched`: a URL source whose content is unknown because it was not fetched (diff fetches nothing; a
  refresh of other sources leaves it alone) and that has nothing stored to serve.

A `path:`, `git:` or `crawl:` source is many documents: each file or page read becomes a unit of its own,
named `SOURCE/ID` (ID: the file's path relative to the folder the source names or to the repository, or the
page's path), with its own decision, so an unchanged document reuses its revision, a changed one is re-chunked
alone, and one no longer there is gone from the next version. When the documents were not read this time (a
refresh or a controller for files it does not have; an apply of an unchanged git or crawl spec) every unit
keeps what it serves.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from kbctl.errors import SourceError
from kbctl.manifest import KnowledgeBase, Source
from kbctl.manifest.changes import source_changes
from kbctl.manifest.digest import manifest_digests, sha256_json, source_sha256
from kbctl.sources import Document, read_inline, source_of
from kbctl.sources.files import NotModified
from kbctl.sources.files import ReadOutcome as FilesRead
from kbctl.sources.url import FetchRequest, FetchResult, Validators
from kbctl.store.database import SourceRow
from kbctl.store.rows import source_state
from kbctl.store.state import StoredState
from kbctl.store.texts import Packing, pack, packing

__all__ = [
    "CHUNKER_VERSION",
    "Decision",
    "Fail",
    "Ingest",
    "KnowledgeBasePlan",
    "NotFetched",
    "PlanFor",
    "ReadFiles",
    "ReadOutcome",
    "Reuse",
    "SourcePlan",
    "build_plan",
    "fetch_requests",
    "file_stamps",
    "served_validators",
    "serves_spec",
    "sha256_json",
    "text_sha256",
]

# Bump when the chunker's output for the same input changes, so stored revisions are rebuilt.
CHUNKER_VERSION = 1

PlanFor = Literal["apply", "refresh", "diff"]  # what the plan is for: an apply, a refresh, or `kbctl diff`
Fetched = Mapping[str, FetchResult | SourceError]
ReadOutcome = FilesRead | SourceError  # a path or git source's files, or why they could not be listed
ReadFiles = Mapping[str, ReadOutcome]  # by source name


def text_sha256(text: str) -> bytes:
    """The vector cache key of a text (with the model id): sha256 of exactly the text sent to the model."""
    return hashlib.sha256(text.encode()).digest()


@dataclass(frozen=True)
class Reuse:
    """Serve a stored revision as it is."""

    revision_id: int
    chunk_count: int


@dataclass(frozen=True)
class Ingest:
    """New content: chunk and embed it into a new revision keyed by `revision_key`."""

    document: Document
    revision_key: str


@dataclass(frozen=True)
class Fail:
    """The source could not be read; it keeps serving `keep` (stale) or serves nothing (failed)."""

    message: str
    keep: Reuse | None = None


@dataclass(frozen=True)
class NotFetched:
    """A URL source not fetched this time with nothing stored to serve: its content is unknown."""


Decision = Reuse | Ingest | Fail | NotFetched


@dataclass(frozen=True)
class SourcePlan:
    """One source's decision, whether its URL is (or, for diff, would be) fetched, and the live status it leaves.

    `status` is None when the stored live status stays as it is (a URL source not fetched this time).
    """

    source: Source
    source_sha256: str
    decision: Decision
    fetch: bool
    status: SourceRow | None
    unit: str | None = None  # one document of a path, git or crawl source: `SOURCE/ID`

    @property
    def name(self) -> str:
        """The source's name, or for one document of a many-document source `SOURCE/ID`."""
        return self.unit or self.source.name

    @property
    def serving(self) -> Reuse | None:
        """The stored revision the next version serves for this source (None: new content or nothing)."""
        if isinstance(self.decision, Reuse):
            return self.decision
        return self.decision.keep if isinstance(self.decision, Fail) else None


@dataclass(frozen=True)
class KnowledgeBasePlan:
    """What one apply, refresh or diff does to one knowledge base; see the module docstring."""

    kb: KnowledgeBase
    manifest: dict[str, Any]
    manifest_sha256: str
    model_id: str
    trigger: PlanFor
    current_version: int | None
    next_version: int
    previous_manifest: dict[str, Any] | None  # the current version's, packed (see source_changes)
    previous_manifest_sha256: str | None
    sources: tuple[SourcePlan, ...]
    removed: tuple[str, ...]  # sources the current version serves that the manifest no longer has
    content_changed: bool  # some source would serve other content than the current version does
    packed: Packing  # pack(manifest), made once when first needed: the manifest as the store keeps it, and its texts

    @property
    def name(self) -> str:
        """The knowledge base's name."""
        return self.kb.name

    @property
    def unchanged(self) -> bool:
        """Nothing to publish: the manifest and every source's content are those of the current version."""
        same_manifest = self.previous_manifest_sha256 == self.manifest_sha256
        return self.current_version is not None and same_manifest and not self.content_changed

    @property
    def action(self) -> Literal["created", "configured", "refreshed", "unchanged"]:
        """What publishing this plan does to the knowledge base."""
        if self.unchanged:
            return "unchanged"
        if self.current_version is None:
            return "created"
        return "refreshed" if self.trigger == "refresh" else "configured"

    def source_changes(self) -> tuple[list[str], list[str], list[str]]:
        """(added, removed, changed) source names against the current version's manifest, in manifest order. Both
        manifests are compared packed: an inline text by its sha256, as the store keeps the previous one (none is
        hashed when the manifests' own hashes agree)."""
        if self.previous_manifest_sha256 == self.manifest_sha256:
            return [], [], []
        old = pack(self.previous_manifest)[0] if self.previous_manifest is not None else None
        return source_changes(old, self.packed()[0])

    @property
    def documents_removed(self) -> list[str]:
        """Documents (SOURCE/ID) the current version serves that the next one does not, though their source is
        still in the manifest: gone from the folder, the repository or the site."""
        names = {s.name for s in self.kb.spec.sources}
        return [n for n in self.removed if n != source_of(n) and source_of(n) in names]

    @property
    def to_ingest(self) -> tuple[SourcePlan, ...]:
        """The sources with new content to chunk and embed, in manifest order."""
        return tuple(p for p in self.sources if isinstance(p.decision, Ingest))

    @property
    def waiting(self) -> int:
        """Sources with work or trouble ahead of publishing (new content to ingest, or a failed read)."""
        return sum(1 for p in self.sources if isinstance(p.decision, Ingest | Fail))


def _source_sha256(source: Source) -> str:
    return source_sha256(source.model_dump(by_alias=True, mode="json"))


def _revision_key(kb: KnowledgeBase, source: Source, doc: Document, model_id: str) -> str:
    c = kb.spec.chunking
    fmt = source.format if doc.markdown is None else "markdown" if doc.markdown else "text"
    key: dict[str, object] = {
        "content": doc.content_sha256,
        "format": "markdown" if source.url else fmt,
        "maxChars": c.max_chars,
        "overlapChars": c.overlap_chars,
        "model": model_id,
        "language": kb.spec.retrieval.language,
        "chunker": CHUNKER_VERSION,
    }
    if doc.title:  # the title heads the chunks' heading paths (ingest.titled); untitled keys stay as they were
        key["title"] = doc.title
    return sha256_json(key)


def _units(served: Mapping[str, SourceRow], source: Source) -> dict[str, tuple[str, SourceRow]]:
    """The units of a many-document source the current version serves: unit name -> (document id, row)."""
    prefix = f"{source.name}/"
    return {name: (name[len(prefix) :], row) for name, row in served.items() if name.startswith(prefix)}


def _unit_sha256(source_sha256: str, doc_id: str) -> str:
    """The spec hash of one document of a path, git or crawl source: its source's, and its id."""
    return sha256_json({"source": source_sha256, "document": doc_id})


def _file_context(kb: KnowledgeBase, model_id: str, unit_sha256: str) -> str:
    """What else than its bytes makes a file's revision: a file is not re-read only under the same context."""
    c = kb.spec.chunking
    settings = [unit_sha256, c.max_chars, c.overlap_chars, model_id, kb.spec.retrieval.language, CHUNKER_VERSION]
    return sha256_json(settings)[:16]


def file_stamps(kb: KnowledgeBase, state: StoredState, model_id: str) -> Callable[[Source], dict[str, str]]:
    """For a path source, the stamp ("size:mtime_ns") of each of its files the current version serves as read
    under the same spec, chunking and model: a file listed with that stamp is not read again."""

    def stamps(source: Source) -> dict[str, str]:
        sha, found = _source_sha256(source), {}
        for name, (doc_id, row) in _units(state.served, source).items():
            status = state.statuses.get(name)
            if row.revision_id is None or status is None or not status.etag:
                continue
            stamp, _, context = status.etag.rpartition("@")
            if stamp and context == _file_context(kb, model_id, _unit_sha256(sha, doc_id)):
                found[doc_id] = stamp
        return found

    return stamps


def served_validators(state: StoredState, source: Source) -> dict[str, Validators]:
    """The HTTP validators of each page a crawl source serves now, by page id (what its conditional requests
    send)."""
    found = {}
    for name, (doc_id, row) in _units(state.served, source).items():
        status = state.statuses.get(name)
        if row.revision_id is not None and status is not None:
            found[doc_id] = Validators(status.etag, status.last_modified)
    return found


def serves_spec(state: StoredState, source: Source) -> bool:
    """Whether the current version serves documents of this many-document source under its spec as it is now."""
    sha = _source_sha256(source)
    return any(row.source_sha256 == _unit_sha256(sha, doc_id) for doc_id, row in _units(state.served, source).values())


def _same_spec(prev: SourceRow | None, sha: str) -> bool:
    """The current version serves content for this source under the same spec."""
    return prev is not None and prev.source_sha256 == sha and prev.revision_id is not None


def _kept(prev: SourceRow | None, sha: str) -> Reuse | None:
    """The revision the current version serves for this source, if its spec is unchanged."""
    if prev is None or prev.revision_id is None or prev.source_sha256 != sha:
        return None
    return Reuse(prev.revision_id, prev.chunk_count)


def fetch_requests(
    kb: KnowledgeBase, state: StoredState, trigger: PlanFor, only: Collection[str] = ()
) -> list[FetchRequest]:
    """The URL sources to fetch, with the HTTP validators of the content they serve.

    apply (and diff, which only reports it) fetches a URL source that is new, whose spec changed, or that
    never had content; refresh fetches every URL source, or those named in `only`.
    """
    requests = []
    for source in kb.spec.sources:
        if source.url is None:
            continue
        sha, prev = _source_sha256(source), state.served.get(source.name)
        wanted = (not only or source.name in only) if trigger == "refresh" else not _same_spec(prev, sha)
        if not wanted:
            continue
        status = state.statuses.get(source.name)
        # Validators only make sense when a 304 lets us keep content we still serve.
        validators = Validators(status.etag, status.last_modified) if _same_spec(prev, sha) and status else None
        requests.append(FetchRequest(source.name, str(source.url), validators))
    return requests


class _Planner:
    """Decides each source of one knowledge base; holds what every decision reads."""

    def __init__(self, kb: KnowledgeBase, state: StoredState, model_id: str, now: datetime) -> None:
        self.kb, self.state, self.model_id, self.now = kb, state, model_id, now

    def status(
        self,
        name: str,
        *,
        read: bool,
        serving: bool = True,
        message: str | None = None,
        origin: str | None = None,
        validators: Validators | None = None,
        fetched_at: datetime | None = None,
    ) -> SourceRow:
        """The live status a source's read leaves: its state by the one rule (`source_state`)."""
        v = validators or Validators()
        state = source_state(read=read, serving=serving)
        return SourceRow(
            source_name=name,
            state=state,
            message=message,
            origin=origin,
            etag=v.etag,
            last_modified=v.last_modified,
            fetched_at=fetched_at,
            checked_at=self.now,
        )

    def document(self, source: Source, doc: Document, name: str | None = None) -> Reuse | Ingest:
        key = _revision_key(self.kb, source, doc, self.model_id)
        stored = self.state.revisions.get((name or source.name, key))
        return Reuse(stored.id, stored.chunk_count) if stored is not None else Ingest(doc, key)

    def files(self, source: Source, sha: str, read: ReadOutcome | None) -> list[SourcePlan]:
        """The units of a many-document source: one per document read; when it was not read (None) or could not
        be listed, each unit it serves keeps serving (stale when listing failed)."""
        served = {name: row for name, (_, row) in _units(self.state.served, source).items()}
        if read is None or isinstance(read, SourceError):
            plans = []
            for name, row in served.items():
                kept = Reuse(row.revision_id, row.chunk_count) if row.revision_id is not None else None
                if read is None:
                    plans.append(SourcePlan(source, row.source_sha256, kept or NotFetched(), False, None, name))
                else:
                    status = self.status(name, read=False, serving=kept is not None, message=str(read))
                    plans.append(SourcePlan(source, row.source_sha256, Fail(str(read), kept), False, status, name))
            if not plans:
                decision: Decision = NotFetched() if read is None else Fail(str(read))
                failed = (
                    None if read is None else self.status(source.name, read=False, serving=False, message=str(read))
                )
                plans.append(SourcePlan(source, sha, decision, False, failed))
            return plans
        plans = []
        for entry, outcome in read:
            name = f"{source.name}/{entry.doc_id}"
            unit_sha = _unit_sha256(sha, entry.doc_id)
            stamp = entry.validators  # a page's HTTP validators; a file's size, time and reading context
            if entry.stamp:
                stamp = Validators(f"{entry.stamp}@{_file_context(self.kb, self.model_id, unit_sha)}")
            kept = _kept(served.get(name), unit_sha)
            if isinstance(outcome, NotModified) and kept is not None:
                stored = self.state.statuses.get(name)
                status = self.status(
                    name, read=True, origin=stored.origin if stored else entry.origin, validators=stamp, fetched_at=None
                )
                plans.append(SourcePlan(source, unit_sha, kept, False, status, name))
                continue
            if isinstance(outcome, NotModified):  # cannot happen: a stamp is known only for what is served
                outcome = SourceError("changed while it was read: apply again")
            if isinstance(outcome, SourceError):
                status = self.status(
                    name, read=False, serving=kept is not None, message=str(outcome), origin=entry.origin
                )
                plans.append(SourcePlan(source, unit_sha, Fail(str(outcome), kept), False, status, name))
            else:
                status = self.status(name, read=True, origin=outcome.origin, validators=stamp)
                plans.append(SourcePlan(source, unit_sha, self.document(source, outcome, name), False, status, name))
        return plans

    def inline(self, source: Source, sha: str) -> SourcePlan:
        doc = read_inline(source)
        status = self.status(source.name, read=True, origin=doc.origin)
        return SourcePlan(source, sha, self.document(source, doc), False, status)

    def not_fetched(self, source: Source, sha: str, fetch: bool) -> SourcePlan:
        kept = _kept(self.state.served.get(source.name), sha)
        return SourcePlan(source, sha, kept or NotFetched(), fetch, None)

    def fetched(self, source: Source, sha: str, outcome: FetchResult | SourceError) -> SourcePlan:
        name, kept = source.name, _kept(self.state.served.get(source.name), sha)
        stored = self.state.statuses.get(name)
        if isinstance(outcome, SourceError):
            message = str(outcome)
            if kept is not None and stored is not None:
                # Still serving the old content: keep the validators and fetch time that describe it.
                status = self.status(
                    name,
                    read=False,
                    message=message,
                    origin=stored.origin,
                    validators=Validators(stored.etag, stored.last_modified),
                    fetched_at=stored.fetched_at,
                )
            else:
                status = self.status(name, read=False, serving=kept is not None, message=message)
            return SourcePlan(source, sha, Fail(message, kept), True, status)
        if outcome.not_modified:
            origin = stored.origin if stored else outcome.final_url
            status = self.status(name, read=True, origin=origin, validators=outcome.validators, fetched_at=self.now)
            return SourcePlan(source, sha, kept or NotFetched(), True, status)
        assert outcome.document is not None
        doc = outcome.document
        status = self.status(name, read=True, origin=doc.origin, validators=outcome.validators, fetched_at=self.now)
        return SourcePlan(source, sha, self.document(source, doc), True, status)


def build_plan(
    kb: KnowledgeBase,
    state: StoredState,
    *,
    model_id: str,
    trigger: PlanFor,
    now: datetime,
    requested: Collection[str] = (),
    fetched: Fetched | None = None,
    read: ReadFiles | None = None,
    known: tuple[str, dict[str, Any]] | None = None,
    source_sha256s: Sequence[str] | None = None,
    packed: Packing | None = None,
) -> KnowledgeBasePlan:
    """The plan of `kb` against `state`; `requested` names the URL sources fetched (or, for diff, that would
    be), `fetched` holds their outcomes (absent for diff). `read` holds the files of each path source read (or
    why it could not be listed); a path source not in it keeps what it serves. `model_id` is part of every
    revision key. `known` is (sha256_json(manifest), manifest) of `kb.to_manifest()`, and `source_sha256s` each
    source's digest in order (`manifest_digests`), and `packed` its `packing`, when the caller has them already."""
    if known is None or source_sha256s is None:
        manifest = known[1] if known is not None else kb.to_manifest()
        digests = manifest_digests(manifest)
        known, source_sha256s = (digests.manifest, manifest), digests.sources
    planner = _Planner(kb, state, model_id, now)
    outcomes = fetched or {}
    plans: list[SourcePlan] = []
    for source, sha in zip(kb.spec.sources, source_sha256s, strict=True):
        if source.path is not None or source.git is not None or source.crawl is not None:
            plans.extend(planner.files(source, sha, (read or {}).get(source.name)))
        elif source.url is None:
            plans.append(planner.inline(source, sha))
        elif source.name in outcomes:
            plans.append(planner.fetched(source, sha, outcomes[source.name]))
        else:
            plans.append(planner.not_fetched(source, sha, source.name in requested))
    served = state.served
    now_serving = [(p.name, p.source_sha256, p.serving.revision_id if p.serving else None) for p in plans]
    before = [(s.source_name, s.source_sha256, s.revision_id) for s in served.values()]
    manifest_sha256, manifest = known
    names = {p.name for p in plans}
    return KnowledgeBasePlan(
        kb=kb,
        manifest=manifest,
        manifest_sha256=manifest_sha256,
        model_id=model_id,
        trigger=trigger,
        current_version=state.current.number if state.current else None,
        next_version=state.next_version,
        previous_manifest=state.current.manifest if state.current else None,
        previous_manifest_sha256=state.current.manifest_sha256 if state.current else None,
        sources=tuple(plans),
        removed=tuple(n for n in served if n not in names),
        content_changed=any(isinstance(p.decision, Ingest) for p in plans) or now_serving != before,
        packed=packed or packing(manifest),
    )
