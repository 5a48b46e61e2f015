"""`kbctl delete`: delete knowledge bases (by name, -f, -l or --all) or Syncs."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from kbctl.cli._common import (
    DESCRIBE_TYPES,
    AllOpt,
    DryRun,
    DryRunOpt,
    ForceOpt,
    ListSelectorOpt,
    LockTimeoutOpt,
    OptionalFiles,
    Recursive,
    app,
    handles_errors,
    list_selector,
    open_store,
    parse_duration,
    resource_names,
    say_waiting,
    say_warnings,
)
from kbctl.cli.completion import SYNC_RESOURCES, kb_names, resource_types
from kbctl.cli.terminal import say

if TYPE_CHECKING:
    from kbctl.manifest.selectors import Selector


def _delete_syncs(names: list[str], *, ignore_not_found: bool) -> None:
    from kbctl.cli.render import deleted_line, not_found_line

    if not names:
        raise typer.BadParameter("name the Syncs to delete", param_hint="NAME")
    missing = []
    with open_store() as store:
        for name in names:
            if store.delete_sync(name):
                say(deleted_line("Sync", name))
            elif not ignore_not_found:
                missing.append(name)
    for name in missing:
        say(not_found_line("sync", name), err=True)
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
    from kbctl.cli.render import deleted_line, error_line, not_found_line

    if resource is not None and resource.lower() in SYNC_RESOURCES:
        _delete_syncs(names or [], ignore_not_found=ignore_not_found)
        return
    wanted, chosen = _delete_targets(resource, names, filename, recursive, selector, all_kbs)
    if dry_run is DryRun.client and wanted:
        for name in wanted:
            say(deleted_line("KnowledgeBase", name, dry_run=True, consulted=False))
        return
    from kbctl.errors import ManagedError

    missing, refused = [], []
    with open_store() as store:
        existing = {s.name for s in store.list(chosen)}
        for name in wanted or sorted(existing):
            if name not in existing:
                missing.append(name)
            elif dry_run is not None:
                say(deleted_line("KnowledgeBase", name, dry_run=True))
            else:
                try:
                    result = store.delete(name, timeout=parse_duration(timeout), on_wait=say_waiting(name), force=force)
                except ManagedError as exc:
                    refused.append(str(exc))
                    continue
                say_warnings(result.warnings)
                say(deleted_line("KnowledgeBase", name, result=result))
    for why in refused:
        say(error_line(why), err=True)
    if not missing or ignore_not_found:
        if refused:
            raise typer.Exit(1)
        return
    for name in missing:
        say(not_found_line("knowledgebase", name), err=True)
    raise typer.Exit(1)


def _delete_targets(
    resource: str | None,
    names: list[str] | None,
    filename: list[str] | None,
    recursive: bool,
    selector: str | None,
    all_kbs: bool,
) -> tuple[list[str], Selector | None]:
    """(names, selector) of the knowledge bases `kbctl delete` is asked for: the names given (or those of -f's
    manifests), or -l's selector; a usage error unless exactly one of names, -f, -l and --all chooses."""
    from kbctl.manifest import load_manifests

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
    return wanted, chosen
