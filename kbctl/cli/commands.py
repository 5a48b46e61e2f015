"""The read and maintenance commands: refresh, validate, schema, get, describe, query, delete, server, version."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from kbctl._version import __version__
from kbctl.cli._common import (
    Files,
    KbName,
    LockTimeoutOpt,
    ModeOpt,
    Output,
    OutputOpt,
    Recursive,
    RerankOpt,
    Resource,
    app,
    check_resource,
    config_app,
    emit,
    handles_errors,
    open_store,
    parse_duration,
    say_waiting,
    server_app,
    state,
    warn_rerank,
)

# Each command imports the library parts it needs when it runs: `kbctl --help` and `kbctl version` load none.


@app.command()
@handles_errors
def refresh(
    resource: Resource,
    name: Annotated[str | None, typer.Argument(metavar="NAME", help="Knowledge base to refresh (or --all).")] = None,
    source: Annotated[
        list[str] | None,
        typer.Option("--source", "-s", metavar="SOURCE", help="Refresh only this source (repeatable)."),
    ] = None,
    all_kbs: Annotated[bool, typer.Option("--all", help="Refresh every knowledge base.")] = False,
    output: OutputOpt = None,
) -> None:
    """Re-fetch URL sources and publish a new version only if some page's text changed.

    Sends If-None-Match / If-Modified-Since from the last fetch; a 304, or a page whose extracted text
    is unchanged, costs no chunking or embedding. A page that fails keeps serving its last good content
    (shown as stale by describe) and makes the command exit 1. Nothing refreshes by itself: run this
    from CI or cron.
    """
    check_resource(resource)
    if (name is None) != all_kbs:
        raise typer.BadParameter("give a knowledge base NAME or --all (not both)", param_hint="NAME")
    from kbctl.cli.progress import CliReporter

    reporter = CliReporter(quiet=output is not None)
    with open_store() as store:
        try:
            report = store.refresh(None if all_kbs else [str(name)], sources=source or (), reporter=reporter)
        finally:
            reporter.close()
    if output:
        emit(report, output)
    if report.failed:
        raise typer.Exit(1)


@app.command()
@handles_errors
def validate(filename: Files, recursive: Recursive = False) -> None:
    """Check manifests without touching any database; print one line per problem (file:line: field: ...)."""
    from kbctl.manifest import load_manifests

    manifests = load_manifests(filename, recursive=recursive, stdin=sys.stdin)
    for m in manifests:
        typer.echo(f"{m.path}:{m.line}: KnowledgeBase/{m.kb.name} valid")


@app.command()
def schema() -> None:
    """Print the JSON Schema of the KnowledgeBase manifest (for editors and CI linters)."""
    from kbctl.manifest import json_schema

    typer.echo(json.dumps(json_schema(), indent=2))


@app.command()
@handles_errors
def get(
    resource: Resource,
    name: Annotated[
        str | None,
        typer.Argument(
            metavar="NAME",
        ),
    ] = None,
    output: OutputOpt = None,
) -> None:
    """List knowledge bases: name, Ready condition, current version, sources ready/total, chunks, age."""
    from kbctl.cli.render import knowledge_base_table

    check_resource(resource)
    with open_store() as store:
        items = [store.describe(name)] if name else store.list()
    if output:
        emit(items[0] if name else items, output)
        return
    if not items:
        typer.echo("No knowledge bases found.", err=True)
        return
    typer.echo(knowledge_base_table(items))


@app.command()
@handles_errors
def describe(resource: Resource, name: KbName, output: OutputOpt = None) -> None:
    """Show a knowledge base in detail: spec in force, current version, and the state of every source."""
    from kbctl.cli.render import describe_text

    check_resource(resource)
    with open_store() as store:
        d = store.describe(name)
    if output:
        emit(d, output)
        return
    typer.echo(describe_text(d))


@app.command()
@handles_errors
def query(
    name: Annotated[str, typer.Argument(metavar="NAME", help="Knowledge base to search.")],
    question: Annotated[str, typer.Argument(metavar="QUESTION", help="The question, in natural language.")],
    top_k: Annotated[
        int | None,
        typer.Option("--top-k", metavar="N", min=1, help="Candidates to consider (default: spec.retrieval.topK)."),
    ] = None,
    threshold: Annotated[
        float | None,
        typer.Option(
            "--threshold",
            metavar="SCORE",
            min=-1.0,
            max=1.0,
            help="Minimum cosine similarity (default: spec.retrieval.similarityThreshold).",
        ),
    ] = None,
    max_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-tokens",
            metavar="N",
            min=1,
            help="Token budget of the returned context (default: spec.retrieval.maxContextTokens).",
        ),
    ] = None,
    mode: ModeOpt = None,
    explain: Annotated[
        bool, typer.Option("--explain", help="Show each stage's candidates, ranks, scores, cuts and timings.")
    ] = False,
    rerank: RerankOpt = None,
    output: OutputOpt = None,
) -> None:
    """Retrieve the chunks most relevant to a question, in rank order, within threshold and token budget.

    When nothing passes the similarity threshold, says so plainly instead of returning weak matches.
    With spec.retrieval.rerank, the best candidates are reordered by the reranker first; if it fails,
    the answer comes in fused order with a warning on stderr.

    Example: kbctl query client-service-policy "how long do we keep invoices?" --explain
    """
    from kbctl.query.options import QueryOptions

    options = QueryOptions.build(
        top_k=top_k,
        threshold=threshold,
        max_tokens=max_tokens,
        mode=mode and mode.value,
        explain=explain,
        rerank=rerank,
    )
    with open_store() as store:
        result = store.query(name, question, options)
    warn_rerank(result.rerank)
    if output:
        emit(result, output)
        return
    for hit in result.hits:
        where = " > ".join(hit.heading_path) or "(no heading)"
        rerank_score = "" if hit.rerank_score is None else f" | rerank {hit.rerank_score:.3f}"
        typer.echo(
            f"{hit.rank}. {hit.source} | {where} | chunk {hit.position} | score {hit.score:.3f}{rerank_score} | "
            f"{hit.tokens} tokens"
        )
        typer.echo("   " + hit.text.replace("\n", "\n   "))
        typer.echo("")
    typer.echo(result.message)
    for stage in result.trace or []:
        typer.echo(f"\n{stage.stage} ({stage.ms:.1f} ms)")
        for e in stage.entries[:15]:
            typer.echo(f"  {e.rank:>3}. {e.source} chunk {e.position}  score {e.score:.3f}  {e.detail}".rstrip())
        if len(stage.entries) > 15:
            typer.echo(f"  ... {len(stage.entries) - 15} more (all of them with -o json)")


@app.command()
@handles_errors
def context(
    name: Annotated[str, typer.Argument(metavar="NAME", help="Knowledge base to search.")],
    question: Annotated[str, typer.Argument(metavar="QUESTION", help="The question, in natural language.")],
    top_k: Annotated[int | None, typer.Option("--top-k", metavar="N", min=1, help="Chunks to keep at most.")] = None,
    threshold: Annotated[
        float | None, typer.Option("--threshold", metavar="SCORE", min=-1.0, max=1.0, help="Minimum cosine similarity.")
    ] = None,
    max_tokens: Annotated[int | None, typer.Option("--max-tokens", metavar="N", min=1, help="Token budget.")] = None,
    mode: ModeOpt = None,
    rerank: RerankOpt = None,
    output: OutputOpt = None,
) -> None:
    """Print the grounded context block for a question, ready to put in a model's prompt.

    Passages are tagged with source, title, origin, section and character range, marked as reference
    data and not instructions, and escaped so their text cannot break out of the block. Neighbouring
    chunks of one source are merged so their overlap is sent once. When nothing passes the threshold
    the block says plainly that no relevant context was found.
    """
    from kbctl.query.options import QueryOptions

    options = QueryOptions.build(
        top_k=top_k, threshold=threshold, max_tokens=max_tokens, mode=mode and mode.value, rerank=rerank
    )
    with open_store() as store:
        grounded = store.context(name, question, options)
    warn_rerank(grounded.rerank)
    if output:
        emit(grounded, output)
    else:
        typer.echo(grounded.block)


@app.command()
@handles_errors
def delete(resource: Resource, name: KbName, timeout: LockTimeoutOpt = "1m") -> None:
    """Delete a knowledge base with its versions, chunks, and the cached vectors no other one uses.

    An apply of it that is running finishes first (it is never recreated half way).
    """
    check_resource(resource)
    with open_store() as store:
        result = store.delete(name, timeout=parse_duration(timeout), on_wait=say_waiting(name))
    typer.echo(f"KnowledgeBase/{result.name} deleted ({result.chunks} chunks, {result.vectors} vectors)")


@server_app.command("status")
@handles_errors
def server_status_cmd(output: OutputOpt = None) -> None:
    """Say whether the embedded PostgreSQL runs, its pid and connection URL."""
    from kbctl.config import Settings
    from kbctl.store.embedded import server_status

    status = server_status(Settings.from_env().pgdata)
    if output:
        emit(status.__dict__, output)
    elif status.running:
        typer.echo(f"running (pid {status.pid}) in {status.pgdata}: {status.url}")
    else:
        typer.echo(f"not running ({status.pgdata})")


@server_app.command("stop")
@handles_errors
def server_stop() -> None:
    """Stop the embedded PostgreSQL (the next command that needs it starts it again)."""
    from kbctl.config import Settings
    from kbctl.store.embedded import stop_server

    pgdata = Settings.from_env().pgdata
    typer.echo("stopped" if stop_server(pgdata) else f"not running ({pgdata})")


@config_app.command("view")
@handles_errors
def config_view(output: OutputOpt = None) -> None:
    """Show the effective configuration (file, environment, defaults) with secrets redacted.

    API keys are never shown: each provider names the variable that holds its key and says whether it
    is set. A database password (in the URL, a ?password= parameter or a conninfo password=), and
    credentials and key or token parameters in a provider's baseURL, are replaced by ***. Also shows
    the network allowances of URL sources (allowPrivateNetworks, allowNetworks). YAML by default, or
    -o json.
    """
    from kbctl.config import Settings, effective_config

    emit(effective_config(Settings.from_env(database_url=state["database_url"])), output or Output.yaml)


@app.command()
def version() -> None:
    """Print the kbctl version."""
    typer.echo(f"kbctl {__version__}")
