"""`kbctl diff`: show what `apply` would change, without changing anything; the prune options apply shares."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, ParamSpec, TypeVar

import typer

from kbctl.cli._common import Files, OutputOpt, Recursive, app, emit, handles_errors, open_store

if TYPE_CHECKING:
    from kbctl.engine.explain import DiffReport
    from kbctl.manifest.selectors import Selector

P = ParamSpec("P")
R = TypeVar("R")

PruneOpt = Annotated[
    bool,
    typer.Option(
        "--prune",
        help="Also delete knowledge bases that match the label selector (-l) and are not in the manifests.",
    ),
]
SelectorOpt = Annotated[
    str | None,
    typer.Option(
        "--selector",
        "-l",
        metavar="SELECTOR",
        help="Label selector of what --prune may delete: k=v, k==v, k!=v, k, !k, 'k in (a,b)', 'k notin (a,b)'; a "
        "comma means AND.",
    ),
]


def prune_selector(prune: bool, selector: str | None) -> Selector | None:
    """The selector of --prune -l, or None without --prune; usage errors (exit code 2) otherwise."""
    if prune and selector is None:
        raise typer.BadParameter(
            "--prune needs a label selector (-l): kbctl never prunes everything", param_hint="'--prune'"
        )
    if selector is None:
        return None
    from kbctl.manifest.selectors import parse_selector

    if not prune:
        raise typer.BadParameter("-l selects what --prune deletes: add --prune", param_hint="'-l' / '--selector'")
    try:
        return parse_selector(selector)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'-l' / '--selector'") from None


def plan_apply(filename: list[str], recursive: bool, selector: Selector | None) -> DiffReport:
    """Load and validate manifests, then diff them against the store (the shared core of diff and apply --dry-run)."""
    from kbctl.engine.explain import diff_knowledge_bases
    from kbctl.manifest import load_manifests

    manifests = load_manifests(filename, recursive=recursive, stdin=sys.stdin)
    with open_store() as store:
        return diff_knowledge_bases(store.db, [m.kb for m in manifests], store.embedder, prune_selector=selector)


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
    selector: SelectorOpt = None,
    output: OutputOpt = None,
) -> None:
    """Show what `kbctl apply` would change, changing nothing: nothing is written, fetched or embedded.

    Prints "KnowledgeBase/NAME created|configured|unchanged|pruned" per knowledge base, then its
    changes, indented (unchanged sources are not shown):
      spec.chunking.maxChars: 1200 → 800
      source NAME added|changed: +A −R chunks, ~T tokens to embed
      source NAME changed: same chunks              (re-chunked into the same texts)
      source NAME removed: −R chunks
      source NAME added|changed: would be fetched   (a URL source: diff does not fetch it)
      source NAME would be fetched                  (a URL source that never had content)
    Chunks are compared by the text sent to the model; "~T tokens to embed" counts the tokens of the
    new chunks whose vectors the cache lacks (an estimate of the embedding bill); a warning counts the
    added chunks longer than the model reads (the local model: 254 tokens), whose ends no vector holds. With --prune -l,
    stored knowledge bases that match the selector and are not in the manifests show as pruned.
    -o json|yaml prints the same plan as data (for pull-request bots).

    Exit code: 0 no differences, 1 differences (a URL source apply would fetch counts as one),
    2 error (invalid manifest, store or model error, usage error).
    """  # noqa: RUF002  (the minus sign U+2212, as printed)
    from kbctl.cli.render import diff_lines

    chosen = prune_selector(prune, selector)
    report = _errors_exit_2(plan_apply)(filename, recursive, chosen)
    if output:
        emit(report, output)
    else:
        for line in diff_lines(report):
            typer.echo(line)
    if report.differs:
        raise typer.Exit(1)
