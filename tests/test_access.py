"""Document-level access: `access` on sources and on the knowledge base, enforced where candidates are selected."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbctl import KnowledgeBaseStore, Reader
from kbctl.cli import app
from kbctl.errors import ManifestError, UsageError
from kbctl.eval.evalset import parse_evalset
from kbctl.eval.run import evaluate_store
from kbctl.inputs.access import may_read
from kbctl.manifest import parse_manifests
from kbctl.store import bm25
from kbctl.store.migrations import MIGRATIONS
from tests.support.manifests import knowledge_base, text_source

HANDBOOK = "Every employee has twenty-five days of paid holiday per calendar year, booked in the HR portal."
SALARIES = "Salary band E4 pays between 81,000 and 97,000 euros a year; band E5 starts at 98,000 euros."
INCIDENT = "Incident report IR-2291: the payroll export leaked salary bands to a shared drive for two hours."
QUESTION = "what does salary band E4 pay?"


def hr(**spec: object) -> str:
    return knowledge_base(
        "hr",
        text_source("handbook", HANDBOOK),
        text_source("salaries", SALARIES, access={"groups": ["hr-managers"]}),
        text_source("incidents", INCIDENT, access={"groups": ["security"], "labels": {"clearance": "high"}}),
        **spec,
    )


@pytest.fixture
def published(store: KnowledgeBaseStore) -> KnowledgeBaseStore:
    assert store.apply(parse_manifests(hr(), "hr.yaml"), wait=True).exit_code() == 0
    return store


def sources(store: KnowledgeBaseStore, reader: Reader | None, question: str = QUESTION, **options: object) -> set[str]:
    result = store.query("hr", question, reader=reader, threshold=-1.0, top_k=10, **options)  # type: ignore[arg-type]
    return {h.source for h in result.hits}


@pytest.mark.parametrize("mode", ["hybrid", "vector", "keyword"])
def test_each_caller_retrieves_only_what_its_groups_and_claims_allow(published: KnowledgeBaseStore, mode: str) -> None:
    question = "salary bands payroll holiday" if mode == "keyword" else QUESTION
    assert sources(published, None, question, mode=mode) <= {"handbook"}
    assert sources(published, Reader(), question, mode=mode) <= {"handbook"}
    assert "salaries" in sources(published, Reader.of(["hr-managers"]), question, mode=mode)
    assert "incidents" not in sources(published, Reader.of(["security"]), question, mode=mode)  # lacks the claim
    cleared = sources(published, Reader.of(["security"], {"clearance": "high"}), question, mode=mode)
    assert "incidents" in cleared and "salaries" not in cleared


def test_what_a_caller_may_not_read_leaves_no_trace(published: KnowledgeBaseStore) -> None:
    outsider = published.query("hr", QUESTION, reader=Reader.of(["staff"]), explain=True)
    manager = published.query("hr", QUESTION, reader=Reader.of(["hr-managers"]), explain=True)
    assert manager.hits and manager.hits[0].source == "salaries"
    assert all(h.source == "handbook" for h in outsider.hits)
    assert outsider.candidates <= 1 and manager.candidates >= 2
    assert outsider.trace is not None
    assert {e.source for stage in outsider.trace for e in stage.entries} <= {"handbook"}
    # The best score is the best of what the caller may read: the salary chunk scores far above the handbook's.
    assert outsider.best_score is not None and manager.best_score is not None
    assert outsider.best_score < manager.best_score
    shown = outsider.model_dump_json()
    assert not any(secret in shown for secret in ("salaries", "81,000", "incidents", "IR-2291"))


def test_describe_and_list_as_a_reader_name_and_count_only_what_it_may_read(published: KnowledgeBaseStore) -> None:
    full = published.describe("hr")
    assert {s.name for s in full.source_status} == {"handbook", "salaries", "incidents"}
    seen = published.describe("hr", reader=Reader.of(["hr-managers"]))
    assert {s.name for s in seen.source_status} == {"handbook", "salaries"}
    assert seen.chunks == sum(s.chunks for s in seen.source_status) < full.chunks
    assert seen.events == [] and all(c.message == "" for c in seen.conditions)
    assert seen.relevance_threshold == full.relevance_threshold is not None  # the version's, as its queries use
    [summary] = [kb for kb in published.list(reader=Reader()) if kb.name == "hr"]
    assert (summary.sources, summary.chunks) == (1, seen.source_status[0].chunks)
    [everything] = [kb for kb in published.list() if kb.name == "hr"]
    assert everything.sources == 3


def test_the_knowledge_base_default_applies_to_sources_without_their_own(store: KnowledgeBaseStore) -> None:
    text = knowledge_base(
        "hr",
        text_source("handbook", HANDBOOK),
        text_source("salaries", SALARIES, access={"groups": ["hr-managers"]}),
        access={"groups": ["staff"]},
    )
    assert store.apply(parse_manifests(text, "hr.yaml"), wait=True).exit_code() == 0
    assert sources(store, Reader()) == set()
    assert sources(store, Reader.of(["staff"])) == {"handbook"}
    assert sources(store, Reader.of(["hr-managers"])) == {"salaries"}  # a source's own access replaces the default


def test_changing_access_publishes_a_version_that_reuses_every_chunk(published: KnowledgeBaseStore) -> None:
    loosened = hr().replace('"hr-managers"', '"hr-managers", "finance"')
    [kb] = published.diff(parse_manifests(loosened, "hr.yaml")).results
    assert kb.action == "configured"
    assert [(f.path, f.new) for f in kb.fields if "access" in f.path] == [
        ("spec.sources[salaries].access", {"groups": ["hr-managers", "finance"], "labels": {}})
    ]
    report = published.apply(parse_manifests(loosened, "hr.yaml"), wait=True)
    [result] = report.results
    assert result.action == "configured" and result.version == 2
    assert all(s.embedded == 0 for s in result.sources)
    assert "salaries" in sources(published, Reader.of(["finance"]))
    assert published.apply(parse_manifests(loosened, "hr.yaml"), wait=True).results[0].action == "unchanged"
    published.rollback("hr", 1)
    assert "salaries" not in sources(published, Reader.of(["finance"]))  # version 1's rule serves again


def readable_recount(store: KnowledgeBaseStore, version: int, reader: Reader) -> tuple[dict[str, int], int, int]:
    """BM25's statistics of what `reader` may read of a version, counted from the chunks it may read."""
    conn = store.db.connection
    rows = conn.execute(
        "SELECT vs.readers, vs.reader_labels, c.tsv FROM kb_version_sources vs"
        " JOIN kb_chunks c ON c.revision_id = vs.revision_id WHERE vs.version_id = %s",
        (version,),
    ).fetchall()
    df: dict[str, int] = {}
    chunks = length = 0
    for readers, labels, tsv in rows:
        if not may_read(reader, readers, labels):
            continue
        chunks += 1
        for lexeme, positions in re.findall(r"'((?:[^']|'')+)'(?::([\d,A-D]+))?", tsv):
            df[lexeme] = df.get(lexeme, 0) + 1
            length += len(positions.split(",")) if positions else 1
    return df, chunks, length


def test_a_callers_keyword_statistics_are_those_of_what_it_may_read(published: KnowledgeBaseStore) -> None:
    """N, avgdl and each word's df for a caller (the version's, minus the rules it does not pass, as stored at
    publish) equal a count over the chunks it may read, in every version, and go with a pruned version."""
    loosened = hr().replace('"hr-managers"', '"hr-managers", "finance"')
    assert published.apply(parse_manifests(loosened, "hr.yaml"), wait=True).exit_code() == 0
    conn = published.db.connection
    versions = [int(r[0]) for r in conn.execute("SELECT id FROM kb_versions ORDER BY number").fetchall()]
    question = "salary band payroll holiday incident employee euros"
    callers = [Reader(), Reader.of(["finance"]), Reader.of(["security"], {"clearance": "high"})]
    for version in versions:
        for reader in [*callers, Reader.of(["hr-managers", "security"], {"clearance": "high"})]:
            df, chunks, length = readable_recount(published, version, reader)
            terms = bm25.question_terms(conn, version, "english", question, reader)
            assert terms.chunks == chunks and terms.mean_length == pytest.approx(length / max(1, chunks))
            assert dict(zip(terms.lexemes, terms.chunks_with, strict=True)) == {w: df.get(w, 0) for w in terms.lexemes}
    assert published.db.readable_chunks(versions[0], Reader.of(["finance"])) < published.db.readable_chunks(
        versions[1], Reader.of(["finance"])
    )
    # Migration 21 computes the same rows for versions published before it (the columns it writes; the calibration
    # of each rule is migration 24's: tests/test_access_calibration.py).
    snapshot = [
        f"SELECT {columns} FROM {table} WHERE version_id = ANY(%s) ORDER BY 1, 2, 3"
        for table, columns in (
            ("kb_version_rules", "version_id, rule, readers, reader_labels, chunks, term_count"),
            ("kb_version_rule_terms", "*"),
        )
    ]
    published_rows = [conn.execute(q, (versions,)).fetchall() for q in snapshot]
    assert all(published_rows)
    [backfill] = [
        sql.split("-- The versions published before this migration.")[1] for n, _, sql in MIGRATIONS if n == 21
    ]
    with conn.transaction():
        conn.execute("DELETE FROM kb_version_rule_terms; DELETE FROM kb_version_rules")
        conn.execute(backfill.encode())
    after = [conn.execute(q, (versions,)).fetchall() for q in snapshot]
    assert after == published_rows
    row = conn.execute("SELECT id FROM kb_knowledge_bases WHERE name = 'hr'").fetchone()
    assert row is not None and published.db.prune_history(int(row[0]), keep=1) == 1
    for table in ("kb_version_rules", "kb_version_rule_terms"):
        row = conn.execute(f"SELECT count(*) FROM {table} WHERE version_id = %s", (versions[0],)).fetchone()
        assert row is not None and row[0] == 0, table
    published.delete("hr")
    for table in ("kb_version_rules", "kb_version_rule_terms"):
        row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
        assert row is not None and row[0] == 0, table


def test_knowledge_bases_without_access_are_read_by_every_caller(store: KnowledgeBaseStore) -> None:
    text = knowledge_base("open", text_source("handbook", HANDBOOK))
    assert store.apply(parse_manifests(text, "open.yaml"), wait=True).exit_code() == 0
    for reader in (None, Reader(), Reader.of(["anyone"])):
        assert [h.source for h in store.query("open", "how many holiday days?", reader=reader).hits] == ["handbook"]


@pytest.mark.parametrize(
    ("access", "field"),
    [
        ({}, "access"),
        ({"groups": []}, "access"),
        ({"groups": ["bad\nname"]}, "groups"),
        ({"groups": ["x" * 300]}, "groups"),
        ({"labels": {"Bad Key": "x"}}, "labels"),
        ({"groups": ["hr"], "extra": 1}, "extra"),
    ],
)
def test_a_bad_access_rule_names_its_field(access: dict[str, object], field: str) -> None:
    text = knowledge_base("hr", text_source("salaries", SALARIES, access=access))
    with pytest.raises(ManifestError) as raised:
        parse_manifests(text, "hr.yaml")
    assert "spec.sources[0].access" in str(raised.value) and field in str(raised.value)


@pytest.mark.parametrize(
    ("groups", "claims"),
    [("hr", None), ([1], None), ([], {"clearance": 3}), ([], {"clearance": {"a": "b"}}), (["ok\x00"], None)],
)
def test_a_reader_of_unknown_shape_is_refused(groups: object, claims: object) -> None:
    with pytest.raises(UsageError):
        Reader.of(groups, claims)  # type: ignore[arg-type]


def test_describe_as_a_caller_on_the_command_line(published: KnowledgeBaseStore, cli: CliRunner) -> None:
    """`kbctl describe kb NAME --as-group/--as-claim` lists the sources that caller reads; with -o it is refused."""
    everything = cli.invoke(app, ["describe", "kb", "hr"], env={"COLUMNS": "200"})
    assert everything.exit_code == 0 and "incidents" in everything.output and "salaries" in everything.output
    managers = cli.invoke(app, ["describe", "kb", "hr", "--as-group", "hr-managers"], env={"COLUMNS": "200"})
    assert managers.exit_code == 0, managers.output
    assert "salaries" in managers.output and "incidents" not in managers.output
    cleared = cli.invoke(
        app, ["describe", "kb", "hr", "--as-group", "security", "--as-claim", "clearance=high"], env={"COLUMNS": "200"}
    )
    assert "incidents" in cleared.output and "salaries" not in cleared.output
    refused = cli.invoke(app, ["describe", "kb", "hr", "--as-group", "hr-managers", "-o", "json"])
    assert refused.exit_code == 2 and "without -o" in refused.output


def test_eval_measures_as_a_caller(published: KnowledgeBaseStore, cli: CliRunner, tmp_path: Path) -> None:
    """`kbctl eval --as-group` measures what that caller retrieves: a source it may not read counts as missed."""
    evalset = (
        "knowledgeBase: hr\nqueries:\n  - id: e4\n"
        "    question: what does salary band E4 pay?\n    expectedSources: [salaries]\n"
    )
    parsed = parse_evalset(evalset)
    recall = {
        reader: evaluate_store(published, "hr", parsed, reader=reader).modes[0].recall
        for reader in (None, Reader.of(["hr-managers"]))
    }
    assert recall[None] == 0.0 and recall[Reader.of(["hr-managers"])] == 1.0
    path = tmp_path / "hr-eval.yaml"
    path.write_text(evalset)
    outsider = cli.invoke(app, ["eval", "-f", str(path), "-o", "json"])
    manager = cli.invoke(app, ["eval", "-f", str(path), "--as-group", "hr-managers", "-o", "json"])
    assert outsider.exit_code == 0 and manager.exit_code == 0, outsider.output + manager.output
    assert json.loads(outsider.output)["modes"][0]["recall"] == 0.0
    assert json.loads(manager.output)["modes"][0]["recall"] == 1.0
