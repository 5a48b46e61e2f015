"""Work on one document is bounded on every route (URL, path, git): over a bound of size or time, it fails alone."""

from __future__ import annotations

import io
import subprocess
import time
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.errors import SourceError
from kbctl.manifest import KnowledgeBase, load_manifests, parse_manifests
from kbctl.sources import Document, bounds
from kbctl.sources.bounds import (
    EXTRACT_TIMEOUT,
    MAX_COLUMNS,
    MAX_ENTRIES,
    MAX_EXTRACT_BYTES,
    MAX_FETCH_BYTES,
    MAX_UNZIPPED_XML_BYTES,
)
from kbctl.sources.files import DocumentsRead, read_path
from kbctl.sources.formats import as_markdown
from kbctl.sources.git import ALLOW_LOCAL_ENV, read_repository
from kbctl.sources.url import FetchPolicy, FetchRequest, fetch_urls
from tests.support.httpserver import fetch_policy_for, serve

pytestmark = pytest.mark.reliability

PARAGRAPH = "<p>Invoices are kept for seven years after the end of the financial year of issue.</p>\n"


def page(paragraphs: int) -> str:
    body = f"<main><h1>Policy</h1>{PARAGRAPH * paragraphs}</main>"
    return f"<html><head><title>Policy</title></head><body>{body}</body></html>"


def _read_docs(kb: KnowledgeBase) -> DocumentsRead:
    """The files of the path source `docs`, as apply reads them."""
    assert kb.base_dir is not None
    return read_path(next(s for s in kb.spec.sources if s.name == "docs"), kb.base_dir)


def test_html_over_the_extraction_limit_fails_alone() -> None:
    """A page larger than max_html_bytes is refused with its size and the limit; the other page is extracted."""
    with serve() as srv:
        srv.route("/big", body=page(2000))  # some 180 KB
        srv.route("/small", body=page(2))
        policy = fetch_policy_for(srv, max_html_bytes=64 * 1024)
        out = fetch_urls([FetchRequest("big", srv.url("/big")), FetchRequest("small", srv.url("/small"))], policy)
    assert isinstance(out["big"], SourceError)
    assert str(out["big"]) == "HTML page of 0.2 MiB is over the 0.0625 MiB limit of text extraction"
    assert not isinstance(out["small"], SourceError) and out["small"].document is not None


def test_extraction_over_its_time_budget_fails_the_page() -> None:
    """An extraction that runs past extract_timeout fails its page with a clear reason instead of running on."""
    with serve() as srv:
        srv.route("/slow", body=page(3000))  # some 280 KB of HTML: far more than a millisecond to extract
        out = fetch_urls([FetchRequest("slow", srv.url("/slow"))], fetch_policy_for(srv, extract_timeout=0.001))
    assert str(out["slow"]) == "extracting the text of the page took more than 0.001 s"


# ---- The same bound on every route: path and git files, and the URL route's default ----

BIG = page(54_500)  # some 4.5 MiB of HTML: over the bound of text extraction (MAX_EXTRACT_BYTES["html"], 4 MiB)
BIG_REASON = "HTML file of 4.5 MiB is over the 4 MiB limit of text extraction"
SMALL = "# Travel\n\nEconomy class for flights under 6 hours; business class above that.\n"
MANIFEST = """apiVersion: kbctl.dev/v1alpha1
kind: KnowledgeBase
metadata: {name: handbook}
spec:
  sources:
    - name: docs
      path: ../docs/
"""


def _repo(tmp_path: Path, *, html: str = BIG) -> str:
    """A repository (it has .git) whose kb/handbook.yaml reads docs/: a large HTML file and a small Markdown one."""
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / ".git").mkdir()
    (repo / "kb").mkdir()
    (repo / "docs" / "big.html").write_text(html)
    (repo / "docs" / "travel.md").write_text(SMALL)
    (repo / "kb" / "handbook.yaml").write_text(MANIFEST)
    return str(repo / "kb" / "handbook.yaml")


def test_the_url_route_and_the_files_share_one_bound() -> None:
    """The fetch policy's defaults are the bounds of kbctl.sources.bounds, the ones path and git files meet."""
    policy = FetchPolicy()
    assert policy.max_html_bytes == MAX_EXTRACT_BYTES["html"] == 4 * 1024 * 1024
    assert policy.extract_timeout == EXTRACT_TIMEOUT
    assert policy.max_bytes == MAX_FETCH_BYTES


def test_html_over_the_bound_in_a_path_source_fails_alone_on_apply(
    store: KnowledgeBaseStore, cli: CliRunner, tmp_path: Path
) -> None:
    """`apply --wait` fails the large HTML file with its size and the bound; the Markdown file next to it publishes."""
    result = cli.invoke(app, ["apply", "-f", _repo(tmp_path), "--wait"])
    assert result.exit_code == 1, result.output
    assert f"source docs/big.html failed: {BIG_REASON}" in result.output
    assert "source docs/travel.md ready: 1 chunk" in result.output
    status = {s.name: (s.state, s.message) for s in store.describe("handbook").source_status}
    assert status["docs/big.html"] == ("failed", BIG_REASON)
    assert status["docs/travel.md"][0] == "ready"
    [hit] = store.query("handbook", "which class for long flights?", top_k=1).hits
    assert hit.source == "docs/travel.md"


def test_html_over_the_bound_in_a_path_source_is_refused_by_diff(
    store: KnowledgeBaseStore, cli: CliRunner, tmp_path: Path
) -> None:
    """`kbctl diff` reads the files through the same bound: the large HTML file brings no chunk, the small one its."""
    manifest = _repo(tmp_path)
    [loaded] = load_manifests([manifest])
    read = _read_docs(loaded.kb)
    assert not isinstance(read, SourceError)
    outcomes = {entry.doc_id: outcome for entry, outcome in read}
    assert isinstance(outcomes["big.html"], SourceError) and str(outcomes["big.html"]) == BIG_REASON
    assert isinstance(outcomes["travel.md"], Document)
    result = cli.invoke(app, ["diff", "-f", manifest])
    assert result.exit_code == 2, result.output  # 2: apply would fail for a document (and change the others)
    lines = [line.strip() for line in result.output.splitlines()]
    assert "source docs/big.html added" in lines  # no chunk to add, no token to embed
    assert f"would fail: source docs/big.html: {BIG_REASON}" in lines
    assert any(line.startswith("source docs/travel.md added: +1 chunk") for line in lines), lines
    diff = store.diff(load_manifests([manifest]))
    sources = {s.name: s for s in diff.results[0].sources}
    assert sources["docs/big.html"].chunks_added == 0 and sources["docs/big.html"].tokens_to_embed == 0
    assert sources["docs/travel.md"].chunks_added == 1
    assert diff.results[0].unreadable == [f"source docs/big.html: {BIG_REASON}"]
    store.apply(load_manifests([manifest]))
    again = cli.invoke(app, ["diff", "-f", manifest])  # the document fails as it did: no difference, still said
    assert again.exit_code == 2, again.output  # and still an error for CI
    assert f"would fail: source docs/big.html: {BIG_REASON}" in [line.strip() for line in again.output.splitlines()]


def test_html_over_the_bound_in_a_git_source_fails_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A git source's files are read as path files: the large HTML file fails alone with the same reason."""
    monkeypatch.setenv(ALLOW_LOCAL_ENV, "1")
    repo = tmp_path / "wiki"
    (repo / "docs").mkdir(parents=True)
    (repo / "docs" / "big.html").write_text(BIG)
    (repo / "docs" / "travel.md").write_text(SMALL)
    for args in (
        ("init", "--quiet"),
        ("add", "-A"),
        ("-c", "user.name=kb", "-c", "user.email=kb@example.com", "commit", "--quiet", "-m", "docs"),
    ):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)
    [loaded] = parse_manifests(
        f"apiVersion: kbctl.dev/v1alpha1\nkind: KnowledgeBase\nmetadata: {{name: wiki}}\nspec:\n  sources:\n"
        f'    - name: wiki\n      git: {{url: "{repo}", paths: [docs]}}\n',
        "wiki.yaml",
    )
    _, read = read_repository(loaded.kb.spec.sources[0], tmp_path / "cache", FetchPolicy().guard())
    outcomes = {entry.doc_id: outcome for entry, outcome in read}
    assert str(outcomes["docs/big.html"]) == BIG_REASON
    assert isinstance(outcomes["docs/travel.md"], Document)


def test_html_over_the_default_bound_fails_alone_on_the_url_route() -> None:
    """With the fetch policy's defaults, a 4.5 MiB page is refused before extraction and the small page is read."""
    with serve() as srv:
        srv.route("/big", body=BIG)
        srv.route("/small", body=page(2))
        out = fetch_urls(
            [FetchRequest("big", srv.url("/big")), FetchRequest("small", srv.url("/small"))], fetch_policy_for(srv)
        )
    assert str(out["big"]) == "HTML page of 4.5 MiB is over the 4 MiB limit of text extraction"
    assert not isinstance(out["small"], SourceError) and out["small"].document is not None


def test_extraction_of_a_file_over_its_time_budget_fails_it_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file whose extraction runs past EXTRACT_TIMEOUT fails with that reason; the Markdown file is read."""
    monkeypatch.setattr(bounds, "EXTRACT_TIMEOUT", 0.001)
    [loaded] = load_manifests([_repo(tmp_path, html=page(3000))])  # some 280 KB: far more than a millisecond
    read = _read_docs(loaded.kb)
    assert not isinstance(read, SourceError)
    outcomes = {entry.doc_id: outcome for entry, outcome in read}
    assert str(outcomes["big.html"]) == "extracting the text of the file took more than 0.001 s"
    assert isinstance(outcomes["travel.md"], Document)


def test_a_reader_past_its_time_stops_itself() -> None:
    """An extraction left running after its time stops at its next `on_time` check instead of running on."""
    steps: list[int] = []

    def reader() -> None:
        for step in range(3):
            time.sleep(0.05)
            bounds.on_time()
            steps.append(step)

    with pytest.raises(SourceError, match=r"^extracting the text of the test took more than 0.01 s$"):
        bounds.within_time(reader, what="the test", timeout=0.01)
    bounds.within_time(lambda: None, what="the next one")  # waits for the one left running to end
    assert steps == []
    bounds.on_time()  # outside within_time: no budget, nothing raised


def test_csv_jsonl_and_docx_are_refused_while_they_are_read() -> None:
    """A CSV past MAX_ENTRIES rows or MAX_COLUMNS columns, a JSONL file past MAX_ENTRIES entries and a small DOCX
    whose XML expands past its bound fail with the bound named."""
    rows = "id\n" + "x\n" * (MAX_ENTRIES + 1)
    with pytest.raises(SourceError, match=f"^more than {MAX_ENTRIES} rows, over the limit of one file$"):
        as_markdown(rows.encode(), "csv", origin="rows.csv")
    wide = ",".join(["x"] * (MAX_COLUMNS + 1))
    with pytest.raises(SourceError, match=f"^line 1: {MAX_COLUMNS + 1} columns, over the limit of {MAX_COLUMNS}$"):
        as_markdown(wide.encode(), "csv", origin="wide.csv")
    jsonl = '{"a": 1}\n' * (MAX_ENTRIES + 1)
    with pytest.raises(SourceError, match=f"^more than {MAX_ENTRIES} entries, over the limit of one file$"):
        as_markdown(jsonl.encode(), "jsonl", origin="rows.jsonl")
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("word/document.xml", b"<w:p/>" * (MAX_UNZIPPED_XML_BYTES // 6 // 32 * 36))  # 36 MiB
    assert len(bomb.getvalue()) < 1024 * 1024  # far under every bound of bytes
    with pytest.raises(SourceError, match=r"^DOCX's XML parts expand to 36.0 MiB, over the 32 MiB limit$"):
        as_markdown(bomb.getvalue(), "docx", origin="bomb.docx")
