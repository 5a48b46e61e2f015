"""The read and maintenance commands: refresh, validate, schema, get, describe, query, delete, server, version."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from kbctl._version import __version__
from kbctl.cli._common import (
    COMPLETE_VAR,
    NOT_COVERED_EXIT,
    AllOpt,
    AsClaimOpt,
    AsGroupOpt,
    DryRun,
    DryRunOpt,
    Files,
    ForceOpt,
    LabelColumnsOpt,
    ListSelectorOpt,
    LockTimeoutOpt,
    MaxTokensOpt,
    ModeOpt,
    NoHeadersOpt,
    NothingFoundExitOpt,
    ObjectOutputOpt,
    OptionalFiles,
    Output,
    OutputOpt,
    QuietOpt,
    Recursive,
    RerankOpt,
    Resource,
    ShowLabelsOpt,
    SortByOpt,
    ThresholdOpt,
    TopKOpt,
    WatchOpt,
    WatchTimeoutOpt,
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
    reader_of,
    resource_names,
    say_waiting,
    say_warnings,
    server_app,
    state,
    warn_rerank,
)
from kbctl.cli.completion import (
    ALL_RESOURCES,
    EVENT_RESOURCES,
    SYNC_RESOURCES,
    kb_names,
    query_names,
    resource_types,
)
from kbctl.cli.terminal import inert, say

if TYPE_CHECKING:
    from kbctl import FederatedResult, KnowledgeBaseEvent, KnowledgeBaseSummary, QueryResult
    from kbctl.client import KnowledgeBaseStore
    from kbctl.manifest.selectors import Selector

# Each command imports the library parts it needs when it runs: `kbctl --help` and `kbctl version` load none.


@app.command()
@handles_errors
def refresh(
    resource: Resource,
    name: Annotated[
        str | None,
        typer.Argument(metavar="NAME", help="Knowledge base to refresh (or --all).", autocompletion=kb_names),
    ] = None,
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
    loaded = load_manifest_paths(filename, recursive)
    for m in loaded.manifests:
        say(inert(f"{m.path}:{m.line}: KnowledgeBase/{m.kb.name} valid"))
    for s in loaded.syncs:
        say(inert(f"{s.path}:{s.line}: Sync/{s.sync.name} valid"))


class SchemaKind(StrEnum):
    knowledge_base = "KnowledgeBase"
    sync = "Sync"


@app.command()
def schema(
    kind: Annotated[
        SchemaKind, typer.Option("--kind", help="The kind whose schema to print: KnowledgeBase or Sync.")
    ] = SchemaKind.knowledge_base,
) -> None:
    """Print the JSON Schema of a manifest kind (for editors and CI linters): the KnowledgeBase's, or with
    --kind Sync a Sync's. The same files are in schemas/."""
    from kbctl.manifest import json_schema
    from kbctl.manifest.sync import sync_json_schema

    typer.echo(json.dumps(sync_json_schema() if kind is SchemaKind.sync else json_schema(), indent=2))


@app.command()
@handles_errors
def get(
    resource: Annotated[
        str,
        typer.Argument(
            metavar="RESOURCE",
            help="Resource type: knowledgebase (aliases: knowledgebases, kb), events, syncs, or all (every kind); "
            "or kb/NAME.",
            autocompletion=resource_types("kb", "events", "syncs", "all", typed_names=True),
        ),
    ],
    names: Annotated[
        list[str] | None,
        typer.Argument(metavar="NAME", help="Knowledge bases to show (default: all).", autocompletion=kb_names),
    ] = None,
    selector: ListSelectorOpt = None,
    output: ObjectOutputOpt = None,
    no_headers: NoHeadersOpt = False,
    show_labels: ShowLabelsOpt = False,
    label_columns: LabelColumnsOpt = None,
    sort_by: SortByOpt = None,
    watch: WatchOpt = False,
    watch_timeout: WatchTimeoutOpt = None,
) -> None:
    """List knowledge bases: name, Ready, STATUS (conditions in one word), version, sources ready/total, chunks, age.

    As in kubectl: `get kb NAME...` or `get kb/NAME...`, `-l SELECTOR` to filter by labels, `-o wide` adds the
    model and the description, `-o name` prints knowledgebase/NAME, `-o json|yaml` the objects themselves
    (apiVersion, kind, metadata, the applied spec with defaults, status; one name prints the object, otherwise
    a List) which can be applied again unchanged, `-o jsonpath='{.items[*].metadata.name}'` and
    `-o custom-columns=NAME:.metadata.name,VERSION:.status.version` pick fields. A name that does not exist
    is reported on stderr (exit 1) after the others are printed.

    `--sort-by=.status.chunks` orders by a field of those objects, `--show-labels` and `-L KEY` add label
    columns, `--no-headers` drops the header line, and `-w` keeps watching after the table (every second),
    printing a knowledge base's row again each time it changes, until Ctrl-C (or --watch-timeout).

    `get events [NAME...]` lists what happened to knowledge bases (all, or those named; deleted ones too),
    oldest first: publishes, failed reconciles, failing sources, rollbacks, deletions and prunes, a repeated
    event counted once (`5m (x3 over 2h)`); `-o json|yaml` prints them as data, `--sort-by=.count` orders them
    by one of those fields, and `-w` prints new or counted-up events as they come.

    `get syncs [NAME...]` lists the Syncs (git folders a controller keeps applied): repository, ref, path,
    interval, the commit last applied, when, and why the last pass applied nothing, if it did not.

    `get all` lists every kind, as kubectl does: the knowledge bases, then the Syncs, a table each (named
    knowledgebase/NAME and sync/NAME), or with -o name one KIND/NAME a line.
    """
    from kbctl.cli.output import custom_columns, parse_object_output
    from kbctl.cli.render import headed_table

    keys = [key.strip() for spec in label_columns or () for key in spec.split(",") if key.strip()]
    if resource.lower() in ALL_RESOURCES:
        if names or selector is not None or watch or sort_by or show_labels or keys:
            raise typer.BadParameter("get all takes --no-headers and -o name only", param_hint="RESOURCE")
        _get_all(output, no_headers=no_headers)
        return
    sort_path = _sort_path(sort_by)
    if resource.lower() in EVENT_RESOURCES:
        if show_labels or keys:
            raise typer.BadParameter("events have no labels", param_hint="'--show-labels' / '-L'")
        _get_events(
            names or [],
            selector,
            output,
            no_headers=no_headers,
            sort_path=sort_path,
            watch=watch,
            watch_timeout=watch_timeout,
        )
        return
    if resource.lower() in SYNC_RESOURCES:
        _get_syncs(names or [], output, no_headers=no_headers)
        return
    wanted = resource_names(resource, names, GET_TYPES)
    chosen = list_selector(selector, wanted)
    fmt = parse_object_output(output)
    if watch and fmt is not None and fmt.structured:
        raise typer.BadParameter("-w prints table rows: use it with the table, -o wide or -o name", param_hint="'-w'")
    layout = {"wide": fmt is not None and fmt.kind == "wide", "show_labels": show_labels, "label_columns": keys}
    with open_store() as store:
        items = _listed(store, chosen, wanted)
        missing = [n for n in wanted if n not in {i.name for i in items}]
        objects = [store.resource(i.name) for i in items] if sort_path or (fmt is not None and fmt.structured) else []
        if sort_path is not None:
            order = sorted(range(len(items)), key=lambda k: _sort_key(sort_path(objects[k])))
            items, objects = [items[k] for k in order], [objects[k] for k in order]
        headers, first = _rows_by_name(items, layout)
        if fmt is not None and fmt.structured:
            if fmt.kind == "custom-columns" and no_headers:
                titles, *cells = custom_columns(fmt.argument, objects)
                say(headed_table(titles, cells, no_headers=True))
            else:
                emit_objects(objects, fmt, single=len(wanted) == 1 and not missing)
        elif fmt is not None and fmt.kind == "name":
            for i in items:
                say(f"knowledgebase/{i.name}")
        elif items:
            say(headed_table(headers, list(first.values()), no_headers=no_headers))
        elif not missing:
            say("No knowledge bases found.", err=True)
        for name in missing:
            say(f'Error: knowledgebase "{inert(name)}" not found', err=True)
        if missing:
            raise typer.Exit(1)
        if watch:
            names_only = fmt is not None and fmt.kind == "name"
            changes = _row_changes(headers, names_only=names_only, header_due=not (items or no_headers or names_only))
            _watch(lambda: _rows_by_name(_listed(store, chosen, wanted), layout)[1], changes, first, watch_timeout)


Rows = dict[str, list[object]]  # the table rows of `get kb` by knowledge base name
GET_TYPES = "knowledgebase (kb), syncs (sync), events (ev), all"  # what `kbctl get` takes
DESCRIBE_TYPES = "knowledgebase (kb), syncs (sync)"  # what `kbctl describe` and `kbctl delete` take


def _get_all(output: str | None, *, no_headers: bool) -> None:
    """`get all`: a table per kind (knowledge bases, then Syncs), each object named KIND/NAME, a blank line
    between two tables; `-o name` their KIND/NAME alone."""
    from kbctl.cli.output import parse_object_output
    from kbctl.cli.render import headed_table, knowledge_base_rows, syncs_table

    fmt = parse_object_output(output)
    if fmt is not None and fmt.kind != "name":
        raise typer.BadParameter(
            "get all prints a table per kind or -o name: use get kb or get syncs for other formats", param_hint="'-o'"
        )
    with open_store() as store:
        kbs, syncs = store.list(), store.syncs()
    if fmt is not None:
        for kb in kbs:
            say(inert(f"knowledgebase/{kb.name}"))
        for sync in syncs:
            say(inert(f"sync/{sync.name}"))
        return
    tables = []
    if kbs:
        headers, rows = knowledge_base_rows(kbs)
        tables.append(headed_table(headers, [[f"knowledgebase/{r[0]}", *r[1:]] for r in rows], no_headers=no_headers))
    if syncs:
        named = [s.model_copy(update={"name": f"sync/{s.name}"}) for s in syncs]
        tables.append(syncs_table(named, no_headers=no_headers))
    if tables:
        say("\n\n".join(tables))
    else:
        say("No resources found.", err=True)


def _listed(store: KnowledgeBaseStore, selector: Selector | None, wanted: list[str]) -> list[KnowledgeBaseSummary]:
    """The knowledge bases `get kb` shows: those named, in that order, else every one `selector` matches."""
    found = store.list(selector)
    by_name = {s.name: s for s in found}
    return [by_name[n] for n in wanted if n in by_name] if wanted else found


def _rows_by_name(items: list[KnowledgeBaseSummary], layout: dict[str, Any]) -> tuple[list[str], Rows]:
    from kbctl.cli.render import knowledge_base_rows

    headers, rows = knowledge_base_rows(items, **layout)
    return headers, {i.name: row for i, row in zip(items, rows, strict=True)}


def _row_changes(headers: list[str], *, names_only: bool, header_due: bool) -> Callable[[Rows, Rows], list[str]]:
    """What `get kb -w` prints between two polls: the rows that changed (knowledgebase/NAME with -o name), under
    the header when the first list printed none (it was empty)."""
    from kbctl.cli.render import headed_table, table_body

    def changes(before: Rows, after: Rows) -> list[str]:
        nonlocal header_due
        changed = [after[n] for n in _changed_rows(before, after)]
        if not changed:
            return []
        if names_only:
            return [f"knowledgebase/{row[0]}" for row in changed]
        text = headed_table(headers, changed) if header_due else table_body(headers, changed)
        header_due = False
        return [text]

    return changes


def _sort_path(sort_by: str | None) -> Callable[[Any], list[Any]] | None:
    """The compiled `--sort-by` (kubectl's `{.path}` or `.path`); a bad one is a usage error (exit 2)."""
    if sort_by is None:
        return None
    from kbctl.cli.output import _path

    text = sort_by.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1].strip()
    if not text.strip("$"):
        raise typer.BadParameter(f"{sort_by!r}: give a field, e.g. .metadata.name", param_hint="'--sort-by'")
    try:
        return _path(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--sort-by'") from None


def _sort_key(values: list[Any]) -> tuple[int, float, str]:
    """Where a value found by `--sort-by` goes: missing (or null) first, then numbers by value, then times (ISO
    text) in time order, then other text; the first match counts when a path finds several."""
    from datetime import datetime

    value = values[0] if values else None
    if value is None:
        return (0, 0.0, "")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (1, float(value), "")
    if isinstance(value, str):
        try:
            return (2, datetime.fromisoformat(value).timestamp(), "")
        except ValueError:
            return (3, 0.0, value)
    return (3, 0.0, json.dumps(value, sort_keys=True, ensure_ascii=False))


def _changed_rows(before: Rows, after: Rows) -> list[str]:
    """The knowledge bases (by name, as in `after`) whose row is new or not what it was, AGE aside (it changes
    with the clock alone): what `get -w` prints again."""
    from kbctl.cli.render import AGE_COLUMN

    def shown(row: list[object] | None) -> list[object] | None:
        return None if row is None else row[:AGE_COLUMN] + row[AGE_COLUMN + 1 :]

    return [name for name, row in after.items() if shown(row) != shown(before.get(name))]


def _new_events(before: list[KnowledgeBaseEvent], after: list[KnowledgeBaseEvent]) -> list[KnowledgeBaseEvent]:
    """The events of `after` that `before` did not have, or had with a lower count (`get events -w`)."""
    seen = {(e.name, e.type, e.reason, e.message): (e.count, e.last_seen) for e in before}
    return [e for e in after if seen.get((e.name, e.type, e.reason, e.message)) != (e.count, e.last_seen)]


WATCH_INTERVAL = 1.0  # seconds between two polls of `get -w`
T = TypeVar("T")


def _pause(seconds: float) -> None:
    import time

    time.sleep(seconds)


def _watch(poll: Callable[[], T], changes: Callable[[T, T], list[str]], last: T, timeout: str | None) -> None:
    """kubectl's `get -w`: poll every WATCH_INTERVAL and print what `changes` finds between two polls, until
    Ctrl-C (exit 0) or `timeout` (a duration) has passed."""
    import time

    deadline = None if timeout is None else time.monotonic() + parse_duration(timeout)
    try:
        while True:
            left = WATCH_INTERVAL if deadline is None else min(WATCH_INTERVAL, deadline - time.monotonic())
            if left > 0:
                _pause(left)
            current = poll()
            for line in changes(last, current):
                say(line)
            last = current
            if deadline is not None and time.monotonic() >= deadline:
                return
    except KeyboardInterrupt:
        return


def _get_syncs(names: list[str], output: str | None, *, no_headers: bool) -> None:
    from kbctl.cli.output import parse_object_output
    from kbctl.cli.render import syncs_table

    fmt = parse_object_output(output)
    if fmt is not None and fmt.kind not in ("json", "yaml"):
        raise typer.BadParameter("syncs print as a table, json or yaml", param_hint="'-o'")
    with open_store() as store:
        syncs = [s for s in store.syncs() if not names or s.name in names]
    missing = [n for n in names if n not in {s.name for s in syncs}]
    if fmt is not None:
        emit(syncs, Output(fmt.kind))
    elif syncs:
        say(syncs_table(syncs, no_headers=no_headers))
    elif not missing:
        say("No syncs found.", err=True)
    for name in missing:
        say(f'Error: sync "{inert(name)}" not found', err=True)
    if missing:
        raise typer.Exit(1)


def _get_events(
    names: list[str],
    selector: str | None,
    output: str | None,
    *,
    no_headers: bool = False,
    sort_path: Callable[[Any], list[Any]] | None = None,
    watch: bool = False,
    watch_timeout: str | None = None,
) -> None:
    from kbctl.cli.output import parse_object_output
    from kbctl.cli.render import events_table

    if selector is not None:
        raise typer.BadParameter("events are listed by knowledge base name, not by label", param_hint="'-l'")
    fmt = parse_object_output(output)
    if fmt is not None and fmt.kind not in ("json", "yaml"):
        raise typer.BadParameter("events print as a table, json or yaml", param_hint="'-o'")
    if watch and fmt is not None:
        raise typer.BadParameter("-w prints table rows: use it without -o", param_hint="'-w'")
    with open_store() as store:
        events = store.events(names or None)
        if sort_path is not None:
            events = sorted(events, key=lambda e: _sort_key(sort_path(_event_object(e))))
        if fmt is not None:
            emit(events, Output(fmt.kind))
        elif events:
            say(events_table(events, no_headers=no_headers))
        else:
            say("No events found.", err=True)
        if watch:
            changes = _event_changes(header_due=not (events or no_headers))
            _watch(lambda: store.events(names or None), changes, events, watch_timeout)


def _event_changes(*, header_due: bool) -> Callable[[list[KnowledgeBaseEvent], list[KnowledgeBaseEvent]], list[str]]:
    """What `get events -w` prints between two polls: the new or counted-up events, under the header when the
    first list printed none."""
    from kbctl.cli.render import events_table

    def changes(before: list[KnowledgeBaseEvent], after: list[KnowledgeBaseEvent]) -> list[str]:
        nonlocal header_due
        arrived = _new_events(before, after)
        if not arrived:
            return []
        text = events_table(arrived, no_headers=not header_due)
        header_due = False
        return [text]

    return changes


def _event_object(event: KnowledgeBaseEvent) -> dict[str, Any]:
    """An event as `-o json` prints it and --sort-by reads it: camelCase names (.lastSeen), as everywhere."""
    return event.model_dump(mode="json", by_alias=True)


@app.command()
@handles_errors
def describe(
    resource: Annotated[
        str,
        typer.Argument(
            metavar="RESOURCE",
            help="Resource type: knowledgebase (aliases: knowledgebases, kb) or sync.",
            autocompletion=resource_types("kb", "syncs"),
        ),
    ],
    name: Annotated[
        str, typer.Argument(metavar="NAME", help="Knowledge base (or Sync) name.", autocompletion=kb_names)
    ],
    output: ObjectOutputOpt = None,
    as_group: AsGroupOpt = None,
    as_claim: AsClaimOpt = None,
) -> None:
    """Show a knowledge base in detail: spec in force, current version, and the state of every source.

    -o json|yaml|jsonpath=...|custom-columns=... print the object as `kbctl get kb NAME -o ...` does.
    --as-group and --as-claim show what one caller may read (document-level `access`), as serve shows it to a
    token with those groups and claims.

    `describe sync NAME` shows a Sync: repository, ref, path, interval, the commit last applied and when, the last
    error, the knowledge bases it applied and its events (-o json|yaml print the same as data).
    """
    from kbctl.cli.output import parse_object_output
    from kbctl.cli.render import describe_text

    if resource.lower() in SYNC_RESOURCES:
        if as_group is not None or as_claim is not None:
            raise typer.BadParameter("a Sync has no access rules", param_hint="'--as-group' / '--as-claim'")
        _describe_sync(name, output)
        return
    check_resource(resource, DESCRIBE_TYPES)
    fmt = parse_object_output(output)
    as_reader = as_group is not None or as_claim is not None
    if as_reader and fmt is not None and fmt.structured:
        raise typer.BadParameter("--as-group and --as-claim describe as text: use them without -o", param_hint="'-o'")
    with open_store() as store:
        if fmt is not None and fmt.structured:
            emit_objects([store.resource(name)], fmt, single=True)
            return
        d = store.describe(name, reader=reader_of(as_group, as_claim) if as_reader else None)
    say(f"knowledgebase/{d.name}" if fmt is not None and fmt.kind == "name" else describe_text(d))


def _describe_sync(name: str, output: str | None) -> None:
    from kbctl.cli.output import parse_object_output
    from kbctl.cli.render import describe_sync_text

    fmt = parse_object_output(output)
    if fmt is not None and fmt.kind not in ("json", "yaml", "name"):
        raise typer.BadParameter("a Sync describes as text, json, yaml or name", param_hint="'-o'")
    with open_store() as store:
        detail = store.describe_sync(name)
    if fmt is None:
        say(describe_sync_text(detail))
    elif fmt.kind == "name":
        say(inert(f"sync/{detail.name}"))
    else:
        emit(detail, Output(fmt.kind))


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
        with open_store() as store:
            result = store.query(names[0], question, options, reader=reader)
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
        fused = store.query_many(question, options, names=names, selector=list_selector(selector, ()), reader=reader)
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
        say(
            inert(
                f"{hit.rank}. {hit.knowledge_base} | {hit.source} | {where} | chunk {hit.position} | "
                f"similarity {hit.similarity:.3f} | {hit.tokens} tokens"
            )
        )
        say("   " + hit.text.replace("\n", "\n   "))
        say("")
    for outcome in result.results:
        if outcome.version is None:
            say(inert(f"{outcome.knowledge_base}: {outcome.message}"), err=True)
    say(inert(result.message))


def _print_hits(result: QueryResult) -> None:
    for hit in result.hits:
        where = " > ".join(hit.heading_path) or "(no heading)"
        rerank_score = "" if hit.rerank_score is None else f" | rerank {hit.rerank_score:.3f}"
        say(
            inert(
                f"{hit.rank}. {hit.source} | {where} | chunk {hit.position} | "
                f"similarity {hit.similarity:.3f}{rerank_score} | {hit.tokens} tokens"
            )
        )
        say("   " + hit.text.replace("\n", "\n   "))
        say("")
    say(inert(result.message))
    for stage in result.trace or []:
        say(f"\n{stage.stage} ({stage.ms:.1f} ms)")
        for e in stage.entries[:15]:
            say(inert(f"  {e.rank:>3}. {e.source} chunk {e.position}  score {e.score:.3f}  {e.detail}".rstrip()))
        if len(stage.entries) > 15:
            say(f"  ... {len(stage.entries) - 15} more (all of them with -o json)")


@app.command()
@handles_errors
def context(
    name: Annotated[str, typer.Argument(metavar="NAME", help="Knowledge base to search.", autocompletion=kb_names)],
    question: Annotated[str, typer.Argument(metavar="QUESTION", help="The question, in natural language.")],
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


def _delete_syncs(names: list[str], *, ignore_not_found: bool) -> None:
    if not names:
        raise typer.BadParameter("name the Syncs to delete", param_hint="NAME")
    missing = []
    with open_store() as store:
        for name in names:
            if store.delete_sync(name):
                say(f"Sync/{name} deleted")
            elif not ignore_not_found:
                missing.append(name)
    for name in missing:
        say(f'Error: sync "{inert(name)}" not found', err=True)
    if missing:
        raise typer.Exit(1)


@app.command()
@handles_errors
def delete(
    resource: Annotated[
        str | None,
        typer.Argument(
            metavar="RESOURCE",
            help="knowledgebase (kb), or kb/NAME; not with -f.",
            autocompletion=resource_types("kb", "syncs", typed_names=True),
        ),
    ] = None,
    names: Annotated[
        list[str] | None,
        typer.Argument(metavar="NAME", help="Knowledge bases to delete.", autocompletion=kb_names),
    ] = None,
    filename: OptionalFiles = None,
    recursive: Recursive = False,
    selector: ListSelectorOpt = None,
    all_kbs: AllOpt = False,
    ignore_not_found: Annotated[
        bool, typer.Option("--ignore-not-found", help="A name that does not exist is not an error.")
    ] = False,
    dry_run: DryRunOpt = None,
    timeout: LockTimeoutOpt = "1m",
    force: ForceOpt = False,
) -> None:
    """Delete knowledge bases with their versions, chunks, and the cached vectors no other one uses.

    Which ones, as in kubectl: `delete kb NAME...` (or kb/NAME...), `delete -f PATH` (the names of those
    manifests), `delete kb -l SELECTOR`, or `delete kb --all`. An apply of one that is running finishes
    first (it is never recreated half way). A name that does not exist is an error (exit 1, after the others
    are deleted) unless --ignore-not-found. --dry-run prints what would be deleted and deletes nothing
    (=client: the names given, without a store). One a Sync manages is refused (its next pass would create it
    again; an error after the others are deleted) unless --force.

    `delete sync NAME...` stops a Sync (the knowledge bases it applied stay: delete them, or prune them from
    another apply).
    """
    from kbctl.manifest import load_manifests

    if resource is not None and resource.lower() in SYNC_RESOURCES:
        _delete_syncs(names or [], ignore_not_found=ignore_not_found)
        return
    if filename:
        if resource is not None:
            raise typer.BadParameter("give -f or a RESOURCE and names, not both", param_hint="-f")
        wanted = [m.kb.name for m in load_manifests(filename, recursive=recursive, stdin=sys.stdin)]
    elif resource is None:
        raise typer.BadParameter("give a RESOURCE (kb) with names, -l or --all; or -f", param_hint="RESOURCE")
    else:
        wanted = resource_names(resource, names, DESCRIBE_TYPES)  # delete takes the types describe does
    chosen = list_selector(selector, wanted)
    if sum((bool(wanted), chosen is not None, all_kbs)) != 1:
        raise typer.BadParameter("choose what to delete: names, -f, -l or --all (one of them)", param_hint="NAME")
    if dry_run is DryRun.client and wanted:
        for name in wanted:
            say(f"KnowledgeBase/{name} deleted (dry run: client, the store was not consulted)")
        return
    from kbctl.errors import ManagedError

    missing, refused = [], []
    with open_store() as store:
        existing = {s.name for s in store.list(chosen)}
        for name in wanted or sorted(existing):
            if name not in existing:
                missing.append(name)
            elif dry_run is not None:
                say(f"KnowledgeBase/{name} deleted (dry run)")
            else:
                try:
                    result = store.delete(name, timeout=parse_duration(timeout), on_wait=say_waiting(name), force=force)
                except ManagedError as exc:
                    refused.append(str(exc))
                    continue
                say_warnings(result.warnings)
                say(f"KnowledgeBase/{name} deleted ({result.chunks} chunks, {result.vectors} vectors)")
    for why in refused:
        say(f"Error: {inert(why)}", err=True)
    if not missing or ignore_not_found:
        if refused:
            raise typer.Exit(1)
        return
    for name in missing:
        say(f'Error: knowledgebase "{inert(name)}" not found', err=True)
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
        say(f"running (pid {status.pid}) in {status.pgdata}: {status.url}")
    else:
        say(f"not running ({status.pgdata})")


@server_app.command("stop")
@handles_errors
def server_stop() -> None:
    """Stop the embedded PostgreSQL (the next command that needs it starts it again)."""
    from kbctl import KnowledgeBaseStore
    from kbctl.config import Settings

    pgdata = Settings.from_env().pgdata
    say("stopped" if KnowledgeBaseStore.stop_server() else f"not running ({pgdata})")


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
        str,
        typer.Argument(
            metavar="FIELD", help="knowledgebase or sync, or a dotted path: kb.spec.retrieval.topK, sync.spec.url."
        ),
    ],
    recursive: Annotated[bool, typer.Option("--recursive", help="Show every field below, not only the next.")] = False,
) -> None:
    """Document a manifest field: its type, default, bounds and description, and its fields (as kubectl explain).

    \b
    Examples:
      kbctl explain knowledgebase.spec.retrieval
      kbctl explain sync --recursive
    """
    from kbctl.cli.render import explain_text
    from kbctl.manifest.explain import explain as explain_field

    try:
        doc = explain_field(field, recursive=recursive)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="FIELD") from None
    say(explain_text(doc))


SHELLS = ("bash", "zsh", "fish")


def _shells() -> list[str]:
    return list(SHELLS)


@app.command()
def completion(
    shell: Annotated[str, typer.Argument(metavar="SHELL", help="bash, zsh or fish.", autocompletion=_shells)],
) -> None:
    """Print the shell completion script for kbctl.

    TAB then completes commands and options, resource types (`kbctl get <TAB>`: knowledgebase, kb, events, syncs, all),
    the values of -o (json, yaml, wide, name, jsonpath=, custom-columns=) and knowledge base names (`kbctl describe
    kb <TAB>`, `kbctl query <TAB>`, kb/<TAB>). Names are read from the store only when it answers at once: the
    embedded PostgreSQL is never started for a completion, and a store that is stopped, unreachable or slower
    than a second completes no names, silently.

    \b
    Examples:
      source <(kbctl completion bash)              # in ~/.bashrc (bash 4.4 or later)
      kbctl completion zsh > "${fpath[1]}/_kbctl"  # then start a new zsh
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
    say(f"kbctl {__version__}")
