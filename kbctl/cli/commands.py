"""The read and maintenance commands: refresh, validate, schema, get, describe, query, delete, server, version."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from kbctl._version import __version__
from kbctl.cli._common import (
    COMPLETE_VAR,
    EVENT_RESOURCES,
    NOT_COVERED_EXIT,
    AllOpt,
    DryRun,
    DryRunOpt,
    Files,
    KbName,
    ListSelectorOpt,
    LockTimeoutOpt,
    MaxTokensOpt,
    ModeOpt,
    NothingFoundExitOpt,
    ObjectOutputOpt,
    OptionalFiles,
    Output,
    OutputOpt,
    QuietOpt,
    Recursive,
    RerankOpt,
    Resource,
    ThresholdOpt,
    TopKOpt,
    app,
    check_resource,
    config_app,
    emit,
    emit_objects,
    handles_errors,
    list_selector,
    load_manifest_paths,
    open_store,
    parse_duration,
    resource_names,
    say_waiting,
    server_app,
    state,
    warn_rerank,
)

if TYPE_CHECKING:
    from kbctl import FederatedResult, QueryResult

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
    all_kbs: AllOpt = False,
    quiet: QuietOpt = False,
    output: OutputOpt = None,
) -> None:
    """Re-fetch URL sources and publish a new version only if some page's text changed.

    Sends If-None-Match / If-Modified-Since from the last fetch; a 304, or a page whose extracted text
    is unchanged, costs no chunking or embedding. A page that fails keeps serving its last good content
    (shown as stale by describe) and makes the command exit 1. Without `spec.refresh` (a schedule that
    `kbctl controller` honours) nothing refreshes by itself: run this from CI or cron.
    """
    check_resource(resource)
    if (name is None) != all_kbs:
        raise typer.BadParameter("give a knowledge base NAME or --all (not both)", param_hint="NAME")
    from kbctl.cli.progress import CliReporter

    reporter = CliReporter(quiet, log=output is None)
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
    """Check manifests without touching any database; print one line per problem (file:line: field: ...).

    Objects of other tools in the same files or folder (a kustomization.yaml, a Deployment) are skipped with one
    note per file on stderr; a `List` (as `get -o yaml` prints) is checked object by object."""
    manifests = load_manifest_paths(filename, recursive)
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
    names: Annotated[
        list[str] | None, typer.Argument(metavar="NAME", help="Knowledge bases to show (default: all).")
    ] = None,
    selector: ListSelectorOpt = None,
    output: ObjectOutputOpt = None,
) -> None:
    """List knowledge bases: name, Ready, STATUS (conditions in one word), version, sources ready/total, chunks, age.

    As in kubectl: `get kb NAME...` or `get kb/NAME...`, `-l SELECTOR` to filter by labels, `-o wide` adds the
    model and the description, `-o name` prints knowledgebase/NAME, `-o json|yaml` the objects themselves
    (apiVersion, kind, metadata, the applied spec with defaults, status; one name prints the object, otherwise
    a List) which can be applied again unchanged, `-o jsonpath='{.items[*].metadata.name}'` and
    `-o custom-columns=NAME:.metadata.name,VERSION:.status.version` pick fields. A name that does not exist
    is reported on stderr (exit 1) after the others are printed.

    `get events [NAME...]` lists what happened to knowledge bases (all, or those named; deleted ones too),
    oldest first: publishes, failed reconciles, failing sources, rollbacks, deletions and prunes, a repeated
    event counted once (`5m (x3 over 2h)`); `-o json|yaml` prints them as data.
    """
    from kbctl.cli.output import parse_object_output
    from kbctl.cli.render import knowledge_base_table

    if resource.lower() in EVENT_RESOURCES:
        _get_events(names or [], selector, output)
        return
    wanted = resource_names(resource, names)
    chosen = list_selector(selector, wanted)
    fmt = parse_object_output(output)
    with open_store() as store:
        found = store.list(chosen)
        by_name = {s.name: s for s in found}
        items = [by_name[n] for n in wanted if n in by_name] if wanted else found
        missing = [n for n in wanted if n not in by_name]
        objects = [store.resource(i.name) for i in items] if fmt is not None and fmt.structured else []
    if fmt is not None and fmt.structured:
        emit_objects(objects, fmt, single=len(wanted) == 1 and not missing)
    elif fmt is not None and fmt.kind == "name":
        for i in items:
            typer.echo(f"knowledgebase/{i.name}")
    elif items:
        typer.echo(knowledge_base_table(items, wide=fmt is not None and fmt.kind == "wide"))
    elif not missing:
        typer.echo("No knowledge bases found.", err=True)
    for name in missing:
        typer.echo(f'Error: knowledgebase "{name}" not found', err=True)
    if missing:
        raise typer.Exit(1)


def _get_events(names: list[str], selector: str | None, output: str | None) -> None:
    from kbctl.cli.output import parse_object_output
    from kbctl.cli.render import events_table

    if selector is not None:
        raise typer.BadParameter("events are listed by knowledge base name, not by label", param_hint="'-l'")
    fmt = parse_object_output(output)
    if fmt is not None and fmt.kind not in ("json", "yaml"):
        raise typer.BadParameter("events print as a table, json or yaml", param_hint="'-o'")
    with open_store() as store:
        events = store.events(names or None)
    if fmt is not None:
        emit(events, Output(fmt.kind))
    elif events:
        typer.echo(events_table(events))
    else:
        typer.echo("No events found.", err=True)


@app.command()
@handles_errors
def describe(resource: Resource, name: KbName, output: ObjectOutputOpt = None) -> None:
    """Show a knowledge base in detail: spec in force, current version, and the state of every source.

    -o json|yaml|jsonpath=...|custom-columns=... print the object as `kbctl get kb NAME -o ...` does.
    """
    from kbctl.cli.output import parse_object_output
    from kbctl.cli.render import describe_text

    check_resource(resource)
    fmt = parse_object_output(output)
    with open_store() as store:
        if fmt is not None and fmt.structured:
            emit_objects([store.resource(name)], fmt, single=True)
            return
        d = store.describe(name)
    typer.echo(f"knowledgebase/{d.name}" if fmt is not None and fmt.kind == "name" else describe_text(d))


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

    \b
    Examples:
      kbctl query client-service-policy "how long do we keep invoices?" --explain
      kbctl query client-service-policy,data-handling-policy "how long do we keep invoices?"
      kbctl query --all "how long do we keep invoices?"
    """
    from kbctl import QueryOptions

    names, question = _query_targets(args, all_kbs, selector)
    options = QueryOptions.build(
        top_k=top_k,
        threshold=threshold,
        max_tokens=max_tokens,
        mode=mode and mode.value,
        explain=explain,
        rerank=rerank,
    )
    if len(names) == 1:
        with open_store() as store:
            result = store.query(names[0], question, options)
        warn_rerank(result.rerank)
        if output:
            emit(result, output)
        else:
            _print_hits(result)
        if exit_code and not result.hits:
            raise typer.Exit(NOT_COVERED_EXIT)
        return
    if explain:
        raise typer.BadParameter("--explain traces one knowledge base: name one", param_hint="'--explain'")
    with open_store() as store:
        fused = store.query_many(question, options, names=names, selector=list_selector(selector, ()))
    if output:
        emit(fused, output)
    else:
        _print_fused(fused)
    if exit_code and not fused.hits:
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


def _print_fused(result: FederatedResult) -> None:
    for hit in result.hits:
        where = " > ".join(hit.heading_path) or "(no heading)"
        typer.echo(
            f"{hit.rank}. {hit.knowledge_base} | {hit.source} | {where} | chunk {hit.position} | "
            f"score {hit.score:.3f} | {hit.tokens} tokens"
        )
        typer.echo("   " + hit.text.replace("\n", "\n   "))
        typer.echo("")
    for outcome in result.results:
        if outcome.version is None:
            typer.echo(f"{outcome.knowledge_base}: {outcome.message}", err=True)
    typer.echo(result.message)


def _print_hits(result: QueryResult) -> None:
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
    top_k: TopKOpt = None,
    threshold: ThresholdOpt = None,
    max_tokens: MaxTokensOpt = None,
    mode: ModeOpt = None,
    rerank: RerankOpt = None,
    exit_code: NothingFoundExitOpt = False,
    output: OutputOpt = None,
) -> None:
    """Print the grounded context block for a question, ready to put in a model's prompt.

    Passages are tagged with source, title, origin, section and character range, marked as reference
    data and not instructions, and escaped so their text cannot break out of the block. Neighbouring
    chunks of one source are merged so their overlap is sent once. When nothing passes the threshold
    the block says plainly that no relevant context was found (with --exit-code, exit 3).
    """
    from kbctl import QueryOptions

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
    if exit_code and not grounded.found:
        raise typer.Exit(NOT_COVERED_EXIT)


@app.command()
@handles_errors
def delete(
    resource: Annotated[
        str | None, typer.Argument(metavar="RESOURCE", help="knowledgebase (kb), or kb/NAME; not with -f.")
    ] = None,
    names: Annotated[list[str] | None, typer.Argument(metavar="NAME", help="Knowledge bases to delete.")] = None,
    filename: OptionalFiles = None,
    recursive: Recursive = False,
    selector: ListSelectorOpt = None,
    all_kbs: AllOpt = False,
    ignore_not_found: Annotated[
        bool, typer.Option("--ignore-not-found", help="A name that does not exist is not an error.")
    ] = False,
    dry_run: DryRunOpt = None,
    timeout: LockTimeoutOpt = "1m",
) -> None:
    """Delete knowledge bases with their versions, chunks, and the cached vectors no other one uses.

    Which ones, as in kubectl: `delete kb NAME...` (or kb/NAME...), `delete -f PATH` (the names of those
    manifests), `delete kb -l SELECTOR`, or `delete kb --all`. An apply of one that is running finishes
    first (it is never recreated half way). A name that does not exist is an error (exit 1, after the others
    are deleted) unless --ignore-not-found. --dry-run prints what would be deleted and deletes nothing
    (=client: the names given, without a store).
    """
    from kbctl.manifest import load_manifests

    if filename:
        if resource is not None:
            raise typer.BadParameter("give -f or a RESOURCE and names, not both", param_hint="-f")
        wanted = [m.kb.name for m in load_manifests(filename, recursive=recursive, stdin=sys.stdin)]
    elif resource is None:
        raise typer.BadParameter("give a RESOURCE (kb) with names, -l or --all; or -f", param_hint="RESOURCE")
    else:
        wanted = resource_names(resource, names)
    chosen = list_selector(selector, wanted)
    if sum((bool(wanted), chosen is not None, all_kbs)) != 1:
        raise typer.BadParameter("choose what to delete: names, -f, -l or --all (one of them)", param_hint="NAME")
    if dry_run is DryRun.client and wanted:
        for name in wanted:
            typer.echo(f"KnowledgeBase/{name} deleted (dry run: client, the store was not consulted)")
        return
    missing = []
    with open_store() as store:
        existing = {s.name for s in store.list(chosen)}
        for name in wanted or sorted(existing):
            if name not in existing:
                missing.append(name)
            elif dry_run is not None:
                typer.echo(f"KnowledgeBase/{name} deleted (dry run)")
            else:
                result = store.delete(name, timeout=parse_duration(timeout), on_wait=say_waiting(name))
                typer.echo(f"KnowledgeBase/{name} deleted ({result.chunks} chunks, {result.vectors} vectors)")
    if not missing or ignore_not_found:
        return
    for name in missing:
        typer.echo(f'Error: knowledgebase "{name}" not found', err=True)
    raise typer.Exit(1)


@server_app.command("status")
@handles_errors
def server_status_cmd(output: OutputOpt = None) -> None:
    """Say whether the embedded PostgreSQL runs, its pid and connection URL."""
    from kbctl import KnowledgeBaseStore

    status = KnowledgeBaseStore.server_status()
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
    from kbctl import KnowledgeBaseStore
    from kbctl.config import Settings

    pgdata = Settings.from_env().pgdata
    typer.echo("stopped" if KnowledgeBaseStore.stop_server() else f"not running ({pgdata})")


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
@handles_errors
def explain(
    field: Annotated[
        str, typer.Argument(metavar="FIELD", help="knowledgebase, or a dotted path: kb.spec.retrieval.topK.")
    ],
    recursive: Annotated[bool, typer.Option("--recursive", help="Show every field below, not only the next.")] = False,
) -> None:
    """Document a manifest field: its type, default, bounds and description, and its fields (as kubectl explain).

    Example: kbctl explain knowledgebase.spec.retrieval
    """
    from kbctl.cli.render import explain_text
    from kbctl.manifest.explain import explain as explain_field

    try:
        doc = explain_field(field, recursive=recursive)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="FIELD") from None
    typer.echo(explain_text(doc))


SHELLS = ("bash", "zsh", "fish")


@app.command()
def completion(
    shell: Annotated[str, typer.Argument(metavar="SHELL", help="bash, zsh or fish.")],
) -> None:
    """Print the shell completion script for kbctl.

    Examples: source <(kbctl completion bash) · kbctl completion zsh > "${fpath[1]}/_kbctl" ·
    kbctl completion fish > ~/.config/fish/completions/kbctl.fish
    """
    if shell not in SHELLS:
        raise typer.BadParameter(f"unknown shell {shell!r}; use one of: {', '.join(SHELLS)}", param_hint="SHELL")
    from typer._completion_classes import completion_init
    from typer._completion_shared import get_completion_script  # typer's own scripts (it has no public API)

    completion_init()
    typer.echo(get_completion_script(prog_name="kbctl", complete_var=COMPLETE_VAR, shell=shell))


@app.command()
def version() -> None:
    """Print the kbctl version."""
    typer.echo(f"kbctl {__version__}")
