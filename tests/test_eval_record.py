"""`kbctl eval --record` and the evaluation history (`record_eval`, `eval_history`) on the real store: each mode's
metrics kept against the version its queries read, under the eval set's name, the caller measured as said."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbctl import KnowledgeBaseStore, Reader
from kbctl.cli import app
from kbctl.errors import KbctlError, NotFoundError
from kbctl.eval.evalset import parse_evalset
from kbctl.eval.run import evaluate_store
from kbctl.manifest import parse_manifests
from kbctl.store.evalruns import EvalMetrics, NewEvalRun
from tests.support.manifests import knowledge_base, text_source

REFUNDS = "# Refunds\n\nA client who cancels 14 to 29 days before the start gets half of the deposit back."
LEAVE = "# Leave\n\nEvery employee has twenty-five days of paid holiday per calendar year."
SALARIES = "# Salaries\n\nSalary band E4 pays between 81,000 and 97,000 euros a year."
EVALSET = """\
queries:
  - id: deposit
    question: How much of the deposit comes back when a client cancels two weeks before the start?
    expectedSources: [refunds]
  - id: holiday
    question: How many days of paid holiday does an employee get?
    expectedSources: [leave]
  - id: cafeteria
    question: What is on the cafeteria menu on Fridays?
    noAnswer: true
"""


def apply(store: KnowledgeBaseStore, leave: str = LEAVE) -> None:
    manifest = knowledge_base(
        "policies",
        text_source("refunds", REFUNDS),
        text_source("leave", leave),
        text_source("salaries", SALARIES, access={"groups": ["hr-managers"]}),
    )
    assert store.apply(parse_manifests(manifest, "policies.yaml"), wait=True).exit_code() == 0


@pytest.fixture
def evalset_file(tmp_path: Path) -> Path:
    path = tmp_path / "sets" / "policies-eval.yaml"
    path.parent.mkdir()
    path.write_text(EVALSET)
    return path


def test_record_stores_each_mode_per_version_and_the_history_lists_them_in_order(
    store: KnowledgeBaseStore, cli: CliRunner, evalset_file: Path
) -> None:
    apply(store)
    first = cli.invoke(app, ["eval", "policies", "-f", str(evalset_file), "-m", "hybrid", "-m", "vector", "--record"])
    assert first.exit_code == 0, first.output
    assert "recorded 2 runs of eval set policies-eval.yaml against KnowledgeBase/policies version 1" in first.output
    apply(store, leave=LEAVE + "\n\nUnused days carry over until the end of March.")
    second = cli.invoke(app, ["eval", "policies", "-f", str(evalset_file), "-m", "hybrid", "--record"])
    assert second.exit_code == 0, second.output
    assert "recorded 1 run of eval set policies-eval.yaml against KnowledgeBase/policies version 2" in second.output
    history = store.eval_history("policies")
    assert [(r.version, r.mode) for r in history] == [(1, "hybrid"), (1, "vector"), (2, "hybrid")]
    assert [r.id for r in history] == sorted(r.id for r in history)
    run = history[-1]
    assert run.eval_set == "policies-eval.yaml" and str(evalset_file.parent) not in run.model_dump_json()
    assert (run.questions, run.k, run.as_reader, run.reader_groups) == (3, 5, False, None)
    assert run.metrics.answerable == 2 and run.metrics.no_answer_queries == 1
    assert run.metrics.recall is not None and 0.0 <= run.metrics.recall <= 1.0
    assert set(run.model_dump(by_alias=True)) >= {"knowledgeBase", "evalSet", "asReader", "metrics"}
    assert "hitRate" in run.model_dump(by_alias=True)["metrics"]


def test_the_version_recorded_is_the_one_the_queries_read(
    store: KnowledgeBaseStore, cli: CliRunner, evalset_file: Path
) -> None:
    """Rolled back to version 1, version 1 serves: the run is of version 1, not of the newest."""
    apply(store)
    apply(store, leave=LEAVE + "\n\nUnused days carry over until the end of March.")
    store.rollback("policies", 1)
    result = cli.invoke(app, ["eval", "policies", "-f", str(evalset_file), "--record", "-o", "json"])
    assert result.exit_code == 0, result.output
    assert "recorded 1 run" in result.stderr and "recorded" not in result.stdout
    assert [r.version for r in store.eval_history("policies")] == [1]


def test_a_run_as_a_group_says_so_and_only_a_reader_holding_it_sees_it(
    store: KnowledgeBaseStore, cli: CliRunner, evalset_file: Path
) -> None:
    apply(store)
    evalset_file.write_text("name: hr-regressions\n" + EVALSET)
    plain = cli.invoke(app, ["eval", "policies", "-f", str(evalset_file), "--record"])
    grouped = cli.invoke(app, ["eval", "policies", "-f", str(evalset_file), "--record", "--as-group", "hr-managers"])
    assert plain.exit_code == 0 and grouped.exit_code == 0, grouped.output
    runs = store.eval_history("policies")
    assert [(r.eval_set, r.as_reader, r.reader_groups) for r in runs] == [
        ("hr-regressions", False, None),
        ("hr-regressions", True, ["hr-managers"]),
    ]
    assert [r.as_reader for r in store.eval_history("policies", reader=Reader())] == [False]
    assert len(store.eval_history("policies", reader=Reader.of(["hr-managers", "staff"]))) == 2


def test_out_of_scope_and_missing_names_are_not_found(store: KnowledgeBaseStore) -> None:
    apply(store)
    evalset = parse_evalset(EVALSET, "set.yaml")
    report = evaluate_store(store, "policies", evalset)
    hidden = lambda name, labels: name != "policies"  # noqa: E731
    with pytest.raises(NotFoundError, match='knowledgebase "policies" not found'):
        store.eval_history("policies", scope=hidden)
    with pytest.raises(NotFoundError, match='knowledgebase "policies" not found'):
        store.record_eval("policies", report, eval_set="set.yaml", scope=hidden)
    with pytest.raises(NotFoundError, match='knowledgebase "other" not found'):
        store.eval_history("other")
    assert store.eval_history("policies") == []


def test_nothing_is_recorded_when_a_mode_read_two_versions(store: KnowledgeBaseStore) -> None:
    apply(store)
    report = evaluate_store(store, "policies", parse_evalset(EVALSET, "set.yaml"), modes=["hybrid", "vector"])
    assert [m.versions for m in report.modes] == [[1], [1]]
    report.modes[1].versions = [1, 2]
    with pytest.raises(KbctlError, match="queries of mode vector read versions 1 and 2"):
        store.record_eval("policies", report, eval_set="set.yaml")
    assert store.eval_history("policies") == []


def test_the_history_keeps_the_newest_runs_and_refuses_a_path(store: KnowledgeBaseStore) -> None:
    apply(store)
    metrics = EvalMetrics(
        answerable=1, no_answer_queries=0, recall=1.0, mrr=1.0, ndcg=1.0, hit_rate=1.0, no_answer_accuracy=None
    )
    for n in range(5):
        run = NewEvalRun(version=1, eval_set=f"set-{n}", questions=1, mode="hybrid", k=5, metrics=metrics)
        store.db.record_eval_runs("policies", [run], keep=3)
    assert [r.eval_set for r in store.db.list_eval_runs("policies")] == ["set-2", "set-3", "set-4"]
    with pytest.raises(KbctlError, match="a name, not a path"):
        store.db.record_eval_runs("policies", [NewEvalRun(1, "ci/set.yaml", 1, "hybrid", 5, metrics)])
    assert len(store.db.list_eval_runs("policies")) == 3


def test_an_eval_set_from_stdin_needs_a_name_to_be_recorded(store: KnowledgeBaseStore, cli: CliRunner) -> None:
    apply(store)
    unnamed = cli.invoke(app, ["eval", "policies", "-f", "-", "--record"], input=EVALSET)
    assert unnamed.exit_code != 0 and "needs a name: to be recorded" in unnamed.output
    assert "Traceback" not in unnamed.output and store.eval_history("policies") == []
    named = cli.invoke(app, ["eval", "policies", "-f", "-", "--record"], input="name: piped\n" + EVALSET)
    assert named.exit_code == 0, named.output
    assert [r.eval_set for r in store.eval_history("policies")] == ["piped"]
