"""Exit codes and summaries CI can trust: `diff` exits 2 when an object would fail (kubectl's >1 is an error), and
`apply --wait` names its failures in the summary line it prints."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from tests.support.manifests import docs_repository

POLICIES = """apiVersion: kbctl.dev/v1alpha1
kind: KnowledgeBase
metadata: {name: policies}
spec:
  sources:
    - name: retention
      text: Invoices are kept for ten years.
"""


def _repo(tmp_path: Path) -> Path:
    """A repository with kb/handbook.yaml, whose path source reads docs/ (one Markdown file); the manifest."""
    repo = docs_repository(tmp_path, "handbook", {"parking.md": "# Parking\n\nStaff park on level two.\n"})
    return repo / "kb" / "handbook.yaml"


def test_diff_exits_2_when_a_path_source_no_longer_exists(
    store: KnowledgeBaseStore, cli: CliRunner, tmp_path: Path
) -> None:
    """The folder of a path source deleted after apply: diff prints why apply would fail and exits 2, not 0."""
    manifest = _repo(tmp_path)
    assert cli.invoke(app, ["apply", "--wait", "-f", str(manifest)]).exit_code == 0
    shutil.rmtree(tmp_path / "repo" / "docs")
    result = cli.invoke(app, ["diff", "-f", str(manifest)])
    reason = f"source docs/parking.md: path '../docs': no such file or folder (relative to {manifest.parent})"
    assert (result.exit_code, result.stdout.splitlines()) == (
        2,
        ["KnowledgeBase/handbook unchanged", f"  would fail: {reason}"],
    )
    assert result.stderr == f"Error: KnowledgeBase/handbook would fail: {reason}\n"
    as_json = cli.invoke(app, ["diff", "-f", str(manifest), "-o", "json"])
    assert as_json.exit_code == 2
    assert json.loads(as_json.stdout)["results"][0]["unreadable"] == [reason]
    assert as_json.stderr == f"Error: KnowledgeBase/handbook would fail: {reason}\n"


def test_diff_exit_codes_0_1_2(store: KnowledgeBaseStore, cli: CliRunner, tmp_path: Path) -> None:
    """0 when apply would change nothing, 1 when it would change something, 2 when any object would fail, even
    beside others that would only change."""
    manifest = _repo(tmp_path)
    policies = tmp_path / "policies.yaml"
    policies.write_text(POLICIES)
    assert cli.invoke(app, ["apply", "--wait", "-f", str(manifest), "-f", str(policies)]).exit_code == 0
    assert cli.invoke(app, ["diff", "-f", str(manifest), "-f", str(policies)]).exit_code == 0
    policies.write_text(POLICIES.replace("ten", "seven"))
    assert cli.invoke(app, ["diff", "-f", str(manifest), "-f", str(policies)]).exit_code == 1
    shutil.rmtree(tmp_path / "repo" / "docs")
    both = cli.invoke(app, ["diff", "-f", str(manifest), "-f", str(policies)])
    assert both.exit_code == 2 and "KnowledgeBase/policies configured" in both.stdout


def test_apply_wait_summary_names_failures(store: KnowledgeBaseStore, cli: CliRunner, tmp_path: Path) -> None:
    """`apply --wait` that exits 1 says so in its summary (`applied 1 resource, 1 failed`); the happy path keeps
    `applied N resources`, the line CI greps."""
    manifest = _repo(tmp_path)
    policies = tmp_path / "policies.yaml"
    policies.write_text(POLICIES)
    first = cli.invoke(app, ["apply", "--wait", "-f", str(manifest), "-f", str(policies)])
    assert (first.exit_code, first.stdout.splitlines()[-1]) == (0, "applied 2 resources")
    shutil.rmtree(tmp_path / "repo" / "docs")
    failed = cli.invoke(app, ["apply", "--wait", "-f", str(manifest)])
    assert (failed.exit_code, failed.stdout.splitlines()[-1]) == (1, "applied 1 resource, 1 failed")
    again = cli.invoke(app, ["apply", "--wait", "-f", str(manifest), "-f", str(policies)])
    assert (again.exit_code, again.stdout.splitlines()[-1]) == (1, "applied 2 resources, 1 failed")
