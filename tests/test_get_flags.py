"""kubectl's table and watch flags of `kbctl get`: --no-headers, --show-labels, -L, --sort-by and -w."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.cli import get as get_command
from kbctl.cli.render import headed_table, label_column_title
from kbctl.client import KnowledgeBaseStore
from kbctl.manifest import parse_manifests
from kbctl.store.events import KnowledgeBaseEvent
from tests.support.manifests import knowledge_base, text_source

SMALL_CHUNKS = {"maxChars": 100, "overlapChars": 0}


def _apply(store: KnowledgeBaseStore, name: str, text: str, labels: dict[str, str] | None = None, **spec: Any) -> None:
    store.apply(parse_manifests(knowledge_base(name, text_source("notes", text), labels=labels, **spec), "kb.yaml"))


def _paragraphs(n: int) -> str:
    """A text that SMALL_CHUNKS splits into about `n` chunks."""
    return "\n\n".join(f"Paragraph {i} says the office opens at {i} o'clock on weekdays." for i in range(n))


def _run(cli: CliRunner, *args: str, code: int = 0) -> str:
    result = cli.invoke(app, list(args))
    assert result.exit_code == code, result.output
    return result.stdout


def test_no_headers_show_labels_and_label_columns(store: KnowledgeBaseStore, cli: CliRunner) -> None:
    _apply(store, "alpha", "Alpha opens at nine.", {"team": "web"})
    _apply(store, "beta", "Beta opens at ten.", {"team": "ops", "tier": "gold"})
    bare = _run(cli, "get", "kb", "--no-headers").splitlines()
    assert [line.split()[0] for line in bare] == ["alpha", "beta"]
    wide = _run(cli, "get", "kb", "-o", "wide", "--no-headers").splitlines()
    assert [line.split()[0] for line in wide] == ["alpha", "beta"] and "team=ops,tier=gold" in wide[1]

    header, alpha, beta = _run(cli, "get", "kb", "--show-labels").splitlines()
    assert header.split()[-2:] == ["AGE", "LABELS"]
    assert alpha.split()[-1] == "team=web" and beta.split()[-1] == "team=ops,tier=gold"

    header, alpha, beta = _run(cli, "get", "kb", "-L", "tier,team", "-L", "missing", "--show-labels").splitlines()
    assert header.split()[-4:] == ["TIER", "TEAM", "MISSING", "LABELS"]  # -L columns, then LABELS, as kubectl
    assert beta.split()[-3:] == ["gold", "ops", "team=ops,tier=gold"]
    assert alpha.split()[-2:] == ["web", "team=web"]  # no tier, no missing: empty cells
    assert alpha[header.index("TIER") : header.index("TEAM")].strip() == ""
    assert alpha[header.index("TEAM") :].split()[0] == "web"
    # -o wide has its LABELS already: --show-labels adds no second one
    assert _run(cli, "get", "kb", "-o", "wide", "--show-labels").splitlines()[0].split().count("LABELS") == 1

    columns = _run(cli, "get", "kb", "-o", "custom-columns=NAME:.metadata.name", "--no-headers")
    assert columns.splitlines() == ["alpha", "beta"]
    events = _run(cli, "get", "events", "--no-headers").splitlines()
    assert [line.split()[3] for line in events] == ["knowledgebase/alpha", "knowledgebase/beta"]
    refused = cli.invoke(app, ["get", "events", "--show-labels"])
    assert refused.exit_code == 2 and "events have no labels" in refused.output


def test_sort_by_a_field_of_the_objects(store: KnowledgeBaseStore, cli: CliRunner) -> None:
    _apply(store, "few", _paragraphs(2), {"rank": "b"}, chunking=SMALL_CHUNKS)
    _apply(store, "many", _paragraphs(12), {"rank": "a"}, chunking=SMALL_CHUNKS)
    _apply(store, "none", "One short text.")
    chunks = {
        o["metadata"]["name"]: o["status"]["chunks"] for o in json.loads(_run(cli, "get", "kb", "-o", "json"))["items"]
    }
    assert chunks["none"] < chunks["few"] < 10 <= chunks["many"]  # numbers, not text ("10" < "2")

    by_chunks = _run(cli, "get", "kb", "--sort-by=.status.chunks", "--no-headers").splitlines()
    assert [line.split()[0] for line in by_chunks] == ["none", "few", "many"]
    assert _run(cli, "get", "kb", "--sort-by", "{.metadata.labels.rank}", "-o", "name").splitlines() == [
        "knowledgebase/none",  # no such label: first
        "knowledgebase/many",
        "knowledgebase/few",
    ]
    listed = json.loads(_run(cli, "get", "kb", "--sort-by=.status.chunks", "-o", "json"))
    assert [o["metadata"]["name"] for o in listed["items"]] == ["none", "few", "many"]
    by_name = _run(cli, "get", "kb", "--sort-by=.metadata.name", "-o", "name").splitlines()
    assert by_name == ["knowledgebase/few", "knowledgebase/many", "knowledgebase/none"]
    assert len(_run(cli, "get", "kb", "--sort-by=.metadata.creationTimestamp").splitlines()) == 4

    for bad in (".status.chunks[", "", "{}"):
        result = cli.invoke(app, ["get", "kb", f"--sort-by={bad}"])
        assert result.exit_code == 2, (bad, result.output)
        assert "Invalid value for '--sort-by'" in result.output


def test_sort_events_by_their_fields(store: KnowledgeBaseStore, cli: CliRunner) -> None:
    _apply(store, "zeta", "Zeta opens at nine.")
    _apply(store, "alpha", "Alpha opens at ten.")
    objects = [line.split()[3] for line in _run(cli, "get", "events", "--no-headers").splitlines()]
    assert objects == ["knowledgebase/zeta", "knowledgebase/alpha"]  # oldest first
    for path in (".name", ".object_name", ".count"):  # unknown: all missing, the order stays
        listed = _run(cli, "get", "events", f"--sort-by={path}", "-o", "json")
        names = [e["name"] for e in json.loads(listed)["items"]]
        assert names == (["alpha", "zeta"] if path == ".name" else ["zeta", "alpha"]), path
    newest_first = _run(cli, "get", "events", "--sort-by=.lastSeen", "--no-headers").splitlines()
    assert [line.split()[3] for line in newest_first] == ["knowledgebase/zeta", "knowledgebase/alpha"]
    assert cli.invoke(app, ["get", "events", "--sort-by=.count["]).exit_code == 2


def test_watch_prints_the_rows_that_change(
    store: KnowledgeBaseStore, cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    _apply(store, "alpha", "Alpha opens at nine.", {"team": "web"})
    unchanged = _run(cli, "get", "kb", "-L", "team", "-w", "--watch-timeout", "300ms")
    assert [line.split()[0] for line in unchanged.splitlines()] == ["NAME", "alpha"]

    def change_then_poll(seconds: float) -> None:  # the watch's pause: the store changes during it
        _apply(store, "alpha", "Alpha opens at nine.", {"team": "ops"})
        _apply(store, "beta", "Beta opens at ten.")

    monkeypatch.setattr(get_command, "_pause", change_then_poll)
    header, first, *again = _run(cli, "get", "kb", "-L", "team", "-w", "--watch-timeout", "10ms").splitlines()
    assert header.split()[0] == "NAME" and first.split()[0] == "alpha" and first.split()[-1] == "web"
    assert [line.split()[0] for line in again] == ["alpha", "beta"]  # beta is new; alpha's team changed
    assert again[0].split()[-1] == "ops" and again[1][header.index("TEAM") :].strip() == ""

    monkeypatch.setattr(get_command, "_pause", lambda seconds: _apply(store, "gamma", "Gamma opens at noon."))
    names = _run(cli, "get", "kb", "-o", "name", "-w", "--watch-timeout", "10ms").splitlines()
    assert names == ["knowledgebase/alpha", "knowledgebase/beta", "knowledgebase/gamma"]

    so_far = _run(cli, "get", "events").splitlines()
    monkeypatch.setattr(get_command, "_pause", lambda seconds: _apply(store, "delta", "Delta opens at one."))
    events = _run(cli, "get", "events", "-w", "--watch-timeout", "10ms").splitlines()
    assert len(events) == len(so_far) + 1 and events[0] == so_far[0]  # one new event, no second header
    assert events[-1].split()[1:4] == ["Normal", "Published", "knowledgebase/delta"]

    def interrupt(seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(get_command, "_pause", interrupt)
    stopped = _run(cli, "get", "kb", "-w", "--no-headers")  # Ctrl-C: exit 0
    assert [line.split()[0] for line in stopped.splitlines()] == ["alpha", "beta", "delta", "gamma"]
    for refused in (["get", "kb", "-w", "-o", "json"], ["get", "events", "-w", "-o", "yaml"]):
        assert cli.invoke(app, refused).exit_code == 2
    assert cli.invoke(app, ["get", "kb", "-w", "--watch-timeout", "soon"]).exit_code == 2


def test_watch_from_an_empty_list_prints_the_header_with_the_first_row(
    store: KnowledgeBaseStore, cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(get_command, "_pause", lambda seconds: _apply(store, "alpha", "Alpha opens at nine."))
    result = cli.invoke(app, ["get", "kb", "-w", "--watch-timeout", "10ms"])
    assert result.exit_code == 0 and result.stderr == "No knowledge bases found.\n"
    assert [line.split()[0] for line in result.stdout.splitlines()] == ["NAME", "alpha"]


def _row(name: str, age: str, chunks: int = 3) -> list[object]:
    return [name, True, "Ready", 1, "1/1", chunks, age, "web"]


def test_changed_rows_ignore_the_age() -> None:
    before = {"a": _row("a", "5s"), "b": _row("b", "5s"), "gone": _row("gone", "1m")}
    after = {"a": _row("a", "2m"), "b": _row("b", "2m", chunks=4), "new": _row("new", "0s")}
    assert get_command._changed_rows(before, after) == ["b", "new"]
    assert get_command._changed_rows(after, after) == []


def _event(name: str, count: int = 1, message: str = "version 1 published") -> KnowledgeBaseEvent:
    seen = datetime(2026, 1, 1, tzinfo=UTC)
    return KnowledgeBaseEvent(
        name=name,
        type="Normal",
        reason="Published",
        message=message,
        component="apply",
        count=count,
        first_seen=seen,
        last_seen=seen + timedelta(minutes=count),
    )


def test_new_events_are_the_new_and_the_counted_up() -> None:
    before = [_event("a"), _event("b")]
    after = [_event("a"), _event("b", count=2), _event("a", message="version 2 published")]
    assert get_command._new_events(before, after) == after[1:]
    assert get_command._new_events(after, after) == []


def test_sort_key_orders_missing_numbers_times_then_text() -> None:
    values: list[list[Any]] = [["b"], [10], [], ["2026-01-02T00:00:00Z"], [2], [None], ["a"], ["2026-01-01T00:00:00Z"]]
    ordered = sorted(values, key=get_command._sort_key)
    assert ordered == [[], [None], [2], [10], ["2026-01-01T00:00:00Z"], ["2026-01-02T00:00:00Z"], ["a"], ["b"]]


def test_label_titles_and_headless_tables() -> None:
    assert label_column_title("app.kubernetes.io/name") == "NAME" and label_column_title("team") == "TEAM"
    assert headed_table(["LONG HEADER", "B"], [["x", 1], ["yy", 22]], no_headers=True) == "x    1\nyy   22"
    assert headed_table(["A"], [], no_headers=True) == ""
