"""`kbctl controller` (the long-running reconciler) and `kbctl wait` (block until a condition holds)."""

from __future__ import annotations

import signal
import threading
from typing import Annotated

import typer

from kbctl.cli._common import (
    KbName,
    Resource,
    app,
    check_resource,
    duration_option,
    handles_errors,
    open_store,
    parse_duration,
)


def parse_for(text: str) -> tuple[str, bool]:
    """(condition, wanted status) of `--for=condition=Ready` or `--for=condition=Degraded=false`."""
    kind, _, rest = text.partition("=")
    name, _, value = rest.partition("=")
    if kind != "condition" or not name or value.lower() not in ("", "true", "false"):
        raise typer.BadParameter(
            f"invalid --for {text!r}; use condition=NAME or condition=NAME=true|false", param_hint="--for"
        )
    return name, value.lower() != "false"


@app.command()
@handles_errors
def controller(
    once: Annotated[bool, typer.Option("--once", help="Process what is pending, then exit.")] = False,
    poll: Annotated[
        str,
        duration_option("--poll-interval", "--poll-seconds", minimum=0.5, help="Check for work at least this often."),
    ] = "5s",
) -> None:
    """Run the reconciler: reconcile knowledge bases recorded by `kbctl apply` (without --wait).

    Wakes up on a PostgreSQL NOTIFY (and every --poll-interval), claims one pending knowledge base at a
    time with FOR UPDATE SKIP LOCKED and a lease, so several controllers can share one database
    without doing the same work twice. Stops cleanly on SIGINT/SIGTERM.
    """
    from kbctl.cli.progress import CliReporter

    reporter = CliReporter()
    with open_store() as store:
        ctl = store.controller(reporter=reporter)
        if once:
            done = ctl.run_once()
            ctl.deregister()
            typer.echo(f"reconciled {done} knowledge base{'s' if done != 1 else ''}")
            return
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        typer.echo(f"controller {ctl.id} running", err=True)
        ctl.run(stop, poll_seconds=parse_duration(poll))


@app.command()
@handles_errors
def wait(
    resource: Resource,
    name: KbName,
    for_: Annotated[
        str, typer.Option("--for", metavar="CONDITION", help="condition=NAME[=true|false], e.g. condition=Ready.")
    ] = ("condition=Ready"),
    timeout: Annotated[str, duration_option("--timeout", help="Give up after this long (30s, 5m, 1h).")] = "30s",
) -> None:
    """Wait until a knowledge base has a condition (Ready, Progressing, Degraded); exit 1 on timeout.

    Ready=true means the latest generation: while a change waits for a controller, the version in place keeps
    Ready True (reason Serving), and waiting returns only once the change is reconciled.
    """
    check_resource(resource)
    condition, value = parse_for(for_)
    seconds = parse_duration(timeout)
    with open_store() as store:
        met = store.wait(name, condition=condition, value=value, timeout=seconds)
    if not met:
        typer.echo(
            f"Error: timed out after {timeout} waiting for {condition}={value} on knowledgebase/{name}", err=True
        )
        raise typer.Exit(1)
    typer.echo(f"knowledgebase/{name} condition met")
