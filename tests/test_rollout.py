"""Version history, rollback and pruning through the Python API and the CLI, on the real store and model."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.engine.results import ApplyReport
from kbctl.errors import ManifestError, NotFoundError, RollbackError
from kbctl.manifest import parse_manifests
from kbctl.sources.url import FetchPolicy
from kbctl.store.history import VersionInfo
from tests.support.httpserver import serve

REFUNDS = """# Refunds
A client who cancels more than 30 days before the start date receives a full refund of the deposit.
"""

QUESTION = "how long are invoices kept?"


def retention(years: str) -> str:
    """A one-chunk retention policy whose answer is `years`."""
    return f"# Retention\nInvoices and accounting records are kept for {years} years, then destroyed.\n"


def manifest(years: str = "ten", *, history: int | str | None = None, extra: str = "") -> str:
    """The `policies` KnowledgeBase: a refunds source that never changes and a retention source stating `years`."""

    def block(text: str) -> str:
        return "\n".join("        " + line for line in text.splitlines())

    keep = f"  versionHistory: {history}\n" if history is not None else ""
    return f"""apiVersion: kbctl.dev/v1alpha1
kind: KnowledgeBase
metadata:
  name: policies
spec:
  sources:
    - name: refunds
      text: |
{block(REFUNDS)}
    - name: retention
      text: |
{block(retention(years))}
{extra}{keep}  chunking: {{maxChars: 150, overlapChars: 0}}
"""


def apply_text(store: KnowledgeBaseStore, text: str) -> ApplyReport:
    """Apply manifests given as YAML text through the Python API."""
    report = store.apply(parse_manifests(text, "kb.yaml"))
    assert not report.failed, report
    return report


def answer(store: KnowledgeBaseStore) -> str:
    """The text of the best chunk for the retention question."""
    return store.query("policies", QUESTION).hits[0].text


def kb_id(store: KnowledgeBaseStore) -> int:
    """The id of the `policies` knowledge base."""
    row = store.db.get_kb("policies")
    assert row is not None
    return row.id


def created(v: VersionInfo) -> str:
    """A version's creation time as `rollout history` prints it."""
    return v.created_at.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_history_lists_versions_newest_first_with_change_causes(store: KnowledgeBaseStore, cli: CliRunner) -> None:
    """`rollout history` lists every kept version newest first, with counts, change cause and the current one."""
    apply_text(store, manifest("ten"))
    apply_text(store, manifest("seven"))
    apply_text(store, manifest("seven", extra="    - name: notes\n      text: Payroll is kept for six years.\n"))
    versions = store.db.list_versions("policies")
    assert [(v.number, v.current, v.change_cause) for v in versions] == [
        (3, True, "source notes added"),
        (2, False, "source retention changed"),
        (1, False, "created"),
    ]
    assert [(v.chunk_count, v.embedded_count, v.reused_count, v.sources, v.failed_sources) for v in versions] == [
        (3, 1, 2, 3, 0),
        (2, 1, 1, 2, 0),
        (2, 2, 0, 2, 0),
    ]
    result = cli.invoke(app, ["rollout", "history", "knowledgebase", "policies"])
    assert result.exit_code == 0, result.output
    v3, v2, v1 = versions
    assert result.stdout.splitlines() == [
        "VERSION   CURRENT   CREATED                SOURCES   CHUNKS   EMBEDDED   REUSED   CHANGE",
        f"3         *         {created(v3)}   3/3       3        1          2        source notes added",
        f"2                   {created(v2)}   2/2       2        1          1        source retention changed",
        f"1                   {created(v1)}   2/2       2        2          0        created",
    ]
    as_json = json.loads(cli.invoke(app, ["rollout", "history", "kb", "policies", "-o", "json"]).stdout)
    assert [(i["number"], i["current"], i["model"]) for i in as_json["items"]] == [
        (3, True, "local/all-MiniLM-L6-v2"),
        (2, False, "local/all-MiniLM-L6-v2"),
        (1, False, "local/all-MiniLM-L6-v2"),
    ]
    assert as_json["kind"] == "List"
    columns = cli.invoke(app, ["rollout", "history", "kb", "policies", "-o", "custom-columns=V:.number,CUR:.current"])
    assert [line.split() for line in columns.stdout.splitlines()] == [
        ["V", "CUR"],
        ["3", "true"],
        ["2", "false"],
        ["1", "false"],
    ]
    path = cli.invoke(app, ["rollout", "history", "kb", "policies", "-o", "jsonpath={.items[0].changeCause}"])
    assert path.stdout == "source notes added"
    assert cli.invoke(app, ["rollout", "history", "kb", "policies", "-o", "name"]).stdout == "knowledgebase/policies\n"


def test_undo_restores_earlier_answers_without_embedding(store: KnowledgeBaseStore, cli: CliRunner) -> None:
    """Undo serves the previous version's answers at once, embeds nothing; re-applying v2 makes v3 from the cache."""
    apply_text(store, manifest("ten"))
    apply_text(store, manifest("seven"))
    assert "seven years" in answer(store)
    before = store.db.counts()
    result = cli.invoke(app, ["rollout", "undo", "knowledgebase", "policies"])
    assert (result.exit_code, result.stdout) == (0, "KnowledgeBase/policies rolled back to version 1\n")
    assert "ten years" in answer(store)
    assert store.db.counts() == before  # nothing embedded, copied or deleted
    assert store.describe("policies").version == 1
    [v1] = parse_manifests(manifest("ten"), "kb.yaml")
    assert (row := store.db.get_kb("policies")) is not None and store.db.last_manifest(row.id) == v1.kb.to_manifest()
    report = apply_text(store, manifest("seven"))
    [kb] = report.results
    assert (kb.action, kb.version, report.embedded) == ("configured", 3, 0)
    assert "seven years" in answer(store)
    assert store.db.counts()["embeddings"] == before["embeddings"]


def test_undo_makes_the_version_the_desired_state(store: KnowledgeBaseStore) -> None:
    """Undo makes the version's manifest desired (a new generation, observed at once), dropping a pending one."""
    apply_text(store, manifest("ten"))
    apply_text(store, manifest("seven"))
    store.apply(parse_manifests(manifest("five"), "kb.yaml"), wait=False)  # recorded for a controller, not applied
    before = store.db.get_kb("policies")
    assert before is not None and (before.generation, before.observed_generation) == (3, 2)
    store.db.rollback_kb("policies")
    after = store.db.get_kb("policies")
    assert after is not None and (after.generation, after.observed_generation, after.pending) == (4, 4, False)
    assert "ten years" in answer(store)
    assert [v.number for v in store.db.list_versions("policies")] == [2, 1]
    # The manifest last applied ("five") is still what the repository says: a controller's pass brings it back
    # (tests/test_drift.py), as a GitOps controller reverts a manual change.
    controller = store.controller()
    [reverted] = controller.run_once().results
    controller.deregister()
    assert (reverted.action, reverted.version) == ("configured", 3)
    assert "five years" in answer(store)


def test_undo_to_version(store: KnowledgeBaseStore, cli: CliRunner) -> None:
    """`--to-version N` serves any kept version, older or newer; plain undo goes to the one below the current."""
    for years in ("ten", "seven", "five"):
        apply_text(store, manifest(years))
    result = cli.invoke(app, ["rollout", "undo", "kb", "policies", "--to-version", "1"])
    assert (result.exit_code, result.stdout) == (0, "KnowledgeBase/policies rolled back to version 1\n")
    assert "ten years" in answer(store)
    forward = store.db.rollback_kb("policies", 3)
    assert (forward.from_version, forward.to_version) == (1, 3)
    assert "five years" in answer(store)
    result = cli.invoke(app, ["rollout", "undo", "kbs", "policies"])
    assert (result.exit_code, result.stdout) == (0, "KnowledgeBase/policies rolled back to version 2\n")
    assert "seven years" in answer(store)
    assert [v.number for v in store.db.list_versions("policies") if v.current] == [2]


def test_undo_errors_are_one_line(store: KnowledgeBaseStore, cli: CliRunner) -> None:
    """Unknown version, the current version, no earlier version and unknown names exit 1 with one line."""
    apply_text(store, manifest("ten"))
    apply_text(store, manifest("seven"))
    cases = {
        ("--to-version", "7"): 'Error: knowledgebase "policies" has no version 7 (versions kept: 1, 2)',
        ("--to-version", "2"): "Error: version 2 is already current",
    }
    for args, line in cases.items():
        result = cli.invoke(app, ["rollout", "undo", "kb", "policies", *args])
        assert (result.exit_code, result.stdout, result.stderr) == (1, "", line + "\n")
    for args in (["rollout", "undo", "kb", "nope"], ["rollout", "history", "kb", "nope"]):
        result = cli.invoke(app, args)
        assert (result.exit_code, result.stderr) == (1, 'Error: knowledgebase "nope" not found\n')
    store.db.rollback_kb("policies")
    with pytest.raises(NotFoundError, match=r'^knowledgebase "policies" has no version before 1 to roll back to$'):
        store.db.rollback_kb("policies")
    with pytest.raises(RollbackError, match=r"^version 1 is already current$"):
        store.db.rollback_kb("policies", 1)
    wrong = cli.invoke(app, ["rollout", "undo", "pods", "policies"])
    assert wrong.exit_code == 2 and "unknown resource type 'pods'" in wrong.output


def test_undo_forgets_http_validators_of_changed_sources_only(store: KnowledgeBaseStore) -> None:
    """After undo, a page whose content changed is fetched in full by refresh; an unchanged page stays conditional."""
    with serve() as site:
        site.route("/about", body="# About\nWe have four partners.\n", content_type="text/markdown", etag=True)
        site.route("/faq.md", body="# FAQ\nSessions move free of charge.\n", content_type="text/markdown", etag=True)
        store.fetch_policy = FetchPolicy(allowed_addresses=frozenset({("127.0.0.1", site.port)}), retries=1)
        text = f"""apiVersion: kbctl.dev/v1alpha1
kind: KnowledgeBase
metadata: {{name: policies}}
spec:
  sources:
    - {{name: about, url: "{site.url("/about")}"}}
    - {{name: faq, url: "{site.url("/faq.md")}"}}
"""
        apply_text(store, text)
        site.route("/about", body="# About\nWe have five partners.\n", content_type="text/markdown", etag=True)
        assert store.refresh(["policies"]).results[0].version == 2
        faq_status = store.db.source_statuses(kb_id(store))["faq"]
        result = store.db.rollback_kb("policies")
        assert (result.from_version, result.to_version, result.reset_sources) == (2, 1, ["about"])
        assert store.db.source_statuses(kb_id(store)) == {"faq": faq_status}
        report = store.refresh(["policies"])
        assert "if-none-match" not in site.requests_for("/about")[-1].headers
        assert site.requests_for("/faq.md")[-1].headers["if-none-match"] == faq_status.etag
        assert (report.results[0].action, report.results[0].version, report.embedded) == ("refreshed", 3, 0)
        assert "five partners" in store.query("policies", "how many partners?").hits[0].text


def test_version_history_keeps_the_newest_versions_and_the_current(store: KnowledgeBaseStore) -> None:
    """With versionHistory: 2 only the newest two versions remain (plus an older current), their chunks with them."""
    db = store.db

    def apply_and_prune(years: str) -> None:
        apply_text(store, manifest(years, history=2))
        db.prune_history(kb_id(store), 2)  # idempotent: reconcile prunes after publishing too

    def stored(table: str, where: str = "true") -> int:
        row = db.connection.execute(f"SELECT count(*) FROM {table} WHERE {where}").fetchone()
        assert row is not None
        return int(row[0])

    for years in ("ten", "seven", "five", "three"):
        apply_and_prune(years)
    assert [v.number for v in db.list_versions("policies")] == [4, 3]
    assert (stored("kb_versions"), stored("kb_source_revisions"), stored("kb_chunks")) == (2, 3, 3)
    assert stored("kb_chunks", "content LIKE '%ten years%' OR content LIKE '%seven years%'") == 0
    assert stored("kb_embeddings") == 5  # vectors stay cached until `kbctl gc`
    db.rollback_kb("policies", 3)
    assert db.prune_history(kb_id(store), 1) == 0  # the newest one, plus the current one
    assert [(v.number, v.current) for v in db.list_versions("policies")] == [(4, False), (3, True)]
    apply_and_prune("one")
    assert [(v.number, v.current) for v in db.list_versions("policies")] == [(5, True), (4, False)]
    assert stored("kb_chunks", "content LIKE '%five years%'") == 0
    with pytest.raises(NotFoundError, match=r"has no version 3 \(versions kept: 4, 5\)$"):
        db.rollback_kb("policies", 3)


def test_prune_history_returns_the_versions_deleted(store: KnowledgeBaseStore) -> None:
    """prune_history deletes the versions beyond `keep` (never the current) and the revisions only they served."""
    for years in ("ten", "seven", "five"):
        apply_text(store, manifest(years))
    assert store.db.prune_history(kb_id(store), 1) == 2
    assert store.db.prune_history(kb_id(store), 1) == 0
    assert store.db.counts() | {"embeddings": 0} == {
        "knowledge_bases": 1,
        "versions": 1,
        "source_revisions": 2,
        "chunks": 2,
        "embeddings": 0,
    }
    assert "five years" in answer(store)
    with pytest.raises(ValueError, match="keep must be at least 1, got 0"):
        store.db.prune_history(kb_id(store), 0)


def test_version_history_must_be_an_integer_from_1_to_100() -> None:
    """spec.versionHistory defaults to 5 and is refused, with file:line, outside 1..100 or when not an integer."""
    [default] = parse_manifests(manifest(), "kb.yaml")
    assert default.kb.spec.version_history == 5
    cases = {
        "0": "must be at least 1",
        "101": "must be at most 100",
        '"3"': "must be an integer",
    }
    for value, message in cases.items():
        with pytest.raises(ManifestError) as caught:
            parse_manifests(manifest(history=value), "kb.yaml")
        assert str(caught.value) == f"kb.yaml:15: spec.versionHistory: {message}"
