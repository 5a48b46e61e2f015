"""The Python API: one object per store that every CLI command (and any agent) calls."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from contextlib import suppress
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from kbctl.config import Settings
from kbctl.errors import NotFoundError, StoreError
from kbctl.store.database import Database
from kbctl.store.embedded import embedded_url, running_url

# The stages are imported by the methods that use them, so that a command (or an agent) pays at start-up only
# for what it calls: `get` never loads the fetcher, the chunker or the model runtime.
if TYPE_CHECKING:
    from kbctl.answer import AskResult
    from kbctl.chat import ChatModel
    from kbctl.embedding import Embedder
    from kbctl.engine.controller import Controller, PendingResult
    from kbctl.engine.events import Reporter
    from kbctl.engine.explain import DiffReport
    from kbctl.engine.prune import PruneScope
    from kbctl.engine.results import ApplyReport, KnowledgeBaseResult
    from kbctl.engine.settled import ManifestsToApply
    from kbctl.engine.status import KnowledgeBaseDetail, KnowledgeBaseSummary
    from kbctl.manifest import KnowledgeBase, LoadedManifest, ManifestFile
    from kbctl.manifest.load import ManifestFiles
    from kbctl.manifest.selectors import Selector
    from kbctl.query.context import GroundedContext
    from kbctl.query.options import QueryOptions
    from kbctl.query.results import QueryResult
    from kbctl.rerank import Reranker
    from kbctl.sources.url import FetchPolicy
    from kbctl.store.applied import SettledKnowledgeBase
    from kbctl.store.history import GcResult, RollbackResult, VersionInfo

__all__ = ["DeleteResult", "KnowledgeBaseStore"]


class DeleteResult(BaseModel):
    """What `delete` removed."""

    name: str
    chunks: int
    vectors: int


def _knowledge_bases(items: Sequence[KnowledgeBase | LoadedManifest]) -> list[KnowledgeBase]:
    """The knowledge bases of loaded manifests (or of knowledge bases given as they are)."""
    from kbctl.manifest import LoadedManifest

    return [k.kb if isinstance(k, LoadedManifest) else k for k in items]


class KnowledgeBaseStore:
    """Knowledge bases in one PostgreSQL store (the embedded one unless a database URL is given).

    >>> with KnowledgeBaseStore() as store:                       # doctest: +SKIP
    ...     store.apply_paths(["examples/kb/"])
    ...     result = store.query("client-service-policy", "how long do we keep invoices?")
    """

    def __init__(
        self,
        *,
        database_url: str | None = None,
        home: str | Path | None = None,
        settings: Settings | None = None,
        fetch_policy: FetchPolicy | None = None,
    ) -> None:
        self.settings = settings or Settings.from_env(home=home, database_url=database_url)
        self.db = self._open_database()
        self._query_db: Database | None = None
        self._fetch_policy = fetch_policy

    @property
    def fetch_policy(self) -> FetchPolicy:
        """How URL, git and crawl sources are fetched: the one given, else from kbctl's configuration (built on
        first use), with kbctl's repository cache unless it names one."""
        if self._fetch_policy is None:
            from kbctl.sources.url import FetchPolicy

            self._fetch_policy = FetchPolicy.from_config(self.settings.config)
        self._fetch_policy = self._with_cache(self._fetch_policy)
        return self._fetch_policy

    @fetch_policy.setter
    def fetch_policy(self, policy: FetchPolicy) -> None:
        self._fetch_policy = policy

    def _with_cache(self, policy: FetchPolicy) -> FetchPolicy:
        """`policy` with kbctl's repository cache (git sources) unless it names one."""
        return policy if policy.cache_dir is not None else replace(policy, cache_dir=self.settings.home / "git")

    def _open_database(self) -> Database:
        """The store's database; the embedded server's by its socket when it is already up (the server library is
        loaded only to start it, or when that socket does not answer)."""
        if self.settings.database_url is None:
            url = running_url(self.settings.pgdata)
            if url is not None:
                with suppress(StoreError):
                    return Database(url, resolve=self._database_url)
        return Database(self._database_url(), resolve=self._database_url)

    def _database_url(self) -> str:
        """The configured database, or the embedded server's URL (started if it is not running)."""
        return self.settings.database_url or embedded_url(self.settings.pgdata)

    @property
    def query_db(self) -> Database:
        """Where queries read: the read replica of `KBCTL_QUERY_DATABASE_URL` (connected on first use, never
        migrated), else the store's own database."""
        url = self.settings.query_database_url
        if url is None:
            return self.db
        if self._query_db is None:
            self._query_db = Database(url, migrate=False)
        return self._query_db

    def close(self) -> None:
        """Close the connections (the embedded server keeps running; `kbctl server stop` stops it)."""
        self.db.close()
        if self._query_db is not None:
            self._query_db.close()

    def __enter__(self) -> KnowledgeBaseStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def embedder(self, model_id: str) -> Embedder:
        """The embedder of a model id, loaded once per process."""
        from kbctl.embedding import get_embedder

        return get_embedder(model_id, self.settings)

    def reranker(self, model_id: str) -> Reranker:
        """The reranker of a `provider/name` model id, loaded once per process."""
        from kbctl.rerank import get_reranker

        return get_reranker(model_id, self.settings)

    def chat_model(self, model_id: str) -> ChatModel:
        """The chat model of a `provider/name` model id or `profile:NAME`, built once per process."""
        from kbctl.chat import get_chat_model

        return get_chat_model(model_id, self.settings)

    def apply(
        self, knowledge_bases: Sequence[KnowledgeBase | LoadedManifest], *, reporter: Reporter | None = None
    ) -> ApplyReport:
        """Reconcile the store to match these knowledge bases; each publishes a new version if anything changed."""
        from kbctl.engine.apply import apply_knowledge_bases

        kbs = _knowledge_bases(knowledge_bases)
        return apply_knowledge_bases(self.db, kbs, self.embedder, reporter, policy=self.fetch_policy)

    def apply_paths(
        self, paths: Sequence[str], *, recursive: bool = False, reporter: Reporter | None = None
    ) -> ApplyReport:
        """Load manifests like `kubectl apply -f` (all validated before anything is written), then apply."""
        from kbctl.manifest import load_manifests

        return self.apply(load_manifests(paths, recursive=recursive), reporter=reporter)

    def refresh(
        self,
        names: Sequence[str] | None = None,
        *,
        sources: Sequence[str] = (),
        reporter: Reporter | None = None,
        policy: FetchPolicy | None = None,
    ) -> ApplyReport:
        """Re-fetch URL sources (of `names`, or of every knowledge base) and republish only what changed.

        A page answering 304 Not Modified, or whose extracted text is unchanged, is not re-chunked or
        re-embedded; a page that fails keeps serving its last good content and is reported stale.
        """
        from kbctl.engine.apply import refresh_knowledge_bases

        return refresh_knowledge_bases(
            self.db,
            names,
            self.embedder,
            reporter,
            sources=sources,
            policy=self._with_cache(policy) if policy is not None else self.fetch_policy,
        )

    def apply_and_wait(
        self,
        knowledge_bases: Sequence[KnowledgeBase | LoadedManifest],
        *,
        reporter: Reporter | None = None,
        timeout: float = 600.0,
    ) -> ApplyReport:
        """`apply --wait`: hand the work to a running controller and wait for it, or, when no controller
        runs or a knowledge base reads files (`path:` sources, which only this process has), reconcile
        in-process (the same result either way)."""
        from kbctl.engine.controller import wait_for_controller

        if not self.controller_alive() or any(kb.reads_files for kb in _knowledge_bases(knowledge_bases)):
            # No controller, or files to read that only this process has: reconcile here.
            return self.apply(knowledge_bases, reporter=reporter)
        kbs = {kb.name: kb for kb in _knowledge_bases(knowledge_bases)}

        def in_process(p: PendingResult) -> KnowledgeBaseResult:
            return self.apply([kbs[p.name]], reporter=reporter).results[0]

        pending = self.submit(knowledge_bases)
        return wait_for_controller(self.db, pending, reporter=reporter, timeout=timeout, in_process=in_process)

    def load_settled(self, files: ManifestFiles) -> ManifestsToApply:
        """Parse manifest files read for `apply`, except those the store applied byte for byte and still serves
        (kbctl.engine.settled): those are known by name only, and `apply_settled_and_wait` reports them
        unchanged. Raises ManifestError for the problems of the files parsed."""
        from kbctl.engine.settled import ManifestsToApply, file_key, settled
        from kbctl.manifest import load_manifest_set

        keys: dict[str, str] = {}
        found: dict[str, list[SettledKnowledgeBase]] = {}

        def lookup(readable: list[ManifestFile]) -> dict[int, tuple[str, list[tuple[str, int]]]]:
            keys.update((f.path, file_key(f.path, f.text or "")) for f in readable)
            found.update(settled(self.db, list(keys.values()), self.embedder))
            return {
                i: (keys[f.path], [(kb.name, kb.line) for kb in found[keys[f.path]]])
                for i, f in enumerate(readable)
                if keys[f.path] in found
            }

        loaded = load_manifest_set(files, settled=lookup)
        rows = tuple(kb for s in loaded.settled for kb in found[s.key] if kb.name == s.name)
        return ManifestsToApply(loaded, rows, keys)

    def apply_settled_and_wait(
        self, to_apply: ManifestsToApply, *, reporter: Reporter | None = None, timeout: float = 600.0
    ) -> ApplyReport:
        """`apply_and_wait` for what `load_settled` gave: the settled knowledge bases are reported unchanged, the
        others applied; then each file applied records its key, so that applying it again is not parsed."""
        from kbctl.engine.events import NullReporter
        from kbctl.engine.results import ApplyReport
        from kbctl.engine.settled import in_file_order, record_applied, report_settled

        manifests = to_apply.manifests.manifests
        unchanged = report_settled(self.db, to_apply.settled, reporter or NullReporter())
        report = (
            self.apply_and_wait(manifests, reporter=reporter, timeout=timeout) if manifests else ApplyReport(results=[])
        )
        serving = {r.name: r.version for r in report.results if r.version is not None and not r.failed}
        record_applied(self.db, to_apply, serving)
        return ApplyReport(results=in_file_order(to_apply.manifests.names, [*unchanged, *report.results]))

    def diff(
        self, knowledge_bases: Sequence[KnowledgeBase | LoadedManifest], *, prune: PruneScope | None = None
    ) -> DiffReport:
        """What apply would do (and, with a prune scope, prune), without writing or fetching anything."""
        from kbctl.engine.explain import diff_knowledge_bases

        kbs = _knowledge_bases(knowledge_bases)
        return diff_knowledge_bases(self.db, kbs, self.embedder, prune=prune)

    def diff_settled(self, to_apply: ManifestsToApply, *, prune: PruneScope | None = None) -> DiffReport:
        """`diff` for what `load_settled` gave: the knowledge bases of settled files are unchanged."""
        from kbctl.engine.explain import diff_knowledge_bases

        kbs = [m.kb for m in to_apply.manifests.manifests]
        return diff_knowledge_bases(
            self.db, kbs, self.embedder, prune=prune, settled=to_apply.settled, order=to_apply.manifests.names
        )

    def prune(
        self, keep: Collection[str], selector: Selector | None = None, *, applyset: str | None = None
    ) -> list[str]:
        """Delete the knowledge bases not in `keep` that are members of `applyset` (and match `selector`, when
        given); without an apply set, those matching `selector` that belong to no apply set."""
        from kbctl.engine.prune import PruneScope, prune_knowledge_bases

        return prune_knowledge_bases(self.db, keep, PruneScope(applyset, selector))

    def check_applyset(self, names: Collection[str], applyset: str) -> None:
        """Refuse (KbctlError) when one of `names` belongs to another apply set; nothing is written."""
        from kbctl.engine.prune import check_applyset

        check_applyset(self.db, names, applyset)

    def join_applyset(self, names: Sequence[str], applyset: str) -> None:
        """Record the stored knowledge bases `names` as members of `applyset` (what a later prune may delete)."""
        self.db.join_applyset(names, applyset)

    def submit(self, knowledge_bases: Sequence[KnowledgeBase | LoadedManifest]) -> list[PendingResult]:
        """Record knowledge bases as desired state for a controller (`apply` without --wait); no ingestion here."""
        from kbctl.engine.controller import record_pending

        return [record_pending(self.db, kb) for kb in _knowledge_bases(knowledge_bases)]

    def submit_settled_or_apply(
        self,
        to_apply: ManifestsToApply,
        *,
        reporter: Reporter | None = None,
        on_recorded: Callable[[list[PendingResult]], None] | None = None,
    ) -> tuple[list[PendingResult], ApplyReport | None]:
        """`submit_or_apply` for what `load_settled` gave: the settled knowledge bases are unchanged (nothing to
        record); a file whose knowledge bases the store already serves unchanged records its key."""
        from kbctl.engine.controller import PendingResult
        from kbctl.engine.settled import in_file_order, record_applied

        unchanged = [PendingResult(kb.name, "unchanged", kb.version, kb.generation, False) for kb in to_apply.settled]
        recorded: list[PendingResult] = []

        def in_order(pending: list[PendingResult]) -> None:
            recorded.extend(in_file_order(to_apply.manifests.names, [*unchanged, *pending]))
            if on_recorded is not None:
                on_recorded(recorded)

        _, applied = self.submit_or_apply(to_apply.manifests.manifests, reporter=reporter, on_recorded=in_order)
        serving = {p.name: p.version for p in recorded if not p.pending and p.version is not None}
        record_applied(self.db, to_apply, serving)
        return recorded, applied

    def submit_or_apply(
        self,
        knowledge_bases: Sequence[KnowledgeBase | LoadedManifest],
        *,
        reporter: Reporter | None = None,
        on_recorded: Callable[[list[PendingResult]], None] | None = None,
    ) -> tuple[list[PendingResult], ApplyReport | None]:
        """`apply` without `--wait`: record the desired state for a controller, except for knowledge bases that
        read files (`path:` sources), which only this process has: those are applied here, after `on_recorded`
        is told what was recorded. Returns what was recorded and, when some were applied, their report."""
        kbs = _knowledge_bases(knowledge_bases)
        pending = self.submit([kb for kb in kbs if not kb.reads_files])
        if on_recorded is not None:
            on_recorded(pending)
        local = [kb for kb in kbs if kb.reads_files]
        return pending, self.apply(local, reporter=reporter) if local else None

    def controller(self, *, reporter: Reporter | None = None) -> Controller:
        """A controller over this store (use `run_once()` or `run(stop_event)`)."""
        from kbctl.engine.controller import Controller

        return Controller(self.db, self.embedder, reporter=reporter, policy=self.fetch_policy)

    def controller_alive(self) -> bool:
        """Whether a controller has announced itself recently."""
        from kbctl.engine.controller import controller_alive

        return controller_alive(self.db)

    def wait(
        self,
        name: str,
        *,
        condition: str = "Ready",
        value: bool = True,
        generation: int | None = None,
        timeout: float = 300.0,
    ) -> bool:
        """Wait until a knowledge base has a condition (default Ready=True); False on timeout."""
        from kbctl.engine.controller import wait_for

        return wait_for(self.db, name, condition=condition, value=value, generation=generation, timeout=timeout)

    def history(self, name: str) -> list[VersionInfo]:
        """The retained versions of a knowledge base, newest first, with what changed in each."""
        from kbctl.store.history import list_versions

        return list_versions(self.db, name)

    def rollback(
        self,
        name: str,
        to_version: int | None = None,
        *,
        timeout: float | None = 60.0,
        on_wait: Callable[[], None] | None = None,
    ) -> RollbackResult:
        """Serve an earlier retained version again (default: the one before the current); nothing is re-embedded.

        Waits (calling `on_wait`) at most `timeout` seconds for an apply of the knowledge base to finish."""
        from kbctl.engine.conditions import observe
        from kbctl.store.history import rollback

        result = rollback(self.db, name, to_version, timeout=timeout, on_wait=on_wait)
        row = self.db.get_kb(name)
        if row is not None:
            observe(self.db, row)
        return result

    def collect_garbage(self, batch: int = 1000) -> GcResult:
        """Delete cached vectors no chunk references, in batches (skipped while an apply runs)."""
        from kbctl.store.history import collect_garbage

        return collect_garbage(self.db, batch)

    def list(self, selector: Selector | None = None) -> list[KnowledgeBaseSummary]:
        """Every knowledge base (whose labels match `selector`, when given), by name."""
        from kbctl.engine.status import list_knowledge_bases

        found = list_knowledge_bases(self.db)
        return found if selector is None else [s for s in found if selector.matches(s.labels)]

    def resource(self, name: str) -> dict[str, Any]:
        """A knowledge base as a Kubernetes-style object (`kbctl get kb NAME -o yaml`): metadata, the applied spec
        with defaults, status. Applying its YAML again changes nothing."""
        from kbctl.engine.status import knowledge_base_resource

        return knowledge_base_resource(self.db, name)

    def describe(self, name: str) -> KnowledgeBaseDetail:
        """Spec in force, current version and per-source state of one knowledge base."""
        from kbctl.engine.status import describe_knowledge_base

        return describe_knowledge_base(self.db, name)

    def query(
        self,
        name: str,
        question: str,
        options: QueryOptions | None = None,
        *,
        top_k: int | None = None,
        threshold: float | None = None,
        max_tokens: int | None = None,
        mode: str | None = None,
        explain: bool | None = None,
        rerank: bool | None = None,
    ) -> QueryResult:
        """The chunks most relevant to `question` (hybrid, vector or keyword; spec defaults for what is unset);
        `rerank` False skips the spec's reranker, True requires one; `explain` adds a per-stage trace of
        candidates, ranks, scores, cuts and timings. The keywords given (not None) override `options`."""
        from kbctl.query.options import QueryOptions
        from kbctl.query.retrieve import query_knowledge_base

        options = QueryOptions.build(
            options,
            top_k=top_k,
            threshold=threshold,
            max_tokens=max_tokens,
            mode=mode,
            explain=explain,
            rerank=rerank,
        )
        return query_knowledge_base(self.query_db, name, question, self.embedder, options, reranker_for=self.reranker)

    def context(
        self,
        name: str,
        question: str,
        options: QueryOptions | None = None,
        *,
        top_k: int | None = None,
        threshold: float | None = None,
        max_tokens: int | None = None,
        mode: str | None = None,
        rerank: bool | None = None,
    ) -> GroundedContext:
        """The block a model should receive for `question`: merged passages marked as reference data,
        or an explicit "no relevant context was found" block. The keywords given (not None) override `options`."""
        from kbctl.query.context import build_context
        from kbctl.query.options import QueryOptions

        options = QueryOptions.build(
            options, top_k=top_k, threshold=threshold, max_tokens=max_tokens, mode=mode, rerank=rerank
        )
        return build_context(self.query(name, question, options))

    def ask(
        self,
        name: str,
        question: str,
        options: QueryOptions | None = None,
        *,
        model: str | None = None,
        on_text: Callable[[str], None] | None = None,
        top_k: int | None = None,
        threshold: float | None = None,
        max_tokens: int | None = None,
        mode: str | None = None,
        rerank: bool | None = None,
    ) -> AskResult:
        """Answer `question` from the knowledge base's passages through a chat model, citing them as [1], [2].

        When nothing passes the similarity threshold no model is called: the result has `answer` None and
        `reason` "noContext". The model is `model` (`provider/name` or `profile:NAME`), else the version's
        `spec.answer`, else the configuration's `chat.defaultModel`. With `on_text` the answer is streamed to
        it as it arrives. The retrieval keywords given (not None) override `options`, as for `query`.
        """
        from kbctl.answer import answer_ask, prepare_ask
        from kbctl.query.options import QueryOptions

        options = QueryOptions.build(
            options, top_k=top_k, threshold=threshold, max_tokens=max_tokens, mode=mode, rerank=rerank
        )
        plan = prepare_ask(
            self.query_db,
            name,
            question,
            self.embedder,
            self.chat_model,
            options,
            model=model,
            default_model=self.settings.config.chat.default_model,
            reranker_for=self.reranker,
        )
        return answer_ask(plan, on_text)

    def delete(
        self, name: str, *, timeout: float | None = 60.0, on_wait: Callable[[], None] | None = None
    ) -> DeleteResult:
        """Delete a knowledge base with everything only it used (versions, chunks, cached vectors).

        Takes the knowledge base's lock, so a running apply finishes first (it is not recreated half
        way); `on_wait` is called when that means waiting, `timeout` bounds the wait (StoreError).
        """
        with self.db.kb_lock(name, timeout=timeout, on_wait=on_wait):
            removed = self.db.delete_kb(name)
        if removed is None:
            raise NotFoundError(f'knowledgebase "{name}" not found')
        return DeleteResult(name=name, chunks=removed[0], vectors=removed[1])
