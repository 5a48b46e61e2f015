"""`kbctl refresh`: fetch URL sources again and publish a new version only when some page's text changed."""

from __future__ import annotations

from typing import Annotated

import typer

from kbctl.cli._common import (
    AllOpt,
    OutputOpt,
    QuietOpt,
    Resource,
    app,
    check_resource,
    emit,
    handles_errors,
    open_store,
)
from kbctl.cli.completion import kb_names


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
