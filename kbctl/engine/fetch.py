"""Fetch: the stage between the manifest and the plan. Each source of a knowledge base becomes one fetched record.

The one place that tells the kinds of sources apart (`Source.kind`): an inline text is read from the manifest; a
URL source is fetched (with the validators of what it serves) when new, its spec changed, it never had content,
or a refresh asks for it; a path source's files are read from the manifest's folder (a file whose stamp is the
one recorded is not read again); a git or crawl source is fetched on refresh, or on apply when new or its spec
changed. Nothing leaves the machine for a diff (`trigger="diff"`): its URL sources are only marked as those
apply would fetch, its git and crawl sources are not read. The plan (kbctl.engine.plan) decides from the
records alone.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from kbctl.engine.keys import file_context, same_spec, spec_sha256, unit_sha256, units
from kbctl.errors import SourceError
from kbctl.manifest import KnowledgeBase, Source
from kbctl.manifest.models import SourceKind
from kbctl.sources import Document, read_inline
from kbctl.sources.crawl import crawl_site
from kbctl.sources.files import DocumentsRead, read_path
from kbctl.sources.git import read_repository
from kbctl.sources.url import FetchPolicy, FetchRequest, FetchResult, Validators, fetch_urls
from kbctl.store.state import StoredState

__all__ = [
    "FetchedSource",
    "FetchedSources",
    "FetchedUrl",
    "InlineText",
    "ListedDocuments",
    "PlanFor",
    "UnfetchedUrl",
    "all_inline",
    "fetch_requests",
    "fetch_sources",
    "file_stamps",
    "kind_of",
    "path_sources",
    "served_validators",
    "serves_spec",
]

PlanFor = Literal["apply", "refresh", "diff"]  # what the fetch and the plan are for: an apply, a refresh, `kbctl diff`


@dataclass(frozen=True)
class InlineText:
    """A `text:` source: its document, as the manifest holds it."""

    source: Source
    document: Document


@dataclass(frozen=True)
class FetchedUrl:
    """A `url:` source fetched this time: the response (its document, or 304 Not Modified), or why it failed."""

    source: Source
    outcome: FetchResult | SourceError


@dataclass(frozen=True)
class UnfetchedUrl:
    """A `url:` source not fetched this time; `requested` when apply fetches it (a diff, which fetches nothing)."""

    source: Source
    requested: bool


@dataclass(frozen=True)
class ListedDocuments:
    """A `path:`, `git:` or `crawl:` source: each document listed with what reading it gave, or why the source could
    not be listed, or None when it was not read this time (each document keeps what it serves)."""

    source: Source
    read: DocumentsRead | SourceError | None
    local: bool = False  # a path source's files, read from the manifest's folder (not fetched)


FetchedSource = InlineText | FetchedUrl | UnfetchedUrl | ListedDocuments


@dataclass(frozen=True)
class FetchedSources:
    """What the fetch stage gave for one knowledge base: one record per source, in manifest order; and the folder
    every path source was listed in, when each of them was (what kbctl.store.applied records), else None."""

    records: tuple[FetchedSource, ...]
    read_from: Path | None = None


def fetch_requests(
    kb: KnowledgeBase, state: StoredState, trigger: PlanFor, only: Collection[str] = ()
) -> list[FetchRequest]:
    """The URL sources to fetch, with the HTTP validators of the content they serve.

    apply (and diff, which only reports it) fetches a URL source that is new, whose spec changed, or that
    never had content; refresh fetches every URL source, or those named in `only`.
    """
    requests = []
    for source in kb.spec.sources:
        if source.kind != "url":
            continue
        sha, prev = spec_sha256(source), state.served.get(source.name)
        wanted = (not only or source.name in only) if trigger == "refresh" else not same_spec(prev, sha)
        if not wanted:
            continue
        status = state.statuses.get(source.name)
        # Validators only make sense when a 304 lets us keep content we still serve.
        validators = Validators(status.etag, status.last_modified) if same_spec(prev, sha) and status else None
        requests.append(FetchRequest(source.name, str(source.url), validators))
    return requests


def file_stamps(kb: KnowledgeBase, state: StoredState, model_id: str) -> Callable[[Source], dict[str, str]]:
    """For a path source, the stamp ("size:mtime_ns") of each of its files the current version serves as read
    under the same spec, chunking and model: a file listed with that stamp is not read again."""

    def stamps(source: Source) -> dict[str, str]:
        sha, found = spec_sha256(source), {}
        for name, (doc_id, row) in units(state.served, source).items():
            status = state.statuses.get(name)
            if row.revision_id is None or status is None or not status.etag:
                continue
            stamp, _, context = status.etag.rpartition("@")
            if stamp and context == file_context(kb, model_id, unit_sha256(sha, doc_id)):
                found[doc_id] = stamp
        return found

    return stamps


def served_validators(state: StoredState, source: Source) -> dict[str, Validators]:
    """The HTTP validators of each page a crawl source serves now, by page id (what its conditional requests
    send)."""
    found = {}
    for name, (doc_id, row) in units(state.served, source).items():
        status = state.statuses.get(name)
        if row.revision_id is not None and status is not None:
            found[doc_id] = Validators(status.etag, status.last_modified)
    return found


def serves_spec(state: StoredState, source: Source) -> bool:
    """Whether the current version serves documents of this many-document source under its spec as it is now."""
    sha = spec_sha256(source)
    return any(row.source_sha256 == unit_sha256(sha, doc_id) for doc_id, row in units(state.served, source).values())


def path_sources(kb: KnowledgeBase) -> list[Source]:
    """The `path:` sources of `kb`: those read from its manifest's folder."""
    return [s for s in kb.spec.sources if s.kind == "path"]


def all_inline(kb: KnowledgeBase) -> bool:
    """Whether every source of `kb` is an inline text: nothing to fetch or read, the manifest is the content."""
    return all(s.kind == "text" for s in kb.spec.sources)


def kind_of(source: dict[str, Any]) -> SourceKind:
    """The kind of a source as a stored (packed) manifest holds it, as plain data (`Source.kind` of a model)."""
    if source.get("crawl") is not None:
        return "crawl"
    if source.get("git") is not None:
        return "git"
    if source.get("path") is not None:
        return "path"
    return "url" if source.get("url") else "text"


def fetch_sources(
    kb: KnowledgeBase,
    state: StoredState,
    *,
    model_id: str,
    trigger: PlanFor,
    only: Collection[str] = (),
    policy: FetchPolicy | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> FetchedSources:
    """Fetch and read what `trigger` needs of each source of `kb` against what `state` serves (see the module
    docstring); `only` limits a refresh to those source names; `policy` defaults to `FetchPolicy.from_env()`;
    `on_progress(done, total)` follows the URL fetches. A source that cannot be fetched or read is a record
    holding its SourceError, never raised."""
    requests = fetch_requests(kb, state, trigger, only)
    policy = (policy or FetchPolicy.from_env()) if trigger != "diff" else None  # a diff: nothing leaves the machine
    fetched = fetch_urls(requests, policy, on_done=on_progress) if policy is not None and requests else {}
    requested = {r.key for r in requests}
    stamps = file_stamps(kb, state, model_id)
    records: list[FetchedSource] = []
    for source in kb.spec.sources:
        match source.kind:
            case "text":
                records.append(InlineText(source, read_inline(source)))
            case "url" if source.name in fetched:
                records.append(FetchedUrl(source, fetched[source.name]))
            case "url":
                records.append(UnfetchedUrl(source, source.name in requested))
            case "path":
                read = None if kb.base_dir is None else _read_files(source, kb.base_dir, stamps(source))
                records.append(ListedDocuments(source, read, local=True))
            case "git" if policy is not None and _remote_wanted(state, source, trigger, only):
                records.append(ListedDocuments(source, _git(source, policy)))
            case "crawl" if policy is not None and _remote_wanted(state, source, trigger, only):
                known = served_validators(state, source) if serves_spec(state, source) else {}  # only what serves
                records.append(ListedDocuments(source, _crawl(source, policy, known)))
            case _:  # a git or crawl source not fetched this time (or by a diff)
                records.append(ListedDocuments(source, None))
    files = [r.read for r in records if isinstance(r, ListedDocuments) and r.local]
    every_listed = files and all(f is not None and not isinstance(f, SourceError) for f in files)
    return FetchedSources(tuple(records), kb.base_dir if every_listed else None)


def _read_files(source: Source, folder: Path, known: dict[str, str]) -> DocumentsRead | SourceError:
    try:
        return read_path(source, folder, known)
    except SourceError as exc:
        return exc


def _remote_wanted(state: StoredState, source: Source, trigger: PlanFor, only: Collection[str]) -> bool:
    """A git or crawl source is fetched: every one (or those in `only`) on refresh; on apply, those new or whose
    spec changed (the others keep what they serve, as URL sources do)."""
    return (not only or source.name in only) if trigger == "refresh" else not serves_spec(state, source)


def _crawl(source: Source, policy: FetchPolicy, known: dict[str, Validators]) -> DocumentsRead | SourceError:
    try:
        return crawl_site(source, policy, known)
    except SourceError as exc:
        return exc


def _git(source: Source, policy: FetchPolicy) -> DocumentsRead | SourceError:
    if policy.cache_dir is None:
        return SourceError("git sources need a cache folder (FetchPolicy.cache_dir)")
    try:
        return read_repository(source, policy.cache_dir, policy.guard())[1]
    except SourceError as exc:
        return exc
