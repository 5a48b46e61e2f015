"""Small hostile-input fixes, each pinned against the real thing: a git repository larger than kbctl checks out is
refused before it is materialized and leaves nothing large in the cache; the controller's probe server says
nothing when a client goes away mid-request; docs/access.md says what `describe` without a caller shows."""

from __future__ import annotations

import hashlib
import os
import re
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kbctl import Reader
from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.engine.events import NullReporter
from kbctl.errors import SourceError
from kbctl.manifest import load_manifests
from kbctl.serve.controller import ControllerMetrics, HealthServer
from kbctl.sources import git as git_sources
from kbctl.sources._guard import Guard
from kbctl.sources.bounds import MiB
from kbctl.sources.git import ALLOW_LOCAL_ENV, fetch_repository
from tests.support.gitrepo import git
from tests.support.manifests import knowledge_base, text_source

pytestmark = pytest.mark.reliability

ROOT = Path(__file__).resolve().parents[2]


def make_repo(folder: Path, files: dict[str, bytes]) -> Path:
    """A repository of one commit holding `files` (path: content), beside a manifest folder `kb`."""
    (folder / "kb").mkdir(parents=True)
    git(folder, "init", "--quiet", "--initial-branch", "main")
    git(folder, "config", "user.email", "kb@example.com")
    git(folder, "config", "user.name", "kb")
    (folder / "kb" / "hours.yaml").write_text(knowledge_base("hours", text_source("open", "The office opens at 9.")))
    for name, content in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(content)
    git(folder, "add", "-A")
    git(folder, "commit", "--quiet", "-m", "hostile")
    return folder


def disk_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


@pytest.fixture
def local_git(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ALLOW_LOCAL_ENV, "1")


def test_a_blob_that_expands_past_the_checkout_bound_is_refused_before_checkout(
    tmp_path: Path, local_git: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 24 MiB blob of zeros travels as a few KiB of pack; its size is read from the tree before checkout, and the
    refused repository is removed from the cache."""
    monkeypatch.setattr(git_sources, "MAX_REPOSITORY_BYTES", 8 * MiB)
    repo = make_repo(tmp_path / "bomb", {"assets/zeros.bin": bytes(24 * MiB)})
    cache = tmp_path / "cache"
    with pytest.raises(SourceError, match=r"files of 24\.0 MiB, over the 8 MiB limit of a repository's checkout"):
        fetch_repository(str(repo), "main", cache, Guard())
    assert disk_bytes(cache) < 64 * 1024, "a refused repository left its objects or files in the cache"


def test_a_repository_of_too_many_files_is_refused_before_checkout(
    tmp_path: Path, local_git: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The files of the whole tree are counted, not just those a source lists (its own limit is MAX_FILES)."""
    monkeypatch.setattr(git_sources, "MAX_REPOSITORY_FILES", 500)
    repo = make_repo(tmp_path / "many", {f"noise/{n // 100}/{n}.txt": b"x" for n in range(600)})
    cache = tmp_path / "cache"
    with pytest.raises(SourceError, match="more than 500 files"):
        fetch_repository(str(repo), "main", cache, Guard())
    assert not any(cache.rglob("*.txt")) and disk_bytes(cache) < 64 * 1024


def test_a_fetch_that_writes_more_than_its_bound_is_stopped_and_cleaned(
    tmp_path: Path, local_git: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Incompressible bytes: what the fetch itself writes into the cache is bounded, whatever the tree says."""
    monkeypatch.setattr(git_sources, "MAX_FETCH_BYTES", 2 * MiB)
    repo = make_repo(tmp_path / "random", {"assets/noise.bin": os.urandom(6 * MiB)})
    cache = tmp_path / "cache"
    with pytest.raises(SourceError, match="over the 2 MiB limit of one fetch"):
        fetch_repository(str(repo), "main", cache, Guard())
    assert disk_bytes(cache) < 64 * 1024


def test_a_repository_within_the_bounds_is_fetched_again_after_a_refusal(
    tmp_path: Path, local_git: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refusal removes the checkout; the next fetch (bounds met) starts afresh and checks out the commit."""
    repo = make_repo(tmp_path / "fine", {"assets/zeros.bin": bytes(3 * MiB)})
    cache = tmp_path / "cache"
    monkeypatch.setattr(git_sources, "MAX_REPOSITORY_BYTES", 1 * MiB)
    with pytest.raises(SourceError, match="limit of a repository's checkout"):
        fetch_repository(str(repo), "main", cache, Guard())
    assert not any(cache.rglob("zeros.bin"))
    monkeypatch.setattr(git_sources, "MAX_REPOSITORY_BYTES", 4 * MiB)
    checkout = fetch_repository(str(repo), "main", cache, Guard())
    assert (checkout.folder / "assets" / "zeros.bin").stat().st_size == 3 * MiB
    assert checkout.commit == git(repo, "rev-parse", "HEAD")


def test_a_checkout_writes_blobs_as_stored_whatever_the_repository_asks(
    tmp_path: Path, local_git: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A repository's .gitattributes cannot run a filter of the user's git configuration (as Git LFS's smudge,
    which downloads from a server of the repository's choosing) nor grow files by end-of-line or encoding
    conversion beyond the sizes checked."""
    lines = b"one\ntwo\nthree\n"
    repo = make_repo(tmp_path / "attrs", {"a.md": lines, "b.txt": lines, "c.csv": lines})
    attributes = "*.md filter=fetcher\n*.txt text eol=crlf\n*.csv working-tree-encoding=UTF-32\n"
    (repo / ".gitattributes").write_text(attributes)  # committed alone: the files' blobs stay as written
    git(repo, "add", ".gitattributes")
    git(repo, "commit", "--quiet", "-m", "attributes")
    marker = tmp_path / "smudged"
    config = tmp_path / "gitconfig"
    config.write_text(f'[filter "fetcher"]\n\tsmudge = "touch {marker}; cat"\n\trequired = true\n')
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))  # as git-lfs install writes its filter for the user
    checkout = fetch_repository(str(repo), "main", tmp_path / "cache", Guard())
    assert not marker.exists()
    assert [(checkout.folder / name).read_bytes() for name in ("a.md", "b.txt", "c.csv")] == [lines] * 3


def test_a_sync_of_an_oversize_repository_applies_nothing_and_leaves_its_cache_small(
    store: KnowledgeBaseStore, cli: CliRunner, tmp_path: Path, local_git: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Sync's fetch meets the same bounds: the Sync fails with the reason, and its cache holds nothing large."""
    monkeypatch.setattr(git_sources, "MAX_REPOSITORY_BYTES", 8 * MiB)
    repo = make_repo(tmp_path / "gitops", {"assets/zeros.bin": bytes(24 * MiB)})
    sync = f"apiVersion: kbctl.dev/v1alpha1\nkind: Sync\nmetadata: {{name: hostile}}\nspec: {{url: {repo}, path: kb}}\n"
    (tmp_path / "sync.yaml").write_text(sync)
    assert cli.invoke(app, ["apply", "-f", str(tmp_path / "sync.yaml")]).exit_code == 0
    controller = store.controller()
    try:
        report = controller.run_once()
    finally:
        controller.deregister()
    assert report.results == [] and report.failed_syncs == ["hostile"]
    [status] = store.syncs()
    assert status.last_error is not None and "over the 8 MiB limit of a repository's checkout" in status.last_error
    assert [kb.name for kb in store.list()] == []
    cached = store.settings.home / "git" / "syncs" / hashlib.sha256(str(repo).encode()).hexdigest()[:24]
    assert not cached.exists() or disk_bytes(cached) < 64 * 1024


# ---------------------------------------------------------------- the controller's probe server


def reset(sock: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0), as a client that timed out and was killed does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_a_probe_client_that_goes_away_leaves_no_traceback(capfd: pytest.CaptureFixture[str]) -> None:
    """A client that resets the connection after a partial request, or while /readyz is being answered (a probe
    that timed out), is no error: nothing is printed, and the next probe is answered."""
    answering = threading.Event()

    def slow_check() -> tuple[bool, dict[str, Any]]:
        answering.set()
        time.sleep(0.3)  # the client is gone by the time the answer is written
        return True, {"ready": True}

    metrics = ControllerMetrics(NullReporter(), pending=lambda: 0)
    server = HealthServer(("127.0.0.1", 0), metrics, lambda: True, ready=slow_check)
    try:
        for request in [b"GET /read", b"GET /readyz HTTP/1.1\r\nHost: x\r\n", b"GET /readyz HTTP/1.1\r\n\r\n"]:
            answering.clear()
            client = socket.create_connection(("127.0.0.1", server.port))
            client.sendall(request)
            if request.endswith(b"\r\n\r\n"):
                assert answering.wait(5)
            time.sleep(0.05)
            reset(client)
        time.sleep(0.6)  # the server has written to, or read from, each reset connection
        with socket.create_connection(("127.0.0.1", server.port)) as client:
            client.sendall(b"GET /readyz HTTP/1.0\r\n\r\n")
            answer = b""
            while chunk := client.recv(4096):
                answer += chunk
        assert answer.startswith(b"HTTP/1.0 200") and answer.endswith(b'{"ready": true}\n')
    finally:
        server.close()
    out, err = capfd.readouterr()
    assert "Traceback" not in err + out and "ConnectionResetError" not in err + out, err


# ---------------------------------------------------------------- docs/access.md: describe without a caller


def access_row(where: str) -> str:
    """The row of docs/access.md's "Who the caller is" table for `where` (CLI, Python)."""
    text = (ROOT / "docs" / "access.md").read_text()
    [row] = [line for line in text.splitlines() if line.startswith(f"| {where} |")]
    return " ".join(row.split())


def test_docs_say_what_describe_without_a_caller_shows_and_it_does(
    store: KnowledgeBaseStore, cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/access.md and `describe --help` agree: without --as-group/--as-claim (reader=None in Python) `describe`
    and `list` are the operator's view of every source, while query and the rest read as a caller without groups;
    replayed on the documents' own example."""
    cli_row, python_row = access_row("CLI"), access_row("Python")
    assert re.search(r"`describe` without them is the operator's view: every source", cli_row), cli_row
    assert re.search(r"`describe` and `list` with `reader=None` are the operator's view", python_row), python_row
    helped = cli.invoke(app, ["describe", "--help"], env={"COLUMNS": "200"})
    assert "describe without --as-group or --as-claim shows every source" in " ".join(helped.output.split())

    monkeypatch.chdir(ROOT)
    assert cli.invoke(app, ["apply", "-f", "examples/access/", "--wait"]).exit_code == 0
    operator = cli.invoke(app, ["describe", "kb", "hr"], env={"COLUMNS": "200"})
    assert operator.exit_code == 0 and "handbook" in operator.output and "restricted" in operator.output
    caller = cli.invoke(app, ["describe", "kb", "hr", "--as-group", "employees"], env={"COLUMNS": "200"})
    assert "handbook" in caller.output and "restricted" not in caller.output
    nobody = cli.invoke(app, ["query", "hr", "what does salary band E4 pay?", "-o", "json"])
    assert nobody.exit_code == 0 and '"hits": []' in nobody.output  # every source has a rule: a caller reads none
    everything = store.describe("hr").source_status
    assert {s.name.split("/")[0] for s in everything} == {"handbook", "restricted"}
    assert store.describe("hr", reader=Reader()).source_status == []
    assert [(kb.name, kb.sources) for kb in store.list()] == [("hr", len(everything))]
    assert store.list(reader=Reader())[0].sources == 0
    [loaded] = load_manifests(["examples/access/hr.yaml"])
    assert loaded.kb.spec.access is not None and loaded.kb.spec.access.groups == ["employees"]
