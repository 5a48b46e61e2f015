"""`kbctl diff`: show what `apply` would change, without changing anything; the prune options apply shares."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, ParamSpec, TypeVar

import typer

from kbctl.cli._common import (
    SELECTOR_SYNTAX,
    Files,
    OutputOpt,
    Recursive,
    app,
    emit,
    handles_errors,
    note_skipped,
    open_store_for,
)
from kbctl.cli.render import legacy_prune_warning
from kbctl.cli.terminal import say

if TYPE_CHECKING:
    from kbctl import DiffReport, PruneScope

P = ParamSpec("P")
R = TypeVar("R")

PruneOpt = Annotated[
    bool,
    typer.Option(
        "--prune",
        help="Also delete the members of the apply set (--applyset) that the manifests no longer name (narrowed by "
        "-l when given; -l alone is kubectl's legacy prune, which never touches an apply set's members).",
    ),
]
ApplySetOpt = Annotated[
    str | None,
    typer.Option(
        "--applyset",
        metavar="NAME",
        help="The apply set these manifests make (one name per repository): apply records its members and --prune "
        "deletes only those, so repositories whose labels overlap never prune each other.",
    ),
]
SelectorOpt = Annotated[
    str | None,
    typer.Option(
        "--selector",
        "-l",
        metavar="SELECTOR",
        help=f"Label selector narrowing what --prune may delete: {SELECTOR_SYNTAX}.",
    ),
]


def applyset_name(applyset: str | None) -> str | None:
    """The --applyset name, checked as a DNS-1123 label (a usage error otherwise)."""
    if applyset is None:
        return None
    from kbctl.manifest import check_dns_label

    try:
        return check_dns_label(applyset)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--applyset'") from None


def prune_scope(prune: bool, selector: str | None, applyset: str | None) -> PruneScope | None:
    """What --prune may delete (None without --prune); usage errors (exit code 2) otherwise. Legacy prune (-l
    without --applyset) is said on stderr."""
    if not prune:
        if selector is not None:
            raise typer.BadParameter("-l selects what --prune deletes: add --prune", param_hint="'-l' / '--selector'")
        return None
    if selector is None and applyset is None:
        raise typer.BadParameter(
            "--prune needs an apply set (--applyset NAME) or a label selector (-l): kbctl never prunes everything",
            param_hint="'--prune'",
        )
    from kbctl import PruneScope
    from kbctl.manifest.selectors import parse_selector

    try:
        parsed = parse_selector(selector) if selector is not None else None
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'-l' / '--selector'") from None
    if applyset is None:
        say(legacy_prune_warning(), err=True)
    return PruneScope(applyset, parsed)


def plan_apply(filename: list[str], recursive: bool, scope: PruneScope | None) -> DiffReport:
    """Load and validate manifests, then diff them against the store (the shared core of diff and apply --dry-run)."""
    from kbctl.manifest import read_manifest_files

    files = read_manifest_files(filename, recursive=recursive, stdin=sys.stdin)
    with open_store_for(files) as store:
        # A file the store applied byte for byte and still serves is unchanged, not parsed (kbctl.engine.settled).
        to_apply = store.load_settled(files)
        note_skipped(to_apply.manifests)
        return store.diff(to_apply, prune=scope)


def _errors_exit_2(func: Callable[P, R]) -> Callable[P, R]:
    """Print errors as every command does, but exit 2: diff's exit code 1 means "differences", as in kubectl."""
    printed = handles_errors(func)

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return printed(*args, **kwargs)
        except typer.Exit as exc:
            if exc.exit_code != 1:
                raise
            raise typer.Exit(2) from None

    return wrapper


@app.command()
def diff(
    filename: Files,
    recursive: Recursive = False,
    prune: PruneOpt = False,
    applyset: ApplySetOpt = None,
    selector: SelectorOpt = None,
    output: OutputOpt = None,
) -> None:
    """Show what `kbctl apply` would change, changing nothing: nothing is written, fetched or embedded.

    Prints "KnowledgeBase/NAME created|configured|unchanged|pruned" per knowledge base, then its
    changes, indented (unchanged sources are not shown):

    \b
      spec.chunking.maxChars: 1200 → 800
      source NAME added|changed: +A −R chunks, ~T tokens to embed
      source NAME changed: same chunks              (re-chunked into the same texts)
      source NAME removed: −R chunks
      source NAME added|changed: would be fetched   (a URL source: diff does not fetch it)
      source NAME would be fetched                  (a URL source that never had content)
      would fail: REASON                            (a source it could not read, a spec.limits exceeded)

    Chunks are compared by the text sent to the model; "~T tokens to embed" counts the tokens of the
    new chunks whose vectors the cache lacks (an estimate of the embedding bill); a warning counts the
    added chunks longer than the model reads (the local model: 254 tokens), whose ends no vector holds. With --prune,
    the stored members of the apply set (--applyset, narrowed by -l) that the manifests no longer name show as
    pruned.
    -o json|yaml prints the same plan as data (for pull-request bots). A file applied before byte for byte, while
    the store still serves what that apply left, is unchanged without being parsed again. Each reason apply would
    fail for is also said on stderr: "Error: KnowledgeBase/NAME would fail: REASON".

    Exit code: 0 no differences, 1 differences (a URL source apply would fetch counts as one),
    2 error: apply would fail for some knowledge base (as in kubectl, above 1 is an error, so CI stops), or the
    diff itself failed (invalid manifest, store or model error, usage error).
    """  # noqa: RUF002  (the minus sign U+2212, as printed)
    from kbctl.cli.render import diff_lines, error_line, would_fail_lines

    chosen = prune_scope(prune, selector, applyset_name(applyset))
    report = _errors_exit_2(plan_apply)(filename, recursive, chosen)
    if output:
        emit(report, output)
    else:
        for line in diff_lines(report):
            say(line)
    for line in would_fail_lines(report):
        say(error_line(line), err=True)
    if report.fails:
        raise typer.Exit(2)
    if report.differs:
        raise typer.Exit(1)
