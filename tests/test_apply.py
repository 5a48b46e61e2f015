"""Apply, re-apply, change and delete knowledge bases through the Python API and the CLI, on the real store."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.manifest import parse_manifests

MODEL = "local/all-MiniLM-L6-v2"

REFUNDS = """# Refunds
## Cancelled engagements
A client who cancels more than 30 days before the start date receives a full refund of the deposit.

A client who cancels between 14 and 30 days before the start date receives 50% of the deposit back.

Cancellations less than 14 days before the start date are not refunded.
"""

RETENTION = """# Retention
Invoices and accounting records are kept for ten years, then destroyed.
"""


def manifest(
    name: str = "policies", *, refunds: str = REFUNDS, retention: str | None = RETENTION, extra: str = ""
) -> str:
    """A KnowledgeBase manifest with a refunds source (3 small chunks) and, optionally, a retention source."""

    def block(text: str) -> str:
        return "\n".join("        " + line for line in text.splitlines())

    sources = f"""    - name: refunds
      format: markdown
      text: |
{block(refunds)}
"""
    if retention is not None:
        sources += f"""    - name: retention
      text: |
{block(retention)}
"""
    return f"""apiVersion: kbctl.dev/v1alpha1
kind: KnowledgeBase
metadata:
  name: {name}
  labels: {{team: ops}}
spec:
  description: Client policies.
  sources:
{sources}{extra}  chunking: {{maxChars: 150, overlapChars: 0}}
"""


def apply_text(store: KnowledgeBaseStore, text: str):  # type: ignore[no-untyped-def]
    """Apply manifests given as YAML text through the Python API."""
    return store.apply(parse_manifests(text, "kb.yaml"))


def test_first_apply_prints_the_contract_lines(cli: CliRunner, tmp_path: Path) -> None:
    """A first apply creates version 1 and prints DESIGN.md's lines, singular '1 chunk' included."""
    (tmp_path / "kb.yaml").write_text(manifest())
    result = cli.invoke(app, ["apply", "-f", str(tmp_path), "--wait"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "KnowledgeBase/policies created (version 1); waiting for the ingestion of 2 sources",
        f"KnowledgeBase/policies source refunds ready: 3 chunks ({MODEL})",
        f"KnowledgeBase/policies source retention ready: 1 chunk ({MODEL})",
        "applied 1 resource",
    ]


def test_reapply_unchanged_embeds_nothing(store: KnowledgeBaseStore, cli: CliRunner, tmp_path: Path) -> None:
    """Re-applying unchanged manifests prints 'unchanged (version 1)', embeds nothing and writes no version."""
    (tmp_path / "kb.yaml").write_text(manifest())
    assert cli.invoke(app, ["apply", "--wait", "-f", str(tmp_path / "kb.yaml")]).exit_code == 0
    before = store.db.counts()
    result = cli.invoke(app, ["apply", "--wait", "-f", str(tmp_path / "kb.yaml")])
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        "KnowledgeBase/policies unchanged (version 1)",
        "applied 1 resource",
    ]
    assert store.db.counts() == before
    report = apply_text(store, manifest())
    assert report.results[0].action == "unchanged" and report.embedded == 0


def test_changing_one_paragraph_embeds_only_its_chunk(store: KnowledgeBaseStore) -> None:
    """Editing one paragraph of one source makes version 2, embeds that one chunk and reuses all others."""
    first = apply_text(store, manifest())
    assert first.embedded == 4
    changed = REFUNDS.replace("50% of the deposit", "40% of the deposit")
    report = apply_text(store, manifest(refunds=changed))
    [kb] = report.results
    assert (kb.action, kb.version, report.embedded) == ("configured", 2, 1)
    by_name = {s.name: s for s in kb.sources}
    assert (by_name["refunds"].ingested, by_name["refunds"].embedded, by_name["refunds"].reused) == (
        True,
        1,
        2,
    )
    assert (by_name["retention"].ingested, by_name["retention"].embedded) == (False, 0)
    detail = store.describe("policies")
    assert (detail.version, detail.chunks, detail.embedded, detail.reused) == (2, 4, 1, 3)
    hit = store.query("policies", "what share of the deposit comes back when cancelling 14 to 30 days before?").hits[0]
    assert "40% of the deposit" in hit.text


def test_version_holds_exactly_the_manifest(store: KnowledgeBaseStore) -> None:
    """A source removed from the manifest, or a paragraph removed from a source, is gone from the new version."""
    apply_text(store, manifest())
    no_late = REFUNDS.replace("Cancellations less than 14 days before the start date are not refunded.\n", "")
    report = apply_text(store, manifest(refunds=no_late, retention=None))
    assert report.results[0].version == 2
    detail = store.describe("policies")
    assert [s.name for s in detail.source_status] == ["refunds"]
    assert detail.chunks == 2
    texts = [h.text for h in store.query("policies", "invoices retention", threshold=-1.0).hits]
    assert texts and not any("Invoices" in t or "not refunded" in t for t in texts)


def test_same_text_in_another_kb_is_not_embedded_again(store: KnowledgeBaseStore) -> None:
    """The vector cache is keyed by model and text only: a second KB holding the same text embeds nothing."""
    apply_text(store, manifest("first"))
    report = apply_text(store, manifest("second"))
    assert report.results[0].action == "created" and report.embedded == 0
    assert store.db.counts()["embeddings"] == 4


def test_invalid_manifest_writes_nothing(store: KnowledgeBaseStore, cli: CliRunner, tmp_path: Path) -> None:
    """When one document is invalid, apply prints file:line: field: message, exits 1 and writes nothing."""
    (tmp_path / "a.yaml").write_text(manifest("good"))
    (tmp_path / "b.yaml").write_text(manifest("bad").replace("maxChars: 150", "maxChar: 150"))
    result = cli.invoke(app, ["apply", "--wait", "-f", str(tmp_path)])
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    [line] = result.stderr.splitlines()
    assert line.startswith(f"{tmp_path / 'b.yaml'}:") and "spec.chunking.maxChar" in line
    assert "did you mean 'maxChars'" in line
    assert store.db.counts()["knowledge_bases"] == 0


def test_url_source_fails_clearly_and_others_still_apply(
    store: KnowledgeBaseStore, cli: CliRunner, tmp_path: Path
) -> None:
    """A URL source fails with a clear reason and exit code 1, while the inline sources are published."""
    extra = "    - name: about\n      url: http://127.0.0.1:9/about\n"
    (tmp_path / "kb.yaml").write_text(manifest(extra=extra))
    result = cli.invoke(app, ["apply", "--wait", "-f", str(tmp_path / "kb.yaml")])
    assert result.exit_code == 1
    assert (
        "KnowledgeBase/policies source about failed: refused to connect to 127.0.0.1 (loopback address); "
        "set KBCTL_ALLOW_PRIVATE_NETWORKS=1 to allow private networks"
    ) in result.stdout.splitlines()
    detail = store.describe("policies")
    states = {s.name: s.state for s in detail.source_status}
    assert states == {"refunds": "ready", "retention": "ready", "about": "failed"}


def test_failed_knowledge_base_keeps_previous_version(store: KnowledgeBaseStore) -> None:
    """A KB whose model cannot load fails as a whole: its current version keeps serving, nothing is written."""
    apply_text(store, manifest())
    before = store.db.counts()
    bad = manifest(refunds=REFUNDS + "\nNew paragraph.\n") + "  embedding: {model: local/no-such-model}\n"
    report = apply_text(store, bad)
    assert report.failed and report.results[0].action == "failed"
    assert "unknown local model 'no-such-model'" in (report.results[0].message or "")
    assert store.db.counts() == before
    assert store.describe("policies").version == 1


def test_query_ranks_and_honours_threshold_and_budget(store: KnowledgeBaseStore, cli: CliRunner) -> None:
    """Query returns chunks best first; the threshold and the token budget cut, and -o json shows it all."""
    apply_text(store, manifest())
    result = store.query("policies", "how long are invoices kept?", threshold=0.0, mode="vector")
    assert result.hits[0].source == "retention"
    scores = [h.score for h in result.hits]
    assert scores == sorted(scores, reverse=True)
    tight = store.query(
        "policies", "how long are invoices kept?", threshold=0.0, max_tokens=result.hits[0].tokens, mode="vector"
    )
    assert len(tight.hits) == 1 and tight.over_budget == len(result.hits) - 1
    question = "refund if I cancel 20 days before the start?"
    out = cli.invoke(app, ["query", "policies", question, "--mode", "vector", "-o", "json"])
    data = json.loads(out.stdout)
    assert data["hits"][0]["headingPath"] == ["Refunds", "Cancelled engagements"]
    assert "50% of the deposit" in data["hits"][0]["text"]
    assert {"rank", "source", "position", "score", "similarity", "tokens"} <= set(data["hits"][0])


def test_query_says_plainly_when_nothing_is_relevant(store: KnowledgeBaseStore, cli: CliRunner) -> None:
    """A question the KB cannot answer returns no chunks and a plain 'nothing relevant found' message."""
    apply_text(store, manifest())
    result = cli.invoke(app, ["query", "policies", "best pizza recipe with mozzarella", "--threshold", "0.5"])
    assert result.exit_code == 0
    assert result.stdout.startswith("nothing relevant found in KnowledgeBase/policies: the best match scores")
    assert "below the similarity threshold 0.50" in result.stdout


def test_delete_removes_what_only_it_used(store: KnowledgeBaseStore, cli: CliRunner) -> None:
    """Delete removes the KB, its chunks and the vectors no other KB uses; shared vectors stay."""
    apply_text(store, manifest("first"))
    apply_text(store, manifest("second", retention="# Retention\nPayroll records are kept for six years.\n"))
    assert store.db.counts()["embeddings"] == 5
    result = cli.invoke(app, ["delete", "knowledgebase", "second"])
    assert result.exit_code == 0
    assert result.stdout.strip() == "KnowledgeBase/second deleted (4 chunks, 1 vectors)"
    assert [k.name for k in store.list()] == ["first"]
    assert store.db.counts()["embeddings"] == 4
    missing = cli.invoke(app, ["delete", "kb", "second"])
    assert (missing.exit_code, missing.stderr.strip()) == (1, 'Error: knowledgebase "second" not found')


def test_get_and_describe_text_and_machine_output(store: KnowledgeBaseStore, cli: CliRunner) -> None:
    """`get kb` lists name, version, sources, chunks, age; describe shows sources; -o json|yaml work."""
    apply_text(store, manifest())
    table = cli.invoke(app, ["get", "knowledgebases"]).stdout.splitlines()
    assert table[0].split() == ["NAME", "READY", "STATUS", "VERSION", "SOURCES", "CHUNKS", "AGE"]
    assert table[1].split()[:6] == ["policies", "True", "Ready", "1", "2/2", "4"]
    as_json = json.loads(cli.invoke(app, ["get", "kb", "-o", "json"]).stdout)
    assert [(i["metadata"]["name"], i["status"]["version"], i["status"]["chunks"]) for i in as_json["items"]] == [
        ("policies", 1, 4)
    ]
    described = cli.invoke(app, ["describe", "kb", "policies"]).stdout
    assert "Chunks:      4 (4 embedded, 0 reused in version 1)" in described
    assert "  refunds     text   ready   3" in described
    as_yaml = cli.invoke(app, ["describe", "kb", "policies", "-o", "yaml"]).stdout
    assert "name: policies" in as_yaml and "- name: retention" in as_yaml
    wrong = cli.invoke(app, ["get", "pods"])
    assert wrong.exit_code == 2 and "unknown resource type 'pods'" in wrong.output
