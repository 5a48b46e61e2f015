"""Manifests, eval sets and datasets (`Evaluation`): `validate`, `explain`, `load_evalset`, `evaluate` and
`import_beir`, each a thin call of the library part that does the work. It builds on `Queries` and `Reconciling`:
an evaluation queries, and an import applies, through the store itself."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kbctl.client.reconcile import Reconciling
from kbctl.client.retrieval import Queries
from kbctl.defaults import BEIR_SPLIT, RANKING_MAX_TOKENS, RANKING_THRESHOLD, RANKING_TOP_K

if TYPE_CHECKING:
    from kbctl.engine.events import Reporter
    from kbctl.eval.beir import BeirImport
    from kbctl.eval.evalset import EvalSet
    from kbctl.eval.run import EvalReport
    from kbctl.inputs.access import Reader
    from kbctl.manifest import ManifestSet
    from kbctl.manifest.explain import FieldDoc
    from kbctl.query.options import QueryOptions

__all__ = ["Evaluation"]


class Evaluation(Queries, Reconciling):
    """Manifests, eval sets and datasets: validate, explain, eval and import beir, each a thin call of the library
    part that does the work (evaluation queries and applies through the store itself)."""

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
