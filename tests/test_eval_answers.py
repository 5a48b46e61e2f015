"""`kbctl eval --answers`: the answer metrics on a small set whose figures are computed by hand, through a real
chat server on 127.0.0.1 (answers and verdicts scripted per question), the real store and the real model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kbctl.answer import NOT_COVERED
from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.errors import EvalSetError
from kbctl.eval.answers import answer_shortfalls, evaluate_answers
from kbctl.eval.evalset import parse_evalset
from kbctl.eval.judge import parse_judgement
from tests.support.chatserver import ChatServer, question_of, serve_chat, user_content_of
from tests.test_ask import _apply, _cli_env, _config, _with_config

EVALSET = """
knowledgeBase: policies
queries:
  - id: invoices
    question: How long are invoices kept in the archive?
    expectedSources: [invoices]
    mustContain: [ten years, shredded]
    expectedAnswer: Ten years after the end of the financial year.
  - id: refunds
    question: How much of the deposit is refunded when a booking is cancelled early?
    expectedSources: [refunds]
    mustContain: [in full]
  - id: late-cancellation
    question: What share of the deposit is kept when a booking is cancelled late?
    expectedSources: [refunds]
  - id: cafeteria
    question: What is on the cafeteria menu on Fridays?
    noAnswer: true
  - id: receipts
    question: How long are expense receipts kept in the archive?
    noAnswer: true
"""
ANSWERS = {
    "How long are invoices kept in the archive?": "Invoices are kept for ten years [1].",
    "How much of the deposit is refunded when a booking is cancelled early?": (
        "The deposit is refunded in full [1]. Refunds are paid within a week [7]."
    ),
}
VERDICTS = {
    "Invoices are kept for ten years [1].": [("Invoices are kept for ten years", "supported", [1])],
    ANSWERS["How much of the deposit is refunded when a booking is cancelled early?"]: [
        ("The deposit is refunded in full", "supported", [1]),
        ("Refunds are paid within a week", "unsupported", [7]),
    ],
}


def _reply(body: dict[str, Any]) -> str:
    return ANSWERS.get(question_of(user_content_of(body)), NOT_COVERED)


def _judge(body: dict[str, Any]) -> str:
    content = user_content_of(body)
    answer = content.split("<answer>\n", 1)[1].split("\n</answer>", 1)[0]
    claims = [{"claim": c, "verdict": v, "passages": p} for c, v, p in VERDICTS[answer]]
    return "Here is my judgement:\n```json\n" + json.dumps({"claims": claims}) + "\n```"


@pytest.fixture(scope="module")
def chat() -> Iterator[ChatServer]:
    with serve_chat(reply=_reply, judge_reply=_judge) as server:
        yield server


@pytest.fixture
def judged(store: KnowledgeBaseStore, chat: ChatServer, tmp_path: Path) -> KnowledgeBaseStore:
    chat.reset()
    _with_config(store, _config(chat), tmp_path)
    _apply(store)
    return store


def test_the_answer_metrics_match_the_figures_computed_by_hand(judged: KnowledgeBaseStore, chat: ChatServer) -> None:
    evalset = parse_evalset(EVALSET, "answers.yaml")
    [report] = evaluate_answers(judged, "policies", evalset, judge="stand-in/chat-test-v1")
    by_id = {r.id: r for r in report.results}
    assert by_id["cafeteria"].reason == "noContext"  # nothing retrieved: no model asked
    assert (report.queries, report.answerable, report.no_answer_queries) == (5, 3, 2)
    assert report.answered == pytest.approx(2 / 3)  # invoices, refunds; late-cancellation declined
    assert report.refused == pytest.approx(1.0)  # cafeteria (no context) and receipts (declined or no context)
    assert report.citation_validity == pytest.approx(2 / 3)  # [1], [1] valid; [7] given to no passage
    assert report.must_contain == pytest.approx(2 / 3)  # "ten years", "in full" found; "shredded" not
    assert report.faithfulness == pytest.approx(0.75)  # invoices 1/1, refunds 1/2
    assert (report.claims, report.unsupported_claims, report.contradicted_claims) == (3, 1, 0)
    assert (report.uncited_answers, report.errors) == (0, 0)
    assert by_id["refunds"].invalid_citations == [7] and by_id["invoices"].must_contain_missing == ["shredded"]
    assert {m.id for m in report.misses} == {"invoices", "refunds", "late-cancellation"}
    assert [s.message for s in answer_shortfalls([report], min_faithfulness=0.8, min_refusal=1.0)] == [
        "faithfulness 0.75 is below --min-faithfulness 0.80"
    ]
    judge_calls = [r for r in chat.completions if "<answer>" in user_content_of(r.body)]
    assert len(judge_calls) == 2  # only answered questions are judged


def test_without_a_judge_faithfulness_is_not_measured(judged: KnowledgeBaseStore) -> None:
    [report] = evaluate_answers(judged, "policies", parse_evalset(EVALSET, "answers.yaml"))
    assert report.faithfulness is None and report.claims == 0 and report.answered == pytest.approx(2 / 3)
    [gate] = answer_shortfalls([report], min_faithfulness=0.5)
    assert gate.message == "faithfulness cannot be measured without a judge model, --min-faithfulness 0.5"


def test_a_judge_that_does_not_answer_in_json_is_an_error_on_that_question(
    judged: KnowledgeBaseStore, chat: ChatServer
) -> None:
    chat.judge_reply = lambda body: "Looks fine to me."
    [report] = evaluate_answers(judged, "policies", parse_evalset(EVALSET, "answers.yaml"), judge="stand-in/x")
    assert report.errors == 2 and report.faithfulness is None
    assert all("judge: the judge did not reply with a JSON object" in (r.error or "") for r in report.misses[:2])


def test_judgements_are_read_strictly() -> None:
    [claim] = parse_judgement('{"claims": [{"claim": "a", "verdict": "contradicted", "passages": [2]}]}')
    assert claim.verdict == "contradicted" and claim.passages == [2]
    with pytest.raises(Exception, match="not a judgement"):
        parse_judgement('{"claims": [{"claim": "a", "verdict": "maybe"}]}')


def test_eval_sets_check_the_answer_fields() -> None:
    with pytest.raises(EvalSetError) as error:
        parse_evalset("queries:\n  - id: a\n    question: q?\n    noAnswer: true\n    mustContain: [x]\n", "bad.yaml")
    assert "bad.yaml:2: queries[0]: noAnswer: true cannot be combined with mustContain" in str(error.value.problems[0])


def test_cli_eval_answers_reports_both_halves_and_gates(
    judged: KnowledgeBaseStore, chat: ChatServer, database_url: str, tmp_path: Path
) -> None:
    config = _config(chat)
    config["chat"]["judgeModel"] = "stand-in/chat-test-v1"
    env = _cli_env(judged, database_url, config, tmp_path)
    path = tmp_path / "answers.yaml"
    path.write_text(EVALSET)
    run = CliRunner(env=env).invoke(app, ["eval", "-f", str(path), "--answers", "-v", "--min-refusal", "1"])
    assert run.exit_code == 0, run.output
    assert "RECALL@5" in run.stdout and "CHAT MODEL" in run.stdout and "FAITHFUL" in run.stdout
    assert "answers judged by stand-in/chat-test-v1" in run.stdout
    assert "refunds: cites [7] (not given); unsupported: Refunds are paid within a week" in run.stdout
    gated = CliRunner(env=env).invoke(
        app, ["eval", "-f", str(path), "--answers", "--min-faithfulness", "0.9", "-o", "json"]
    )
    assert gated.exit_code == 1 and "faithfulness 0.75 is below --min-faithfulness 0.90" in gated.stderr
    data = json.loads(gated.stdout)
    assert data["modes"][0]["recall"] is not None and data["answers"][0]["faithfulness"] == pytest.approx(0.75)
    usage = CliRunner(env=env).invoke(app, ["eval", "-f", str(path), "--judge-model", "x/y"])
    assert usage.exit_code == 2 and "need --answers" in usage.output
