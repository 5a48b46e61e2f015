"""`kbctl rollout history|diff|status|undo` and `kbctl gc`: list versions, compare two, follow a rollout, switch back
to one, drop unreferenced vectors."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from typer.core import TyperCommand

from kbctl.cli._common import (
    AsClaimOpt,
    AsGroupOpt,
    ForceOpt,
    KbName,
    LockTimeoutOpt,
    ObjectOutputOpt,
    OutputOpt,
    Resource,
    app,
    check_resource,
    command_group,
    duration_option,
    emit,
    emit_objects,
    handles_errors,
    open_store,
    parse_duration,
    reader_of,
    say_waiting,
    say_warnings,
)
from kbctl.cli.terminal import inert, say

if TYPE_CHECKING:
    from typer import _click  # the click that typer vendors (annotations only)

# The renderers are imported by the commands that print them (see kbctl.cli.commands).

rollout_app = command_group(
    "rollout", "Show the versions of a knowledge base, compare two, follow its rollout, and roll back to one."
)


@rollout_app.command("history")
@handles_errors
def history(resource: Resource, name: KbName, output: ObjectOutputOpt = None) -> None:
    """List the versions kept for rollback, newest first: * marks the one serving queries, SOURCES the
    sources ready when it was published, CHANGE what made it.

    -o json|yaml print them as a List; -o jsonpath=... and custom-columns=... pick fields (e.g.
    custom-columns=VERSION:.number,CHUNKS:.chunkCount); -o name prints knowledgebase/NAME.
    """
    from kbctl.cli.output import parse_object_output
    from kbctl.cli.render import history_table, no_versions_line, object_name

    check_resource(resource)
    fmt = parse_object_output(output)
    with open_store() as store:
        versions = store.history(name)
        detail = store.describe(name) if not versions else None
    if fmt is not None and fmt.structured:
        emit_objects([v.model_dump(mode="json", by_alias=True) for v in versions], fmt, single=False)
        return
    if fmt is not None and fmt.kind == "name":
        say(object_name("knowledgebase", name))
        return
    if detail is not None:
        say(no_versions_line(detail), err=True)
        return
    say(history_table(versions))


@rollout_app.command("diff")
@handles_errors
def diff(
    name: KbName,
    from_version: Annotated[
        int | None,
        typer.Option("--from", metavar="VERSION", min=1, help="The older version (default: the one before --to)."),
    ] = None,
    to_version: Annotated[
        int | None,
        typer.Option("--to", metavar="VERSION", min=1, help="The newer version (default: the one serving)."),
    ] = None,
    output: OutputOpt = None,
    as_group: AsGroupOpt = None,
    as_claim: AsClaimOpt = None,
) -> None:
    """Compare two retained versions of a knowledge base: the sources added, removed, changed (another revision)
    and unchanged, with each side's chunks and characters, then a unified diff of each changed source's text.

    A source's text is rebuilt from its chunks (blank lines between them may differ from the document). The diffs
    are bounded, per source and in all (kbctl.defaults' DIFF_*): a cut diff says so (-o json|yaml: diffTruncated).
    --as-group / --as-claim compare as one caller: a source behind an access rule it does not pass is left out.

    \b
    Examples:
      kbctl rollout diff policies                  # the version before the serving one, against it
      kbctl rollout diff policies --from 3 --to 5 -o json
    """
    from kbctl.cli.render import version_diff_text

    reader = reader_of(as_group, as_claim) if as_group or as_claim else None
    with open_store() as store:
        result = store.version_diff(name, from_version, to_version, reader=reader)
    if output:
        emit(result, output)
    else:
        say(version_diff_text(result))


# kubectl spells a boolean flag's value after "=": `--watch=false` is `--no-watch` (click's flags take no value).
_WATCH_SPELLINGS = {
    **{f"--watch={v}": "--watch" for v in ("true", "t", "1", "yes")},
    **{f"--watch={v}": "--no-watch" for v in ("false", "f", "0", "no")},
}


class _WatchValue(TyperCommand):
    """`rollout status`: reads kubectl's `--watch=false` and `--watch=true` (nothing after `--` is touched)."""

    def parse_args(self, ctx: _click.Context, args: list[str]) -> list[str]:
        end = args.index("--") if "--" in args else len(args)
        spelled = [_WATCH_SPELLINGS.get(a.lower(), a) for a in args[:end]]
        return super().parse_args(ctx, spelled + args[end:])


@rollout_app.command("status", cls=_WatchValue)
@handles_errors
def status(
    resource: Resource,
    name: KbName,
    watch: Annotated[
        bool,
        typer.Option(
            "--watch/--no-watch",
            "-w",
            help="Wait until the rollout finishes (default), or print the status once (--watch=false).",
        ),
    ] = True,
    timeout: Annotated[
        str, duration_option("--timeout", help="Give up after this long (30s, 5m, 1h); 0 waits without a limit.")
    ] = "0s",
    progress_deadline: Annotated[
        str,
        duration_option(
            "--progress-deadline",
            minimum=0.001,
            help="Give up when the rollout makes no progress for this long: reconciled but not Ready (sources "
            "failing), or waiting for a controller while none runs (a Deployment's progressDeadlineSeconds).",
        ),
    ] = "10m",
) -> None:
    """Wait until the latest applied generation of a knowledge base is rolled out: reconciled by a controller
    (observedGeneration = generation) and Ready.

    Prints a line each time the state changes (`Waiting for knowledgebase "NAME" rollout to finish: generation 3
    waits for a controller...`), then `knowledgebase "NAME" successfully rolled out (version N)`. Exits 1 when the
    reconcile failed or published nothing (the reason is printed), when the rollout made no progress for
    --progress-deadline (`knowledgebase "NAME" exceeded its progress deadline (10m): ...`: it stayed reconciled but
    not Ready, or no controller ran to reconcile it), or after --timeout, if one is given. --watch=false prints the
    status once: exit 0 if rolled out, 1 otherwise.

    \b
    Examples:
      kbctl apply -f kb/policies.yaml && kbctl rollout status kb policies --timeout=10m
      kbctl rollout status kb policies --progress-deadline=2m
      kbctl rollout status kb policies --watch=false
    """
    from kbctl.cli.render import error_line, rollout_stalled_line, rollout_timed_out_line

    check_resource(resource)
    with open_store() as store:
        result = store.rollout_status(
            name,
            watch=watch,
            timeout=parse_duration(timeout) or None,  # 0: no limit
            progress_deadline=parse_duration(progress_deadline),
            on_progress=lambda s: say(inert(s.message)),
        )
    if result.state == "done":
        say(inert(result.message))
        return
    if result.state == "failed":
        say(error_line(result.message), err=True)
    elif not watch:
        say(inert(result.message))
    elif result.stalled:
        say(rollout_stalled_line(name, progress_deadline, result.detail), err=True)
    else:
        say(rollout_timed_out_line(name, timeout, result.detail), err=True)
    raise typer.Exit(1)


@rollout_app.command("undo")
@handles_errors
def undo(
    resource: Resource,
    name: KbName,
    to_version: Annotated[
        int | None,
        typer.Option(
            "--to-version",
            "--to-revision",
            metavar="VERSION",
            min=1,
            help="Version to serve (default: the one before the current); --to-revision is kubectl's spelling.",
        ),
    ] = None,
    timeout: LockTimeoutOpt = "1m",
    force: ForceOpt = False,
) -> None:
    """Serve an earlier version again, instantly: nothing is fetched, chunked or embedded.

    Sources whose content differs between the two versions are fetched in full by the next refresh.
    The next apply compares manifests with the version now serving. A running `kbctl controller` brings back
    the manifest last applied on its next pass (drift), unless that manifest sets spec.suspend: true. A knowledge
    base a Sync manages is refused (the Sync's next pass would undo it) unless --force.
    """
    from kbctl.cli.render import rolled_back_line

    check_resource(resource)
    with open_store() as store:
        result = store.rollback(
            name, to_version, timeout=parse_duration(timeout), on_wait=say_waiting(name), force=force
        )
    say_warnings(result.warnings)
    say(rolled_back_line(result.name, result.to_version))


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
    from kbctl.cli.render import gc_line, nothing_collected_line

    with open_store() as store:
        result = store.collect_garbage(batch)
    if output:
        emit(result, output)
    elif result.skipped:
        say(nothing_collected_line())
    else:
        say(gc_line(result))
