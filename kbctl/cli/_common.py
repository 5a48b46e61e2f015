"""What every kbctl command shares: the app, common options, error handling and output formatting."""

from __future__ import annotations

import functools
import io
import json
import re
import sys
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, ParamSpec, TypeVar

import typer
from typer.core import TyperGroup

from kbctl.cli.completion import RESOURCES, kb_names, object_formats, resource_types
from kbctl.cli.output import ObjectOutput, check_object_output
from kbctl.cli.render import (
    error_line,
    lock_waiting_line,
    rerank_skipped_line,
    skipped_note,
    version_line,
    warning_line,
)
from kbctl.cli.terminal import inert, say
from kbctl.errors import InputError, KbctlError
from kbctl.manifest import CONTEXT_TOKENS_MAX, TOP_K_MAX

if TYPE_CHECKING:  # the library is imported by the command that uses it, so `--help` and `version` start fast
    from pydantic import BaseModel
    from typer import _click  # the click that typer vendors (annotations only)

    from kbctl import RerankInfo
    from kbctl.client import KnowledgeBaseStore
    from kbctl.inputs.access import Reader
    from kbctl.manifest import ManifestSet
    from kbctl.manifest.load import ManifestFiles
    from kbctl.manifest.selectors import Selector


class DryRun(StrEnum):
    """What `--dry-run` checks: the manifests only (client), or also what the store would do (server)."""

    client = "client"
    server = "server"


class _Commands(TyperGroup):
    """kbctl's command group: a bare `--dry-run` means `--dry-run=server`, as in kubectl (click options cannot
    take an optional value, so the bare flag is spelled out before parsing; nothing after `--` is touched)."""

    def parse_args(self, ctx: _click.Context, args: list[str]) -> list[str]:
        end = args.index("--") if "--" in args else len(args)
        spelled = [f"--dry-run={DryRun.server}" if a == "--dry-run" else a for a in args[:end]]
        return super().parse_args(ctx, spelled + args[end:])


app = typer.Typer(
    cls=_Commands,
    rich_markup_mode=None,
    name="kbctl",
    help="Declarative, kubectl-style controller for retrieval knowledge bases on PostgreSQL + pgvector.\n\n"
    "Text output prints the control characters of data (names, titles, descriptions, messages) escaped as \\n, \\t,"
    " \\x1b or \\u202e, so none can drive the terminal or start a line; -o json and -o yaml print them exactly.",
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

# What the completion scripts set when the shell asks kbctl for completions (see `kbctl completion`).
COMPLETE_VAR = "_KBCTL_COMPLETE"

# `kbctl ask` (and query / context with --exit-code): the knowledge base does not cover the question (not an
# error: 1 is for errors, 2 for usage).
NOT_COVERED_EXIT = 3
NothingFoundExitOpt = Annotated[
    bool, typer.Option("--exit-code", help="Exit 3 when nothing passes the similarity threshold (0 when found).")
]

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


def choices(kind: type[StrEnum]) -> str:
    """The metavar that lists an option's values: [hybrid|vector|keyword]."""
    return "[" + "|".join(kind) + "]"


TopKOpt = Annotated[
    int | None,
    typer.Option(
        "--top-k",
        metavar="N",
        min=1,
        max=TOP_K_MAX,
        help=f"How many chunks to return at most, 1-{TOP_K_MAX} (default: spec.retrieval.topK).",
    ),
]
ThresholdOpt = Annotated[
    float | None,
    typer.Option(
        "--threshold",
        metavar="SCORE",
        min=-1.0,
        max=1.0,
        help="Minimum cosine similarity of every chunk, -1 to 1 (default: spec.retrieval.similarityThreshold, else"
        " none: the version's calibrated relevance gate, which describe shows, decides whether anything is returned).",
    ),
]
MaxTokensOpt = Annotated[
    int | None,
    typer.Option(
        "--max-tokens",
        metavar="N",
        min=1,
        max=CONTEXT_TOKENS_MAX,
        help="Token budget of the returned chunks (default: spec.retrieval.maxContextTokens).",
    ),
]
ModeOpt = Annotated[
    QueryMode | None,
    typer.Option(
        "--mode",
        metavar=choices(QueryMode),
        help="hybrid (full text + vectors, fused), vector or keyword (default: spec.retrieval.mode).",
    ),
]
AsGroupOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--as-group",
        metavar="GROUP",
        help="Act as a caller in this group (repeatable): a document behind an access rule is read only when the "
        "rule names one of the groups. A caller without groups reads only documents without a rule (describe "
        "without --as-group or --as-claim shows every source).",
    ),
]
AsClaimOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--as-claim",
        metavar="NAME=VALUE",
        help="Act as a caller holding this claim (repeatable), matched against access.labels.",
    ),
]


def reader_of(groups: list[str] | None, claims: list[str] | None) -> Reader:
    """The caller that --as-group and --as-claim describe; a bad value is a usage error naming its option."""
    from kbctl.inputs.access import Reader

    pairs: dict[str, list[str]] = {}
    for claim in claims or []:
        name, equals, value = claim.partition("=")
        if not equals or not name:
            raise typer.BadParameter(f"expected NAME=VALUE, got {claim!r}", param_hint="'--as-claim'")
        pairs.setdefault(name, []).append(value)
    try:
        return Reader.of(groups or [], pairs)
    except ValueError as exc:
        hint = "'--as-claim'" if claims and "claim" in str(exc) else "'--as-group'"
        raise typer.BadParameter(str(exc), param_hint=hint) from None


DryRunOpt = Annotated[
    DryRun | None,
    typer.Option(
        "--dry-run",
        metavar=choices(DryRun),
        help="Change nothing: client checks the manifests only; server (a bare --dry-run) also plans against the "
        "store and prints what would happen.",
    ),
]
ObjectOutputOpt = Annotated[
    str | None,
    typer.Option(
        "--output",
        "-o",
        metavar="FORMAT",
        callback=check_object_output,
        autocompletion=object_formats,
        help="json or yaml (the objects, which apply again unchanged), wide, name, jsonpath=TEMPLATE or "
        "custom-columns=SPEC, as in kubectl.",
    ),
]
_FILENAME = typer.Option(
    "--filename", "-f", metavar="FILE", help="Manifest file, directory of manifests, or - for stdin (repeatable)."
)
Files = Annotated[list[str], _FILENAME]
OptionalFiles = Annotated[list[str] | None, _FILENAME]  # the same option where names may stand instead (delete)
AllOpt = Annotated[bool, typer.Option("--all", help="Every knowledge base, instead of naming them.")]
ForceOpt = Annotated[
    bool,
    typer.Option("--force", help="Change knowledge bases a Sync manages all the same (its next pass undoes it)."),
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing but errors: no log lines, no progress.")]
Recursive = Annotated[bool, typer.Option("--recursive", "-R", help="Process directories recursively.")]
OutputOpt = Annotated[
    Output | None, typer.Option("--output", "-o", metavar="FORMAT", help="Print json or yaml instead of text.")
]
RerankOpt = Annotated[
    bool | None,
    typer.Option(
        "--rerank/--no-rerank",
        help="Rerank with spec.retrieval.rerank, or skip it (default: rerank when the spec names a reranker).",
    ),
]


def note_skipped(loaded: ManifestSet) -> None:
    """Name on stderr, once per file, the objects of other tools that -f found beside the manifests."""
    for skipped in loaded.skipped:
        say(skipped_note(skipped.message), err=True)


def load_manifest_paths(filename: Sequence[str], recursive: bool) -> ManifestSet:
    """The manifests -f names (stdin for "-"), every problem raised at once, the skipped files noted."""
    from kbctl.manifest import load_manifest_set, read_manifest_files

    loaded = load_manifest_set(read_manifest_files(filename, recursive=recursive, stdin=sys.stdin))
    note_skipped(loaded)
    return loaded


def say_warnings(warnings: Sequence[str]) -> None:
    """Print each warning a library result carries on stderr, `warning: ...`."""
    for warning in warnings:
        say(warning_line(warning), err=True)


def warn_rerank(info: RerankInfo | None) -> None:
    """Say on stderr that the reranker failed and the answer is in fused order."""
    if info is not None and info.error:
        say(rerank_skipped_line(info.error), err=True)


Resource = Annotated[
    str,
    typer.Argument(
        metavar="RESOURCE",
        help="Resource type: knowledgebase (aliases: knowledgebases, kb).",
        autocompletion=resource_types("kb"),
    ),
]
KbName = Annotated[str, typer.Argument(metavar="NAME", help="Knowledge base name.", autocompletion=kb_names)]
QuestionArg = Annotated[str, typer.Argument(metavar="QUESTION", help="The question, in natural language.")]

P = ParamSpec("P")
R = TypeVar("R")


def parse_duration(text: str) -> float:
    """Seconds of a duration as kubectl writes them: 90s, 10m, 1h30m, 250ms, or a plain number of seconds.

    Raises typer.BadParameter (a usage error, exit code 2) for anything else."""
    from kbctl.manifest import duration_seconds

    try:
        return duration_seconds(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def duration_option(*flags: str, help: str, minimum: float = 0.0, maximum: float | None = None) -> Any:
    """A typer option taking a duration (see parse_duration) within [minimum, maximum] seconds; the command
    receives the text as typed and reads it with parse_duration."""

    def check(value: str | None) -> str | None:
        if value is None:
            return None
        seconds = parse_duration(value)
        if seconds < minimum or (maximum is not None and seconds > maximum):
            upper = "" if maximum is None else f" and at most {maximum:g} s"
            raise typer.BadParameter(f"{value!r} is out of range: at least {minimum:g} s{upper}")
        return value

    return typer.Option(*flags, metavar="DURATION", callback=check, help=help)


LockTimeoutOpt = Annotated[
    str,
    duration_option(
        "--timeout", help="How long to wait for an apply of the knowledge base that holds its lock to finish."
    ),
]
# kubectl get's table and watch options (`kbctl get`).
NoHeadersOpt = Annotated[bool, typer.Option("--no-headers", help="Print the table without its header line.")]
ShowLabelsOpt = Annotated[
    bool, typer.Option("--show-labels", help="Add a LABELS column with every label (k=v,k=v or <none>).")
]
LabelColumnsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--label-columns",
        "-L",
        metavar="KEY[,KEY...]",
        help="Add a column for each of these labels, titled with the key upper-cased (repeatable).",
    ),
]
SortByOpt = Annotated[
    str | None,
    typer.Option(
        "--sort-by",
        metavar="JSONPATH",
        help="Sort by a field of the objects -o json prints, e.g. .metadata.name, .status.chunks, "
        ".metadata.creationTimestamp (numbers by value, missing values first).",
    ),
]
WatchOpt = Annotated[
    bool,
    typer.Option(
        "--watch", "-w", help="After the list, keep watching: print a row again whenever one changes (until Ctrl-C)."
    ),
]
WatchTimeoutOpt = Annotated[
    str | None, duration_option("--watch-timeout", help="Stop watching after this long (default: until Ctrl-C).")
]


def say_waiting(name: str) -> Callable[[], None]:
    """What a command prints on stderr when another command holds the knowledge base's lock."""
    return lambda: say(lock_waiting_line(name), err=True)


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
                say(inert(str(problem)), err=True)
            raise typer.Exit(1) from None
        except KbctlError as exc:  # a bad argument is UsageError; unreadable stored data StoreError
            if state["debug"]:
                raise
            say(error_line(str(exc)), err=True)
            raise typer.Exit(1) from None

    return wrapper


def open_store() -> KnowledgeBaseStore:
    from kbctl.client import KnowledgeBaseStore

    return KnowledgeBaseStore(database_url=state["database_url"])


def open_store_for(files: ManifestFiles) -> KnowledgeBaseStore:
    """`open_store` for a command given manifest files (read, not yet parsed): when the store cannot be opened,
    the files' problems, if they have any, are what is reported."""
    try:
        return open_store()
    except KbctlError:
        from kbctl.manifest import load_manifest_set

        load_manifest_set(files)  # raises ManifestError for the first problem of any file
        raise


KB_TYPES = "knowledgebase (kb)"
"""The resource types of a command that takes knowledge bases alone, as its error for another one lists them."""

DESCRIBE_TYPES = "knowledgebase (kb), syncs (sync)"
"""The resource types `kbctl describe` and `kbctl delete` take."""


def check_resource(resource: str, known: str = KB_TYPES) -> None:
    """A usage error unless `resource` spells knowledgebase; it lists `known`, every type the command takes."""
    if resource.lower() not in RESOURCES:
        raise typer.BadParameter(f"unknown resource type '{resource}'; kbctl knows: {known}", param_hint="RESOURCE")


def emit(data: BaseModel | Sequence[BaseModel] | dict[str, Any], output: Output | None) -> None:
    if isinstance(data, dict):
        plain: Any = data
    elif isinstance(data, Sequence):
        plain = {"items": [d.model_dump(mode="json", by_alias=True) for d in data]}
    else:
        plain = data.model_dump(mode="json", by_alias=True)
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


# What a YAML literal block cannot hold as it is: controls but tab and newline (a carriage return or NEL would be
# read back as a line break), surrogates and U+FFFE/U+FFFF. A string holding one is double-quoted, with escapes.
_NOT_LITERAL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def _literal_blocks(value: Any) -> Any:
    """`value` with every multi-line string marked for YAML's literal block style (inline texts stay readable),
    unless it holds a character a literal block would not keep exactly."""
    from ruamel.yaml.scalarstring import LiteralScalarString

    if isinstance(value, dict):
        return {k: _literal_blocks(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_literal_blocks(v) for v in value]
    if isinstance(value, str) and "\n" in value and not _NOT_LITERAL.search(value):
        return LiteralScalarString(value)
    return value


def emit_objects(objects: list[dict[str, Any]], fmt: ObjectOutput, *, single: bool) -> None:
    """Print objects for a structured `-o` (json, yaml, jsonpath, custom-columns): one object as it is when
    `single`, else a List of them, as kubectl does."""
    from kbctl import KnowledgeBaseStore
    from kbctl.cli.output import custom_columns, jsonpath_template
    from kbctl.cli.render import table

    data = objects[0] if single and objects else KnowledgeBaseStore.resource_list(objects)
    if fmt.kind == "jsonpath":
        say(jsonpath_template(fmt.argument, data), nl=False)
    elif fmt.kind == "custom-columns":
        header, *rows = custom_columns(fmt.argument, objects)
        say(table(header, rows))
    elif fmt.kind == "yaml":
        emit(_literal_blocks(data), Output.yaml)
    else:
        emit(data, Output.json)


def resource_names(resource: str, names: Sequence[str] | None, known: str = KB_TYPES) -> list[str]:
    """The names of `get kb a b` or `get kb/a kb/b` (kubectl's TYPE/NAME form); [] for every knowledge base. A
    wrong type is a usage error listing `known`, the types the command takes."""
    if "/" not in resource:
        check_resource(resource, known)
        return list(names or [])
    wanted = []
    for item in (resource, *(names or [])):
        kind, sep, name = item.partition("/")
        if not sep or not name:
            raise typer.BadParameter(f"{item!r}: use TYPE/NAME (kb/NAME) for every argument", param_hint="RESOURCE")
        check_resource(kind, known)
        wanted.append(name)
    return wanted


SELECTOR_SYNTAX = "k=v, k==v, k!=v, k, !k, 'k in (a,b)', 'k notin (a,b)'; a comma means AND"
"""What a label selector (`-l`) may say, in the help of each command that takes one."""

ListSelectorOpt = Annotated[
    str | None,
    typer.Option(
        "--selector",
        "-l",
        metavar="SELECTOR",
        help=f"Only knowledge bases whose labels match: {SELECTOR_SYNTAX}.",
    ),
]


def list_selector(selector: str | None, names: Sequence[str]) -> Selector | None:
    """The parsed `-l` of get (a usage error when it is bad, or given with names, as in kubectl)."""
    if selector is None:
        return None
    if names:
        raise typer.BadParameter("give names or a label selector, not both", param_hint="'-l' / '--selector'")
    from kbctl.manifest.selectors import parse_selector

    try:
        return parse_selector(selector)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'-l' / '--selector'") from None


def _print_version(value: bool | None) -> None:
    if value:
        from kbctl._version import __version__

        say(version_line(__version__))
        raise typer.Exit()


@app.callback()
def _root(
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            metavar="URL",
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
