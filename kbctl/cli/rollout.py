"""`kbctl rollout history|undo` and `kbctl gc`: list versions, switch back to one, drop unreferenced vectors."""

from __future__ import annotations

from typing import Annotated

import typer

from kbctl.cli._common import (
    KbName,
    LockTimeoutOpt,
    ObjectOutputOpt,
    OutputOpt,
    Resource,
    app,
    check_resource,
    command_group,
    emit,
    emit_objects,
    handles_errors,
    open_store,
    parse_duration,
    say_waiting,
)

# The renderers are imported by the commands that print them (see kbctl.cli.commands).

rollout_app = command_group("rollout", "Show the versions of a knowledge base and roll back to one.")


@rollout_app.command("history")
@handles_errors
def history(resource: Resource, name: KbName, output: ObjectOutputOpt = None) -> None:
    """List the versions kept for rollback, newest first: * marks the one serving queries, SOURCES the
    sources ready when it was published, CHANGE what made it.

    -o json|yaml print them as a List; -o jsonpath=... and custom-columns=... pick fields (e.g.
    custom-columns=VERSION:.number,CHUNKS:.chunk_count); -o name prints knowledgebase/NAME.
    """
    from kbctl.cli.output import parse_object_output
    from kbctl.cli.render import history_table, no_versions_line

    check_resource(resource)
    fmt = parse_object_output(output)
    with open_store() as store:
        versions = store.history(name)
        detail = store.describe(name) if not versions else None
    if fmt is not None and fmt.structured:
        emit_objects([v.model_dump(mode="json") for v in versions], fmt, single=False)
        return
    if fmt is not None and fmt.kind == "name":
        typer.echo(f"knowledgebase/{name}")
        return
    if detail is not None:
        typer.echo(no_versions_line(detail), err=True)
        return
    typer.echo(history_table(versions))


@rollout_app.command("undo")
@handles_errors
def undo(
    resource: Resource,
    name: KbName,
    to_version: Annotated[
        int | None,
        typer.Option(
            "--to-version", metavar="VERSION", min=1, help="Version to serve (default: the one before the current)."
        ),
    ] = None,
    timeout: LockTimeoutOpt = "1m",
) -> None:
    """Serve an earlier version again, instantly: nothing is fetched, chunked or embedded.

    Sources whose content differs between the two versions are fetched in full by the next refresh.
    The next apply compares manifests with the version now serving. A running `kbctl controller` brings back
    the manifest last applied on its next pass (drift), unless that manifest sets spec.suspend: true.
    """
    check_resource(resource)
    with open_store() as store:
        result = store.rollback(name, to_version, timeout=parse_duration(timeout), on_wait=say_waiting(name))
    typer.echo(f"KnowledgeBase/{result.name} rolled back to version {result.to_version}")


@app.command()
@handles_errors
def gc(
    batch: Annotated[int, typer.Option("--batch", metavar="N", min=1, help="Vectors deleted per transaction.")] = 1000,
    output: OutputOpt = None,
) -> None:
    """Delete cached vectors that no chunk uses any more (left by pruned versions and by failed applies), and
    inline source texts that no stored manifest names.

    Does nothing while an apply or refresh runs, since it may be about to use such vectors.
    """
    from kbctl.cli.render import gc_line

    with open_store() as store:
        result = store.collect_garbage(batch)
    if output:
        emit(result, output)
    elif result.skipped:
        typer.echo("skipped: an apply is in progress")
    else:
        typer.echo(gc_line(result))
