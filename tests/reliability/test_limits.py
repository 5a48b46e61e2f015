"""spec.limits stop a runaway source or bill before any of it is embedded, and diff says so beforehand."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.manifest import parse_manifests
from tests.support.manifests import knowledge_base, text_source

pytestmark = pytest.mark.reliability

BIG = "\n\n".join(f"Rule {i}: keep record {i} for {i % 9 + 1} years after the engagement ends." for i in range(40))


def manifest(**limits: int) -> str:
    return knowledge_base(
        "rules",
        text_source("big", BIG, format="text"),
        text_source("small", "Office hours are 9:00 to 17:30."),
        chunking={"maxChars": 100, "overlapChars": 0},
        **({"limits": limits} if limits else {}),
    )


def test_a_source_over_max_chunks_fails_alone(store: KnowledgeBaseStore) -> None:
    """The source that would split into too many chunks fails with the count and the limit; the other publishes."""
    report = store.apply(parse_manifests(manifest(maxChunksPerSource=10), "kb.yaml"))
    [result] = report.results
    assert result.version == 1 and report.failed
    big, small = result.sources
    assert big.state == "failed" and big.message == (
        "40 chunks, over spec.limits.maxChunksPerSource (10); raise the limit or split the source"
    )
    assert small.state == "ready" and report.embedded == 1


def test_an_apply_over_max_tokens_embeds_nothing(store: KnowledgeBaseStore, cli: CliRunner, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Over maxTokensToEmbed the knowledge base fails before sending a single text; diff shows it first."""
    path = tmp_path / "kb.yaml"
    path.write_text(manifest(maxTokensToEmbed=100))
    diff = cli.invoke(app, ["diff", "-f", str(path)])
    assert diff.exit_code == 2  # apply would fail: an error, as in kubectl
    [line] = [x for x in diff.stdout.splitlines() if "would fail" in x]
    assert line.startswith("  would fail: ~") and line.endswith(
        "tokens to embed, over spec.limits.maxTokensToEmbed (100)"
    )
    report = store.apply(parse_manifests(path.read_text(), "kb.yaml"))
    [result] = report.results
    assert result.action == "failed" and "over spec.limits.maxTokensToEmbed (100); nothing was embedded" in (
        result.message or ""
    )
    assert store.db.counts()["embeddings"] == 0


def test_limits_left_unset_do_not_change_the_stored_manifest() -> None:
    """A manifest without limits serializes as before limits existed (no new version for existing KBs)."""
    [loaded] = parse_manifests(manifest(), "kb.yaml")
    assert "limits" not in loaded.kb.to_manifest()["spec"]
    assert loaded.kb.spec.effective_limits.max_tokens_to_embed == 5_000_000
