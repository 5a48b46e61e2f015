"""`kbctl eval`: measure a knowledge base's retrieval against an eval set (KnowledgeBaseStore.evaluate; the
logic in kbctl.eval, the wording in kbctl.cli.render)."""

from __future__ import annotations

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
from kbctl.defaults import EVAL_SET_NAME_CHARS
from kbctl.errors import KbctlError

if TYPE_CHECKING:
    from kbctl import EvalRun


class Mode(StrEnum):
    """Retrieval modes."""

    hybrid = "hybrid"
    vector = "vector"
    keyword = "keyword"
    hybrid_rerank = "hybrid+rerank"
    vector_rerank = "vector+rerank"
    keyword_rerank = "keyword+rerank"


def _recorded_name(filename: str, name: str | None) -> str:
    """The name --record keeps: the eval set's name:, else its file's name (never the path to it)."""
    from pathlib import PurePath

    if name is not None:
        return name
    if filename == "-":
        raise typer.BadParameter("an eval set read from stdin needs a name: to be recorded", param_hint="--record")
    base = PurePath(filename).name.rsplit("\\", 1)[-1]
    if len(base) > EVAL_SET_NAME_CHARS:
        raise typer.BadParameter(
            f"the eval set's file name is longer than {EVAL_SET_NAME_CHARS} characters: set a name: to record it",
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
    from kbctl import KnowledgeBaseStore, QueryOptions
    from kbctl.cli.render import eval_answers_text, eval_recorded_line, eval_text

    if not answers and (chat_model or judge_model or min_faithfulness is not None or min_refusal is not None):
        raise typer.BadParameter(
            "--chat-model, --judge-model, --min-faithfulness and --min-refusal need --answers", param_hint="--answers"
        )
    evalset = KnowledgeBaseStore.load_evalset(filename)
    recorded_as = _recorded_name(filename, evalset.name) if record else None
    target = name or evalset.knowledge_base
    if target is None:
        raise typer.BadParameter("give a knowledge base NAME or set knowledgeBase in the eval set", param_hint="NAME")
    reader = reader_of(as_group, as_claim)
    with open_store() as store:
        report = store.evaluate(
            target,
            evalset,
            k=k,
            modes=[m.value for m in mode] if mode else [None],
            options=QueryOptions(threshold=threshold, max_tokens=max_tokens),
            reader=reader,
            answers=answers,
            chat_models=chat_model or [None],
            judge=judge_model,
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
        say(eval_text(report, verbose))
        if report.answers:
            say(eval_answers_text(report, verbose))
    if runs:
        say(eval_recorded_line(runs, recorded_as or "", target), err=output is not None)
    if unrecorded is not None:
        raise unrecorded
    gates = report.shortfalls(
        min_recall=min_recall, min_ndcg=min_ndcg, min_faithfulness=min_faithfulness, min_refusal=min_refusal
    )
    for gate in gates:
        say(inert(gate.message), err=True)
    if gates:
        raise typer.Exit(1)
