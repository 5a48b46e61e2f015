"""`kbctl apply`: make the store match manifests."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kbctl.cli._common import (
    DryRun,
    DryRunOpt,
    Files,
    ForceOpt,
    OutputOpt,
    QuietOpt,
    Recursive,
    app,
    duration_option,
    emit,
    handles_errors,
    load_manifest_paths,
    note_skipped,
    open_store_for,
    parse_duration,
    say_warnings,
)
from kbctl.cli.diff import ApplySetOpt, PruneOpt, SelectorOpt, applyset_name, plan_apply, prune_scope
from kbctl.cli.render import (
    client_valid_line,
    no_controller_line,
    pruned_line,
    read_here_line,
    recorded_line,
    span,
    sync_applied_line,
)
from kbctl.cli.terminal import say
from kbctl.defaults import APPLY_WAIT_SECONDS

if TYPE_CHECKING:
    from kbctl import ApplyReport, ManifestsToApply, PendingResult, PruneScope


@app.command()
@handles_errors
def apply(
    filename: Files,
    recursive: Recursive = False,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="Ingest and publish before returning: through a running controller, or in-process when none runs.",
        ),
    ] = False,
    timeout: Annotated[
        str, duration_option("--timeout", minimum=1, help="With --wait and a controller: how long to wait for it.")
    ] = span(APPLY_WAIT_SECONDS),
    dry_run: DryRunOpt = None,
    prune: PruneOpt = False,
    applyset: ApplySetOpt = None,
    selector: SelectorOpt = None,
    exit_code: Annotated[
        bool,
        typer.Option("--exit-code", help="Exit 0 when nothing changed, 2 when something did (1 stays failure)."),
    ] = False,
    quiet: QuietOpt = False,
    output: OutputOpt = None,
    force: ForceOpt = False,
) -> None:
    """Create or update knowledge bases to match manifests: fetch, chunk, embed what changed, publish a version.

    Every manifest is validated first; if any is invalid nothing is written. With --wait the work is
    done before the command returns (by a running `kbctl controller`, or in-process when none runs);
    without it the desired state is recorded for a controller ("configured (version 3 pending)").
    Exit code 1 when a source or a knowledge base failed (the previous version keeps serving); with --wait the last
    line counts them: "applied 3 resources", or "applied 3 resources, 1 failed". Knowledge
    bases with path: sources are always applied by this process, which has the files. A file applied before byte
    for byte, while the store still serves what that apply left, is reported unchanged without being parsed
    again (knowledge bases of inline sources).

    --applyset NAME records the knowledge bases of these manifests as one apply set (give each repository
    its own; one that belongs to another set is refused); --prune then deletes the set's members that the
    manifests no longer name ("KnowledgeBase/NAME pruned"), narrowed by -l when given.

    A knowledge base a Sync manages (one it applied, while the Sync exists and is not suspended) is refused
    when this apply would change it, since the Sync's next pass would undo it: the error names the Sync and how to
    suspend it; --force applies it anyway, with a warning.

    --dry-run writes nothing: --dry-run=server (or a bare --dry-run) prints what would happen,
    "KnowledgeBase/NAME configured (dry run)" with the changes `kbctl diff` shows; --dry-run=client only
    validates the manifests, without a store. --exit-code: 0 when
    nothing changed (or would), 2 when something was (or would be) created, configured or pruned, 1 on
    any failure.
    """
    from kbctl.cli.progress import CliReporter
    from kbctl.manifest import read_manifest_files

    applyset = applyset_name(applyset)
    chosen = prune_scope(prune, selector, applyset)
    if dry_run is DryRun.client:
        _client_dry_run(filename, recursive, output)
        return
    if dry_run is DryRun.server:
        _dry_run(filename, recursive, chosen, output, exit_code)
        return
    files = read_manifest_files(filename, recursive=recursive, stdin=sys.stdin)
    reporter = CliReporter(quiet, log=output is None)
    with open_store_for(files) as store:
        # Files the store applied byte for byte and still serves are not parsed again (kbctl.engine.settled).
        to_apply = store.load_settled(files)
        note_skipped(to_apply.manifests)
        del files  # the texts read: what was parsed holds what it needs (a large manifest's text is ~100 MB)
        try:
            report = store.apply(
                to_apply,
                wait=wait,
                controller=True,
                timeout=parse_duration(timeout),
                applyset=applyset,
                prune=chosen,
                reporter=reporter,
                on_recorded=None if wait else _recorded_lines(to_apply, quiet=quiet, log=output is None),
                force=force,
            )
        finally:
            reporter.close()
        say_warnings(report.warnings)
        alive = wait or store.controller_alive()
    if output and not (wait and quiet):
        emit(_json(report, wait=wait, pruning=chosen is not None), output)
    elif not quiet and not output:
        for name in report.pruned:
            say(pruned_line(name))
        for sync in report.syncs:
            say(sync_applied_line(sync.name, sync.action))
        if wait:
            from kbctl.cli.render import applied_line

            say(applied_line(report))
        elif any(p.pending for p in report.recorded) and not alive:
            say(no_controller_line())
    code = report.exit_code(changes=exit_code)
    if code:
        raise typer.Exit(code)


def _recorded_lines(to_apply: ManifestsToApply, *, quiet: bool, log: bool) -> Callable[[list[PendingResult]], None]:
    """apply without --wait: the lines of what was left to a controller, said before the knowledge bases of path:
    sources are applied here (a controller has no copy of their files)."""
    local = [m.kb.name for m in to_apply.manifests.manifests if m.kb.reads_files]

    def recorded(pending: list[PendingResult]) -> None:
        if log and not quiet:
            for p in pending:
                say(recorded_line(p.name, p.action, p.version, pending=p.pending))
        if local and not quiet:
            say(read_here_line(local), err=True)

    return recorded


def _json(report: ApplyReport, *, wait: bool, pruning: bool) -> dict[str, Any]:
    """`-o json|yaml`: with --wait the report (and what was pruned, when pruning); without, what was recorded,
    what was pruned, and the report of what was applied here (path: sources), if any."""
    applied = report.model_dump(mode="json", exclude={"recorded", "pruned", "syncs", "failed_syncs"})
    syncs = {"syncs": [s.model_dump(mode="json", by_alias=True) for s in report.syncs]} if report.syncs else {}
    if wait:
        return {**applied, "pruned": report.pruned, **syncs} if pruning else {**applied, **syncs}
    out: dict[str, Any] = {"results": [p.__dict__ for p in report.recorded], "pruned": report.pruned, **syncs}
    if report.results:
        out["applied"] = applied
    return out


def _client_dry_run(filename: list[str], recursive: bool, output: OutputOpt) -> None:
    """--dry-run=client: validate the manifests (every problem at once, as apply does) and touch no store."""
    manifests = load_manifest_paths(filename, recursive).manifests
    if output:
        emit({"dryRun": "client", "valid": [m.kb.name for m in manifests]}, output)
        return
    for m in manifests:
        say(client_valid_line(m.kb.name))


def _dry_run(
    filename: list[str], recursive: bool, chosen: PruneScope | None, output: OutputOpt, exit_code: bool
) -> None:
    from kbctl.cli.render import diff_lines

    plan = plan_apply(filename, recursive, chosen)
    if output:
        emit(plan, output)
    else:
        for line in diff_lines(plan, suffix=" (dry run)"):
            say(line)
    if exit_code and plan.differs:
        raise typer.Exit(2)
