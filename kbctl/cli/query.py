"""`kbctl query` and `kbctl context`: retrieve the chunks most relevant to a question (from one knowledge base or
several, fused), or the grounded context block made of them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from kbctl.cli._common import (
    NOT_COVERED_EXIT,
    AllOpt,
    AsClaimOpt,
    AsGroupOpt,
    ListSelectorOpt,
    MaxTokensOpt,
    ModeOpt,
    NothingFoundExitOpt,
    Output,
    OutputOpt,
    QuestionArg,
    RerankOpt,
    ThresholdOpt,
    TopKOpt,
    app,
    emit,
    handles_errors,
    list_selector,
    open_store,
    reader_of,
    warn_rerank,
)
from kbctl.cli.completion import kb_names, query_names
from kbctl.cli.terminal import inert, say

if TYPE_CHECKING:
    from kbctl import QueryOptions
    from kbctl.inputs.access import Reader


@app.command()
@handles_errors
def query(
    args: Annotated[
        list[str],
        typer.Argument(
            metavar="NAME[,NAME...] QUESTION",
            help="The knowledge base (several, comma-separated, for one fused ranking) and the question. With --all "
            "or -l, the question alone.",
            show_default=False,
            autocompletion=query_names,
        ),
    ],
    top_k: TopKOpt = None,
    threshold: ThresholdOpt = None,
    max_tokens: MaxTokensOpt = None,
    mode: ModeOpt = None,
    explain: Annotated[
        bool, typer.Option("--explain", help="Show each stage's candidates, ranks, scores, cuts and timings.")
    ] = False,
    rerank: RerankOpt = None,
    all_kbs: AllOpt = False,
    selector: ListSelectorOpt = None,
    as_group: AsGroupOpt = None,
    as_claim: AsClaimOpt = None,
    exit_code: NothingFoundExitOpt = False,
    output: OutputOpt = None,
) -> None:
    """Retrieve the chunks most relevant to a question, in rank order, within threshold and token budget.

    When nothing passes the similarity threshold, says so plainly instead of returning weak matches
    (with --exit-code, exit 3, so a script need not parse the output).
    With spec.retrieval.rerank, the best candidates are reordered by the reranker first; if it fails,
    the answer comes in fused order with a warning on stderr.

    Several knowledge bases (NAME,NAME), every one with a published version (--all), or those whose labels match
    (-l) are each queried with their own model and threshold, and their rankings fused into one by reciprocal
    rank; topK and the token budget apply to the fused list (by default the largest of theirs). Each hit names
    its knowledge base; one without a published version is said, not fatal.

    Documents behind an access rule (spec.access, spec.sources[].access) are retrieved only for the groups and
    claims given by --as-group and --as-claim: a caller without them reads only documents without a rule.

    \b
    Examples:
      kbctl query client-service-policy "how long do we keep invoices?" --explain
      kbctl query hr-handbook "what does salary band E4 pay?" --as-group hr-managers
      kbctl query client-service-policy,data-handling-policy "how long do we keep invoices?"
      kbctl query --all "how long do we keep invoices?"
    """
    from kbctl import QueryOptions
    from kbctl.cli.render import fused_hit_lines, not_queried_lines

    names, question = _query_targets(args, all_kbs, selector)
    reader = reader_of(as_group, as_claim)
    options = QueryOptions.build(
        top_k=top_k,
        threshold=threshold,
        max_tokens=max_tokens,
        mode=mode and mode.value,
        explain=explain,
        rerank=rerank,
    )
    if len(names) == 1:
        _query_one(names[0], question, options, reader, output, exit_code=exit_code)
        return
    if explain:
        raise typer.BadParameter("--explain traces one knowledge base: name one", param_hint="'--explain'")
    with open_store() as store:
        fused = store.query_many(question, options, names=names, selector=list_selector(selector, ()), reader=reader)
    if output:
        emit(fused, output)
    else:
        for line in fused_hit_lines(fused):
            say(line)
        for line in not_queried_lines(fused):
            say(line, err=True)
        say(inert(fused.message))
    if exit_code and not fused.hits:
        raise typer.Exit(NOT_COVERED_EXIT)


def _query_one(
    name: str, question: str, options: QueryOptions, reader: Reader, output: Output | None, *, exit_code: bool
) -> None:
    """`kbctl query` of one knowledge base: its hits in rank order (with --exit-code, exit 3 when there are none)."""
    from kbctl.cli.render import hits_text

    with open_store() as store:
        result = store.query(name, question, options, reader=reader)
    warn_rerank(result.rerank)
    if output:
        emit(result, output)
    else:
        say(hits_text(result))
    if exit_code and not result.hits:
        raise typer.Exit(NOT_COVERED_EXIT)


def _query_targets(args: list[str], all_kbs: bool, selector: str | None) -> tuple[list[str], str]:
    """(names, question) from query's arguments: NAME[,NAME...] QUESTION, or QUESTION with --all or -l (no names:
    every knowledge base in question)."""
    everything = all_kbs or selector is not None
    if all_kbs and selector is not None:
        raise typer.BadParameter("give --all or a label selector, not both", param_hint="'--all'")
    if len(args) != (1 if everything else 2):
        wanted = "QUESTION (with --all or -l)" if everything else "NAME[,NAME...] QUESTION"
        raise typer.BadParameter(f"expected {wanted}, got {len(args)} argument(s)", param_hint="NAME QUESTION")
    if everything:
        return [], args[0]
    names = [n for n in args[0].split(",") if n]
    if not names:
        raise typer.BadParameter("name a knowledge base", param_hint="NAME")
    return list(dict.fromkeys(names)), args[1]


@app.command()
@handles_errors
def context(
    name: Annotated[str, typer.Argument(metavar="NAME", help="Knowledge base to search.", autocompletion=kb_names)],
    question: QuestionArg,
    top_k: TopKOpt = None,
    threshold: ThresholdOpt = None,
    max_tokens: MaxTokensOpt = None,
    mode: ModeOpt = None,
    rerank: RerankOpt = None,
    as_group: AsGroupOpt = None,
    as_claim: AsClaimOpt = None,
    exit_code: NothingFoundExitOpt = False,
    output: OutputOpt = None,
) -> None:
    """Print the grounded context block for a question, ready to put in a model's prompt.

    Passages are tagged with source, title, origin, section and character range, marked as reference
    data and not instructions, and escaped so their text cannot break out of the block. Neighbouring
    chunks of one source are merged so their overlap is sent once. When nothing passes the threshold
    the block says plainly that no relevant context was found (with --exit-code, exit 3). Documents behind an
    access rule are read only as --as-group and --as-claim allow, as for kbctl query.
    """
    from kbctl import QueryOptions

    options = QueryOptions.build(
        top_k=top_k, threshold=threshold, max_tokens=max_tokens, mode=mode and mode.value, rerank=rerank
    )
    with open_store() as store:
        grounded = store.context(name, question, options, reader=reader_of(as_group, as_claim))
    warn_rerank(grounded.rerank)
    if output:
        emit(grounded, output)
    else:
        say(grounded.block)
    if exit_code and not grounded.found:
        raise typer.Exit(NOT_COVERED_EXIT)
