"""Smaller reliability fixes: version numbers across submit and --wait, usage errors exit 2, bounded change causes."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.manifest import parse_manifests
from kbctl.sources.url import FetchRequest, fetch_urls
from tests.support.httpserver import fetch_policy_for, serve

pytestmark = pytest.mark.reliability


def kb(sources: int = 1, text: str = "Invoices are kept for seven years.") -> str:
    body = "".join(f"    - name: s{i}\n      text: {text} ({i})\n" for i in range(sources))
    return f"apiVersion: kbctl.dev/v1alpha1\nkind: KnowledgeBase\nmetadata:\n  name: notes\nspec:\n  sources:\n{body}"


def test_submit_then_apply_wait_names_the_same_version(store: KnowledgeBaseStore, cli: CliRunner, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`apply` (pending version 2) then `apply --wait` publishes and prints version 2."""
    path = tmp_path / "kb.yaml"
    path.write_text(kb())
    assert cli.invoke(app, ["apply", "-f", str(path), "--wait"]).exit_code == 0
    path.write_text(kb(text="Invoices are kept for ten years."))
    submitted = cli.invoke(app, ["apply", "-f", str(path)])
    assert submitted.stdout.splitlines()[0] == "KnowledgeBase/notes configured (version 2 pending)"
    waited = cli.invoke(app, ["apply", "-f", str(path), "--wait"])
    assert waited.stdout.splitlines()[0].startswith("KnowledgeBase/notes configured (version 2); ")
    assert [v.number for v in store.history("notes")] == [2, 1]


def test_a_wrong_mode_is_a_usage_error(cli: CliRunner) -> None:
    """`--mode bogus` exits 2 (usage), like every other invalid option value."""
    assert cli.invoke(app, ["query", "notes", "x", "--mode", "bogus"]).exit_code == 2
    assert cli.invoke(app, ["context", "notes", "x", "--mode", "bogus"]).exit_code == 2


def test_change_cause_stays_one_readable_line(store: KnowledgeBaseStore) -> None:
    """150 sources added name three of them and count the rest, so `rollout history` keeps one short line."""
    store.apply(parse_manifests(kb(), "kb.yaml"))
    store.apply(parse_manifests(kb(sources=151), "kb.yaml"))
    cause = store.history("notes")[0].change_cause
    assert cause == "source s1 added; source s2 added; source s3 added; and 147 more"


def test_a_backslash_in_a_redirect_location_is_a_clear_error() -> None:
    """A redirect to a URL with a backslash fails the source with a message naming it, not "unexpected error"."""
    with serve() as srv:
        srv.redirect("/r", "http://a\\b/")
        outcome = fetch_urls([FetchRequest("k", srv.url("/r"))], fetch_policy_for(srv, retries=0))["k"]
    assert "unexpected" not in str(outcome) and str(outcome).startswith("redirected to http://a\\b/: ")
