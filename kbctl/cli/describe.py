"""`kbctl describe`: a knowledge base (or a Sync) in detail."""

from __future__ import annotations

from typing import Annotated

import typer

from kbctl.cli._common import (
    DESCRIBE_TYPES,
    AsClaimOpt,
    AsGroupOpt,
    ObjectOutputOpt,
    Output,
    app,
    check_resource,
    emit,
    emit_objects,
    handles_errors,
    open_store,
    reader_of,
)
from kbctl.cli.completion import SYNC_RESOURCES, kb_names, resource_types
from kbctl.cli.terminal import say


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
    from kbctl.cli.render import describe_text, object_name

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
    say(object_name("knowledgebase", d.name) if fmt is not None and fmt.kind == "name" else describe_text(d))


def _describe_sync(name: str, output: str | None) -> None:
    from kbctl.cli.output import parse_object_output
    from kbctl.cli.render import describe_sync_text, object_name

    fmt = parse_object_output(output)
    if fmt is not None and fmt.kind not in ("json", "yaml", "name"):
        raise typer.BadParameter("a Sync describes as text, json, yaml or name", param_hint="'-o'")
    with open_store() as store:
        detail = store.describe_sync(name)
    if fmt is None:
        say(describe_sync_text(detail))
    elif fmt.kind == "name":
        say(object_name("sync", detail.name))
    else:
        emit(detail, Output(fmt.kind))
