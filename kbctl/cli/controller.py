"""`kbctl controller` (the long-running reconciler) and `kbctl wait` (block until a condition holds)."""

from __future__ import annotations

import logging
import signal
import threading
from contextlib import AbstractContextManager, nullcontext
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

from kbctl.cli._common import (
    AllOpt,
    ListSelectorOpt,
    Resource,
    app,
    choices,
    duration_option,
    handles_errors,
    list_selector,
    open_store,
    parse_duration,
    resource_names,
)
from kbctl.cli.completion import kb_names
from kbctl.cli.render import controller_started_line, pass_finished_line, wait_met_line, wait_timed_out_line
from kbctl.cli.terminal import say

if TYPE_CHECKING:
    from kbctl import Event, Reporter
    from kbctl.cli.progress import JsonLogReporter


class LogFormat(StrEnum):
    """How the controller logs: text lines, or JSON lines."""

    text = "text"
    json = "json"


class LogLevel(StrEnum):
    """The least a controller's log line must be to be printed."""

    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


def parse_for(text: str) -> tuple[str, bool] | None:
    """(condition, wanted status) of `--for=condition=Ready` or `--for=condition=Degraded=false`; None for
    `--for=delete`."""
    if text.lower() == "delete":
        return None
    kind, _, rest = text.partition("=")
    name, _, value = rest.partition("=")
    if kind != "condition" or not name or value.lower() not in ("", "true", "false"):
        raise typer.BadParameter(
            f"invalid --for {text!r}; use condition=NAME, condition=NAME=true|false or delete", param_hint="--for"
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
            help="Serve /metrics (Prometheus), /healthz and /readyz here, e.g. :9090 (every interface) or "
            "127.0.0.1:9090.",
        ),
    ] = None,
    log_format: Annotated[
        LogFormat, typer.Option("--log-format", metavar=choices(LogFormat), help="text lines, or JSON lines.")
    ] = LogFormat.text,
    log_level: Annotated[
        LogLevel,
        typer.Option(
            "--log-level",
            metavar=choices(LogLevel),
            help="The least a line must be to be logged: debug adds routine work (reconciles that changed nothing).",
        ),
    ] = LogLevel.info,
) -> None:
    """Run the reconciler: apply the Syncs that are due (git folders of manifests, pull mode), bring back knowledge
    bases that drifted from the manifest last applied (a manual `rollout undo`), reconcile those recorded by
    `kbctl apply` (without --wait), and run the scheduled refreshes (spec.refresh) that are due.

    Wakes up on a PostgreSQL NOTIFY (and every --poll-interval), claims one pending knowledge base at a
    time with FOR UPDATE SKIP LOCKED and a lease, so several controllers can share one database
    without doing the same work twice. Stops cleanly on SIGINT/SIGTERM. As a service (deploy/: the
    image, a kustomize base and overlays, a systemd unit): --metrics-address serves Prometheus metrics (reconciles,
    durations, failures by reason, last success, queue depth; per knowledge base Ready, failing sources and serving
    version, per Sync its state, read from the store at each scrape), /healthz (503 when the loop has
    stalled) and /readyz (503 while the database cannot be reached or its schema is not this kbctl's), and
    --log-format json prints one JSON object per line on stdout (time, level, logger, message, event,
    knowledgeBase), the same keys as `kbctl serve`'s log. Routine work (a reconcile that changed nothing, a Sync
    applying the commit it applied last) is logged only with --log-level debug.
    """
    from kbctl.cli.progress import CliReporter, JsonLogReporter

    if metrics_address is not None:
        from kbctl.serve.controller import parse_address

        try:
            address = parse_address(metrics_address)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="'--metrics-address'") from None
    seconds = parse_duration(poll)
    level = logging.getLevelName(log_level.value.upper())
    if log_format is LogFormat.json:
        from kbctl.serve.logs import json_logging

        log: JsonLogReporter | _Leveled = JsonLogReporter()
        logs: AbstractContextManager[None] = json_logging(level=level)
    else:
        log, logs = _Leveled(CliReporter(), level), nullcontext()
    with logs:
        _run_controller(log, once=once, seconds=seconds, address=address if metrics_address is not None else None)


class _Leveled:
    """The text log of a controller: the lines of `inner` at `level` and above (`EventLevels`)."""

    def __init__(self, inner: Reporter, level: int) -> None:
        from kbctl.cli.progress import EventLevels

        self._inner, self._level, self._levels = inner, level, EventLevels()

    def report(self, event: Event) -> None:
        """Hand `event` on when its level is shown (progress always: the bar is not a log line)."""
        level = self._levels(event)
        if level is None or level >= self._level:
            self._inner.report(event)

    def say(self, event: str, message: str, *, level: str = "info", err: bool = False) -> None:
        """Print a line of the command's own (`event` and `level` are for the JSON log)."""
        say(message, err=err)


def _run_controller(
    log: JsonLogReporter | _Leveled, *, once: bool, seconds: float, address: tuple[str, int] | None
) -> None:
    """`kbctl controller`'s work, logging to `log`."""
    with open_store() as store:
        server = None
        reporter: Reporter = log
        if address is not None:
            from kbctl.serve.controller import ControllerMetrics, HealthServer, StoreReadiness

            metrics = ControllerMetrics(log, state=store.overview)  # the scrape's own connection, each time
            reporter = metrics
        ctl = store.controller(reporter=reporter)
        if address is not None:
            server = HealthServer(
                address, metrics, lambda: ctl.alive(max(3 * seconds, 60.0)), ready=StoreReadiness(store.settings)
            )
        try:
            if once:
                report = ctl.run_once()
                ctl.deregister()
                done, failed = len(report.results), sum(r.failed for r in report.results) + len(report.failed_syncs)
                log.say("PassFinished", pass_finished_line(done, failed), level="error" if failed else "info")
                if report.exit_code():
                    raise typer.Exit(report.exit_code())
                return
            stop = threading.Event()
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, lambda *_: stop.set())
            port = server.port if server is not None else None
            log.say("ControllerStarted", controller_started_line(ctl.id, port), err=True)
            ctl.run(stop, poll_seconds=seconds)
        finally:
            if server is not None:
                server.close()


@app.command()
@handles_errors
def wait(
    resource: Resource,
    names: Annotated[
        list[str] | None,
        typer.Argument(metavar="NAME", help="Knowledge bases to wait for (or -l, or --all).", autocompletion=kb_names),
    ] = None,
    for_: Annotated[
        str,
        typer.Option(
            "--for", metavar="CONDITION", help="condition=NAME[=true|false] (e.g. condition=Ready), or delete."
        ),
    ] = "condition=Ready",
    selector: ListSelectorOpt = None,
    all_kbs: AllOpt = False,
    timeout: Annotated[str, duration_option("--timeout", help="Give up after this long (30s, 5m, 1h).")] = "30s",
) -> None:
    """Wait until knowledge bases have a condition (Ready, Progressing, Degraded), or are deleted; exit 1 on
    timeout.

    Which ones, as in kubectl: `wait kb NAME...` (or kb/NAME...), `wait kb -l SELECTOR`, or `wait kb --all` (those
    that exist when the wait starts). Prints `knowledgebase/NAME condition met` (or `deleted`) for each as soon as
    it is; one --timeout covers them all, and on timeout the error names those not met. Ready=true means the latest
    generation: while a change waits for a controller, the version in place keeps Ready True (reason Serving), and
    waiting returns only once the change is reconciled. A name that does not exist is an error, except with
    --for=delete (it is deleted already).

    \b
    Examples:
      kbctl apply -f kb/ && kbctl wait kb --all --for=condition=Ready --timeout=10m
      kbctl wait kb client-service-policy data-handling-policy --for=condition=Degraded=false
      kbctl wait kb -l team=support --for=condition=Ready --timeout=5m
      kbctl wait kb old-policies --for=delete --timeout=1m
    """
    wanted = list(dict.fromkeys(resource_names(resource, names)))
    chosen = list_selector(selector, wanted)
    if sum((bool(wanted), chosen is not None, all_kbs)) != 1:
        raise typer.BadParameter("choose what to wait for: names, -l or --all (one of them)", param_hint="NAME")
    target = parse_for(for_)
    seconds = parse_duration(timeout)
    done: list[str] = []

    def met(name: str) -> None:
        done.append(name)
        say(wait_met_line(name, deleted=target is None))

    with open_store() as store:
        targets = wanted or [s.name for s in store.list(chosen)]
        if not targets:
            if target is None:
                return  # nothing left to be deleted
            from kbctl.errors import NotFoundError

            raise NotFoundError("no knowledge bases found" if all_kbs else "no knowledge base matches the selector")
        if target is None:
            all_met = store.wait(targets, deleted=True, timeout=seconds, on_met=met)
        else:
            all_met = store.wait(targets, condition=target[0], value=target[1], timeout=seconds, on_met=met)
    if all_met:
        return
    say(wait_timed_out_line(timeout, target, [n for n in targets if n not in done]), err=True)
    raise typer.Exit(1)
