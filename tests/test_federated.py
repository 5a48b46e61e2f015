"""One question over several knowledge bases: names, --all and -l on the CLI; names, selector and scope in Python."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.errors import NotFoundError
from kbctl.manifest import parse_manifests
from tests.support.manifests import knowledge_base, text_source

INVOICES = "Invoices are kept for ten years after the end of the financial year, then shredded."
BADGES = "Visitor badges are handed out at the front desk and returned when leaving the building."
HOLIDAYS = "Each employee has twenty-five days of paid holiday per calendar year."
QUESTION = "how long do we keep invoices?"


@pytest.fixture
def three(store: KnowledgeBaseStore) -> KnowledgeBaseStore:
    """finance and facilities (team=ops), people (team=hr), each published."""
    text = "\n---\n".join(
        [
            knowledge_base("finance", text_source("retention", INVOICES), labels={"team": "ops"}),
            knowledge_base("facilities", text_source("badges", BADGES), labels={"team": "ops"}),
            knowledge_base("people", text_source("holidays", HOLIDAYS), labels={"team": "hr"}),
        ]
    )
    report = store.apply(parse_manifests(text, "kb.yaml"), wait=True)
    assert report.exit_code() == 0
    return store


def test_names_fuse_into_one_ranking_that_names_each_hits_knowledge_base(three: KnowledgeBaseStore) -> None:
    result = three.query_many(QUESTION, names=["facilities", "finance"], threshold=0.0)
    assert result.knowledge_bases == ["facilities", "finance"]
    assert [h.rank for h in result.hits] == list(range(1, len(result.hits) + 1))
    assert {h.knowledge_base for h in result.hits} == {"facilities", "finance"}
    assert result.hits[0].knowledge_base == "finance"  # the invoice passage answers; the badge one does not
    assert "ten years" in result.hits[0].text
    assert [o.knowledge_base for o in result.results] == ["facilities", "finance"]
    assert all(o.version == 1 and o.hits == 1 for o in result.results)
    assert result.tokens == sum(h.tokens for h in result.hits)


def test_top_k_and_the_token_budget_apply_to_the_fused_list(three: KnowledgeBaseStore) -> None:
    one = three.query_many(QUESTION, names=["facilities", "finance", "people"], threshold=0.0, top_k=1)
    assert len(one.hits) == 1 and one.top_k == 1
    assert one.hits[0].knowledge_base == "finance"
    assert sum(o.hits for o in one.results) == 3  # each gave its own; the cut is on the fused list
    tight = three.query_many(
        QUESTION, names=["facilities", "finance", "people"], threshold=0.0, max_tokens=one.hits[0].tokens
    )
    assert tight.tokens <= one.hits[0].tokens and len(tight.hits) == 1


def test_selector_and_scope_choose_the_knowledge_bases(three: KnowledgeBaseStore) -> None:
    from kbctl.manifest.selectors import parse_selector

    ops = three.query_many(QUESTION, selector=parse_selector("team=ops"), threshold=0.0)
    assert ops.knowledge_bases == ["facilities", "finance"]
    everything = three.query_many(QUESTION, threshold=0.0)
    assert everything.knowledge_bases == ["facilities", "finance", "people"]

    def hr_only(name: str, labels: object) -> bool:
        return dict(labels).get("team") == "hr"  # type: ignore[call-overload]

    scoped = three.query_many(QUESTION, threshold=0.0, scope=hr_only)
    assert scoped.knowledge_bases == ["people"]
    with pytest.raises(NotFoundError, match='"finance" not found'):
        three.query_many(QUESTION, names=["people", "finance"], scope=hr_only)
    with pytest.raises(NotFoundError, match='"nowhere" not found'):
        three.query_many(QUESTION, names=["finance", "nowhere"])


def test_a_knowledge_base_without_a_published_version_is_said_not_fatal(three: KnowledgeBaseStore) -> None:
    three.apply(parse_manifests(knowledge_base("drafts", text_source("d", INVOICES)), "kb.yaml"), wait=False)
    result = three.query_many(QUESTION, names=["drafts", "finance"], threshold=0.0)
    drafts, finance = result.results
    assert drafts.version is None and drafts.hits == 0 and drafts.message
    assert finance.version == 1
    assert {h.knowledge_base for h in result.hits} == {"finance"}
    # --all leaves out what has nothing published instead of reporting it
    assert "drafts" not in three.query_many(QUESTION, threshold=0.0).knowledge_bases


def test_nothing_relevant_is_said_once_for_all(three: KnowledgeBaseStore) -> None:
    result = three.query_many("what is the airspeed of an unladen swallow?", names=["finance", "people"])
    assert result.hits == [] and result.tokens == 0
    assert result.message == "nothing relevant found in finance, people"


def test_cli_names_all_and_selector(three: KnowledgeBaseStore, cli: CliRunner) -> None:
    named = cli.invoke(app, ["query", "finance,facilities", QUESTION, "--threshold", "0", "-o", "json"])
    assert named.exit_code == 0, named.output
    data = json.loads(named.stdout)
    assert data["knowledgeBases"] == ["finance", "facilities"]
    assert data["hits"][0]["knowledgeBase"] == "finance"

    everything = cli.invoke(app, ["query", "--all", QUESTION, "--threshold", "0", "-o", "json"])
    assert json.loads(everything.stdout)["knowledgeBases"] == ["facilities", "finance", "people"]

    selected = cli.invoke(app, ["query", "-l", "team=hr", QUESTION, "--threshold", "0"])
    assert selected.exit_code == 0, selected.output
    lines = selected.stdout.splitlines()
    assert lines[0].startswith("1. people | holidays | ")
    assert lines[-1] == "1 chunks from 1 knowledge bases"


def test_cli_one_name_keeps_the_single_knowledge_base_output(three: KnowledgeBaseStore, cli: CliRunner) -> None:
    single = cli.invoke(app, ["query", "finance", QUESTION, "-o", "json"])
    assert single.exit_code == 0, single.output
    data = json.loads(single.stdout)
    assert data["knowledgeBase"] == "finance" and "knowledgeBases" not in data
    again = cli.invoke(app, ["query", "finance,finance", QUESTION, "-o", "json"])
    assert json.loads(again.stdout)["knowledgeBase"] == "finance"


def test_cli_nothing_relevant_across_several_exits_3_with_the_flag(three: KnowledgeBaseStore, cli: CliRunner) -> None:
    args = ["query", "finance,people", "what is the airspeed of an unladen swallow?"]
    plain = cli.invoke(app, args)
    assert plain.exit_code == 0 and "nothing relevant found in finance, people" in plain.stdout
    flagged = cli.invoke(app, [*args, "--exit-code"])
    assert flagged.exit_code == 3


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["query", QUESTION], "expected NAME[,NAME...] QUESTION, got 1 argument"),
        (["query", "--all", "finance", QUESTION], "expected QUESTION (with --all or -l), got 2 argument"),
        (["query", "--all", "-l", "team=ops", QUESTION], "give --all or a label selector, not both"),
        (["query", ",", QUESTION], "name a knowledge base"),
        (["query", "finance,people", QUESTION, "--explain"], "--explain traces one knowledge base"),
        (["query", "-l", "team in (", QUESTION], "-l"),
    ],
)
def test_cli_usage_errors_are_one_clear_line(
    three: KnowledgeBaseStore, cli: CliRunner, args: list[str], said: str
) -> None:
    result = cli.invoke(app, args)
    assert result.exit_code == 2
    assert said in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_cli_unknown_name_among_several_is_not_found(three: KnowledgeBaseStore, cli: CliRunner) -> None:
    result = cli.invoke(app, ["query", "finance,nowhere", QUESTION])
    assert result.exit_code == 1
    assert 'knowledgebase "nowhere" not found' in result.output
    assert "Traceback" not in result.output
