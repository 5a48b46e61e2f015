"""A knowledge base's retained versions (`VersionHistory`): `history`, what changed between two (`version_diff`) or
in each (`version_changes`), and the evaluations recorded against them (`record_eval`, `eval_history`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kbctl.client._base import Scope, StoreBase
from kbctl.errors import KbctlError, UsageError

if TYPE_CHECKING:
    from kbctl.eval.run import EvalReport
    from kbctl.inputs.access import Reader
    from kbctl.store.evalruns import EvalRun
    from kbctl.store.history import VersionInfo
    from kbctl.store.versiondiff import DiffBounds, VersionChange, VersionDiff

__all__ = ["VersionHistory"]


class VersionHistory(StoreBase):
    """A knowledge base's retained versions, what changed between them and the evaluations recorded of each."""

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
