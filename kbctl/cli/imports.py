"""`kbctl import beir`: a BEIR-format dataset as a knowledge base plus an eval set (KnowledgeBaseStore.import_beir;
the logic in kbctl.eval.beir)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kbctl.cli._common import OutputOpt, command_group, emit, handles_errors, open_store
from kbctl.cli.terminal import say
from kbctl.defaults import BEIR_SPLIT, RANKING_MAX_TOKENS, RANKING_THRESHOLD
from kbctl.manifest import CONTEXT_TOKENS_MAX

import_app = command_group("import", "Import a public dataset as a knowledge base with its eval set.")


@import_app.command("beir")
@handles_errors
def beir(
    directory: Annotated[
        Path, typer.Argument(metavar="DIR", help="BEIR dataset folder: corpus.jsonl, queries.jsonl, qrels/<split>.tsv.")
    ],
    name: Annotated[
        str, typer.Option("--name", "-n", metavar="NAME", help="Name of the knowledge base to create or update.")
    ],
    split: Annotated[
        str, typer.Option("--split", metavar="SPLIT", help="Which qrels/<split>.tsv judges the queries.")
    ] = BEIR_SPLIT,
    eval_out: Annotated[
        Path | None,
        typer.Option(
            "--eval-out",
            metavar="FILE",
            help="Where to write the eval set, JSON Lines (default: NAME-SPLIT-eval.jsonl here).",
        ),
    ] = None,
    manifest: Annotated[
        Path | None,
        typer.Option("--manifest", metavar="FILE", help="Also write the KnowledgeBase manifest (YAML) to this file."),
    ] = None,
    limit_docs: Annotated[
        int | None,
        typer.Option(
            "--limit-docs",
            metavar="N",
            min=0,
            help="Keep the documents relevant to the kept queries plus the first N others.",
        ),
    ] = None,
    limit_queries: Annotated[
        int | None,
        typer.Option("--limit-queries", metavar="N", min=1, help="Keep the first N queries with a relevant document."),
    ] = None,
    threshold: Annotated[
        float,
        typer.Option(
            "--threshold",
            metavar="SCORE",
            min=-1.0,
            max=1.0,
            help="spec.retrieval.similarityThreshold of the knowledge base.",
        ),
    ] = RANKING_THRESHOLD,
    max_tokens: Annotated[
        int,
        typer.Option(
            "--max-tokens",
            metavar="N",
            min=1,
            max=CONTEXT_TOKENS_MAX,
            help="spec.retrieval.maxContextTokens of the knowledge base.",
        ),
    ] = RANKING_MAX_TOKENS,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            metavar="MODEL",
            help="spec.embedding.model of the knowledge base: local/all-MiniLM-L6-v2 (the default),"
            " local/bge-small-en-v1.5, or a provider's model.",
        ),
    ] = None,
    output: OutputOpt = None,
) -> None:
    """Import a BEIR-format dataset as a knowledge base, and write its eval set for `kbctl eval`.

    Each corpus document becomes an inline markdown source ("# title", then the text) named after its
    _id: lowercased, other characters replaced by '-', a short hash appended when two ids clash. Each
    query that judges a document relevant (score > 0) becomes an eval query expecting those sources;
    the others are skipped. The whole folder is checked first: a problem is one line FILE:LINE: ...,
    exit code 1, and nothing is written. Importing the same folder again embeds nothing.

    The knowledge base retrieves with similarityThreshold -1.0, maxContextTokens 100000 and topK 10,
    so `kbctl eval` measures ranking, not cut-offs (--threshold and --max-tokens change that).

    Example, with a dataset from the BEIR benchmark's public downloads (NFCorpus: 3,633 documents):

        kbctl import beir nfcorpus/ --name nfcorpus --limit-docs 1000 --manifest nfcorpus.yaml

        kbctl eval nfcorpus -f nfcorpus-test-eval.jsonl -k 10 -m hybrid -m vector -m keyword
    """
    from kbctl.cli.progress import CliReporter
    from kbctl.cli.render import beir_import_text

    reporter = CliReporter(log=output is None)
    with open_store() as store:
        try:
            result = store.import_beir(
                directory,
                name,
                split=split,
                eval_out=eval_out,
                manifest_out=manifest,
                limit_docs=limit_docs,
                limit_queries=limit_queries,
                threshold=threshold,
                max_tokens=max_tokens,
                model=model,
                reporter=reporter,
            )
        finally:
            reporter.close()
    if output:
        emit(result, output)
    else:
        say(beir_import_text(result))
    if result.report.failed:
        raise typer.Exit(1)
