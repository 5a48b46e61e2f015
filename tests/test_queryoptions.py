"""QueryOptions: one frozen object from the CLI and the Python API down to retrieval, and the stored spec's defaults."""

from __future__ import annotations

import dataclasses

import pytest
from psycopg.types.json import Jsonb
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.eval.evalset import EvalQuery, EvalSet
from kbctl.eval.run import evaluate_store
from kbctl.manifest import Retrieval, parse_manifests
from kbctl.query.options import MODES, QueryOptions

MANIFEST = """apiVersion: kbctl.dev/v1alpha1
kind: KnowledgeBase
metadata: {name: office}
spec:
  sources:
    - name: invoices
      text: "# Invoices\\n\\nInvoices are kept for ten years, then destroyed."
    - name: visitors
      text: "# Visitors\\n\\nVisitors sign in at the front desk and wear a badge."
  retrieval: {topK: 2, similarityThreshold: 0.2, maxContextTokens: 300}
"""


@pytest.fixture
def office(store: KnowledgeBaseStore) -> KnowledgeBaseStore:
    store.apply(parse_manifests(MANIFEST, "kb.yaml"))
    return store


def test_options_are_frozen_and_checked() -> None:
    options = QueryOptions(top_k=3, mode="vector")
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.top_k = 4  # type: ignore[misc]
    assert MODES == ("hybrid", "vector", "keyword")
    with pytest.raises(ValueError, match="mode must be hybrid, vector or keyword, got 'fuzzy'"):
        QueryOptions.build(mode="fuzzy")
    with pytest.raises(ValueError, match="top_k must be a whole number from 1 to 200, got 0"):
        QueryOptions(top_k=0)
    with pytest.raises(ValueError, match="max_tokens must be a whole number from 1 to 1,000,000, got 0"):
        QueryOptions(max_tokens=0)


@pytest.mark.parametrize(
    "fields",
    [
        {"top_k": 100_000_000},
        {"top_k": 10**23},
        {"top_k": 201},
        {"top_k": True},
        {"top_k": 2.5},
        {"max_tokens": 10**23},
        {"threshold": float("nan")},
        {"threshold": float("inf")},
        {"threshold": 1.5},
        {"threshold": "-1"},
        {"threshold": True},
    ],
)
def test_options_are_bounded_like_the_spec(fields: dict[str, object], office: KnowledgeBaseStore) -> None:
    """The Python API refuses what spec.retrieval would refuse, with a clear ValueError and no query run."""
    with pytest.raises(ValueError, match=r"must be a (whole )?number from"):
        office.query("office", "how long are invoices kept?", QueryOptions(**fields))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"must be a (whole )?number from"):
        office.query("office", "how long are invoices kept?", **fields)  # type: ignore[arg-type]


def test_the_cli_bounds_top_k_like_the_spec(office: KnowledgeBaseStore, cli: CliRunner) -> None:
    """`--top-k 100000000` and `--max-tokens 1e23` are usage errors (exit 2, one line), not a traceback."""
    for args in (["--top-k", "100000000"], ["--top-k", "201"], ["--max-tokens", "1000000000000"]):
        for command in ("query", "context"):
            result = cli.invoke(app, [command, "office", "how long are invoices kept?", *args])
            assert result.exit_code == 2, result.output
            assert "Traceback" not in result.output and "Invalid value for" in result.output
    assert cli.invoke(app, ["query", "office", "how long are invoices kept?", "--top-k", "200"]).exit_code == 0


def test_build_overrides_only_what_is_given() -> None:
    base = QueryOptions(top_k=3, threshold=0.5, mode="keyword", rerank=False)
    assert QueryOptions.build(base) is base
    assert QueryOptions.build() == QueryOptions()
    merged = QueryOptions.build(base, threshold=0.1, mode="hybrid", explain=True)
    assert merged == QueryOptions(top_k=3, threshold=0.1, mode="hybrid", explain=True, rerank=False)


def test_store_takes_options_or_keywords_alike(office: KnowledgeBaseStore) -> None:
    """An options object and the same keywords give the same answer; keywords override the object."""
    question = "how long are invoices kept?"
    by_keywords = office.query("office", question, top_k=1, threshold=-1.0, mode="vector")
    by_options = office.query("office", question, QueryOptions(top_k=1, threshold=-1.0, mode="vector"))
    assert by_keywords.model_dump() == by_options.model_dump()
    assert (by_options.top_k, by_options.similarity_threshold, by_options.mode) == (1, -1.0, "vector")
    overridden = office.query("office", question, QueryOptions(top_k=1, mode="vector"), top_k=2, mode="keyword")
    assert (overridden.top_k, overridden.mode) == (2, "keyword")
    explained = office.query("office", question, QueryOptions(explain=True))
    assert explained.trace is not None and [s.stage for s in explained.trace][-1] == "select"
    grounded = office.context("office", question, QueryOptions(top_k=1))
    assert grounded.found and [p.source for p in grounded.passages] == ["invoices"]


def test_unset_options_come_from_the_stored_spec(office: KnowledgeBaseStore) -> None:
    result = office.query("office", "how long are invoices kept?")
    settings = (result.top_k, result.similarity_threshold, result.max_context_tokens, result.mode)
    assert settings == (2, 0.2, 300, "hybrid")


def test_defaults_missing_from_a_stored_spec_are_the_manifest_models(office: KnowledgeBaseStore) -> None:
    """A version stored before a retrieval field existed reads that field's default from the manifest model."""
    db = office.db
    row = db.get_kb("office")
    assert row is not None and row.current_version is not None
    version = db.get_version(row.id, row.current_version)
    assert version is not None
    manifest = dict(version.manifest)
    retrieval = {k: v for k, v in manifest["spec"]["retrieval"].items() if k not in ("mode", "language", "topK")}
    manifest["spec"] = {**manifest["spec"], "retrieval": retrieval}
    db.connection.execute(
        "UPDATE kb_versions SET manifest = %s, retrieval = %s WHERE id = %s",
        (Jsonb(manifest), Jsonb(retrieval), version.id),
    )
    result = office.query("office", "how long are invoices kept?")
    defaults = Retrieval()
    assert (result.mode, result.top_k) == (defaults.mode, defaults.top_k)
    assert result.hits and result.hits[0].source == "invoices"


def test_evaluate_store_takes_shared_options(office: KnowledgeBaseStore) -> None:
    """Threshold and budget travel in an options object; top_k, mode and rerank are the evaluation's own."""
    evalset = EvalSet(
        queries=[EvalQuery(id="keep", question="how long are invoices kept?", expected_sources=["invoices"])]
    )
    [report] = evaluate_store(office, "office", evalset, k=1, options=QueryOptions(threshold=-1.0)).modes
    assert report.recall == pytest.approx(1.0)
    for options in (QueryOptions(top_k=3), QueryOptions(mode="vector"), QueryOptions(rerank=False)):
        with pytest.raises(ValueError, match="options must leave top_k, mode and rerank unset"):
            evaluate_store(office, "office", evalset, options=options)
