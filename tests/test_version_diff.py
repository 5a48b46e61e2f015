"""A diff between two versions of a knowledge base (`kbctl rollout diff`, `version_diff`, `version_changes`), on the
real store: sources added, removed, changed and unchanged, the text diff of a changed one, its bounds, and what a
reader may not read left out."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kbctl import KnowledgeBaseStore, Reader
from kbctl.cli import app
from kbctl.errors import NotFoundError
from kbctl.manifest import parse_manifests
from kbctl.store.versiondiff import DiffBounds
from tests.support.manifests import knowledge_base, text_source

REFUNDS = (
    "# Refunds\n\nA client who cancels 30 days or more before the start gets the whole deposit back.\n\n"
    "A client who cancels 14 to 29 days before the start gets half of the deposit back.\n\n"
    "Later cancellations get nothing back."
)
LEAVE = "# Leave\n\nEvery employee has twenty-five days of paid holiday per calendar year."
TRAVEL = "# Travel\n\nTrain journeys under four hours are booked in standard class."
SALARIES = "# Salaries\n\nSalary band E4 pays between 81,000 and 97,000 euros a year."
EXPENSES = "# Expenses\n\nReceipts are submitted within thirty days of the expense."


def apply(store: KnowledgeBaseStore, *sources: dict[str, object]) -> None:
    report = store.apply(parse_manifests(knowledge_base("policies", *sources), "policies.yaml"), wait=True)
    assert report.exit_code() == 0


@pytest.fixture
def two_versions(store: KnowledgeBaseStore) -> KnowledgeBaseStore:
    """Version 1: refunds, leave, travel, salaries (hr-managers only). Version 2: refunds' second paragraph edited,
    travel removed, expenses added, leave and salaries as they were."""
    salaries = text_source("salaries", SALARIES, access={"groups": ["hr-managers"]})
    apply(store, text_source("refunds", REFUNDS), text_source("leave", LEAVE), text_source("travel", TRAVEL), salaries)
    edited = REFUNDS.replace("gets half of the deposit back", "gets a third of the deposit back")
    expenses = text_source("expenses", EXPENSES)
    apply(store, text_source("refunds", edited), text_source("leave", LEAVE), salaries, expenses)
    return store


def test_the_diff_names_each_source_with_the_changed_line(two_versions: KnowledgeBaseStore) -> None:
    diff = two_versions.version_diff("policies")  # default: the version before the serving one, against it
    assert (diff.from_version, diff.to_version) == (1, 2)
    changes = {s.name: s.change for s in diff.sources}
    assert changes == {
        "refunds": "changed",
        "leave": "unchanged",
        "salaries": "unchanged",
        "expenses": "added",
        "travel": "removed",
    }
    assert (diff.added, diff.removed, diff.changed, diff.unchanged) == (1, 1, 1, 2)
    refunds = next(s for s in diff.sources if s.name == "refunds")
    assert refunds.same_text is False and not refunds.diff_truncated and not diff.truncated
    assert "-A client who cancels 14 to 29 days before the start gets half of the deposit back." in refunds.diff
    assert "+A client who cancels 14 to 29 days before the start gets a third of the deposit back." in refunds.diff
    assert refunds.diff[0] == "--- refunds@1" and refunds.diff[1] == "+++ refunds@2"
    travel = next(s for s in diff.sources if s.name == "travel")
    assert (travel.from_chars, travel.to_chars, travel.to_chunks) == (len(TRAVEL), None, None)
    expenses = next(s for s in diff.sources if s.name == "expenses")
    assert (expenses.from_chunks, expenses.to_chars) == (None, len(EXPENSES))
    assert all(not s.diff for s in diff.sources if s.change != "changed")


def test_the_text_is_rebuilt_from_overlapping_chunks(store: KnowledgeBaseStore) -> None:
    """A long source's chunks overlap; stitched by their places, they give its text back (blank lines aside)."""
    paragraphs = [f"Paragraph {i} says that rule {i} applies to every office in region {i % 7}." for i in range(80)]
    text = "\n\n".join(paragraphs)
    apply(store, text_source("rules", text, format="text"))
    row = store.db.connection.execute(
        "SELECT vs.revision_id FROM kb_version_sources vs JOIN kb_versions v ON v.id = vs.version_id"
        " WHERE vs.source_name = 'rules'"
    ).fetchone()
    assert row is not None
    chunks = store.db.connection.execute("SELECT count(*) FROM kb_chunks WHERE revision_id = %s", row).fetchone()
    assert chunks is not None and chunks[0] > 2
    rebuilt, cut = store.db.revision_text(row[0], 1_000_000)
    assert not cut
    assert rebuilt.split() == text.split()
    start, cut = store.db.revision_text(row[0], 500)
    assert cut and text.startswith(start) and len(start) == 500


def test_bounds_cut_a_large_diff_and_flag_it(two_versions: KnowledgeBaseStore) -> None:
    tight = DiffBounds(source_lines=4)
    diff = two_versions.version_diff("policies", 1, 2, bounds=tight)
    refunds = next(s for s in diff.sources if s.name == "refunds")
    assert len(refunds.diff) == 4 and refunds.diff_truncated and diff.truncated
    few_bytes = two_versions.version_diff("policies", 1, 2, bounds=DiffBounds(total_bytes=30))
    refunds = next(s for s in few_bytes.sources if s.name == "refunds")
    assert sum(len(line.encode()) + 1 for line in refunds.diff) <= 30 and refunds.diff_truncated
    unread = two_versions.version_diff("policies", 1, 2, bounds=DiffBounds(total_chars=10))
    refunds = next(s for s in unread.sources if s.name == "refunds")
    assert refunds.diff_truncated and unread.truncated


def test_a_reader_without_the_group_does_not_see_the_restricted_source(two_versions: KnowledgeBaseStore) -> None:
    outsider = two_versions.version_diff("policies", reader=Reader())
    assert "salaries" not in {s.name for s in outsider.sources}
    assert outsider.unchanged == 1 and "salaries" not in outsider.model_dump_json()
    insider = two_versions.version_diff("policies", reader=Reader.of(["hr-managers"]))
    assert "salaries" in {s.name for s in insider.sources} and insider.unchanged == 2
    changes = two_versions.version_changes("policies", reader=Reader())
    assert [(c.number, c.previous, c.added, c.removed, c.changed, c.unchanged) for c in changes] == [
        (2, 1, 1, 1, 1, 1),
        (1, None, 3, 0, 0, 0),
    ]
    everything = two_versions.version_changes("policies")
    assert [(c.added, c.unchanged) for c in everything] == [(1, 2), (4, 0)]


def test_versions_not_retained_and_out_of_scope_are_not_found(two_versions: KnowledgeBaseStore) -> None:
    with pytest.raises(NotFoundError, match=r'knowledgebase "policies" has no version 7 \(versions kept: 1, 2\)'):
        two_versions.version_diff("policies", 1, 7)
    with pytest.raises(NotFoundError, match="has no version before 1 to compare with"):
        two_versions.version_diff("policies", to_version=1)
    with pytest.raises(NotFoundError, match='knowledgebase "policies" not found'):
        two_versions.version_diff("policies", scope=lambda name, labels: name != "policies")
    with pytest.raises(NotFoundError, match='knowledgebase "policies" not found'):
        two_versions.version_changes("policies", scope=lambda name, labels: False)
    with pytest.raises(NotFoundError, match='knowledgebase "missing" not found'):
        two_versions.version_diff("missing")


def test_rollout_diff_prints_the_table_then_the_text_diff(two_versions: KnowledgeBaseStore, cli: CliRunner) -> None:
    result = cli.invoke(app, ["rollout", "diff", "policies"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "KnowledgeBase/policies version 1 \u2192 2: 1 added, 1 removed, 1 changed, 2 unchanged"
    assert lines[2].split() == ["SOURCE", "CHANGE", "CHUNKS", "CHARS"]
    assert lines[3].split()[:2] == ["refunds", "changed"]
    assert next(line for line in lines if line.startswith("travel")).split()[:2] == ["travel", "removed"]
    assert "--- refunds@1" in lines and "+++ refunds@2" in lines
    assert lines.index("--- refunds@1") > lines.index(next(line for line in lines if line.startswith("expenses")))
    assert any(line.startswith("+") and "a third of the deposit" in line for line in lines)
    as_json = cli.invoke(app, ["rollout", "diff", "policies", "--from", "1", "--to", "2", "-o", "json"])
    assert as_json.exit_code == 0, as_json.output
    data = json.loads(as_json.output)
    assert (data["fromVersion"], data["toVersion"], data["changed"]) == (1, 2, 1)
    assert {s["name"]: s["change"] for s in data["sources"]}["travel"] == "removed"
    outsider = cli.invoke(app, ["rollout", "diff", "policies", "--as-group", "staff", "-o", "yaml"])
    assert outsider.exit_code == 0 and "salaries" not in outsider.output
    missing = cli.invoke(app, ["rollout", "diff", "policies", "--from", "9"])
    assert missing.exit_code == 1
    assert 'knowledgebase "policies" has no version 9 (versions kept: 1, 2)' in missing.output
    assert "Traceback" not in missing.output
