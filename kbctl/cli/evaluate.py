"""`kbctl eval`: measure a knowledge base's retrieval against an eval set (logic in kbctl.eval)."""

from __future__ import annotations

import sys
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

from kbctl.cli._common import (
    AsClaimOpt,
    AsGroupOpt,
    MaxTokensOpt,
    OutputOpt,
    ThresholdOpt,
    app,
    choices,
    emit,
    handles_errors,
    open_store,
    reader_of,
)
from kbctl.cli.completion import kb_names
from kbctl.cli.terminal import inert, say
from kbctl.errors import KbctlError

if TYPE_CHECKING:
    from kbctl import EvalRun
    from kbctl.eval.answers import AnswerReport
    from kbctl.eval.run import EvalReport


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
    from kbctl.cli.render import table
    from kbctl.eval.metrics import MRR_DEPTH, NDCG_DEPTH

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
    say(table(headers, rows))
    first = report.modes[0]
    say(
        f"KnowledgeBase/{report.knowledge_base}: {first.queries} queries "
        f"({first.answerable} with an answer, {first.no_answer_queries} without)"
    )
    if not verbose:
        return
    for m in report.modes:
        misses = m.misses
        say(f"\nmisses in mode {m.label}: {len(misses) or 'none'}")
        for r in misses:
            got = ", ".join(r.retrieved) or "nothing"
            if r.no_answer:
                say(inert(f"  {r.id}: expected no answer, got {got}"))
            else:
                rank = f"first relevant at rank {r.relevant_ranks[0]}" if r.relevant_ranks else "no relevant hit"
                missing = ", ".join(r.missing_sources) or "-"
                say(inert(f"  {r.id}: recall@{k} {_num(r.recall)}, {rank}; missing {missing}; got {got}"))
            say("    " + inert(r.question))


def _print_answers(reports: list[AnswerReport], verbose: bool) -> None:
    from kbctl.cli.render import table

    headers = [
        "CHAT MODEL",
        "ANSWERED",
        "REFUSED",
        "CITATIONS-VALID",
        "UNCITED",
        "MUST-CONTAIN",
        "FAITHFUL",
        "UNSUPPORTED",
        "CONTRADICTED",
        "ERRORS",
    ]
    rows = [
        [
            r.label,
            _num(r.answered),
            _num(r.refused),
            _num(r.citation_validity),
            r.uncited_answers,
            _num(r.must_contain),
            _num(r.faithfulness),
            r.unsupported_claims if r.judge else "-",
            r.contradicted_claims if r.judge else "-",
            r.errors,
        ]
        for r in reports
    ]
    say("")
    say(table(headers, rows))
    judge = reports[0].judge
    say(f"answers judged by {judge}" if judge else "faithfulness not measured: no --judge-model (chat.judgeModel)")
    if not verbose:
        return
    for r in reports:
        misses = r.misses
        say(f"\nanswer misses with {r.label}: {len(misses) or 'none'}")
        for o in misses:
            if o.error is not None:
                why = f"error: {o.error}"
            elif o.no_answer:
                why = "expected 'not covered', got an answer"
            elif o.refused:
                why = f"answered 'not covered' ({o.reason})"
            else:
                parts = []
                if o.invalid_citations:
                    parts.append("cites " + ", ".join(f"[{i}]" for i in o.invalid_citations) + " (not given)")
                if o.uncited:
                    parts.append("cites nothing")
                if o.must_contain_missing:
                    parts.append("lacks " + ", ".join(repr(m) for m in o.must_contain_missing))
                bad = [c for c in o.claims or [] if c.verdict != "supported"]
                parts.extend(f"{c.verdict}: {c.claim}" for c in bad)
                why = "; ".join(parts)
            say(inert(f"  {o.id}: {why}"))
            say("    " + inert(o.question))


def _recorded_name(filename: str, name: str | None) -> str:
    """The name --record keeps: the eval set's name:, else its file's name (never the path to it)."""
    from pathlib import PurePath

    from kbctl.eval.evalset import NAME_MAX_CHARS

    if name is not None:
        return name
    if filename == "-":
        raise typer.BadParameter("an eval set read from stdin needs a name: to be recorded", param_hint="--record")
    base = PurePath(filename).name.rsplit("\\", 1)[-1]
    if len(base) > NAME_MAX_CHARS:
        raise typer.BadParameter(
            f"the eval set's file name is longer than {NAME_MAX_CHARS} characters: set a name: to record it",
            param_hint="--record",
        )
    return base


@app.command("eval")
@handles_errors
def evaluate(
    filename: Annotated[
        str,
        typer.Option(
            "--filename", "-f", metavar="FILE", help="Eval set: YAML, or JSON Lines (one query per line); - for stdin."
        ),
    ],
    name: Annotated[
        str | None,
        typer.Argument(
            metavar="NAME",
            help="Knowledge base to evaluate (default: the eval set's knowledgeBase).",
            autocompletion=kb_names,
        ),
    ] = None,
    k: Annotated[int, typer.Option("--k", "-k", metavar="K", min=1, help="Cut-off of recall@k and hit rate@k.")] = 5,
    mode: Annotated[
        list[Mode] | None,
        typer.Option(
            "--mode",
            "-m",
            metavar=choices(Mode),
            help="Retrieval mode to measure (repeatable; default: the spec's mode and reranker). "
            "A mode without +rerank is measured without the reranker.",
        ),
    ] = None,
    threshold: ThresholdOpt = None,
    max_tokens: MaxTokensOpt = None,
    min_recall: Annotated[
        float | None,
        typer.Option("--min-recall", metavar="RATIO", min=0.0, help="Exit 1 when mean recall@k is below this."),
    ] = None,
    min_ndcg: Annotated[
        float | None,
        typer.Option("--min-ndcg", metavar="SCORE", min=0.0, help="Exit 1 when mean nDCG@10 is below this."),
    ] = None,
    answers: Annotated[
        bool, typer.Option("--answers", help="Also ask every question (kbctl ask) and measure the answers.")
    ] = False,
    chat_model: Annotated[
        list[str] | None,
        typer.Option(
            "--chat-model",
            metavar="MODEL",
            help="Chat model to measure with --answers (repeatable; default: spec.answer or chat.defaultModel).",
        ),
    ] = None,
    judge_model: Annotated[
        str | None,
        typer.Option(
            "--judge-model",
            metavar="MODEL",
            help="Chat model judging faithfulness (default: chat.judgeModel; none: skip).",
        ),
    ] = None,
    min_faithfulness: Annotated[
        float | None,
        typer.Option(
            "--min-faithfulness", metavar="RATIO", min=0.0, max=1.0, help="Exit 1 when mean faithfulness is below this."
        ),
    ] = None,
    min_refusal: Annotated[
        float | None,
        typer.Option(
            "--min-refusal",
            metavar="RATIO",
            min=0.0,
            max=1.0,
            help="Exit 1 when the share of noAnswer questions refused is below this.",
        ),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="List the queries that missed.")] = False,
    record: Annotated[
        bool,
        typer.Option(
            "--record",
            help="Keep each mode's results in the store against the version its queries read, under the eval set's "
            "name: or its file's name (the history: the console and the Python API's eval_history).",
        ),
    ] = False,
    output: OutputOpt = None,
    as_group: AsGroupOpt = None,
    as_claim: AsClaimOpt = None,
) -> None:
    """Measure retrieval quality against an eval set: recall@k, MRR@10, nDCG@10, hit rate@k, no-answer accuracy.

    Each question is asked with top-k 3 x max(k, 10) (at most 200) and the spec's threshold and token
    budget (or --threshold / --max-tokens), once per --mode. A hit is relevant when it comes from one of
    the query's expectedSources or contains one of its expectedText (any case); hits from its
    ignoredSources are left out; a noAnswer query is correct when nothing is returned. DOC-RECALL and
    DOC-NDCG rank sources instead of chunks (each at its best chunk), like published BEIR figures.
    Exits 1 when a mode falls below --min-recall or --min-ndcg, so CI can gate on retrieval quality.

    With --answers, every question is also asked as `kbctl ask` does, once per --chat-model, and the answers
    are measured apart from retrieval: ANSWERED (answerable questions that got an answer), REFUSED (noAnswer
    questions answered "not covered"), CITATIONS-VALID (citations naming a passage that was given), UNCITED
    answers, MUST-CONTAIN (the queries' mustContain strings found in the answers) and, with a judge model,
    FAITHFUL (the mean share of each answer's claims the judge finds supported by the passages) with the
    unsupported and contradicted claims counted. --min-faithfulness and --min-refusal gate on them.

    --as-group / --as-claim measure as one caller (document-level access): a source behind a rule it does not
    pass is never retrieved, so it counts as missed. Without them, the caller has no groups.

    --record keeps each mode's retrieval metrics in the store, against the version of the knowledge base its
    queries read, under the eval set's name: (else its file's name), with the caller measured as; the gates
    still apply. An eval set read from stdin needs a name: to be recorded.

    Example: kbctl eval client-service-policy -f examples/eval/client-service-policy.yaml -m hybrid -m vector
    """
    from kbctl import QueryOptions
    from kbctl.eval.answers import answer_shortfalls, evaluate_answers
    from kbctl.eval.evalset import load_evalset
    from kbctl.eval.run import evaluate_store

    if not answers and (chat_model or judge_model or min_faithfulness is not None or min_refusal is not None):
        raise typer.BadParameter(
            "--chat-model, --judge-model, --min-faithfulness and --min-refusal need --answers", param_hint="--answers"
        )
    evalset = load_evalset(filename, stdin=sys.stdin)
    recorded_as = _recorded_name(filename, evalset.name) if record else None
    target = name or evalset.knowledge_base
    if target is None:
        raise typer.BadParameter("give a knowledge base NAME or set knowledgeBase in the eval set", param_hint="NAME")
    reader = reader_of(as_group, as_claim)
    with open_store() as store:
        report = evaluate_store(
            store,
            target,
            evalset,
            k=k,
            modes=[m.value for m in mode] if mode else [None],
            options=QueryOptions(threshold=threshold, max_tokens=max_tokens),
            reader=reader,
        )
        if answers:
            report.answers = evaluate_answers(
                store,
                target,
                evalset,
                models=chat_model or [None],
                judge=judge_model or store.settings.config.chat.judge_model,
                options=QueryOptions(threshold=threshold, max_tokens=max_tokens),
                reader=reader,
            )
        runs: list[EvalRun] = []
        unrecorded: KbctlError | None = None
        if recorded_as is not None:
            try:
                runs = store.record_eval(target, report, eval_set=recorded_as)
            except KbctlError as error:  # the report is still printed first
                unrecorded = error
    if output:
        emit(report, output)
    else:
        _print(report, verbose)
        if report.answers:
            _print_answers(report.answers, verbose)
    if runs:
        versions = ", ".join(str(v) for v in dict.fromkeys(r.version for r in runs))
        what = f"{len(runs)} run{'s' if len(runs) != 1 else ''} of eval set {recorded_as}"
        say(inert(f"recorded {what} against KnowledgeBase/{target} version {versions}"), err=output is not None)
    if unrecorded is not None:
        raise unrecorded
    messages = [s.message for s in report.shortfalls(min_recall=min_recall, min_ndcg=min_ndcg)]
    if report.answers:
        gates = answer_shortfalls(report.answers, min_faithfulness=min_faithfulness, min_refusal=min_refusal)
        messages += [s.message for s in gates]
    for message in messages:
        say(inert(message), err=True)
    if messages:
        raise typer.Exit(1)
