"""Evaluation history: the results of `kbctl eval --record`, kept against the version of the knowledge base they
measured, so retrieval quality can be followed (and plotted) version after version.

One run is one retrieval mode of one evaluation: the version its queries read (the one serving when they ran,
as the query results name it: with a read replica, the replica's), the eval set's name (its `name:` or its file's
name, never a path), the mode and k measured, the caller it measured as, and its metrics. A run measured as a
caller with groups or claims (`--as-group`, `--as-claim`) keeps them, since it measured only what that caller
may read; a reader of the history sees such a run only when it holds every one of them itself (it may read all
that run read), so no figure reaches it from documents it may not read. A knowledge base keeps its newest
EVAL_RUNS_PER_KNOWLEDGE_BASE runs; they go with it when it is deleted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from psycopg.types.json import Jsonb
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from kbctl.defaults import EVAL_RUNS_PER_KNOWLEDGE_BASE
from kbctl.errors import NotFoundError, UsageError
from kbctl.inputs.access import Reader
from kbctl.store.knowledgebases import KnowledgeBases

__all__ = ["EVAL_SET_NAME_CHARS", "EvalMetrics", "EvalRun", "EvalRuns", "NewEvalRun"]

EVAL_SET_NAME_CHARS: Final = 200  # an eval set's recorded name: a file name or its `name:`


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class EvalMetrics(_Model):
    """The metrics of one mode over an eval set (means over its answerable queries; None: nothing to measure)."""

    answerable: int = Field(description="Queries with an expected answer.")
    no_answer_queries: int = Field(description="noAnswer queries: correct when nothing is returned.")
    recall: float | None = Field(description="Mean recall@k.")
    mrr: float | None = Field(description="Mean reciprocal rank within the top 10.")
    ndcg: float | None = Field(description="Mean nDCG@10.")
    hit_rate: float | None = Field(description="Share of queries with a relevant hit in the top k.")
    no_answer_accuracy: float | None = Field(description="Share of noAnswer queries that got no hit at all.")
    document_recall: float | None = Field(default=None, description="Mean recall@k over distinct sources.")
    document_ndcg: float | None = Field(default=None, description="Mean nDCG@10 over distinct sources.")


class EvalRun(_Model):
    """One recorded evaluation of one retrieval mode against one version of a knowledge base."""

    id: int
    knowledge_base: str
    version: int = Field(description="The version the mode's queries read.")
    at: datetime
    eval_set: str = Field(description="The eval set's `name:`, else its file's name.")
    questions: int
    mode: str = Field(description="The mode measured: hybrid, vector or keyword, with +rerank when reranked.")
    k: int = Field(description="The cut-off of recall@k and hit rate@k.")
    as_reader: bool = Field(
        description="Measured as one caller with groups or claims (--as-group, --as-claim): what it may not read "
        "counted as missed. False: as a caller without any, who reads only documents without an access rule."
    )
    reader_groups: list[str] | None = Field(default=None, description="The groups measured as.")
    reader_claims: list[str] | None = Field(default=None, description="The claims measured as, `name=value`.")
    metrics: EvalMetrics


@dataclass(frozen=True)
class NewEvalRun:
    """A run to record: one mode of an evaluation, measured as a caller with these groups and claim terms
    (`name=value`; none: a caller without any)."""

    version: int
    eval_set: str
    questions: int
    mode: str
    k: int
    metrics: EvalMetrics
    reader_groups: Sequence[str] = ()
    reader_claims: Sequence[str] = ()


def _check(run: NewEvalRun) -> None:
    name = run.eval_set
    if not name or len(name) > EVAL_SET_NAME_CHARS or any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise UsageError(f"an eval set's name must be 1-{EVAL_SET_NAME_CHARS} printable characters")
    if "/" in name or "\\" in name:
        raise UsageError(f"an eval set's name is a name, not a path: {name[:64]!r}")
    if run.version < 1 or run.k < 1 or run.questions < 0:
        raise UsageError("a run needs a version and k of at least 1")


_COLUMNS: Final = (
    "r.id, k.name AS knowledge_base, r.version, r.at, r.eval_set, r.questions, r.mode, r.k,"
    " r.reader_groups, r.reader_claims, r.metrics"
)


def _run(row: Sequence[Any]) -> EvalRun:
    groups, claims = row[8], row[9]
    return EvalRun(
        id=row[0],
        knowledge_base=row[1],
        version=row[2],
        at=row[3],
        eval_set=row[4],
        questions=row[5],
        mode=row[6],
        k=row[7],
        as_reader=bool(groups or claims),
        reader_groups=groups,
        reader_claims=claims,
        metrics=EvalMetrics.model_validate(row[10]),
    )


def _visible(run: EvalRun, reader: Reader) -> bool:
    """Whether `reader` may read everything the run's caller read: each of its groups and claims held."""
    return set(run.reader_groups or ()) <= reader.groups and set(run.reader_claims or ()) <= set(reader.claim_terms())


class EvalRuns(KnowledgeBases):
    """Recorded eval runs (kb_eval_runs)."""

    def record_eval_runs(
        self, name: str, runs: Sequence[NewEvalRun], *, keep: int = EVAL_RUNS_PER_KNOWLEDGE_BASE
    ) -> list[EvalRun]:
        """Record the runs of one evaluation of knowledge base `name` in one transaction, then drop its runs beyond
        the newest `keep`; the runs recorded, in order. NotFoundError when there is no such knowledge base; UsageError
        (nothing written) for an eval set name that is empty, too long, holds a control character or is a path."""
        if keep < 1:
            raise UsageError(f"keep must be at least 1, got {keep}")
        for run in runs:
            _check(run)
        conn = self._conn
        with conn.transaction():
            row = conn.execute("SELECT id FROM kb_knowledge_bases WHERE name = %s FOR SHARE", (name,)).fetchone()
            if row is None:
                raise NotFoundError(f'knowledgebase "{name}" not found')
            kb_id = int(row[0])
            ids = []
            for run in runs:
                groups, claims = sorted(set(run.reader_groups)) or None, sorted(set(run.reader_claims)) or None
                inserted = conn.execute(
                    "INSERT INTO kb_eval_runs (kb_id, version, eval_set, questions, mode, k,"
                    " reader_groups, reader_claims,"
                    " metrics) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
                    (
                        kb_id,
                        run.version,
                        run.eval_set,
                        run.questions,
                        run.mode,
                        run.k,
                        groups,
                        claims,
                        Jsonb(run.metrics.model_dump(mode="json", by_alias=True)),
                    ),
                ).fetchone()
                assert inserted is not None
                ids.append(int(inserted[0]))
            conn.execute(
                "DELETE FROM kb_eval_runs WHERE kb_id = %(kb)s AND id NOT IN"
                " (SELECT id FROM kb_eval_runs WHERE kb_id = %(kb)s ORDER BY at DESC, id DESC LIMIT %(keep)s)",
                {"kb": kb_id, "keep": keep},
            )
            rows = conn.execute(
                "SELECT " + _COLUMNS + " FROM kb_eval_runs r JOIN kb_knowledge_bases k ON k.id = r.kb_id"
                " WHERE r.id = ANY(%s) ORDER BY r.id",
                (ids,),
            ).fetchall()
        return [_run(r) for r in rows]

    def list_eval_runs(
        self, name: str, *, reader: Reader | None = None, limit: int = EVAL_RUNS_PER_KNOWLEDGE_BASE
    ) -> list[EvalRun]:
        """The recorded runs of knowledge base `name`, oldest first (at most `limit`, the newest). With a `reader`, only
        the runs measured as a caller whose groups and claims it all holds (those without any, at least). NotFoundError
        when there is no such knowledge base."""
        rows = self._conn.execute(
            "SELECT * FROM (SELECT " + _COLUMNS + " FROM kb_knowledge_bases k JOIN kb_eval_runs r ON r.kb_id = k.id"
            " WHERE k.name = %s ORDER BY r.at DESC, r.id DESC LIMIT %s) newest ORDER BY at, id",
            (name, limit),
        ).fetchall()
        if not rows and self.get_kb(name) is None:
            raise NotFoundError(f'knowledgebase "{name}" not found')
        runs = [_run(r) for r in rows]
        return runs if reader is None else [r for r in runs if _visible(r, reader)]
