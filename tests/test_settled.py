"""Settled files: a manifest file applied again byte for byte, while the store serves what it left, is not parsed.

Every test applies through the real CLI path (`load_settled` + `apply(..., controller=True)`) against the real store,
and checks both sides: what is skipped, and that the report is the one a full apply gives.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings
from kbctl.engine.results import ApplyReport
from kbctl.engine.settled import ManifestsToApply, file_key
from kbctl.errors import ManifestError
from kbctl.manifest import load_manifests, read_manifest_files
from tests.support.manifests import knowledge_base, text_source

NOTES = (
    knowledge_base("notes", text_source("a", "Alpha is first."), text_source("b", "Beta is second, then Gamma.")) + "\n"
)
OFFICE = knowledge_base("office", text_source("hours", "Office hours are 9:00 to 17:30 on working days.")) + "\n"
OFFICE_YAML = """apiVersion: kbctl.dev/v1alpha1
kind: KnowledgeBase
metadata:
  name: office
spec:
  sources:
    - name: hours
      text: Office hours are 9:00 to 17:30 on working days.
"""


def load(store: KnowledgeBaseStore, *paths: Path) -> ManifestsToApply:
    return store.load_settled(read_manifest_files([str(p) for p in paths]))


def apply(store: KnowledgeBaseStore, *paths: Path) -> tuple[ManifestsToApply, ApplyReport]:
    to_apply = load(store, *paths)
    return to_apply, store.apply(to_apply, controller=True)


def parsed(to_apply: ManifestsToApply) -> list[str]:
    return [m.kb.name for m in to_apply.manifests.manifests]


def applied_office(cli: CliRunner, folder: Path) -> Path:
    """OFFICE_YAML written to folder/kb.yaml and applied through the CLI with --wait; the file's path."""
    kb = folder / "kb.yaml"
    kb.write_text(OFFICE_YAML)
    assert cli.invoke(app, ["apply", "-f", str(kb), "--wait"]).exit_code == 0
    return kb


def checked_times(store: KnowledgeBaseStore) -> dict[str, Any]:
    rows = store.db.connection.execute("SELECT source_name, checked_at FROM kb_source_status").fetchall()
    return {str(name): at for name, at in rows}


def test_the_same_file_again_is_not_parsed_and_reports_what_a_full_apply_reports(
    store: KnowledgeBaseStore, tmp_path: Path
) -> None:
    kb = tmp_path / "kb.yaml"
    kb.write_text(NOTES)
    first, created = apply(store, kb)
    assert parsed(first) == ["notes"] and created.results[0].action == "created"
    # The same text at another path is another file: parsed, planned, unchanged.
    copy = tmp_path / "copy" / "kb.yaml"
    copy.parent.mkdir()
    shutil.copy(kb, copy)
    full, unchanged_full = apply(store, copy)
    assert parsed(full) == ["notes"] and unchanged_full.results[0].action == "unchanged"
    before = checked_times(store)
    again, unchanged = apply(store, copy)
    assert parsed(again) == [] and [s.name for s in again.manifests.settled] == ["notes"]
    assert unchanged.model_dump() == unchanged_full.model_dump()
    after = checked_times(store)
    assert set(after) == {"a", "b"} and all(after[n] > before[n] for n in after)
    assert store.db.get_kb("notes").current_version == 1  # type: ignore[union-attr]


def test_any_change_of_the_bytes_or_of_the_store_reads_the_file_again(
    store: KnowledgeBaseStore, tmp_path: Path
) -> None:
    kb = tmp_path / "kb.yaml"
    kb.write_text(NOTES)
    apply(store, kb)
    kb.write_text(NOTES + "# a comment changes the bytes, not the manifest\n")
    changed, report = apply(store, kb)
    assert parsed(changed) == ["notes"] and report.results[0].action == "unchanged"
    assert parsed(load(store, kb)) == []

    kb.write_text(knowledge_base("notes", text_source("a", "Alpha is first, now.")))
    assert apply(store, kb)[1].results[0].version == 2
    assert parsed(load(store, kb)) == []
    store.rollback("notes", 1)  # the store no longer serves what the file left: read, planned, published
    back, report = apply(store, kb)
    assert parsed(back) == ["notes"] and report.results[0].action == "configured"
    assert parsed(load(store, kb)) == []

    store.delete("notes")
    gone, report = apply(store, kb)
    assert parsed(gone) == ["notes"] and report.results[0].action == "created"


def test_a_file_settles_only_while_all_its_knowledge_bases_serve_it(store: KnowledgeBaseStore, tmp_path: Path) -> None:
    both = tmp_path / "both.yaml"
    both.write_text(NOTES + "---\n" + OFFICE)
    apply(store, both)
    settled = load(store, both)
    assert parsed(settled) == [] and settled.manifests.names == ["notes", "office"]
    store.delete("office")
    again, report = apply(store, both)
    assert parsed(again) == ["notes", "office"]
    assert [(r.name, r.action) for r in report.results] == [("notes", "unchanged"), ("office", "created")]


def test_path_sources_and_stdin_are_always_read(store: KnowledgeBaseStore, tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "faq.md").write_text("# FAQ\n\nReturns are accepted within 30 days.\n")
    kb = tmp_path / "kb.yaml"
    kb.write_text(
        "apiVersion: kbctl.dev/v1alpha1\nkind: KnowledgeBase\nmetadata: {name: files}\n"
        "spec:\n  sources:\n    - {name: docs, path: docs}\n"
    )
    apply(store, kb)
    assert parsed(load(store, kb)) == ["files"]  # its files could have changed: only reading them tells


def test_a_duplicate_name_is_reported_as_when_nothing_is_settled(store: KnowledgeBaseStore, tmp_path: Path) -> None:
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text("# notes\n" + NOTES)
    second.write_text(NOTES)
    apply(store, first)
    with pytest.raises(ManifestError) as unsettled:
        load_manifests([str(first), str(second)])
    with pytest.raises(ManifestError) as settled:
        load(store, first, second)
    assert [str(p) for p in settled.value.problems] == [str(p) for p in unsettled.value.problems]
    assert "also defined at" in str(settled.value.problems[0])
    with pytest.raises(ManifestError) as reversed_order:  # a settled file after the one defining the name
        load(store, second, first)
    assert "duplicate KnowledgeBase name 'notes'" in str(reversed_order.value.problems[0])


def test_the_key_is_the_path_and_the_text() -> None:
    key = file_key("kb.yaml", NOTES)
    assert key == file_key("./kb.yaml", NOTES)
    assert key not in {file_key("other.yaml", NOTES), file_key("kb.yaml", NOTES + "\n")}


def test_cli_apply_twice_prints_unchanged_and_a_broken_file_still_fails(
    cli: CliRunner, store: KnowledgeBaseStore, tmp_path: Path
) -> None:
    kb = applied_office(cli, tmp_path)
    again = cli.invoke(app, ["apply", "-f", str(kb), "--wait"])
    assert again.exit_code == 0 and "KnowledgeBase/office unchanged (version 1)" in again.output
    kb.write_text(OFFICE_YAML.replace("kind: KnowledgeBase", "kind: KnowledgeBase\nbogus: 1"))
    broken = cli.invoke(app, ["apply", "-f", str(kb), "--wait"])
    assert broken.exit_code == 1 and "bogus" in broken.output


def test_apply_without_wait_reports_a_settled_file_unchanged_and_records_an_unchanged_one(
    cli: CliRunner, store: KnowledgeBaseStore, tmp_path: Path
) -> None:
    kb = applied_office(cli, tmp_path)
    settled = cli.invoke(app, ["apply", "-f", str(kb), "-o", "json"])
    assert settled.exit_code == 0, settled.output
    assert '"action": "unchanged"' in settled.output and '"pending": false' in settled.output
    copy = tmp_path / "copy.yaml"
    copy.write_text(OFFICE_YAML)
    assert parsed(load(store, copy)) == ["office"]
    unchanged = cli.invoke(app, ["apply", "-f", str(copy)])
    assert unchanged.exit_code == 0 and "KnowledgeBase/office unchanged (version 1)" in unchanged.output
    assert parsed(load(store, copy)) == []  # the store already served it: the copy's key is recorded
    assert store.db.get_kb("office").generation == 1  # type: ignore[union-attr]


def test_a_profile_that_names_another_model_now_reads_the_file_again(
    database_url: str, kbctl_home: Path, store: KnowledgeBaseStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The settled check resolves the manifest's embedding profile: pointed at another model, the file is parsed,
    and applying it would re-embed (here: fail, the other model's endpoint does not answer)."""
    config = tmp_path / "config.yaml"
    config.write_text("embedding:\n  profiles:\n    main: {provider: local, model: all-MiniLM-L6-v2}\n")
    monkeypatch.setenv("KBCTL_CONFIG", str(config))
    kb = tmp_path / "kb.yaml"
    kb.write_text(OFFICE_YAML.replace("spec:\n", "spec:\n  embedding: {profile: main}\n"))
    with KnowledgeBaseStore(settings=Settings.from_env(home=kbctl_home, database_url=database_url)) as local:
        assert apply(local, kb)[1].results[0].action == "created"
        assert parsed(load(local, kb)) == []
    changed = tmp_path / "changed.yaml"  # models are built once per process and configuration file
    changed.write_text(
        "embedding:\n  providers:\n    gateway: {baseURL: 'http://127.0.0.1:9/v1'}\n"
        "  profiles:\n    main: {provider: gateway, model: text-embedding-3-small}\n"
    )
    monkeypatch.setenv("KBCTL_CONFIG", str(changed))
    with KnowledgeBaseStore(settings=Settings.from_env(home=kbctl_home, database_url=database_url)) as other:
        assert parsed(load(other, kb)) == ["office"]


def test_diff_and_dry_run_of_a_settled_file_say_what_they_say_of_the_same_text_parsed(
    cli: CliRunner, store: KnowledgeBaseStore, tmp_path: Path
) -> None:
    kb, copy = applied_office(cli, tmp_path), tmp_path / "copy.yaml"
    copy.write_text(OFFICE_YAML)
    assert parsed(load(store, kb)) == [] and parsed(load(store, copy)) == ["office"]
    for command in (["diff"], ["diff", "-o", "json"], ["apply", "--dry-run"], ["apply", "--dry-run", "-o", "yaml"]):
        settled = cli.invoke(app, [*command, "-f", str(kb)])
        full = cli.invoke(app, [*command, "-f", str(copy)])
        assert (settled.exit_code, settled.output) == (full.exit_code, full.output), command
        assert settled.exit_code == 0 and "unchanged" in settled.output
