"""`kbctl apply`: make the store match manifests."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from kbctl.cli._common import (
    DryRun,
    DryRunOpt,
    Files,
    OutputOpt,
    QuietOpt,
    Recursive,
    app,
    duration_option,
    emit,
    handles_errors,
    open_store_for,
    parse_duration,
)
from kbctl.cli.diff import ApplySetOpt, PruneOpt, SelectorOpt, applyset_name, plan_apply, prune_scope

if TYPE_CHECKING:
    from kbctl.client import KnowledgeBaseStore
    from kbctl.engine.controller import PendingResult
    from kbctl.engine.prune import PruneScope
    from kbctl.engine.results import ApplyReport
    from kbctl.engine.settled import ManifestsToApply


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
    ] = "10m",
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
) -> None:
    """Create or update knowledge bases to match manifests: fetch, chunk, embed what changed, publish a version.

    Every manifest is validated first; if any is invalid nothing is written. With --wait the work is
    done before the command returns (by a running `kbctl controller`, or in-process when none runs);
    without it the desired state is recorded for a controller ("configured (version 3 pending)").
    Exit code 1 when a source or a knowledge base failed (the previous version keeps serving). Knowledge
    bases with path: sources are always applied by this process, which has the files. A file applied before byte
    for byte, while the store still serves what that apply left, is reported unchanged without being parsed
    again (knowledge bases of inline sources).

    --applyset NAME records the knowledge bases of these manifests as one apply set (give each repository
    its own; one that belongs to another set is refused); --prune then deletes the set's members that the
    manifests no longer name ("KnowledgeBase/NAME pruned"), narrowed by -l when given.

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
    with open_store_for(files) as store:
        # Files the store applied byte for byte and still serves are not parsed again (kbctl.engine.settled).
        to_apply = store.load_settled(files)
        del files  # the texts read: what was parsed holds what it needs (a large manifest's text is ~100 MB)
        if not wait:
            _submit(store, to_apply, applyset, chosen, output, exit_code, quiet)
            return
        names = to_apply.manifests.names
        _check_applyset(store, names, applyset)
        reporter = CliReporter(quiet, log=output is None)
        try:
            report = store.apply_settled_and_wait(to_apply, reporter=reporter, timeout=parse_duration(timeout))
        finally:
            reporter.close()
        pruned = _join_and_prune(store, names, applyset, chosen)
    if not quiet:
        _print_report(report, pruned if chosen else None, output)
    if report.failed:
        raise typer.Exit(1)
    if exit_code and (pruned or any(r.action != "unchanged" for r in report.results)):
        raise typer.Exit(2)


def _check_applyset(store: KnowledgeBaseStore, names: list[str], applyset: str | None) -> None:
    if applyset is not None:
        store.check_applyset(set(names), applyset)


def _join_and_prune(
    store: KnowledgeBaseStore, names: list[str], applyset: str | None, chosen: PruneScope | None
) -> list[str]:
    """After an apply: record its knowledge bases (by name) as members of the apply set, then prune what the
    scope covers and the manifests no longer name."""
    if applyset is not None:
        store.join_applyset(names, applyset)
    return store.prune(names, chosen.selector, applyset=chosen.applyset) if chosen else []


def _submit(
    store: KnowledgeBaseStore,
    to_apply: ManifestsToApply,
    applyset: str | None,
    chosen: PruneScope | None,
    output: OutputOpt,
    exit_code: bool,
    quiet: bool,
) -> None:
    """apply without --wait: record the desired state for a controller and return; knowledge bases that read
    files (path: sources) are applied here, since a controller has no copy of the files."""
    from kbctl.cli.progress import CliReporter

    local = [m.kb.name for m in to_apply.manifests.manifests if m.kb.reads_files]
    reporter = CliReporter(quiet, log=output is None)

    def recorded(pending: list[PendingResult]) -> None:
        """The lines of what was left to a controller, before the lines of what is applied here."""
        if not output and not quiet:
            for p in pending:
                state = f"version {p.version} pending" if p.pending else f"version {p.version}"
                typer.echo(f"KnowledgeBase/{p.name} {p.action if p.pending else 'unchanged'} ({state})")
        if local and not quiet:
            typer.echo(
                f"{', '.join(local)}: path: sources are read here (as with --wait), not by a controller", err=True
            )

    names = to_apply.manifests.names
    _check_applyset(store, names, applyset)
    try:
        pending, applied = store.submit_settled_or_apply(to_apply, reporter=reporter, on_recorded=recorded)
    finally:
        reporter.close()
    alive = store.controller_alive()
    pruned = _join_and_prune(store, names, applyset, chosen)
    if output:
        results: dict[str, object] = {"results": [p.__dict__ for p in pending], "pruned": pruned}
        if applied is not None:
            results["applied"] = applied.model_dump(mode="json")
        emit(results, output)
    elif not quiet:
        for name in pruned:
            typer.echo(f"KnowledgeBase/{name} pruned")
        if any(p.pending for p in pending) and not alive:
            typer.echo(
                "no controller is running, so nothing is ingested yet: run `kbctl controller` (or `kbctl controller "
                "--once`), or apply again with --wait"
            )
    if applied is not None and applied.failed:
        raise typer.Exit(1)
    changed = applied is not None and any(r.action != "unchanged" for r in applied.results)
    if exit_code and (pruned or changed or any(p.pending for p in pending)):
        raise typer.Exit(2)


def _print_report(report: ApplyReport, pruned: list[str] | None, output: OutputOpt) -> None:
    if output:
        emit(report if pruned is None else {**report.model_dump(mode="json"), "pruned": pruned}, output)
        return
    for name in pruned or []:
        typer.echo(f"KnowledgeBase/{name} pruned")
    n = len(report.results)
    typer.echo(f"applied {n} resource{'s' if n != 1 else ''}")


def _client_dry_run(filename: list[str], recursive: bool, output: OutputOpt) -> None:
    """--dry-run=client: validate the manifests (every problem at once, as apply does) and touch no store."""
    from kbctl.manifest import load_manifests

    manifests = load_manifests(filename, recursive=recursive, stdin=sys.stdin)
    if output:
        emit({"dryRun": "client", "valid": [m.kb.name for m in manifests]}, output)
        return
    for m in manifests:
        typer.echo(f"KnowledgeBase/{m.kb.name} valid (dry run: client, the store was not consulted)")


def _dry_run(
    filename: list[str], recursive: bool, chosen: PruneScope | None, output: OutputOpt, exit_code: bool
) -> None:
    from kbctl.cli.render import diff_lines

    plan = plan_apply(filename, recursive, chosen)
    if output:
        emit(plan, output)
    else:
        for line in diff_lines(plan, suffix=" (dry run)"):
            typer.echo(line)
    if exit_code and plan.differs:
        raise typer.Exit(2)
