"""`kbctl eval`: measure a knowledge base's retrieval against an eval set (logic in kbctl.eval)."""

from __future__ import annotations

import sys
from enum import StrEnum
from typing import Annotated

import typer

from kbctl.cli._common import OutputOpt, app, emit, handles_errors, open_store
from kbctl.cli.render import table
from kbctl.eval.evalset import load_evalset
from kbctl.eval.metrics import MRR_DEPTH, NDCG_DEPTH
from kbctl.eval.run import EvalReport, evaluate_store
from kbctl.query.options import QueryOptions


class Mode(StrEnum):
    """Retrieval modes."""

    hybrid = "hybrid"
    vector = "vector"
    keyword = "keyword"
    hybrid_rerank = "hybrid+rerank"
    vector_rerank = "vector+rerank"
    keyword_rerank = "keyword+rerank"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _print(report: EvalReport, verbose: bool) -> None:
    k = report.k
    headers = [
        "MODE",
        "QUERIES",
        f"RECALL@{k}",
        f"MRR@{MRR_DEPTH}",
        f"NDCG@{NDCG_DEPTH}",
        f"HIT@{k}",
        "NO-ANSWER",
        f"DOC-RECALL@{k}",
        f"DOC-NDCG@{NDCG_DEPTH}",
    ]
    rows = [
        [
            m.label,
            m.queries,
            _num(m.recall),
            _num(m.mrr),
            _num(m.ndcg),
            _num(m.hit_rate),
            _num(m.no_answer_accuracy),
            _num(m.document_recall),
            _num(m.document_ndcg),
        ]
        for m in report.modes
    ]
    typer.echo(table(headers, rows))
    first = report.modes[0]
    typer.echo(
        f"KnowledgeBase/{report.knowledge_base}: {first.queries} queries "
        f"({first.answerable} with an answer, {first.no_answer_queries} without)"
    )
    if not verbose:
        return
    for m in report.modes:
        misses = m.misses
        typer.echo(f"\nmisses in mode {m.label}: {len(misses) or 'none'}")
        for r in misses:
            got = ", ".join(r.retrieved) or "nothing"
            if r.no_answer:
                typer.echo(f"  {r.id}: expected no answer, got {got}")
            else:
                rank = f"first relevant at rank {r.relevant_ranks[0]}" if r.relevant_ranks else "no relevant hit"
                missing = ", ".join(r.missing_sources) or "-"
                typer.echo(f"  {r.id}: recall@{k} {_num(r.recall)}, {rank}; missing {missing}; got {got}")
            typer.echo(f"    {r.question}")


@app.command("eval")
@handles_errors
def evaluate(
    filename: Annotated[
        str, typer.Option("--filename", "-f", help="Eval set: YAML, or JSON Lines (one query per line); - for stdin.")
    ],
    name: Annotated[
        str | None, typer.Argument(help="Knowledge base to evaluate (default: the eval set's knowledgeBase).")
    ] = None,
    k: Annotated[int, typer.Option("--k", "-k", min=1, help="Cut-off of recall@k and hit rate@k.")] = 5,
    mode: Annotated[
        list[Mode] | None,
        typer.Option(
            "--mode",
            "-m",
            help="Retrieval mode to measure (repeatable; default: the spec's mode and reranker). "
            "A mode without +rerank is measured without the reranker.",
        ),
    ] = None,
    threshold: Annotated[
        float | None,
        typer.Option(
            "--threshold", min=-1.0, max=1.0, help="Similarity threshold (default: spec.retrieval.similarityThreshold)."
        ),
    ] = None,
    max_tokens: Annotated[
        int | None,
        typer.Option("--max-tokens", min=1, help="Token budget (default: spec.retrieval.maxContextTokens)."),
    ] = None,
    min_recall: Annotated[
        float | None, typer.Option("--min-recall", min=0.0, help="Exit 1 when mean recall@k is below this.")
    ] = None,
    min_ndcg: Annotated[
        float | None, typer.Option("--min-ndcg", min=0.0, help="Exit 1 when mean nDCG@10 is below this.")
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="List the queries that missed.")] = False,
    output: OutputOpt = None,
) -> None:
    """Measure retrieval quality against an eval set: recall@k, MRR@10, nDCG@10, hit rate@k, no-answer accuracy.

    Each question is asked with top-k 3 x max(k, 10) (at most 200) and the spec's threshold and token
    budget (or --threshold / --max-tokens), once per --mode. A hit is relevant when it comes from one of
    the query's expectedSources or contains one of its expectedText (any case); hits from its
    ignoredSources are left out; a noAnswer query is correct when nothing is returned. DOC-RECALL and
    DOC-NDCG rank sources instead of chunks (each at its best chunk), like published BEIR figures.
    Exits 1 when a mode falls below --min-recall or --min-ndcg, so CI can gate on retrieval quality.

    Example: kbctl eval client-service-policy -f examples/eval/client-service-policy.yaml -m hybrid -m vector
    """
    evalset = load_evalset(filename, stdin=sys.stdin)
    target = name or evalset.knowledge_base
    if target is None:
        raise typer.BadParameter("give a knowledge base NAME or set knowledgeBase in the eval set", param_hint="NAME")
    with open_store() as store:
        report = evaluate_store(
            store,
            target,
            evalset,
            k=k,
            modes=[m.value for m in mode] if mode else [None],
            options=QueryOptions(threshold=threshold, max_tokens=max_tokens),
        )
    if output:
        emit(report, output)
    else:
        _print(report, verbose)
    shortfalls = report.shortfalls(min_recall=min_recall, min_ndcg=min_ndcg)
    for s in shortfalls:
        typer.echo(s.message, err=True)
    if shortfalls:
        raise typer.Exit(1)
