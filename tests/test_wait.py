"""`kbctl wait` over several knowledge bases (names, -l, --all, --for=delete) and `kbctl rollout status`, on the real
store: a controller run in a thread makes a wait succeed."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.engine.controller import RolloutStatus
from kbctl.manifest import parse_manifests


def kb_text(name: str, fact: str = "Invoices are kept for seven years.", team: str = "ops") -> str:
    """A one-source KnowledgeBase manifest labelled team=`team`."""
    return f"""apiVersion: kbctl.dev/v1alpha1
kind: KnowledgeBase
metadata:
  name: {name}
  labels: {{team: {team}}}
spec:
  sources:
    - name: facts
      text: "{fact}"
"""


def apply(store: KnowledgeBaseStore, *texts: str, wait: bool = True) -> None:
    """Apply manifests given as YAML text: in-process, or (wait=False) recorded for a controller."""
    store.apply(parse_manifests("---\n".join(texts), "kb.yaml"), wait=wait)


@contextmanager
def in_thread(store: KnowledgeBaseStore, work: Callable[[KnowledgeBaseStore], object]) -> Iterator[None]:
    """Run `work` on a store of its own (its own connection) in a thread while the block runs; re-raise its error."""
    other = KnowledgeBaseStore(settings=store.settings)
    failed: list[BaseException] = []

    def run() -> None:
        try:
            work(other)
        except BaseException as exc:  # handed to the test
            failed.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        yield
    finally:
        thread.join(timeout=300)
        other.close()
    assert not failed, failed


def reconcile(store: KnowledgeBaseStore) -> None:
    """What `kbctl controller --once` does."""
    assert store.controller().run_once().exit_code() == 0


def lines(text: str) -> list[str]:
    return text.splitlines()


# ---------------------------------------------------------------- kbctl wait


def test_wait_all_and_selector_met(store: KnowledgeBaseStore, cli: CliRunner) -> None:
    """--all waits for every knowledge base, -l for those whose labels match; one line each."""
    apply(store, kb_text("a"), kb_text("b", team="sales"), kb_text("c"))
    every = cli.invoke(app, ["wait", "kb", "--all", "--for=condition=Ready", "--timeout=30s"])
    assert every.exit_code == 0, every.output
    assert sorted(lines(every.stdout)) == [f"knowledgebase/{n} condition met" for n in ("a", "b", "c")]
    ops = cli.invoke(app, ["wait", "kb", "-l", "team=ops", "--for", "condition=Degraded=false"])
    assert ops.exit_code == 0, ops.output
    assert sorted(lines(ops.stdout)) == ["knowledgebase/a condition met", "knowledgebase/c condition met"]
    sales = cli.invoke(app, ["wait", "knowledgebases", "--selector", "team in (sales)"])
    assert (sales.exit_code, sales.stdout) == (0, "knowledgebase/b condition met\n")


def test_wait_for_several_names_met_by_a_controller(store: KnowledgeBaseStore, cli: CliRunner) -> None:
    """`wait kb a b` (and kb/NAME) returns once a controller (here in a thread) has reconciled both."""
    apply(store, kb_text("a"), kb_text("b"), wait=False)
    with in_thread(store, reconcile):
        waited = cli.invoke(app, ["wait", "kb", "a", "b", "--timeout=5m"])
    assert waited.exit_code == 0, waited.output
    assert sorted(lines(waited.stdout)) == ["knowledgebase/a condition met", "knowledgebase/b condition met"]
    again = cli.invoke(app, ["wait", "kb/a", "kb/b", "kb/a"])  # a name given twice is waited for once
    assert (again.exit_code, again.stdout) == (0, "knowledgebase/a condition met\nknowledgebase/b condition met\n")


def test_wait_timeout_names_those_not_met(store: KnowledgeBaseStore, cli: CliRunner) -> None:
    """One deadline for all: those met are printed, the error names the others, exit 1."""
    apply(store, kb_text("a"))
    apply(store, kb_text("b"), kb_text("c"), wait=False)  # nothing reconciles them
    timed_out = cli.invoke(app, ["wait", "kb", "a", "b", "c", "--timeout=300ms"])
    assert timed_out.exit_code == 1
    assert timed_out.stdout == "knowledgebase/a condition met\n"
    assert timed_out.stderr == (
        "Error: timed out after 300ms waiting for Ready=True on knowledgebase/b, knowledgebase/c\n"
    )
    every = cli.invoke(app, ["wait", "kb", "--all", "--timeout=200ms"])
    assert every.exit_code == 1
    assert every.stderr.endswith("waiting for Ready=True on knowledgebase/b, knowledgebase/c\n")
    assert store.wait(["a", "b"], timeout=0.2) is False


def test_wait_for_a_name_that_does_not_exist_is_an_error(store: KnowledgeBaseStore, cli: CliRunner) -> None:
    """A condition cannot be met by what does not exist: exit 1 at once, as before; so is --all over nothing."""
    apply(store, kb_text("a"))
    missing = cli.invoke(app, ["wait", "kb", "a", "nope", "--timeout=5m"])
    assert missing.exit_code == 1
    assert missing.stderr == 'Error: knowledgebase "nope" not found\n'
    nothing = cli.invoke(app, ["wait", "kb", "-l", "team=nobody"])
    assert (nothing.exit_code, nothing.stderr) == (1, "Error: no knowledge base matches the selector\n")


def test_wait_for_delete(store: KnowledgeBaseStore, cli: CliRunner) -> None:
    """--for=delete is met at once for a name that does not exist, and when a delete (here in a thread) is done;
    it times out, exit 1, while one still exists."""
    gone = cli.invoke(app, ["wait", "kb", "never-was", "--for=delete"])
    assert (gone.exit_code, gone.stdout) == (0, "knowledgebase/never-was deleted\n")
    apply(store, kb_text("a"), kb_text("b"), kb_text("keep", team="other"))
    kept = cli.invoke(app, ["wait", "kb", "-l", "team=other", "--for=delete", "--timeout=300ms"])
    assert kept.exit_code == 1
    assert kept.stderr == "Error: timed out after 300ms waiting for the deletion of knowledgebase/keep\n"

    def delete_both(other: KnowledgeBaseStore) -> None:
        other.delete("a")
        other.delete("b")

    with in_thread(store, delete_both):
        deleted = cli.invoke(app, ["wait", "kb", "a", "b", "--for=delete", "--timeout=5m"])
    assert deleted.exit_code == 0, deleted.output
    assert sorted(lines(deleted.stdout)) == ["knowledgebase/a deleted", "knowledgebase/b deleted"]
    assert [kb.name for kb in store.list()] == ["keep"]
    none_left = cli.invoke(app, ["wait", "kb", "-l", "team=ops", "--for=delete"])  # none matches: nothing to wait
    assert (none_left.exit_code, none_left.stdout) == (0, "")
    assert store.wait(["a", "b"], deleted=True, timeout=0)


@pytest.mark.parametrize(
    "args",
    [
        ["wait", "kb"],  # nothing to wait for
        ["wait", "kb", "a", "--all"],
        ["wait", "kb", "a", "-l", "team=ops"],
        ["wait", "kb", "--all", "-l", "team=ops"],
        ["wait", "kb", "-l", "team in ops"],  # a bad selector
        ["wait", "kb", "a", "--for=deleted"],
        ["wait", "pods", "a"],
        ["wait", "kb", "a", "--timeout=soon"],
    ],
)
def test_wait_usage_errors_exit_2(args: list[str]) -> None:
    """What to wait for is exactly one of: names, -l, --all; a wrong --for, resource or duration is a usage error."""
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert len([line for line in lines(result.stderr) if line.startswith("Error:")]) == 1


# ---------------------------------------------------------------- kbctl rollout status


def test_rollout_status_waits_for_a_controller(store: KnowledgeBaseStore, cli: CliRunner) -> None:
    """A recorded generation: progress is printed once, a timeout exits 1; once a controller (in a thread) has
    reconciled it, the rollout is done."""
    apply(store, kb_text("a"), wait=False)
    timed_out = cli.invoke(app, ["rollout", "status", "kb", "a", "--timeout=300ms"])
    assert timed_out.exit_code == 1
    [waiting] = lines(timed_out.stdout)  # said once, though read several times
    assert waiting.startswith('Waiting for knowledgebase "a" rollout to finish: generation 1 waits for a controller')
    assert timed_out.stderr.startswith(
        'Error: timed out after 300ms waiting for knowledgebase "a" rollout to finish: generation 1 waits'
    )
    with in_thread(store, reconcile):
        done = cli.invoke(app, ["rollout", "status", "kb", "a", "--timeout", "5m"])
    assert done.exit_code == 0, done.output
    assert lines(done.stdout)[-1] == 'knowledgebase "a" successfully rolled out (version 1)'
    apply(store, kb_text("a", "Invoices are kept for ten years."), wait=False)
    with in_thread(store, reconcile):
        again = cli.invoke(app, ["rollout", "status", "knowledgebase", "a"])
    assert lines(again.stdout)[-1] == 'knowledgebase "a" successfully rolled out (version 2)'


def test_rollout_status_reports_progress_through_the_api(store: KnowledgeBaseStore) -> None:
    """`on_progress` hears the waiting status before the controller works; the result says it is done."""
    apply(store, kb_text("a"), wait=False)
    heard: list[RolloutStatus] = []
    started = threading.Event()

    def progress(status: RolloutStatus) -> None:
        heard.append(status)
        started.set()

    def reconcile_once_heard(other: KnowledgeBaseStore) -> None:
        assert started.wait(60)
        reconcile(other)

    with in_thread(store, reconcile_once_heard):
        result = store.rollout_status("a", timeout=300, on_progress=progress)
    assert (result.state, result.done, result.version, result.generation, result.observed_generation) == (
        "done",
        True,
        1,
        1,
        1,
    )
    assert heard and heard[0].state == "waiting" and heard[0].observed_generation == 0


def test_rollout_status_of_a_failed_reconcile_exits_1(
    store: KnowledgeBaseStore, cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reconcile that failed as a whole (no API key for the model) ends the wait at once with its reason."""
    apply(store, kb_text("a"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    bad = kb_text("a").replace("  sources:", "  embedding: {model: openai/text-embedding-3-small}\n  sources:")
    report = store.apply(parse_manifests(bad, "kb.yaml"))
    assert report.failed
    failed = cli.invoke(app, ["rollout", "status", "kb", "a", "--timeout=5m"])
    assert (failed.exit_code, failed.stdout) == (1, "")
    assert failed.stderr.startswith('Error: knowledgebase "a" rollout failed: environment variable OPENAI_API_KEY')
    assert failed.stderr.endswith("version 1 still serves queries; fix the cause and apply again\n")
    assert len(lines(failed.stderr)) == 1
    once = cli.invoke(app, ["rollout", "status", "kb", "a", "--watch=false"])
    assert once.exit_code == 1 and once.stderr == failed.stderr
    assert store.rollout_status("a", watch=False).state == "failed"


def test_rollout_status_without_watch_prints_once(store: KnowledgeBaseStore, cli: CliRunner) -> None:
    """--watch=false (or --no-watch) prints the status now: exit 0 when rolled out, 1 otherwise."""
    apply(store, kb_text("a"))
    for flag in ("--watch=false", "--no-watch", "--watch=False"):
        done = cli.invoke(app, ["rollout", "status", "kb", "a", flag])
        assert (done.exit_code, done.stdout) == (0, 'knowledgebase "a" successfully rolled out (version 1)\n')
    apply(store, kb_text("a", "Invoices are kept for ten years."), wait=False)
    pending = cli.invoke(app, ["rollout", "status", "kb", "a", "--watch=false"])
    assert pending.exit_code == 1
    assert pending.stdout.startswith('Waiting for knowledgebase "a" rollout to finish: generation 2 waits')
    missing = cli.invoke(app, ["rollout", "status", "kb", "nope", "--no-watch"])
    assert (missing.exit_code, missing.stderr) == (1, 'Error: knowledgebase "nope" not found\n')
    wrong = cli.invoke(app, ["rollout", "status", "kb", "a", "--watch=maybe"])
    assert wrong.exit_code == 2
