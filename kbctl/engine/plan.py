"""Plan one knowledge base: from the stored state and what the fetch stage gave, decide per source what it serves.

The plan is frozen data built without any database or network call from one fetched record per source
(kbctl.engine.fetch), so `apply`, `apply --dry-run` and `diff` consume the same object. Each source gets one
decision: `Reuse` (serve a stored revision as it is), `Ingest` (new content to chunk and embed), `Fail` (not
read: `keep` is the revision it goes on serving, "stale", or None, "failed") or `NotFetched` (a URL source not
fetched this time that has nothing stored to serve).

A `path:`, `git:` or `crawl:` source is many documents, each a unit `SOURCE/ID` with a decision of its own: an
unchanged document reuses its revision, a changed one is re-chunked alone, one no longer there is gone from the
next version; when the documents were not read this time, every unit keeps what it serves (docs/manifest.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from kbctl.engine.fetch import FetchedSource, FetchedUrl, InlineText, ListedDocuments, PlanFor, UnfetchedUrl
from kbctl.engine.keys import CHUNKER_VERSION, file_context, unit_sha256, units
from kbctl.errors import SourceError
from kbctl.manifest import KnowledgeBase, Source
from kbctl.manifest.changes import source_changes
from kbctl.manifest.digest import manifest_digests, sha256_json
from kbctl.sources import Document, source_of
from kbctl.sources.files import DocumentsRead, NotModified
from kbctl.sources.url import FetchResult, Validators
from kbctl.store.database import LiveSourceRow, VersionSourceRow
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
    "Reuse",
    "SourcePlan",
    "build_plan",
    "sha256_json",
    "text_sha256",
]


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
    """New content: chunk and embed it into a new revision keyed by `revision_key`, split as markdown (headings)
    or as plain text."""

    document: Document
    revision_key: str
    markdown: bool


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
    status: LiveSourceRow | None
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
    # The current version lacks the calibration a publish now gives (published before migration 22 or 28): an
    # apply or refresh that publishes nothing calibrates it in place (kbctl.store.embeddings.calibrate).
    uncalibrated: bool = False

    @property
    def calibrates(self) -> bool:
        """Whether this plan calibrates the version that keeps serving (one it publishes is calibrated anyway)."""
        return self.unchanged and self.uncalibrated

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


def _revision_key(kb: KnowledgeBase, doc: Document, fmt: str, model_id: str) -> str:
    c = kb.spec.chunking
    key: dict[str, object] = {
        "content": doc.content_sha256,
        "format": fmt,
        "maxChars": c.max_chars,
        "overlapChars": c.overlap_chars,
        "model": model_id,
        "language": kb.spec.retrieval.language,
        "chunker": CHUNKER_VERSION,
    }
    if doc.title:  # the title heads the chunks' heading paths (ingest.titled); untitled keys stay as they were
        key["title"] = doc.title
    return sha256_json(key)


def _kept(prev: VersionSourceRow | None, sha: str) -> Reuse | None:
    """The revision the current version serves for this source, if its spec is unchanged."""
    if prev is None or prev.revision_id is None or prev.source_sha256 != sha:
        return None
    return Reuse(prev.revision_id, prev.chunk_count)


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
    ) -> LiveSourceRow:
        """The live status a source's read leaves: its state by the one rule (`source_state`)."""
        v = validators or Validators()
        state = source_state(read=read, serving=serving)
        return LiveSourceRow(
            source_name=name,
            state=state,
            message=message,
            origin=origin,
            etag=v.etag,
            last_modified=v.last_modified,
            fetched_at=fetched_at,
            checked_at=self.now,
        )

    def document(self, source: Source, doc: Document, name: str | None = None, *, page: bool = False) -> Reuse | Ingest:
        """Reuse the stored revision of this content, else ingest it. A URL's `page` is split as markdown, and its
        key says so; a document that does not say how to split it (`markdown` None) goes by the source's format."""
        fmt = "markdown" if page else source.format if doc.markdown is None else "markdown" if doc.markdown else "text"
        key = _revision_key(self.kb, doc, fmt, self.model_id)
        stored = self.state.revisions.get((name or source.name, key))
        if stored is not None:
            return Reuse(stored.id, stored.chunk_count)
        markdown = doc.markdown if doc.markdown is not None else page or source.format == "markdown"
        return Ingest(doc, key, markdown)

    def files(self, source: Source, sha: str, read: DocumentsRead | SourceError | None) -> list[SourcePlan]:
        """The units of a many-document source: one per document read; when it was not read (None) or could not
        be listed, each unit it serves keeps serving (stale when listing failed)."""
        served = {name: row for name, (_, row) in units(self.state.served, source).items()}
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
            unit_sha = unit_sha256(sha, entry.doc_id)
            stamp = entry.validators  # a page's HTTP validators; a file's size, time and reading context
            if entry.stamp:
                stamp = Validators(f"{entry.stamp}@{file_context(self.kb, self.model_id, unit_sha)}")
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

    def inline(self, source: Source, sha: str, doc: Document) -> SourcePlan:
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
        return SourcePlan(source, sha, self.document(source, doc, page=True), True, status)


def build_plan(
    kb: KnowledgeBase,
    state: StoredState,
    fetched: Sequence[FetchedSource],
    *,
    model_id: str,
    trigger: PlanFor,
    now: datetime,
    known: tuple[str, dict[str, Any]] | None = None,
    source_sha256s: Sequence[str] | None = None,
    packed: Packing | None = None,
) -> KnowledgeBasePlan:
    """The plan of `kb` against `state` from `fetched`, the fetch stage's record of each source of `kb` in manifest
    order (kbctl.engine.fetch.fetch_sources). `model_id` is part of every revision key. `known` is
    (sha256_json(manifest), manifest) of `kb.to_manifest()`, and `source_sha256s` each source's digest in order
    (`manifest_digests`), and `packed` its `packing`, when the caller has them already."""
    if known is None or source_sha256s is None:
        manifest = known[1] if known is not None else kb.to_manifest()
        digests = manifest_digests(manifest)
        known, source_sha256s = (digests.manifest, manifest), digests.sources
    planner = _Planner(kb, state, model_id, now)
    plans: list[SourcePlan] = []
    for record, sha in zip(fetched, source_sha256s, strict=True):
        match record:
            case ListedDocuments():
                plans.extend(planner.files(record.source, sha, record.read))
            case InlineText():
                plans.append(planner.inline(record.source, sha, record.document))
            case FetchedUrl():
                plans.append(planner.fetched(record.source, sha, record.outcome))
            case UnfetchedUrl():
                plans.append(planner.not_fetched(record.source, sha, record.requested))
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
        uncalibrated=state.current is not None and not state.current.calibrated,
    )
