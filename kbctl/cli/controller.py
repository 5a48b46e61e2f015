"""`kbctl controller` (the long-running reconciler) and `kbctl wait` (block until a condition holds)."""

from __future__ import annotations

import signal
import threading
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

from kbctl.cli._common import (
    KbName,
    Resource,
    app,
    check_resource,
    choices,
    duration_option,
    handles_errors,
    open_store,
    parse_duration,
)

if TYPE_CHECKING:
    from kbctl import Reporter


class LogFormat(StrEnum):
    """How the controller logs: text lines, or JSON lines."""

    text = "text"
    json = "json"


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
    once: Annotated[
        bool,
        typer.Option("--once", help="Process what is pending and the refreshes due, then exit (1 if any failed)."),
    ] = False,
    poll: Annotated[
        str,
        duration_option("--poll-interval", "--poll-seconds", minimum=0.5, help="Check for work at least this often."),
    ] = "5s",
    metrics_address: Annotated[
        str | None,
        typer.Option(
            "--metrics-address",
            metavar="HOST:PORT",
            help="Serve /metrics (Prometheus) and /healthz here, e.g. :9090 (every interface) or 127.0.0.1:9090.",
        ),
    ] = None,
    log_format: Annotated[
        LogFormat, typer.Option("--log-format", metavar=choices(LogFormat), help="text lines, or JSON lines.")
    ] = LogFormat.text,
) -> None:
    """Run the reconciler: reconcile knowledge bases recorded by `kbctl apply` (without --wait), and run the
    scheduled refreshes (spec.refresh) that are due.

    Wakes up on a PostgreSQL NOTIFY (and every --poll-interval), claims one pending knowledge base at a
    time with FOR UPDATE SKIP LOCKED and a lease, so several controllers can share one database
    without doing the same work twice. Stops cleanly on SIGINT/SIGTERM. As a service (examples/deploy:
    a systemd unit, a Kubernetes Deployment): --metrics-address serves Prometheus metrics (reconciles,
    durations, failures, queue depth, last success per knowledge base) and /healthz (503 when the loop has
    stalled), and --log-format json prints one JSON object per event.
    """
    from kbctl.cli.progress import CliReporter, JsonLogReporter

    if metrics_address is not None:
        from kbctl.serve.controller import parse_address

        try:
            address = parse_address(metrics_address)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="'--metrics-address'") from None
    seconds = parse_duration(poll)
    log = JsonLogReporter() if log_format is LogFormat.json else CliReporter()
    with open_store() as store:
        server = None
        reporter: Reporter = log
        if metrics_address is not None:
            from kbctl.serve.controller import ControllerMetrics, HealthServer

            metrics = ControllerMetrics(log, store.pending_count)  # the scrape's own connection, each time
            reporter = metrics
        ctl = store.controller(reporter=reporter)
        if metrics_address is not None:
            server = HealthServer(address, metrics, lambda: ctl.alive(max(3 * seconds, 60.0)))
        try:
            if once:
                report = ctl.run_once()
                ctl.deregister()
                done, failed = len(report.results), sum(r.failed for r in report.results)
                plural = "s" if done != 1 else ""
                typer.echo(f"reconciled {done} knowledge base{plural}" + (f", {failed} failed" if failed else ""))
                if report.exit_code():
                    raise typer.Exit(report.exit_code())
                return
            stop = threading.Event()
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, lambda *_: stop.set())
            where = f"; metrics and /healthz on port {server.port}" if server is not None else ""
            typer.echo(f"controller {ctl.id} running{where}", err=True)
            ctl.run(stop, poll_seconds=seconds)
        finally:
            if server is not None:
                server.close()


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
