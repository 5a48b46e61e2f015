"""The `kbctl` command line: parses arguments, calls the Python API, formats the result. No logic."""

from __future__ import annotations

import functools
import io
import json
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, ParamSpec, TypeVar

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from kbctl import __version__
from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings
from kbctl.errors import KbctlError, ManifestError
from kbctl.manifest import json_schema, load_manifests
from kbctl.store.embedded import server_status, stop_server

app = typer.Typer(
    name="kbctl",
    help="Declarative, kubectl-style controller for retrieval knowledge bases on PostgreSQL + pgvector.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
server_app = typer.Typer(help="Manage the embedded PostgreSQL server (used when no database URL is set).")
app.add_typer(server_app, name="server")

RESOURCES = {"knowledgebase", "knowledgebases", "kb", "kbs"}
_state: dict[str, Any] = {"debug": False, "database_url": None}


class Output(StrEnum):
    """Machine-readable output formats."""

    json = "json"
    yaml = "yaml"


Files = Annotated[
    list[str],
    typer.Option("--filename", "-f", help="Manifest file, directory of manifests, or - for stdin (repeatable)."),
]
Recursive = Annotated[bool, typer.Option("--recursive", "-R", help="Process directories recursively.")]
OutputOpt = Annotated[Output | None, typer.Option("--output", "-o", help="Print json or yaml instead of text.")]
Resource = Annotated[str, typer.Argument(help="Resource type: knowledgebase (aliases: knowledgebases, kb).")]

P = ParamSpec("P")
R = TypeVar("R")


def _handles_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Turn kbctl errors into one clear line on stderr and exit code 1 (a traceback only with --debug)."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except ManifestError as exc:
            if _state["debug"]:
                raise
            for problem in exc.problems:
                typer.echo(str(problem), err=True)
            raise typer.Exit(1) from None
        except (KbctlError, ValueError) as exc:
            if _state["debug"]:
                raise
            typer.echo(f"Error: {exc}", err=True)
            raise typer.Exit(1) from None

    return wrapper


def _store() -> KnowledgeBaseStore:
    return KnowledgeBaseStore(database_url=_state["database_url"])


def _check_resource(resource: str) -> None:
    if resource.lower() not in RESOURCES:
        raise typer.BadParameter(
            f"unknown resource type '{resource}'; kbctl knows: knowledgebase (kb)", param_hint="RESOURCE"
        )


def _emit(data: BaseModel | Sequence[BaseModel] | dict[str, Any], output: Output | None) -> None:
    if isinstance(data, BaseModel):
        plain: Any = data.model_dump(mode="json")
    elif isinstance(data, dict):
        plain = data
    else:
        plain = {"items": [d.model_dump(mode="json") for d in data]}
    if output is Output.yaml:
        from ruamel.yaml import YAML

        buf = io.StringIO()
        yaml = YAML()
        yaml.default_flow_style = False
        yaml.indent(mapping=2, sequence=4, offset=2)
        yaml.dump(plain, buf)
        typer.echo(buf.getvalue(), nl=False)
    else:
        typer.echo(json.dumps(plain, indent=2, ensure_ascii=False))


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]], indent: str = "") -> str:
    cells = [list(headers), *[[("" if c is None else str(c)) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join(indent + "   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def _age(when: datetime) -> str:
    seconds = max(0, int((datetime.now(UTC) - when).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


class _CliReporter:
    """Prints apply lines to stdout and, on a terminal only, an embedding progress bar to stderr."""

    def __init__(self, quiet: bool) -> None:
        self._quiet = quiet
        self._console = Console(stderr=True)
        self._progress: Progress | None = None
        self._task: Any = None

    def line(self, text: str) -> None:
        self.close()
        if not self._quiet:
            typer.echo(text)

    def embedding_progress(self, done: int, total: int) -> None:
        if not self._console.is_terminal:
            return
        if self._progress is None:
            self._progress = Progress(
                TextColumn("embedding"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=self._console,
                transient=True,
            )
            self._progress.start()
            self._task = self._progress.add_task("embedding", total=total)
        self._progress.update(self._task, completed=done, total=total)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


@app.callback()
def _root(
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            envvar="KBCTL_DATABASE_URL",
            show_envvar=True,
            help="PostgreSQL (with pgvector) to use instead of the embedded server.",
        ),
    ] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks of errors.")] = False,
) -> None:
    """Keep KnowledgeBase manifests in git; `kbctl apply -f kb/ --wait` makes the store match them.

    Without --database-url, kbctl starts its own PostgreSQL + pgvector in $KBCTL_HOME/pg
    (default ~/.local/share/kbctl/pg) and leaves it running; `kbctl server stop` stops it.
    """
    _state["debug"] = debug
    _state["database_url"] = database_url


@app.command()
@_handles_errors
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
    reporter = _CliReporter(quiet=output is not None)
    with _store() as store:
        try:
            report = store.apply(manifests, reporter=reporter)
        finally:
            reporter.close()
    if output:
        _emit(report, output)
    else:
        n = len(report.results)
        typer.echo(f"applied {n} resource{'s' if n != 1 else ''}")
    if report.failed:
        raise typer.Exit(1)


@app.command()
@_handles_errors
def refresh(
    resource: Resource,
    name: Annotated[str | None, typer.Argument(help="Knowledge base to refresh (or --all).")] = None,
    source: Annotated[
        list[str] | None, typer.Option("--source", "-s", help="Refresh only this source (repeatable).")
    ] = None,
    all_kbs: Annotated[bool, typer.Option("--all", help="Refresh every knowledge base.")] = False,
    output: OutputOpt = None,
) -> None:
    """Re-fetch URL sources and publish a new version only if some page's text changed.

    Sends If-None-Match / If-Modified-Since from the last fetch; a 304, or a page whose extracted text
    is unchanged, costs no chunking or embedding. A page that fails keeps serving its last good content
    (shown as stale by describe) and makes the command exit 1. Nothing refreshes by itself: run this
    from CI or cron.
    """
    _check_resource(resource)
    if (name is None) != all_kbs:
        raise typer.BadParameter("give a knowledge base NAME or --all (not both)", param_hint="NAME")
    reporter = _CliReporter(quiet=output is not None)
    with _store() as store:
        try:
            report = store.refresh(None if all_kbs else [str(name)], sources=source or (), reporter=reporter)
        finally:
            reporter.close()
    if output:
        _emit(report, output)
    if report.failed:
        raise typer.Exit(1)


@app.command()
@_handles_errors
def validate(filename: Files, recursive: Recursive = False) -> None:
    """Check manifests without touching any database; print one line per problem (file:line: field: ...)."""
    manifests = load_manifests(filename, recursive=recursive, stdin=sys.stdin)
    for m in manifests:
        typer.echo(f"{m.path}:{m.line}: KnowledgeBase/{m.kb.name} valid")


@app.command()
def schema() -> None:
    """Print the JSON Schema of the KnowledgeBase manifest (for editors and CI linters)."""
    typer.echo(json.dumps(json_schema(), indent=2))


@app.command()
@_handles_errors
def get(resource: Resource, name: Annotated[str | None, typer.Argument()] = None, output: OutputOpt = None) -> None:
    """List knowledge bases: name, current version, sources ready/total, chunks, age."""
    _check_resource(resource)
    with _store() as store:
        items = [store.describe(name)] if name else store.list()
    if output:
        _emit(items[0] if name else items, output)
        return
    if not items:
        typer.echo("No knowledge bases found.", err=True)
        return
    typer.echo(
        _table(
            ["NAME", "VERSION", "SOURCES", "CHUNKS", "AGE"],
            [[i.name, i.version or "-", f"{i.ready_sources}/{i.sources}", i.chunks, _age(i.created_at)] for i in items],
        )
    )


@app.command()
@_handles_errors
def describe(resource: Resource, name: str, output: OutputOpt = None) -> None:
    """Show a knowledge base in detail: spec in force, current version, and the state of every source."""
    _check_resource(resource)
    with _store() as store:
        d = store.describe(name)
    if output:
        _emit(d, output)
        return
    created = d.version_created_at.strftime("%Y-%m-%d %H:%M:%S %Z") if d.version_created_at else "-"
    fields = [
        ("Name", d.name),
        ("Labels", ",".join(f"{k}={v}" for k, v in sorted(d.labels.items())) or "<none>"),
        ("Description", d.description or "<none>"),
        ("Version", f"{d.version} (published {created})"),
        ("Model", d.model),
        ("Chunking", " ".join(f"{k}={v}" for k, v in d.chunking.items())),
        ("Retrieval", " ".join(f"{k}={v}" for k, v in d.retrieval.items())),
        ("Chunks", f"{d.chunks} ({d.embedded} embedded, {d.reused} reused in version {d.version})"),
    ]
    for key, value in fields:
        typer.echo(f"{key + ':':<13}{value}")
    typer.echo("Sources:")
    typer.echo(
        _table(
            ["NAME", "KIND", "STATE", "CHUNKS", "EMBEDDED", "REUSED", "MESSAGE"],
            [[s.name, s.kind, s.state, s.chunks, s.embedded, s.reused, s.message] for s in d.source_status],
            indent="  ",
        )
    )


@app.command()
@_handles_errors
def query(
    name: Annotated[str, typer.Argument(help="Knowledge base to search.")],
    question: Annotated[str, typer.Argument(help="The question, in natural language.")],
    top_k: Annotated[
        int | None,
        typer.Option("--top-k", min=1, help="Candidates to consider (default: spec.retrieval.topK)."),
    ] = None,
    threshold: Annotated[
        float | None,
        typer.Option(
            "--threshold",
            min=-1.0,
            max=1.0,
            help="Minimum cosine similarity (default: spec.retrieval.similarityThreshold).",
        ),
    ] = None,
    max_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-tokens",
            min=1,
            help="Token budget of the returned context (default: spec.retrieval.maxContextTokens).",
        ),
    ] = None,
    output: OutputOpt = None,
) -> None:
    """Retrieve the chunks most relevant to a question, in rank order, within threshold and token budget.

    When nothing passes the similarity threshold, says so plainly instead of returning weak matches.
    """
    with _store() as store:
        result = store.query(name, question, top_k=top_k, threshold=threshold, max_tokens=max_tokens)
    if output:
        _emit(result, output)
        return
    for hit in result.hits:
        where = " > ".join(hit.heading_path) or "(no heading)"
        typer.echo(
            f"{hit.rank}. {hit.source} | {where} | chunk {hit.position} | score {hit.score:.3f} | {hit.tokens} tokens"
        )
        typer.echo("   " + hit.text.replace("\n", "\n   "))
        typer.echo("")
    typer.echo(result.message)


@app.command()
@_handles_errors
def delete(resource: Resource, name: str) -> None:
    """Delete a knowledge base with its versions, chunks, and the cached vectors no other one uses."""
    _check_resource(resource)
    with _store() as store:
        result = store.delete(name)
    typer.echo(f"KnowledgeBase/{result.name} deleted ({result.chunks} chunks, {result.vectors} vectors)")


@server_app.command("status")
@_handles_errors
def server_status_cmd(output: OutputOpt = None) -> None:
    """Say whether the embedded PostgreSQL runs, its pid and connection URL."""
    status = server_status(Settings.from_env().pgdata)
    if output:
        _emit(status.__dict__, output)
    elif status.running:
        typer.echo(f"running (pid {status.pid}) in {status.pgdata}: {status.url}")
    else:
        typer.echo(f"not running ({status.pgdata})")


@server_app.command("stop")
@_handles_errors
def server_stop() -> None:
    """Stop the embedded PostgreSQL (the next command that needs it starts it again)."""
    pgdata = Settings.from_env().pgdata
    typer.echo("stopped" if stop_server(pgdata) else f"not running ({pgdata})")


@app.command()
def version() -> None:
    """Print the kbctl version."""
    typer.echo(f"kbctl {__version__}")


def main() -> None:
    """Console-script entry point."""
    app()
