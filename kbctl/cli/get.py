"""`kbctl get`: list knowledge bases, events, Syncs or all of them as kubectl does, with its -o formats, label
columns, --sort-by and -w (watch: poll and print the rows that change)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from kbctl.cli._common import (
    LabelColumnsOpt,
    ListSelectorOpt,
    NoHeadersOpt,
    ObjectOutputOpt,
    Output,
    ShowLabelsOpt,
    SortByOpt,
    WatchOpt,
    WatchTimeoutOpt,
    app,
    emit,
    emit_objects,
    handles_errors,
    list_selector,
    open_store,
    parse_duration,
    resource_names,
)
from kbctl.cli.completion import ALL_RESOURCES, EVENT_RESOURCES, SYNC_RESOURCES, kb_names, resource_types
from kbctl.cli.terminal import say

if TYPE_CHECKING:
    from kbctl import KnowledgeBaseEvent, KnowledgeBaseSummary
    from kbctl.client import KnowledgeBaseStore
    from kbctl.manifest.selectors import Selector


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
    from kbctl.cli.render import headed_table, not_found_line, nothing_found_line, object_name

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
                say(object_name("knowledgebase", i.name))
        elif items:
            say(headed_table(headers, list(first.values()), no_headers=no_headers))
        elif not missing:
            say(nothing_found_line("knowledge bases"), err=True)
        for name in missing:
            say(not_found_line("knowledgebase", name), err=True)
        if missing:
            raise typer.Exit(1)
        if watch:
            names_only = fmt is not None and fmt.kind == "name"
            changes = _row_changes(headers, names_only=names_only, header_due=not (items or no_headers or names_only))
            _watch(lambda: _rows_by_name(_listed(store, chosen, wanted), layout)[1], changes, first, watch_timeout)


Rows = dict[str, list[object]]  # the table rows of `get kb` by knowledge base name
GET_TYPES = "knowledgebase (kb), syncs (sync), events (ev), all"  # what `kbctl get` takes


def _get_all(output: str | None, *, no_headers: bool) -> None:
    """`get all`: a table per kind (knowledge bases, then Syncs), each object named KIND/NAME, a blank line
    between two tables; `-o name` their KIND/NAME alone."""
    from kbctl.cli.output import parse_object_output
    from kbctl.cli.render import all_tables, nothing_found_line, object_name

    fmt = parse_object_output(output)
    if fmt is not None and fmt.kind != "name":
        raise typer.BadParameter(
            "get all prints a table per kind or -o name: use get kb or get syncs for other formats", param_hint="'-o'"
        )
    with open_store() as store:
        kbs, syncs = store.list(), store.syncs()
    if fmt is not None:
        for kb in kbs:
            say(object_name("knowledgebase", kb.name))
        for sync in syncs:
            say(object_name("sync", sync.name))
        return
    tables = all_tables(kbs, syncs, no_headers=no_headers)
    if tables:
        say(tables)
    else:
        say(nothing_found_line("resources"), err=True)


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
    from kbctl.cli.render import headed_table, object_name, table_body

    def changes(before: Rows, after: Rows) -> list[str]:
        nonlocal header_due
        changed = [after[n] for n in _changed_rows(before, after)]
        if not changed:
            return []
        if names_only:
            return [object_name("knowledgebase", str(row[0])) for row in changed]
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
    from kbctl.cli.render import not_found_line, nothing_found_line, syncs_table

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
        say(nothing_found_line("syncs"), err=True)
    for name in missing:
        say(not_found_line("sync", name), err=True)
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
    from kbctl.cli.render import events_table, nothing_found_line

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
            say(nothing_found_line("events"), err=True)
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
