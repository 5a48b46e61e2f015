"""The Python API: one object per store that every CLI command (and any agent) calls."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from kbctl import telemetry
from kbctl.config import Settings
from kbctl.defaults import (
    APPLY_WAIT_SECONDS,
    BEIR_SPLIT,
    RANKING_MAX_TOKENS,
    RANKING_THRESHOLD,
    RANKING_TOP_K,
    WAIT_SECONDS,
)
from kbctl.errors import KbctlError, NotFoundError, StoreError, UsageError
from kbctl.store.database import Database
from kbctl.store.embedded import embedded_url, running_url
from kbctl.store.names import LOOKUP_TIMEOUT, knowledge_base_names, reachable_url

# The stages are imported by the methods that use them, so that a command (or an agent) pays at start-up only
# for what it calls: `get` never loads the fetcher, the chunker or the model runtime.
if TYPE_CHECKING:
    from kbctl.answer import AskResult
    from kbctl.chat import ChatModel
    from kbctl.embedding import Embedder
    from kbctl.engine.controller import Controller, RolloutStatus
    from kbctl.engine.diff import DiffReport
    from kbctl.engine.events import Reporter
    from kbctl.engine.prune import PruneScope
    from kbctl.engine.results import ApplyReport, PendingResult
    from kbctl.engine.settled import ManifestsToApply
    from kbctl.engine.status import KnowledgeBaseDetail, KnowledgeBaseSummary, SyncDetail
    from kbctl.eval.beir import BeirImport
    from kbctl.eval.evalset import EvalSet
    from kbctl.eval.run import EvalReport
    from kbctl.inputs.access import Reader
    from kbctl.manifest import KnowledgeBase, LoadedManifest, ManifestFile, ManifestSet
    from kbctl.manifest.explain import FieldDoc
    from kbctl.manifest.load import ManifestFiles
    from kbctl.manifest.selectors import Selector
    from kbctl.query.context import GroundedContext
    from kbctl.query.federated import FederatedResult
    from kbctl.query.options import QueryOptions, QueryOverrides
    from kbctl.query.results import QueryResult
    from kbctl.rerank import Reranker
    from kbctl.sources.url import FetchPolicy
    from kbctl.store.applied import SettledKnowledgeBase
    from kbctl.store.embedded import ServerStatus
    from kbctl.store.evalruns import EvalRun
    from kbctl.store.events import KnowledgeBaseEvent
    from kbctl.store.history import GcResult, RollbackResult, VersionInfo
    from kbctl.store.pool import DatabasePool
    from kbctl.store.retrievals import NewRetrieval, Retrieval
    from kbctl.store.syncs import SyncStatus
    from kbctl.store.versiondiff import DiffBounds, VersionChange, VersionDiff

__all__ = ["DeleteResult", "KnowledgeBaseStore", "Readiness", "Scope"]


Scope = Callable[[str, Mapping[str, str]], bool]
"""May the caller see a knowledge base (name, labels)? A server's token scope; refused looks like absent."""


class DeleteResult(BaseModel):
    """What `delete` removed."""

    name: str
    chunks: int
    vectors: int
    warnings: list[str] = Field(
        default_factory=list, exclude=True, description="A forced delete of a knowledge base a Sync manages warns."
    )


class Readiness(BaseModel):
    """Whether queries can be served (`/readyz`): each check "ok", or a word on why not."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    ready: bool
    database: str
    migrations: str
    model: str


@dataclass(frozen=True)
class Overview:
    """What a controller's metrics read at each scrape: the queue depth, every knowledge base, every Sync."""

    pending: int
    knowledge_bases: Sequence[KnowledgeBaseSummary] = ()
    syncs: Sequence[SyncStatus] = ()


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
        pool_size: int | None = None,
        pool_timeout: float = 10.0,
    ) -> None:
        """`pool_size` opens a pool of that many connections that reads borrow from, one per call (many
        concurrent callers: `kbctl serve`, `kbctl mcp`); `pool_timeout` bounds the wait for one. When the OTEL_*
        variables ask for traces and no tracer provider is installed, the first store installs one
        (kbctl.telemetry; docs/tracing.md)."""
        telemetry.configure_tracing()
        self.settings = settings or Settings.from_env(home=home, database_url=database_url)
        self.db = self._open_database()  # migrates the schema, before any pool opens
        self._query_db: Database | None = None
        self._first_query = True  # the only one that starts loading its model in the background
        self._fetch_policy = fetch_policy
        self._pool: DatabasePool | None = None
        if pool_size is not None:
            from kbctl.store.pool import DatabasePool

            url = self.settings.query_database_url or self._database_url()
            self._pool = DatabasePool(url, size=pool_size, timeout=pool_timeout)

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
    def _query_database(self) -> Database:
        """Where queries read: the read replica of `KBCTL_QUERY_DATABASE_URL` (connected on first use, never
        migrated), else the store's own database."""
        url = self.settings.query_database_url
        if url is None:
            return self.db
        if self._query_db is None:
            self._query_db = Database(url, migrate=False)
        return self._query_db

    @staticmethod
    def server_status(settings: Settings | None = None) -> ServerStatus:
        """Whether the embedded PostgreSQL (of `settings`, else of the environment) runs, without starting it."""
        from kbctl.store.embedded import server_status

        return server_status((settings or Settings.from_env()).pgdata)

    @staticmethod
    def peek_names(prefix: str = "", *, settings: Settings | None = None, timeout: float = LOOKUP_TIMEOUT) -> list[str]:
        """The names of the stored knowledge bases that start with `prefix`, sorted, read within `timeout` seconds
        without starting the embedded server or migrating anything (shell completion); [] when the store is not
        running, cannot be reached in time, or fails."""
        settings = settings or Settings.from_env()
        url = reachable_url(settings.database_url, settings.pgdata)
        return [] if url is None else knowledge_base_names(url, prefix, timeout=timeout)

    @staticmethod
    def stop_server(settings: Settings | None = None) -> bool:
        """Stop the embedded PostgreSQL (of `settings`, else of the environment); False when it was not running."""
        from kbctl.store.embedded import stop_server

        return stop_server((settings or Settings.from_env()).pgdata)

    def pending_count(self) -> int:
        """Knowledge bases whose desired state a controller has not reconciled yet, read on a connection of its
        own (safe from another thread, e.g. a metrics scrape, while this store's connection works)."""
        with Database(self.db.url, migrate=False) as db:
            return db.pending_count()

    def overview(self) -> Overview:
        """The queue depth (`pending_count`), every knowledge base (as `list` gives them) and every Sync (as `syncs`),
        read in one snapshot on a connection of its own (safe from another thread, e.g. a metrics scrape)."""
        from kbctl.engine.status import list_knowledge_bases

        with Database(self.db.url, migrate=False) as db, db.read_only():
            knowledge_bases, syncs = list_knowledge_bases(db), db.list_syncs()
        # pending_count's own condition, counted on the rows just read rather than in a statement of its own
        pending = sum(kb.generation > kb.observed_generation for kb in knowledge_bases)
        return Overview(pending, knowledge_bases, syncs)

    def close(self) -> None:
        """Close the connections (the embedded server keeps running; `kbctl server stop` stops it)."""
        if self._pool is not None:
            self._pool.close()
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

    def _preload_model(self, db: Database, name: str) -> None:
        """On a store's first query: start loading the model of `name`'s serving version in the background
        (kbctl.embedding.preload), so the query's modules import while the model loads. Later queries (a server's)
        skip the lookup; a model they are the first to need loads when they embed. What the query itself reads, in
        its own snapshot, decides: a version published meanwhile with another model only wastes this load."""
        from kbctl.embedding import preload

        if not self._first_query:
            return
        self._first_query = False
        target = db.query_target(name)
        if target is None or target.model is None:
            return
        with suppress(KbctlError):  # an unknown model is reported by the query
            preload(self.embedder(target.model))

    def reranker(self, model_id: str) -> Reranker:
        """The reranker of a `provider/name` model id, loaded once per process."""
        from kbctl.rerank import get_reranker

        return get_reranker(model_id, self.settings)

    def chat_model(self, model_id: str) -> ChatModel:
        """The chat model of a `provider/name` model id or `profile:NAME`, built once per process."""
        from kbctl.chat import get_chat_model

        return get_chat_model(model_id, self.settings)

    def apply(
        self,
        manifests: Sequence[KnowledgeBase | LoadedManifest] | ManifestsToApply,
        *,
        wait: bool = True,
        controller: bool = False,
        timeout: float = APPLY_WAIT_SECONDS,
        applyset: str | None = None,
        prune: PruneScope | None = None,
        reporter: Reporter | None = None,
        on_recorded: Callable[[list[PendingResult]], None] | None = None,
        force: bool = False,
    ) -> ApplyReport:
        """Make the store match these knowledge bases; each publishes a new version if anything changed.

        By default the work is done here, before returning. `controller=True` hands it to a running
        `kbctl controller` and waits for it up to `timeout` seconds (`kbctl apply --wait`; done here all the same
        when none runs, or when a knowledge base reads files that only this process has). `wait=False` records
        the desired state for a controller and returns (`report.recorded`; `on_recorded` hears it first), except
        for knowledge bases of path: sources, applied here. `applyset` records the knowledge bases as members of
        that apply set (one that belongs to another set is refused before anything is written); `prune` then
        deletes what its scope covers and the manifests no longer name (`report.pruned`). What `load_settled`
        gave is applied without parsing the settled files again. `report.exit_code()` is `kbctl apply`'s.

        A knowledge base a Sync manages (one it applied, while the Sync exists and is not suspended) is refused
        with ManagedError, before anything is written, when this apply would change it: the Sync would undo it.
        `force=True` applies it all the same (`report.warnings` says so).
        """
        from kbctl.engine.orchestrate import ApplyOptions, run_apply
        from kbctl.engine.settled import ManifestsToApply

        chosen = manifests if isinstance(manifests, ManifestsToApply) else _knowledge_bases(manifests)
        options = ApplyOptions(
            wait=wait, controller=controller, timeout=timeout, applyset=applyset, prune=prune, force=force
        )
        with telemetry.apply_spans("kbctl.apply", reporter) as spans:
            report = run_apply(
                self.db,
                chosen,
                self.embedder,
                options,
                reporter=spans.reporter,
                policy=self.fetch_policy,
                on_recorded=on_recorded,
            )
            spans.finished(report)
        return report

    def apply_paths(
        self, paths: Sequence[str], *, recursive: bool = False, reporter: Reporter | None = None
    ) -> ApplyReport:
        """Load manifests like `kubectl apply -f` (all validated before anything is written), then `apply` them."""
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

        with telemetry.apply_spans("kbctl.refresh", reporter) as spans:
            report = refresh_knowledge_bases(
                self.db,
                names,
                self.embedder,
                spans.reporter,
                sources=sources,
                policy=self._with_cache(policy) if policy is not None else self.fetch_policy,
            )
            spans.finished(report)
        return report

    def load_settled(self, files: ManifestFiles) -> ManifestsToApply:
        """Parse manifest files read for `apply`, except those the store applied byte for byte and still serves
        (kbctl.engine.settled): those are known by name only, and `apply` and `diff` report them unchanged.
        Raises ManifestError for the problems of the files parsed."""
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

    def diff(
        self,
        manifests: Sequence[KnowledgeBase | LoadedManifest] | ManifestsToApply,
        *,
        prune: PruneScope | None = None,
    ) -> DiffReport:
        """What `apply` would do (and, with a prune scope, prune), without writing or fetching anything; the
        knowledge bases of settled files (`load_settled`) are unchanged."""
        from kbctl.engine.diff import diff_knowledge_bases
        from kbctl.engine.settled import ManifestsToApply

        if not isinstance(manifests, ManifestsToApply):
            return diff_knowledge_bases(self.db, _knowledge_bases(manifests), self.embedder, prune=prune)
        kbs = [m.kb for m in manifests.manifests.manifests]
        return diff_knowledge_bases(
            self.db, kbs, self.embedder, prune=prune, settled=manifests.settled, order=manifests.manifests.names
        )

    def controller(self, *, reporter: Reporter | None = None) -> Controller:
        """A controller over this store (use `run_once()` or `run(stop_event)`); each reconcile is a
        `kbctl.reconcile` span when tracing (kbctl.telemetry)."""
        from kbctl.engine.controller import Controller

        return Controller(self.db, self.embedder, reporter=telemetry.span_reporter(reporter), policy=self.fetch_policy)

    def controller_alive(self) -> bool:
        """Whether a controller has announced itself recently."""
        from kbctl.engine.controller import controller_alive

        return controller_alive(self.db)

    def wait(
        self,
        name: str | Sequence[str],
        *,
        condition: str = "Ready",
        value: bool = True,
        generation: int | None = None,
        deleted: bool = False,
        timeout: float = WAIT_SECONDS,
        on_met: Callable[[str], None] | None = None,
    ) -> bool:
        """Wait until a knowledge base (or each of several) has a condition (default Ready=True, for the latest
        generation), or with `deleted` until it no longer exists; False when `timeout` seconds pass first (one
        deadline for all). `on_met` hears each name as soon as it is met. A name that does not exist is
        NotFoundError, except with `deleted` (met at once).

        >>> store.wait(["a", "b"], timeout=300, on_met=print)    # doctest: +SKIP
        """
        from kbctl.engine.controller import wait_for_all, wait_for_deletion

        names = [name] if isinstance(name, str) else list(name)
        if deleted:
            return not wait_for_deletion(self.db, names, timeout=timeout, on_deleted=on_met)
        left = wait_for_all(
            self.db, names, condition=condition, value=value, generation=generation, timeout=timeout, on_met=on_met
        )
        return not left

    def rollout_status(
        self,
        name: str,
        *,
        watch: bool = True,
        timeout: float | None = WAIT_SECONDS,
        progress_deadline: float | None = None,
        on_progress: Callable[[RolloutStatus], None] | None = None,
    ) -> RolloutStatus:
        """Where the rollout of a knowledge base's latest generation stands (`kbctl rollout status`): with `watch`,
        wait until it is done (reconciled and Ready) or failed, up to `timeout` seconds (None: no limit), or until it
        made no progress for `progress_deadline` seconds (then the result is `stalled`; `on_progress` hears each new
        waiting status); without, the status now. The result's `state` is "done", "failed" or "waiting"."""
        from kbctl.engine.controller import rollout_status, wait_for_rollout

        if not watch:
            return rollout_status(self.db, name)
        return wait_for_rollout(
            self.db, name, timeout=timeout, progress_deadline=progress_deadline, on_progress=on_progress
        )

    def history(self, name: str) -> list[VersionInfo]:
        """The retained versions of a knowledge base, newest first, with what changed in each."""

        return self.db.list_versions(name)

    def version_diff(
        self,
        name: str,
        from_version: int | None = None,
        to_version: int | None = None,
        *,
        scope: Scope | None = None,
        reader: Reader | None = None,
        bounds: DiffBounds | None = None,
    ) -> VersionDiff:
        """What changed between two retained versions (`kbctl rollout diff`; default: the version before the serving
        one, and the serving one): the sources added, removed, changed and unchanged with each side's chunks and
        characters, and a unified diff of each changed source's text, cut at `bounds` (kbctl.defaults' DIFF_*) and
        flagged. With a `reader`, as that caller sees the versions: a source it may not read is left out, not named
        nor counted; without one, every source. NotFoundError outside `scope`, and for a version not retained."""

        with self._reading() as db:
            if scope is not None:
                self._in_scope(db, name, scope)
            return db.diff_versions(name, from_version, to_version, reader=reader, bounds=bounds)

    def version_changes(
        self, name: str, *, scope: Scope | None = None, reader: Reader | None = None
    ) -> list[VersionChange]:
        """Each retained version, newest first (as `history`), with how many sources it added, removed and changed
        against the retained version before it; no text is read. `scope` and `reader` as for `version_diff`."""

        with self._reading() as db:
            if scope is not None:
                self._in_scope(db, name, scope)
            return db.version_changes(name, reader=reader)

    def record_eval(self, name: str, report: EvalReport, *, eval_set: str, scope: Scope | None = None) -> list[EvalRun]:
        """Record an evaluation of knowledge base `name` (`kbctl eval --record`): one run per mode, against the
        version its queries read (as the query results name it, so a read replica's), under `eval_set` (the eval
        set's `name:` or its file's name: a name, never a path), with the caller it measured as. The answers of
        `--answers` are not recorded. KbctlError, nothing recorded, when a mode's queries read more than one version
        (one was published while they ran: measure again); NotFoundError outside `scope`."""
        from kbctl.store.evalruns import EvalMetrics, NewEvalRun

        if report.knowledge_base is not None and report.knowledge_base != name:
            raise UsageError(f"the report measured KnowledgeBase/{report.knowledge_base}, not {name}")
        runs = []
        for m in report.modes:
            if len(m.versions) != 1:
                read = " and ".join(str(v) for v in m.versions) or "none"
                raise KbctlError(
                    f"KnowledgeBase/{name} not recorded: the queries of mode {m.label} read versions {read} (a version "
                    "was published while they ran); measure again"
                )
            metrics = EvalMetrics.model_validate(m.model_dump(include=set(EvalMetrics.model_fields)))
            runs.append(
                NewEvalRun(
                    version=m.versions[0],
                    eval_set=eval_set,
                    questions=m.queries,
                    mode=m.resolved_mode or m.mode or "default",
                    k=report.k,
                    metrics=metrics,
                    reader_groups=report.reader_groups or (),
                    reader_claims=report.reader_claims or (),
                )
            )
        if scope is not None:
            self._in_scope(self.db, name, scope)
        return self.db.record_eval_runs(name, runs)

    def eval_history(self, name: str, *, scope: Scope | None = None, reader: Reader | None = None) -> list[EvalRun]:
        """The recorded evaluation runs of a knowledge base, oldest first (the newest EVAL_RUNS_PER_KNOWLEDGE_BASE
        are kept), each with the version it measured. With a `reader`, only the runs measured as a caller whose groups
        and claims it all holds (those measured without any, at least): no figure of documents it may not read.
        NotFoundError outside `scope`."""

        with self._reading() as db:
            if scope is not None:
                self._in_scope(db, name, scope)
            return db.list_eval_runs(name, reader=reader)

    # ---------------------------------------------------------------- manifests, eval sets and datasets (validate,
    # explain, eval, import beir): each a thin call of the library part that does the work

    @staticmethod
    def validate(paths: Sequence[str], *, recursive: bool = False) -> ManifestSet:
        """The KnowledgeBases and Syncs of `paths` (files, folders, "-" for stdin; `recursive`: subfolders too) parsed
        and checked, without a database (`kbctl validate`): every problem of every file raised as one ManifestError
        (file:line), the objects of other tools in `skipped`."""
        from kbctl.manifest import load_manifest_set, read_manifest_files

        return load_manifest_set(read_manifest_files(paths, recursive=recursive))

    @staticmethod
    def explain(field: str, *, recursive: bool = False) -> FieldDoc:
        """The documentation of a manifest field (`kbctl explain`): `knowledgebase`, `kb.spec.retrieval.topK`, `sync`,
        with its direct fields (every level below with `recursive`). UsageError names an unknown field."""
        from kbctl.manifest.explain import explain

        return explain(field, recursive=recursive)

    @staticmethod
    def load_evalset(path: str) -> EvalSet:
        """An eval set from a YAML or JSON Lines file, or "-" for stdin; EvalSetError lists every problem with
        file:line."""
        from kbctl.eval.evalset import load_evalset

        return load_evalset(path)

    def evaluate(
        self,
        name: str,
        evalset: EvalSet,
        *,
        k: int = 5,
        modes: Sequence[str | None] = (None,),
        options: QueryOptions | None = None,
        reader: Reader | None = None,
        answers: bool = False,
        chat_models: Sequence[str | None] = (None,),
        judge: str | None = None,
    ) -> EvalReport:
        """Measure knowledge base `name` against `evalset` (`kbctl eval`): retrieval in each of `modes` (None: the
        spec's mode and reranker; `hybrid+rerank` with the spec's reranker) at cut-off `k`, as `reader`; with
        `answers`, also every question asked once per chat model of `chat_models` (None: spec.answer's) and judged by
        `judge` (None: chat.judgeModel, when set). `options` may set the threshold and the token budget only. Record
        the report with `record_eval`; its `shortfalls` are the gates."""
        from kbctl.eval.answers import evaluate_answers
        from kbctl.eval.run import evaluate_store

        report = evaluate_store(self, name, evalset, k=k, modes=modes, options=options, reader=reader)
        if answers:
            report.answers = evaluate_answers(
                self,
                name,
                evalset,
                models=chat_models,
                judge=judge or self.settings.config.chat.judge_model,
                options=options,
                reader=reader,
            )
        return report

    def import_beir(
        self,
        folder: str | Path,
        name: str,
        *,
        split: str = BEIR_SPLIT,
        eval_out: str | Path | None = None,
        manifest_out: str | Path | None = None,
        limit_docs: int | None = None,
        limit_queries: int | None = None,
        threshold: float = RANKING_THRESHOLD,
        max_tokens: int = RANKING_MAX_TOKENS,
        model: str | None = None,
        reporter: Reporter | None = None,
    ) -> BeirImport:
        """Import the BEIR dataset in `folder` as knowledge base `name` and write its eval set (`kbctl import beir`):
        retrieving the top RANKING_TOP_K with similarityThreshold `threshold` and maxContextTokens `max_tokens`,
        embedded with `model` (None: the default model). Everything is checked before anything is written
        (BeirError, file:line); the knowledge base is then applied as `apply --wait` does."""
        from kbctl.eval.beir import import_beir
        from kbctl.manifest import Embedding, Retrieval

        return import_beir(
            self,
            folder,
            name,
            split=split,
            eval_out=eval_out,
            manifest_out=manifest_out,
            limit_docs=limit_docs,
            limit_queries=limit_queries,
            retrieval=Retrieval(top_k=RANKING_TOP_K, similarity_threshold=threshold, max_context_tokens=max_tokens),
            embedding=Embedding(model=model) if model else None,
            reporter=reporter,
        )

    def rollback(
        self,
        name: str,
        to_version: int | None = None,
        *,
        timeout: float | None = 60.0,
        on_wait: Callable[[], None] | None = None,
        force: bool = False,
    ) -> RollbackResult:
        """Serve an earlier retained version again (default: the one before the current); nothing is re-embedded.

        Waits (calling `on_wait`) at most `timeout` seconds for an apply of the knowledge base to finish. A knowledge
        base a Sync manages is refused (ManagedError: its next pass would undo it) unless `force` (then
        `result.warnings` says so)."""
        from kbctl.engine.conditions import observe
        from kbctl.engine.eventlog import record, rolled_back
        from kbctl.engine.ownership import check_hand_change

        warnings = check_hand_change(self.db, [name], "rollback", force=force)
        result = self.db.rollback_kb(name, to_version, timeout=timeout, on_wait=on_wait)
        row = self.db.get_kb(name)
        if row is not None:
            observe(self.db, row)
        record(self.db, [rolled_back(name, result.from_version, result.to_version)])
        return result.model_copy(update={"warnings": warnings})

    def collect_garbage(self, batch: int = 1000) -> GcResult:
        """Delete cached vectors no chunk references, in batches (skipped while an apply runs)."""

        return self.db.collect_garbage(batch)

    # ---------------------------------------------------------------- reading

    @contextmanager
    def _reading(self, *, query: bool = False) -> Iterator[Database]:
        """Where a read goes: a pooled connection (a store opened with `pool_size`), else the read replica for a
        query (`_query_database`), else the store's own connection."""
        if self._pool is not None:
            with self._pool.borrow() as db:
                yield db
        else:
            yield self._query_database if query else self.db

    @staticmethod
    def _in_scope(db: Database, name: str, scope: Scope | None) -> None:
        """NotFoundError unless `name` exists and `scope` lets the caller see it: out of scope looks like absent."""
        row = db.get_kb(name)
        if row is None or (scope is not None and not scope(row.name, row.labels)):
            raise NotFoundError(f'knowledgebase "{name}" not found')

    def events(
        self, names: Sequence[str] | None = None, *, scope: Scope | None = None, limit: int | None = None
    ) -> list[KnowledgeBaseEvent]:
        """What happened to knowledge bases (those of `names`, else every one, deleted ones included), oldest
        first: publishes, failed reconciles, failing sources, rollbacks, deletions. `limit` keeps the newest.
        With `scope`, only events of knowledge bases that exist and that `scope` lets the caller see (not those of a
        Sync of the same name)."""

        if scope is not None:
            visible = {kb.name for kb in self.list(scope=scope)}
            names = [n for n in names if n in visible] if names is not None else sorted(visible)
        with self._reading() as db:
            return db.list_events(names, limit=limit, kind="KnowledgeBase" if scope is not None else None)

    def retrievals(
        self,
        *,
        knowledge_base: str | None = None,
        caller: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        nothing_relevant: bool = False,
        limit: int = 50,
        before: int | None = None,
        scope: Scope | None = None,
        reader: Reader | None = None,
    ) -> list[Retrieval]:
        """The retrieval log of `kbctl serve` (serve.retrievalLog), newest first, without results: at most `limit`
        runs (1 - 500) with an id below `before` (the next page), of `knowledge_base`, of `caller`, from `since`
        until `until`, only those that found nothing relevant with `nothing_relevant`. With `scope`, only the runs
        whose every knowledge base it lets the caller see; with `reader`, the hits counted are those it may read
        (kbctl.store.retrievals). ValueError for a limit out of bounds."""

        with self._reading() as db:
            return db.list_retrievals(
                knowledge_base=knowledge_base,
                caller=caller,
                since=since,
                until=until,
                nothing_relevant=nothing_relevant,
                limit=limit,
                before=before,
                scope=scope,
                reader=reader,
            )

    def retrieval(self, run_id: int, *, scope: Scope | None = None, reader: Reader | None = None) -> Retrieval:
        """One run of the retrieval log with its result and trace, as `scope` and `reader` may see it (the hits and
        trace entries of sources the reader may not read left out); NotFoundError when there is none, or it is
        out of scope."""

        with self._reading() as db:
            found = db.get_retrieval(run_id, scope=scope, reader=reader)
        if found is None:
            raise NotFoundError(f"retrieval {run_id} not found")
        return found

    def record_retrievals(self, runs: Sequence[NewRetrieval], *, max_result_bytes: int) -> None:
        """Record runs in the retrieval log (kbctl serve's writer thread), in one batch, each result cut to
        `max_result_bytes` of JSON (its hit texts shortened, then its trace entries dropped, and flagged)."""

        with self._writing() as db:
            db.record_retrievals(runs, max_result_bytes=max_result_bytes)

    def prune_retrievals(self, *, days: int, max_rows: int) -> int:
        """Delete the runs of the retrieval log older than `days` and beyond the newest `max_rows`; how many."""

        with self._writing() as db:
            return db.prune_retrievals(days=days, max_rows=max_rows)

    @contextmanager
    def _writing(self) -> Iterator[Database]:
        """Where a write of a pooled store goes: a pooled connection when the pool is the primary's, else the
        store's own connection (the pool of a store with a read replica reads the replica)."""
        if self._pool is not None and self.settings.query_database_url is None:
            with self._pool.borrow() as db:
                yield db
        else:
            yield self.db

    def syncs(self) -> list[SyncStatus]:
        """The Syncs recorded (git folders of manifests a controller keeps applied), by name, with what each last
        applied."""

        with self._reading() as db:
            return db.list_syncs()

    def describe_sync(self, name: str) -> SyncDetail:
        """A Sync in detail (`kbctl describe sync`): its spec, the commit it last applied and when, its last error,
        the knowledge bases it applied and its events (NotFoundError when there is none called `name`)."""
        from kbctl.engine.status import describe_sync

        with self._reading() as db:
            return describe_sync(db, name)

    def delete_sync(self, name: str) -> bool:
        """Stop and forget a Sync (the knowledge bases it applied stay); False when there was none called `name`."""

        return self.db.delete_sync(name)

    def list(
        self, selector: Selector | None = None, *, scope: Scope | None = None, reader: Reader | None = None
    ) -> list[KnowledgeBaseSummary]:
        """Every knowledge base (whose labels match `selector`, and that `scope` lets the caller see, when
        given), by name. With a `reader`, as that caller sees them: the counts of a knowledge base that restricts
        sources (`access`) are of what it may read."""
        from kbctl.engine.status import list_knowledge_bases

        with self._reading() as db:
            found = list_knowledge_bases(db, reader)
        return [
            s
            for s in found
            if (selector is None or selector.matches(s.labels)) and (scope is None or scope(s.name, s.labels))
        ]

    def resource(self, name: str) -> dict[str, Any]:
        """A knowledge base as a Kubernetes-style object (`kbctl get kb NAME -o yaml`): metadata, the applied spec
        with defaults, status. Applying its YAML again changes nothing."""
        from kbctl.engine.status import knowledge_base_resource

        return knowledge_base_resource(self.db, name)

    @staticmethod
    def resource_list(items: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """Several `resource` objects as one Kubernetes `List` (`kbctl get kb -o yaml`)."""
        from kbctl.engine.status import resource_list

        return resource_list(list(items))

    def describe(self, name: str, *, scope: Scope | None = None, reader: Reader | None = None) -> KnowledgeBaseDetail:
        """Spec in force, current version and per-source state of one knowledge base (NotFoundError outside
        `scope`). With a `reader`, as that caller sees it: the sources it may not read are left out, with their
        chunks, events and condition messages."""
        from kbctl.engine.status import describe_knowledge_base

        with self._reading() as db:
            if scope is not None:
                self._in_scope(db, name, scope)
            return describe_knowledge_base(db, name, reader)

    def query(
        self,
        name: str,
        question: str,
        options: QueryOptions | None = None,
        *,
        scope: Scope | None = None,
        reader: Reader | None = None,
        **overrides: Unpack[QueryOverrides],
    ) -> QueryResult:
        """The chunks most relevant to `question` (hybrid, vector or keyword; spec defaults for what is unset);
        `rerank` False skips the spec's reranker, True requires one; `explain` adds a per-stage trace of
        candidates, ranks, scores, cuts and timings. The overrides given (not None: top_k, threshold,
        max_tokens, mode, explain, rerank) replace those of `options`. Outside `scope` it is NotFoundError.

        `reader` is the caller's groups and claims (`Reader.of(["hr"])`): documents behind an `access` rule it
        does not meet are never candidates, so no hit, count, score or trace names them. None is a caller without
        any, who reads only documents without a rule."""
        from kbctl.query.options import QueryOptions

        options = QueryOptions.build(options, **overrides)
        with self._reading(query=True) as db:
            self._preload_model(db, name)
            from kbctl.query.retrieve import query_knowledge_base

            result = query_knowledge_base(
                db, name, question, self.embedder, options, reranker_for=self.reranker, visible=scope, reader=reader
            )
        return telemetry.traced(result)

    def query_many(
        self,
        question: str,
        options: QueryOptions | None = None,
        *,
        names: Sequence[str] = (),
        selector: Selector | None = None,
        scope: Scope | None = None,
        reader: Reader | None = None,
        on_member: Callable[[QueryResult], None] | None = None,
        **overrides: Unpack[QueryOverrides],
    ) -> FederatedResult:
        """Query several knowledge bases (`names`, or those matching `selector`, or every one with a published
        version in `scope`) and fuse their rankings into one by reciprocal rank (kbctl.query.federated). topK
        and the token budget apply to the fused list, by default the largest of the knowledge bases'. A name
        that does not exist, or is outside `scope`, is NotFoundError. `reader` as for `query`; `on_member` is
        given each knowledge base's own result (with its trace when explaining: kbctl serve's retrieval log)."""
        from kbctl.query.federated import query_many
        from kbctl.query.options import QueryOptions

        options = QueryOptions.build(options, **overrides)
        if names:
            with self._reading() as db:
                for name in names:
                    self._in_scope(db, name, scope)
            targets = list(names)
        else:
            targets = [kb.name for kb in self.list(selector, scope=scope) if kb.version is not None]

        def one(name: str) -> QueryResult:
            result = self.query(name, question, options, scope=scope, reader=reader)
            if on_member is not None:
                on_member(result)
            return result

        return query_many(question, targets, options, one)

    def context(
        self,
        name: str,
        question: str,
        options: QueryOptions | None = None,
        *,
        scope: Scope | None = None,
        reader: Reader | None = None,
        **overrides: Unpack[QueryOverrides],
    ) -> GroundedContext:
        """The block a model should receive for `question`: merged passages marked as reference data,
        or an explicit "no relevant context was found" block. The overrides given replace those of `options`;
        `reader` as for `query`."""
        from kbctl.query.context import build_context

        return build_context(self.query(name, question, options, scope=scope, reader=reader, **overrides))

    def ask(
        self,
        name: str,
        question: str,
        options: QueryOptions | None = None,
        *,
        model: str | None = None,
        on_text: Callable[[str], None] | None = None,
        scope: Scope | None = None,
        reader: Reader | None = None,
        **overrides: Unpack[QueryOverrides],
    ) -> AskResult:
        """Answer `question` from the knowledge base's passages through a chat model, citing them as [1], [2].

        When nothing passes the similarity threshold no model is called: the result has `answer` None and
        `reason` "noContext". The model is `model` (`provider/name` or `profile:NAME`), else the version's
        `spec.answer`, else the configuration's `chat.defaultModel`. With `on_text` the answer is streamed to
        it as it arrives. The retrieval overrides given replace those of `options`, and `reader` filters the
        passages, as for `query`. The database connection is given back before the model is called.
        """
        from kbctl.answer import answer_ask, prepare_ask
        from kbctl.query.options import QueryOptions

        options = QueryOptions.build(options, **overrides)
        with self._reading(query=True) as db:
            plan = prepare_ask(
                db,
                name,
                question,
                self.embedder,
                self.chat_model,
                options,
                model=model,
                default_model=self.settings.config.chat.default_model,
                reranker_for=self.reranker,
                visible=scope,
                reader=reader,
            )
        result = answer_ask(plan, on_text)
        telemetry.traced(result.retrieval)
        return result

    # ---------------------------------------------------------------- health

    def warm_up(self) -> None:
        """Load the default embedding model now, so the first query does not pay for it."""
        from kbctl.manifest.models import DEFAULT_MODEL

        self.embedder(DEFAULT_MODEL).embed(["warm up"], "query")

    def readiness(self) -> Readiness:
        """Whether queries can be served: the database answers, its schema is current, the model is loaded."""
        from kbctl.manifest.models import DEFAULT_MODEL

        if self._pool is not None:
            database, migrations = self._pool.schema_problem()
        else:
            database, migrations = "ok", self._query_database.schema_problem()
        model = "ok" if getattr(self.embedder(DEFAULT_MODEL), "loaded", True) else "not loaded yet"
        return Readiness(
            ready=database == migrations == model == "ok", database=database, migrations=migrations, model=model
        )

    def delete(
        self,
        name: str,
        *,
        timeout: float | None = 60.0,
        on_wait: Callable[[], None] | None = None,
        force: bool = False,
    ) -> DeleteResult:
        """Delete a knowledge base with everything only it used (versions, chunks, cached vectors).

        Takes the knowledge base's lock, so a running apply finishes first (it is not recreated half
        way); `on_wait` is called when that means waiting, `timeout` bounds the wait (StoreError). A knowledge
        base a Sync manages is refused (ManagedError: its next pass would create it again) unless `force` (then
        `result.warnings` says so).
        """
        from kbctl.engine.eventlog import deleted, record
        from kbctl.engine.ownership import check_hand_change

        warnings = check_hand_change(self.db, [name], "delete", force=force)
        with self.db.kb_lock(name, timeout=timeout, on_wait=on_wait):
            removed = self.db.delete_kb(name)
        if removed is None:
            raise NotFoundError(f'knowledgebase "{name}" not found')
        record(self.db, [deleted(name, "delete")])
        return DeleteResult(name=name, chunks=removed[0], vectors=removed[1], warnings=warnings)
