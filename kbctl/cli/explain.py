"""`kbctl explain`: document a manifest field, as kubectl explain does."""

from __future__ import annotations

from typing import Annotated

import typer

from kbctl.cli._common import app, handles_errors
from kbctl.cli.terminal import say


@app.command()
@handles_errors
def explain(
    field: Annotated[
        str,
        typer.Argument(
            metavar="FIELD", help="knowledgebase or sync, or a dotted path: kb.spec.retrieval.topK, sync.spec.url."
        ),
    ],
    recursive: Annotated[bool, typer.Option("--recursive", help="Show every field below, not only the next.")] = False,
) -> None:
    """Document a manifest field: its type, default, bounds and description, and its fields (as kubectl explain).

    \b
    Examples:
      kbctl explain knowledgebase.spec.retrieval
      kbctl explain sync --recursive
    """
    from kbctl import KnowledgeBaseStore
    from kbctl.cli.render import explain_text

    try:
        doc = KnowledgeBaseStore.explain(field, recursive=recursive)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="FIELD") from None
    say(explain_text(doc))
