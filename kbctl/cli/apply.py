"""`kbctl apply`: make the store match manifests."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from kbctl.cli._common import CliReporter, Files, OutputOpt, Recursive, app, emit, handles_errors, open_store
from kbctl.manifest import load_manifests


@app.command()
@handles_errors
def apply(
    filename: Files,
    recursive: Recursive = False,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="Wait until every source is ingested (apply always "
            "ingests in-process in this version, so this is implied).",
        ),
    ] = True,
    output: OutputOpt = None,
) -> None:
    """Create or update knowledge bases to match manifests: fetch, chunk, embed what changed, publish a version.

    Every manifest is validated first; if any is invalid nothing is written. Exit code 1 when a source
    or a knowledge base failed (the previous version keeps serving).
    """
    manifests = load_manifests(filename, recursive=recursive, stdin=sys.stdin)
    reporter = CliReporter(quiet=output is not None)
    with open_store() as store:
        try:
            report = store.apply(manifests, reporter=reporter)
        finally:
            reporter.close()
    if output:
        emit(report, output)
    else:
        n = len(report.results)
        typer.echo(f"applied {n} resource{'s' if n != 1 else ''}")
    if report.failed:
        raise typer.Exit(1)
