"""A version's calibrated line is computed per access rule: the line a caller gets (describe, the HTTP API's
backgroundSimilarity, a query's gate and its "nothing relevant" decision) is that of the chunks it may read, never
moved by text it may not read (docs/access.md, "What a caller learns")."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from kbctl import KnowledgeBaseStore, Reader
from kbctl.cli import app
from kbctl.defaults import DEFAULT_THRESHOLD
from kbctl.inputs.access import may_read
from kbctl.manifest import parse_manifests
from kbctl.store.migrations import MIGRATIONS
from tests.support.manifests import knowledge_base, text_source
from tests.support.serveproc import kbctl_env, serving
from tests.test_calibration import ALMANAC, POLICY

MODEL = "local/all-MiniLM-L6-v2"
# The public policy answers it (0.48) above the model's threshold (0.35) and below the line the board's everyday text
# gives the whole version (0.60).
ANSWERED = "Do I get money back when cancelling?"
LEAVE = (
    "Leave. Staff get 25 days of paid leave a year, booked in the leave planner at least two weeks ahead. Up to five "
    "unused days carry over to the next year; sick leave needs a doctor's note after three days."
)


def _apply(store: KnowledgeBaseStore, *manifests: str) -> None:
    report = store.apply(parse_manifests("\n---\n".join(manifests), "kb.yaml"))
    assert not report.failed, report


def _board_almanac() -> list[dict[str, Any]]:
    """Everyday text only the board may read: a fact a source."""
    return [text_source(f"fact-{n}", fact, access={"groups": ["board"]}) for n, fact in enumerate(ALMANAC)]


def test_a_caller_gets_the_line_of_what_it_may_read(
    store: KnowledgeBaseStore, cli: CliRunner, database_url: str, tmp_path: Path
) -> None:
    """Issue 57 item 5: a restricted source of everyday text moves neither the line an anonymous caller is shown nor
    the gate of its query: both are those of a knowledge base holding only the public source."""
    _apply(
        store,
        knowledge_base("mixed", text_source("policy", POLICY), *_board_almanac(), embedding={"model": MODEL}),
        knowledge_base("public", text_source("policy", POLICY), embedding={"model": MODEL}),
    )
    public = store.describe("public")
    assert public.background_similarity is not None and public.relevance_threshold is not None
    nobody = Reader.of(["nobody"])
    for reader in (nobody, Reader(), None):
        asked = store.query("mixed", ANSWERED, reader=reader)
        alone = store.query("public", ANSWERED)
        assert alone.hits, alone.message
        assert asked.message == alone.message.replace("KnowledgeBase/public", "KnowledgeBase/mixed")
        assert asked.relevance_threshold == pytest.approx(alone.relevance_threshold, abs=1e-4)
        assert [(h.source, h.position) for h in asked.hits] == [(h.source, h.position) for h in alone.hits]
        seen = store.describe("mixed", reader=reader or Reader())
        assert seen.background_similarity == pytest.approx(public.background_similarity, abs=1e-4)
        assert seen.relevance_threshold == pytest.approx(public.relevance_threshold, abs=1e-4)

    # The board reads everything: its line is the whole version's, which the operator's describe shows.
    whole = store.describe("mixed")
    board = store.describe("mixed", reader=Reader.of(["board"]))
    assert whole.background_similarity is not None and whole.background_similarity > public.background_similarity
    assert whole.relevance_threshold is not None and whole.relevance_threshold > public.relevance_threshold
    assert board.background_similarity == pytest.approx(whole.background_similarity, abs=1e-4)
    refused = store.query("mixed", ANSWERED, reader=Reader.of(["board"]))  # its everyday text raises its line
    assert refused.relevance_threshold == pytest.approx(whole.relevance_threshold, abs=1e-4)
    assert refused.hits == [] and refused.message.endswith(
        f"below version 1's relevance line {refused.relevance_threshold:.2f}"
    )

    # The command line's describe as that caller words the public line.
    shown = cli.invoke(app, ["describe", "kb", "mixed", "--as-group", "nobody"], env={"COLUMNS": "200"})
    alone_shown = cli.invoke(app, ["describe", "kb", "public"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    threshold = [line for line in shown.output.splitlines() if line.startswith("Threshold:")]
    assert threshold
    # A version that restricts sources has no keyword line (its share would move with text a caller may not read):
    # the caller's gate is the similarity line of what it may read, which is the public knowledge base's.
    [alone_line] = [line for line in alone_shown.output.splitlines() if line.startswith("Threshold:")]
    assert threshold == [re.sub(r"; or a keyword share of [^)]*\)", "", alone_line)]
    assert store.query("mixed", ANSWERED).keyword_threshold is None

    # The HTTP API, to a caller without groups (a server without tokens on loopback).
    env = kbctl_env(store.settings.home, database_url, HOME=str(tmp_path))
    with serving(env, tmp_path / "serve.log") as served, served.client() as http:
        mixed, alone_body = http.get("/v1/knowledgebases/mixed").json(), http.get("/v1/knowledgebases/public").json()
        assert mixed["backgroundSimilarity"] == pytest.approx(alone_body["backgroundSimilarity"], abs=1e-4)
        assert mixed["relevanceThreshold"] == pytest.approx(alone_body["relevanceThreshold"], abs=1e-4)
        answered = http.post("/v1/knowledgebases/mixed/query", json={"question": ANSWERED}).json()
        assert answered["hits"], answered
        assert answered["relevantBy"] == "similarity" and answered["keywordThreshold"] is None
        public_answer = http.post("/v1/knowledgebases/public/query", json={"question": ANSWERED}).json()
        assert public_answer["keywordThreshold"] == pytest.approx(public.keyword_threshold, abs=1e-4)
        assert public_answer["keywordShare"] is not None and public_answer["relevantBy"] in ("similarity", "keyword")


def _parts(store: KnowledgeBaseStore) -> dict[str, list[float] | None]:
    """The per-question bests each part of the knowledge base `mixed` keeps (its version's, then its rules'), sorted:
    the migration keeps them in another order of the questions than a publish."""
    rows = store.db.connection.execute(
        "SELECT 'open', v.background_bests FROM kb_versions v JOIN kb_knowledge_bases k ON k.id = v.kb_id"
        " WHERE k.name = 'mixed' UNION ALL SELECT array_to_string(r.readers, ','), r.background_bests"
        " FROM kb_version_rules r JOIN kb_versions v ON v.id = r.version_id JOIN kb_knowledge_bases k ON k.id = v.kb_id"
        " WHERE k.name = 'mixed'"
    ).fetchall()
    return {str(name): None if bests is None else sorted(bests) for name, bests in rows}


def test_a_caller_who_reads_nothing_is_told_so_not_that_the_version_is_old(
    store: KnowledgeBaseStore, cli: CliRunner
) -> None:
    """describe as a caller who may read no chunk of the version shows the model's threshold and says why."""
    _apply(store, knowledge_base("board-only", *_board_almanac()[:3], embedding={"model": MODEL}))
    shown = cli.invoke(app, ["describe", "kb", "board-only", "--as-group", "nobody"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    [threshold] = [line for line in shown.output.splitlines() if line.startswith("Threshold:")]
    assert threshold == f"Threshold:   {DEFAULT_THRESHOLD:g} (the model's: no chunk of version 1 is readable here)"


def test_migration_24_calibrates_the_restricted_versions_published_before(store: KnowledgeBaseStore) -> None:
    """Migration 24 fills in the per-rule calibration of restricted versions calibrated before it, from the vectors
    they hold: the same numbers a publish keeps, and so the same line for a caller."""
    _apply(
        store,
        knowledge_base("mixed", text_source("policy", POLICY), *_board_almanac(), embedding={"model": MODEL}),
        knowledge_base("public", text_source("policy", POLICY), embedding={"model": MODEL}),
    )
    published = _parts(store)
    assert set(published) == {"open", "board"} and all(len(b or []) == 99 for b in published.values())
    conn = store.db.connection
    [sql] = [sql for number, _, sql in MIGRATIONS if number == 24]
    with conn.transaction():
        conn.execute("ALTER TABLE kb_versions DROP COLUMN background_bests")
        conn.execute("ALTER TABLE kb_version_rules DROP COLUMN background_bests")
        conn.execute(sql.encode())
    migrated = _parts(store)
    for part, bests in published.items():
        assert migrated[part] == pytest.approx(bests, abs=1e-5)
    public = store.describe("public")
    nobody = store.describe("mixed", reader=Reader.of(["nobody"]))
    assert nobody.background_similarity == pytest.approx(public.background_similarity, abs=1e-4)
    # A version that restricts nothing needs no parts: its line is its own for every caller.
    assert conn.execute("SELECT count(*) FROM kb_versions WHERE background_bests IS NOT NULL").fetchone() == (1,)

    # Without the model's background vectors nothing can be filled in: the parts stay unknown.
    with conn.transaction(force_rollback=True):
        conn.execute("ALTER TABLE kb_versions DROP COLUMN background_bests")
        conn.execute("ALTER TABLE kb_version_rules DROP COLUMN background_bests")
        conn.execute("DELETE FROM kb_background_vectors WHERE model = %s", (MODEL,))
        conn.execute(sql.encode())
        assert set(_parts(store).values()) == {None}


def test_a_restricted_version_without_its_parts_gives_callers_the_models_line(store: KnowledgeBaseStore) -> None:
    """A restricted version whose per-rule calibration is unknown shows and applies the model's threshold to a
    caller that may not read all of it, never the whole version's line; a reader of everything keeps that one."""
    _apply(store, knowledge_base("mixed", text_source("policy", POLICY), *_board_almanac(), embedding={"model": MODEL}))
    whole = store.describe("mixed")
    store.db.connection.execute("UPDATE kb_versions SET background_bests = NULL")
    store.db.connection.execute("UPDATE kb_version_rules SET background_bests = NULL")
    nobody = store.describe("mixed", reader=Reader.of(["nobody"]))
    assert nobody.background_similarity is None
    assert nobody.relevance_threshold == pytest.approx(DEFAULT_THRESHOLD)
    assert store.query("mixed", ANSWERED).relevance_threshold == pytest.approx(DEFAULT_THRESHOLD)
    board = store.describe("mixed", reader=Reader.of(["board"]))
    assert board.background_similarity == pytest.approx(whole.background_similarity, abs=1e-4)
    assert store.query("mixed", ANSWERED, reader=Reader.of(["board"])).relevance_threshold == pytest.approx(
        whole.relevance_threshold, abs=1e-4
    )


RULES = (
    {"groups": ["a"]},
    {"groups": ["b"]},
    {"groups": ["a", "b"]},
    {"labels": {"level": "1"}},
    {"groups": ["a"], "labels": {"level": "1"}},
)
PUBLIC = {"policy": POLICY, "leave": LEAVE}
QUESTIONS = (ANSWERED, "How long do I boil an egg?", "How many days of leave do I get?", "Who won the first World Cup?")

layouts = st.fixed_dictionaries(
    {
        "public": st.sets(st.sampled_from(sorted(PUBLIC))),
        # restricted everyday text: which facts, each behind which rule
        "restricted": st.dictionaries(
            st.integers(min_value=0, max_value=len(ALMANAC) - 1), st.sampled_from(RULES), min_size=1, max_size=6
        ),
        "groups": st.sets(st.sampled_from(["a", "b", "c"])),
        "claim": st.booleans(),
        "question": st.sampled_from(QUESTIONS),
    }
)


def _reads(reader: Reader, rule: dict[str, Any]) -> bool:
    labels = sorted(f"{k}={v}" for k, v in rule.get("labels", {}).items()) or None
    return may_read(reader, rule.get("groups"), labels)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(layout=layouts)
def test_no_line_or_decision_depends_on_text_the_caller_may_not_read(
    store: KnowledgeBaseStore, layout: dict[str, Any]
) -> None:
    """Whatever the restricted text and its rules, a caller's calibrated line (describe) and its query's gate and
    decision are those of a knowledge base holding only the sources it may read; one that may read nothing has no
    line and the model's threshold."""
    reader = Reader.of(layout["groups"], {"level": "1"} if layout["claim"] else None)
    public = [text_source(name, PUBLIC[name]) for name in sorted(layout["public"])]
    restricted = {f"fact-{n}": (ALMANAC[n], rule) for n, rule in sorted(layout["restricted"].items())}
    full = [*public, *(text_source(name, text, access=rule) for name, (text, rule) in restricted.items())]
    readable = [*public, *(text_source(n, text) for n, (text, rule) in restricted.items() if _reads(reader, rule))]
    _apply(store, knowledge_base("full", *full, embedding={"model": MODEL}))
    seen = store.describe("full", reader=reader)
    asked = store.query("full", layout["question"], reader=reader)
    if not readable:
        assert seen.background_similarity is None and seen.relevance_threshold == pytest.approx(DEFAULT_THRESHOLD)
        assert asked.hits == [] and asked.message == "nothing relevant found: KnowledgeBase/full has no chunks"
        return
    _apply(store, knowledge_base("alone", *readable, embedding={"model": MODEL}))
    alone = store.describe("alone")
    assert alone.background_similarity is not None and seen.background_similarity is not None
    assert seen.background_similarity == pytest.approx(alone.background_similarity, abs=1e-4)
    assert seen.relevance_threshold == pytest.approx(alone.relevance_threshold, abs=1e-4)
    answer = store.query("alone", layout["question"])
    assert asked.relevance_threshold == pytest.approx(answer.relevance_threshold, abs=1e-4)
    assert {(h.source, h.position) for h in asked.hits} == {(h.source, h.position) for h in answer.hits}


def test_an_apply_calibrates_a_restricted_version_published_before_calibration_once(
    store: KnowledgeBaseStore,
) -> None:
    """A restricted version published before calibration gets its whole line and every rule's part from the next
    apply that publishes nothing, and keeps no keyword line (by design: that apply and the next calibrate nothing
    more); one whose parts alone are missing gets them too."""
    manifest = knowledge_base("mixed", text_source("policy", POLICY), *_board_almanac(), embedding={"model": MODEL})
    _apply(store, manifest)
    whole, parts = store.describe("mixed"), _parts(store)
    assert whole.background_keyword is None and None not in parts.values()
    nobody = store.describe("mixed", reader=Reader.of(["nobody"]))
    store.db.connection.execute("UPDATE kb_versions SET background_similarity = NULL, background_bests = NULL")
    store.db.connection.execute("UPDATE kb_version_rules SET background_bests = NULL")
    _apply(store, manifest)
    _apply(store, manifest)
    again = store.describe("mixed")
    assert again.version == 1
    assert again.background_similarity == pytest.approx(whole.background_similarity, abs=1e-4)
    assert again.background_keyword is None
    assert _parts(store).keys() == parts.keys()
    for rule, bests in _parts(store).items():
        assert bests == pytest.approx(parts[rule], abs=1e-4)
    assert store.describe("mixed", reader=Reader.of(["nobody"])).relevance_threshold == pytest.approx(
        nobody.relevance_threshold, abs=1e-4
    )
    assert [e.count for e in store.db.list_events(["mixed"]) if e.reason == "Calibrated"] == [1]
    # Parts alone missing (migration 24 could not compute them): the next apply computes them too.
    store.db.connection.execute("UPDATE kb_versions SET background_bests = NULL")
    store.db.connection.execute("UPDATE kb_version_rules SET background_bests = NULL")
    assert store.describe("mixed", reader=Reader.of(["nobody"])).relevance_threshold == pytest.approx(DEFAULT_THRESHOLD)
    _apply(store, manifest)
    for rule, bests in _parts(store).items():
        assert bests == pytest.approx(parts[rule], abs=1e-4)
    assert [e.count for e in store.db.list_events(["mixed"]) if e.reason == "Calibrated"] == [2]  # one row, counted
