"""`kbctl validate` and `kbctl schema`: check manifests without a database, and print the JSON Schema that editors
and CI linters check them with."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated

import typer

from kbctl.cli._common import Files, Recursive, app, handles_errors, note_skipped
from kbctl.cli.terminal import say


@app.command()
@handles_errors
def validate(filename: Files, recursive: Recursive = False) -> None:
    """Check manifests without touching any database; print one line per problem (file:line: field: ...).

    Objects of other tools in the same files or folder (a kustomization.yaml, a Deployment) are skipped with one
    note per file on stderr; a `List` (as `get -o yaml` prints) is checked object by object."""
    from kbctl import KnowledgeBaseStore
    from kbctl.cli.render import valid_lines

    loaded = KnowledgeBaseStore.validate(filename, recursive=recursive)
    note_skipped(loaded)
    for line in valid_lines(loaded):
        say(line)


class SchemaKind(StrEnum):
    knowledge_base = "KnowledgeBase"
    sync = "Sync"


@app.command()
def schema(
    kind: Annotated[
        SchemaKind, typer.Option("--kind", help="The kind whose schema to print: KnowledgeBase or Sync.")
    ] = SchemaKind.knowledge_base,
) -> None:
    """Print the JSON Schema of a manifest kind (for editors and CI linters): the KnowledgeBase's, or with
    --kind Sync a Sync's. The same files are in schemas/."""
    from kbctl.manifest import json_schema
    from kbctl.manifest.sync import sync_json_schema

    typer.echo(json.dumps(sync_json_schema() if kind is SchemaKind.sync else json_schema(), indent=2))
