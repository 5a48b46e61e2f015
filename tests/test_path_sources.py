"""`path:` sources: a folder of real Markdown, text, HTML, PDF, DOCX, JSON, JSONL and CSV files next to the
manifest, applied to the real store with the real model; one document per file, each reused, re-embedded or
removed on its own."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.errors import ManifestError, SourceError
from kbctl.manifest import load_manifests
from kbctl.sources.files import list_files
from tests.support.documents import make_docx, make_pdf

MANIFEST = """apiVersion: kbctl.dev/v1alpha1
kind: KnowledgeBase
metadata: {name: handbook}
spec:
  sources:
    - name: docs
      path: %s
%s"""


def _repo(tmp_path: Path) -> Path:
    """A repository (it has .git) with kb/handbook.yaml and a docs/ folder of every format."""
    repo = tmp_path / "repo"
    docs = repo / "docs"
    (docs / "policies").mkdir(parents=True)
    (repo / ".git").mkdir()
    (repo / "kb").mkdir()
    (docs / "travel.md").write_text("# Travel\n\nEconomy class for flights under 6 hours.\n")
    (docs / "policies" / "expenses.txt").write_text("Expenses above GBP 25 need a receipt.\n")
    (docs / "intranet.html").write_text(
        "<html><head><title>Parking</title></head><body><article><h1>Parking</h1>"
        "<p>Staff parking is on level minus two, and visitors park on level minus one.</p></article></body></html>"
    )
    (docs / "security.pdf").write_bytes(
        make_pdf(["Security\nLock your screen when you leave your desk.", "Report a lost laptop within one hour."])
    )
    (docs / "onboarding.docx").write_bytes(
        make_docx(
            [
                ("h1", "Onboarding"),
                ("p", "Laptops are issued on day one."),
                [["Item", "Owner"], ["Badge", "Facilities"]],
            ]
        )
    )
    (docs / "faq.json").write_text(
        json.dumps([{"question": "How do I reset my password?", "answer": "Use the self-service portal."}])
    )
    (docs / "contacts.csv").write_text("team,phone\nService desk,+44 20 7946 0123\n")
    (docs / "glossary.jsonl").write_text('{"term": "SLA", "meaning": "service level agreement"}\n')
    (docs / ".draft.md").write_text("# Hidden\n\nNot to be indexed.\n")
    (docs / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    return repo


def _manifest(repo: Path, path: str = "../docs/", extra: str = "") -> str:
    file = repo / "kb" / "handbook.yaml"
    file.write_text(MANIFEST % (path, extra))
    return str(file)


def _served(store: KnowledgeBaseStore) -> dict[str, tuple[str, int]]:
    return {s.name: (s.state, s.chunks) for s in store.describe("handbook").source_status}


def test_every_format_becomes_one_document_each(store: KnowledgeBaseStore, tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    report = store.apply(load_manifests([_manifest(repo)]))
    assert report.results[0].action == "created"
    served = _served(store)
    assert sorted(served) == [
        "docs/contacts.csv",
        "docs/faq.json",
        "docs/glossary.jsonl",
        "docs/intranet.html",
        "docs/onboarding.docx",
        "docs/policies/expenses.txt",
        "docs/security.pdf",
        "docs/travel.md",
    ]  # hidden files and formats kbctl does not read (logo.png) are left out
    assert all(state == "ready" and chunks >= 1 for state, chunks in served.values())
    hit = store.query("handbook", "what do I do when my laptop is lost?", top_k=1).hits[0]
    assert (hit.source, hit.origin, hit.heading_path) == ("docs/security.pdf", "../docs/security.pdf", ["Page 2"])
    table = store.query("handbook", "who owns the badge?", top_k=3, mode="keyword").hits
    assert any(h.source == "docs/onboarding.docx" and "| Badge | Facilities |" in h.text for h in table)
    faq = store.query("handbook", "reset my password", top_k=1).hits[0]
    assert faq.source == "docs/faq.json" and faq.heading_path == ["Entry 1"] and "self-service portal" in faq.text


def test_unchanged_changed_and_deleted_files(store: KnowledgeBaseStore, tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    manifest = _manifest(repo)
    store.apply(load_manifests([manifest]))
    again = store.apply(load_manifests([manifest])).results[0]
    assert again.action == "unchanged" and sum(s.embedded for s in again.sources) == 0
    (repo / "docs" / "travel.md").write_text("# Travel\n\nEconomy class for flights under 5 hours.\n")
    (repo / "docs" / "contacts.csv").unlink()
    changed = store.apply(load_manifests([manifest])).results[0]
    assert changed.action == "configured"
    embedded = {s.name: s.embedded for s in changed.sources if s.embedded}
    assert embedded == {"docs/travel.md": 1}  # only the changed file's new chunk
    assert "docs/contacts.csv" not in _served(store)
    assert all(h.source != "docs/contacts.csv" for h in store.query("handbook", "service desk phone", top_k=8).hits)


def test_a_broken_file_fails_alone(store: KnowledgeBaseStore, tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    (repo / "docs" / "locked.pdf").write_bytes(make_pdf(["secret"], password="pw"))
    (repo / "docs" / "scanned.pdf").write_bytes(make_pdf([""]))
    (repo / "docs" / "broken.docx").write_bytes(b"PK\x03\x04 not really a zip")
    (repo / "docs" / "binary.txt").write_bytes(b"\x00\x01\x02")
    store.apply(load_manifests([_manifest(repo)]))
    details = {s.name: s for s in store.describe("handbook").source_status}
    assert details["docs/locked.pdf"].message == "encrypted PDF: kbctl reads only PDFs that open without a password"
    assert details["docs/scanned.pdf"].message.startswith("the PDF has no text layer")
    assert details["docs/broken.docx"].message.startswith("not a readable DOCX file")
    assert details["docs/binary.txt"].message == "binary file (it holds NUL bytes), not text"
    assert details["docs/travel.md"].state == "ready" and details["docs/locked.pdf"].state == "failed"


def test_include_exclude_globs_and_single_files(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    [loaded] = load_manifests(
        [_manifest(repo, extra='      include: ["*.md", "*.txt"]\n      exclude: [policies/*]\n')]
    )
    assert [e.doc_id for e in list_files(loaded.kb.spec.sources[0], repo / "kb")] == ["travel.md"]
    [globbed] = load_manifests([_manifest(repo, path='"../docs/**/*.txt"')])
    assert [e.doc_id for e in list_files(globbed.kb.spec.sources[0], repo / "kb")] == ["policies/expenses.txt"]
    [single] = load_manifests([_manifest(repo, path="../docs/security.pdf")])
    [entry] = list_files(single.kb.spec.sources[0], repo / "kb")
    assert (entry.doc_id, entry.format, entry.origin) == ("security.pdf", "pdf", "../docs/security.pdf")


def test_nothing_outside_the_repository_is_read(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    outside = tmp_path / "secrets"
    outside.mkdir()
    (outside / "keys.md").write_text("# Keys\n\nroot password\n")
    os.symlink(outside / "keys.md", repo / "docs" / "keys.md")
    os.symlink(outside, repo / "docs" / "linked")
    [loaded] = load_manifests([_manifest(repo)])
    ids = [e.doc_id for e in list_files(loaded.kb.spec.sources[0], repo / "kb")]
    assert "keys.md" not in ids and not any(i.startswith("linked") for i in ids)
    [escaping] = load_manifests([_manifest(repo, path="../../secrets/")])
    with pytest.raises(SourceError, match="leaves the repository the manifest is in"):
        list_files(escaping.kb.spec.sources[0], repo / "kb")


def test_a_missing_path_fails_the_source_and_keeps_the_rest(store: KnowledgeBaseStore, tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    manifest = _manifest(repo)
    store.apply(load_manifests([manifest]))
    os.rename(repo / "docs", repo / "moved")
    result = store.apply(load_manifests([manifest])).results[0]
    served = _served(store)
    assert result.action == "unchanged" and served and all(state == "stale" for state, _ in served.values())
    assert "no such file or folder" in store.describe("handbook").source_status[0].message


def test_bad_paths_are_manifest_errors_with_lines(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    with pytest.raises(ManifestError) as error:
        load_manifests([_manifest(repo, path="/etc/passwd")])
    assert str(error.value.problems[0]).endswith(
        "handbook.yaml:7: spec.sources[0].path: must be a path relative to the manifest's folder, with / as separator"
    )


def test_cli_apply_diff_and_refresh(store: KnowledgeBaseStore, cli: CliRunner, tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    manifest = _manifest(repo)
    first = cli.invoke(app, ["apply", "-f", manifest])  # no --wait: files are read here, not by a controller
    assert first.exit_code == 0, first.output
    assert "path: sources are read here (as with --wait)" in first.stderr
    assert "KnowledgeBase/handbook created (version 1)" in first.stdout
    (repo / "docs" / "new.md").write_text("# New\n\nA new page about parking permits.\n")
    (repo / "docs" / "faq.json").unlink()
    diff = cli.invoke(app, ["diff", "-f", manifest])
    assert "source docs/new.md added: +1 chunk" in diff.stdout
    assert "source docs/faq.json removed: \N{MINUS SIGN}1 chunk" in diff.stdout
    refresh = cli.invoke(app, ["refresh", "kb", "handbook"])  # the files are not read back from the store
    assert refresh.exit_code == 0 and "unchanged" in refresh.stdout
    assert "docs/faq.json" in _served(store)


def test_a_docx_that_expands_past_the_limit_is_refused_unread() -> None:
    """A zip bomb named .docx: its declared sizes are checked before any part is parsed."""
    import io
    import zipfile

    from kbctl.sources.formats import MAX_UNZIPPED_BYTES, as_markdown

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive, archive.open("word/document.xml", "w") as part:
        zeros = b"\0" * (1 << 20)
        for _ in range((MAX_UNZIPPED_BYTES >> 20) + 1):
            part.write(zeros)
    assert len(buffer.getvalue()) < 2 << 20
    with pytest.raises(SourceError, match="DOCX expands to 257 MiB, over the 256 MiB limit of its parts"):
        as_markdown(buffer.getvalue(), "docx", origin="bomb.docx")


def test_a_file_with_the_same_size_and_time_is_not_read_again(store: KnowledgeBaseStore, tmp_path: Path) -> None:
    """Like a 304: a file whose size and modification time are those of its last read reuses what it serves
    without being opened; a new time (or other chunking) reads it again."""
    repo = _repo(tmp_path)
    manifest = _manifest(repo)
    store.apply(load_manifests([manifest]))
    pdf = repo / "docs" / "security.pdf"
    info = pdf.stat()
    pdf.write_bytes(b"x" * info.st_size)  # damaged, same size, same time: not opened, so not noticed
    os.utime(pdf, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert store.apply(load_manifests([manifest])).results[0].action == "unchanged"
    assert _served(store)["docs/security.pdf"] == ("ready", 2)
    os.utime(pdf, ns=(info.st_atime_ns, info.st_mtime_ns + 1_000_000_000))
    store.apply(load_manifests([manifest]))
    assert _served(store)["docs/security.pdf"][0] == "stale"  # read again: not a PDF any more, the old one serves
    pdf.write_bytes(make_pdf(["Security", "Report a lost laptop within one hour."]))
    store.apply(load_manifests([manifest]))
    rechunked = store.apply(load_manifests([_manifest(repo, extra="  chunking: {maxChars: 600}\n")])).results[0]
    assert rechunked.action == "configured"  # other chunking: every file is read and chunked again
    assert all(s.ingested for s in rechunked.sources if s.state == "ready")


def test_outside_a_repository_only_the_manifests_folder_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A manifest in no git repository, applied from `/`, reads neither a symlink to /etc/passwd nor `..`: only its
    own folder tree, whatever the working directory."""
    kb = tmp_path / "plain" / "kb"
    (kb / "docs").mkdir(parents=True)
    (kb / "docs" / "travel.md").write_text("# Travel\n\nEconomy class for flights under 6 hours.\n")
    os.symlink("/etc/passwd", kb / "docs" / "passwd.txt")
    (tmp_path / "plain" / "shared.md").write_text("# Shared\n\nNot below the manifest's folder.\n")
    manifest = kb / "handbook.yaml"
    monkeypatch.chdir("/")
    manifest.write_text(MANIFEST % ("docs/", ""))
    [loaded] = load_manifests([str(manifest)])
    assert [e.doc_id for e in list_files(loaded.kb.spec.sources[0], kb)] == ["travel.md"]
    manifest.write_text(MANIFEST % ("../shared.md", ""))
    [escaping] = load_manifests([str(manifest)])
    with pytest.raises(SourceError, match="leaves the manifest's folder"):
        list_files(escaping.kb.spec.sources[0], kb)


def test_a_file_document_holds_its_text_compressed_and_reads_back_the_same(tmp_path: Path) -> None:
    """A plan keeps every new document until its version is published: a file's is held compressed, with the same
    text, hash and length as the text itself would give, and equal to the same text read inline."""
    from kbctl.sources import Document
    from kbctl.sources.files import read_file

    text = "# Retention\n\n" + "".join(f"Record {n} is kept for {n % 12 + 1} years.\n" for n in range(2000))
    kb = tmp_path / "kb"
    (kb / "docs").mkdir(parents=True)
    (kb / "docs" / "retention.md").write_text(text)
    (kb / "kb.yaml").write_text(MANIFEST % ("../kb/docs", ""))
    [loaded] = load_manifests([str(kb / "kb.yaml")])
    [entry] = list_files(loaded.kb.spec.sources[0], kb)
    document = read_file(entry, loaded.kb.spec.sources[0])
    plain = Document(text=text, origin=document.origin, title=document.title, markdown=document.markdown)
    assert document.text == text and document.length == len(text) == plain.length
    assert document.content_sha256 == plain.content_sha256 and document == plain
    assert document._packed is not None and len(document._packed) < len(text) / 4
    assert plain._packed is None and plain._text is text
