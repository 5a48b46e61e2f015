"""Document-level access: `access` on sources and on the knowledge base, enforced where candidates are selected."""

from __future__ import annotations

import pytest

from kbctl import KnowledgeBaseStore, Reader
from kbctl.errors import ManifestError, UsageError
from kbctl.manifest import parse_manifests
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
