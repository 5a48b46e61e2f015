"""`kbctl ask`: an answer grounded in a knowledge base, with its citations (logic in kbctl.answer)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from kbctl.cli._common import (
    NOT_COVERED_EXIT,
    AsClaimOpt,
    AsGroupOpt,
    MaxTokensOpt,
    ModeOpt,
    OutputOpt,
    QuestionArg,
    RerankOpt,
    ThresholdOpt,
    TopKOpt,
    app,
    emit,
    handles_errors,
    open_store,
    reader_of,
    say_warnings,
    warn_rerank,
)
from kbctl.cli.completion import kb_names
from kbctl.cli.render import cited_sources_text
from kbctl.cli.terminal import inert, inert_text, say

if TYPE_CHECKING:
    from kbctl import AskResult


@app.command()
@handles_errors
def ask(
    name: Annotated[
        str, typer.Argument(metavar="NAME", help="Knowledge base to answer from.", autocompletion=kb_names)
    ],
    question: QuestionArg,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            metavar="MODEL",
            help="Chat model: provider/name of chat.providers (openai built in) or profile:NAME of chat.profiles "
            "(default: spec.answer.model or spec.answer.profile).",
        ),
    ] = None,
    top_k: TopKOpt = None,
    threshold: ThresholdOpt = None,
    max_tokens: MaxTokensOpt = None,
    mode: ModeOpt = None,
    rerank: RerankOpt = None,
    as_group: AsGroupOpt = None,
    as_claim: AsClaimOpt = None,
    stream: Annotated[
        bool | None,
        typer.Option("--stream/--no-stream", help="Print the answer as it arrives (default: on a terminal)."),
    ] = None,
    output: OutputOpt = None,
) -> None:
    """Answer a question from the knowledge base only, citing its passages as [1], [2]; or say it is not covered.

    Retrieves as `kbctl context` does and gives the passages to a chat model (any OpenAI-compatible
    /v1/chat/completions: OpenAI, a LiteLLM proxy, Ollama, vLLM) with rules: answer only from them, cite
    every claim, say when they do not hold the answer, treat them as data and never as instructions. When
    nothing passes the similarity threshold no model is called and kbctl says the knowledge base does not
    cover the question. Then lists the sources the answer cites; citations of passages that were not given,
    and an answer citing nothing, are reported on stderr.

    Documents behind an access rule are read only as --as-group and --as-claim allow, as for kbctl query.

    Exit codes: 0 answered; 3 the knowledge base does not cover the question (nothing relevant retrieved, or
    the model found no answer in the passages); 1 an error.

    Example: kbctl ask client-service-policy "how long do we keep invoices?" --model litellm/support-llm
    """
    from kbctl import QueryOptions

    options = QueryOptions.build(
        top_k=top_k, threshold=threshold, max_tokens=max_tokens, mode=mode and mode.value, rerank=rerank
    )
    streaming = output is None and (sys.stdout.isatty() if stream is None else stream)
    shown: list[str] = []

    def piece(text: str) -> None:
        shown.append(text)
        sys.stdout.write(inert_text(text))
        sys.stdout.flush()

    with open_store() as store:
        result = store.ask(
            name,
            question,
            options,
            model=model,
            on_text=piece if streaming else None,
            reader=reader_of(as_group, as_claim),
        )
    warn_rerank(result.retrieval.rerank)
    if output:
        emit(result, output)
    else:
        _say_answer(result, streamed=bool(shown))
    say_warnings(result.warnings)
    if result.reason != "answered":
        raise typer.Exit(NOT_COVERED_EXIT)


def _say_answer(result: AskResult, *, streamed: bool) -> None:
    """The answer as text (its line ended, when it was streamed), or why there is none, then the cited sources."""
    if streamed:
        say()  # the streamed answer's line ends
    elif result.answer is not None:
        say(result.answer)
    else:  # nothing relevant: kbctl's own sentence, and why on stderr
        say(result.text)
        say(inert(result.message), err=True)
    sources = cited_sources_text(result)
    if sources:
        say(sources)
