"""What every kbctl command shares: the app, common options, error handling and output formatting."""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, ParamSpec, TypeVar

import typer

from kbctl.errors import InputError, KbctlError

if TYPE_CHECKING:  # the library is imported by the command that uses it, so `--help` and `version` start fast
    from pydantic import BaseModel

    from kbctl.client import KnowledgeBaseStore
    from kbctl.query.results import RerankInfo

app = typer.Typer(
    rich_markup_mode=None,
    name="kbctl",
    help="Declarative, kubectl-style controller for retrieval knowledge bases on PostgreSQL + pgvector.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def command_group(name: str, summary: str) -> typer.Typer:
    """A group of subcommands (`kbctl NAME ...`) with plain-text help, like the rest of kbctl."""
    group = typer.Typer(rich_markup_mode=None, help=summary, no_args_is_help=True)
    app.add_typer(group, name=name)
    return group


server_app = command_group("server", "Manage the embedded PostgreSQL server (used when no database URL is set).")
config_app = command_group("config", "Show kbctl's configuration (embedding providers and profiles, networks).")

# `kbctl ask`: the knowledge base does not cover the question (not an error: 1 is for errors, 2 for usage).
NOT_COVERED_EXIT = 3

RESOURCES = {"knowledgebase", "knowledgebases", "kb", "kbs"}
state: dict[str, Any] = {"debug": False, "database_url": None}


class Output(StrEnum):
    """Machine-readable output formats."""

    json = "json"
    yaml = "yaml"


class QueryMode(StrEnum):
    """How a query ranks candidates (a wrong value is a usage error, exit code 2)."""

    hybrid = "hybrid"
    vector = "vector"
    keyword = "keyword"


Files = Annotated[
    list[str],
    typer.Option("--filename", "-f", help="Manifest file, directory of manifests, or - for stdin (repeatable)."),
]
Recursive = Annotated[bool, typer.Option("--recursive", "-R", help="Process directories recursively.")]
OutputOpt = Annotated[Output | None, typer.Option("--output", "-o", help="Print json or yaml instead of text.")]
RerankOpt = Annotated[
    bool | None,
    typer.Option(
        "--rerank/--no-rerank",
        help="Rerank with spec.retrieval.rerank, or skip it (default: rerank when the spec names a reranker).",
    ),
]


def warn_rerank(info: RerankInfo | None) -> None:
    """Say on stderr that the reranker failed and the answer is in fused order."""
    if info is not None and info.error:
        typer.echo(f"warning: rerank skipped, results are in fused order: {info.error}", err=True)


Resource = Annotated[str, typer.Argument(help="Resource type: knowledgebase (aliases: knowledgebases, kb).")]

P = ParamSpec("P")
R = TypeVar("R")


LockTimeoutOpt = Annotated[
    float,
    typer.Option(
        "--timeout", min=0, help="Seconds to wait for an apply of the knowledge base that holds its lock to finish."
    ),
]


def say_waiting(name: str) -> Callable[[], None]:
    """What a command prints on stderr when another command holds the knowledge base's lock."""
    return lambda: typer.echo(f"waiting for another apply, delete or rollback of KnowledgeBase/{name}", err=True)


def handles_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Turn kbctl errors into one clear line on stderr and exit code 1 (a traceback only with --debug)."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except InputError as exc:
            if state["debug"]:
                raise
            for problem in exc.problems:
                typer.echo(str(problem), err=True)
            raise typer.Exit(1) from None
        except (KbctlError, ValueError) as exc:
            if state["debug"]:
                raise
            typer.echo(f"Error: {exc}", err=True)
            raise typer.Exit(1) from None

    return wrapper


def open_store() -> KnowledgeBaseStore:
    from kbctl.client import KnowledgeBaseStore

    return KnowledgeBaseStore(database_url=state["database_url"])


def check_resource(resource: str) -> None:
    if resource.lower() not in RESOURCES:
        raise typer.BadParameter(
            f"unknown resource type '{resource}'; kbctl knows: knowledgebase (kb)", param_hint="RESOURCE"
        )


def emit(data: BaseModel | Sequence[BaseModel] | dict[str, Any], output: Output | None) -> None:
    if isinstance(data, dict):
        plain: Any = data
    elif isinstance(data, Sequence):
        plain = {"items": [d.model_dump(mode="json") for d in data]}
    else:
        plain = data.model_dump(mode="json")
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


def _print_version(value: bool | None) -> None:
    if value:
        from kbctl._version import __version__

        typer.echo(f"kbctl {__version__}")
        raise typer.Exit()


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
    version: Annotated[
        bool | None,
        typer.Option("--version", is_eager=True, callback=_print_version, help="Print the kbctl version and exit."),
    ] = None,
) -> None:
    """Keep KnowledgeBase manifests in git; `kbctl apply -f kb/ --wait` makes the store match them.

    Without --database-url, kbctl starts its own PostgreSQL + pgvector in $KBCTL_HOME/pg
    (default ~/.local/share/kbctl/pg) and leaves it running; `kbctl server stop` stops it.
    """
    state["debug"] = debug
    state["database_url"] = database_url
