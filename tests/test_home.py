"""KBCTL_HOME that cannot hold kbctl's files (a regular file, a path under /proc, a read-only folder): one clear
`Error: ...` line and exit code 1, never an OSError traceback."""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings, ensure_dir
from kbctl.embedding.local import LocalEmbedder
from kbctl.errors import KbctlError, StoreError
from kbctl.store.embedded import embedded_url

HINT = "(set KBCTL_HOME to a writable folder)"


@pytest.fixture
def a_file(tmp_path: Path) -> Path:
    path = tmp_path / "home-is-a-file"
    path.write_text("not a folder\n")
    return path


def embedded(home: Path) -> CliRunner:
    """A CLI runner on the embedded server (no database URL) with this KBCTL_HOME."""
    return CliRunner(env={"KBCTL_HOME": str(home), "KBCTL_DATABASE_URL": None, "KBCTL_CONFIG": ""})


def one_error_line(result: object) -> str:
    """The single stderr line of a failed command (exit code 1, no traceback)."""
    exit_code, stderr, output = (getattr(result, n) for n in ("exit_code", "stderr", "output"))
    assert exit_code == 1, output
    assert "Traceback" not in output and "Errno" not in output
    [line] = stderr.splitlines()
    assert line.startswith("Error: ")
    return str(line)


@pytest.mark.parametrize("sub", ["", "nested/deeper"])
def test_home_that_is_a_file(a_file: Path, sub: str) -> None:
    """KBCTL_HOME naming a regular file (or a folder under one) is one line naming that file."""
    home = a_file / sub if sub else a_file
    line = one_error_line(embedded(home).invoke(app, ["get", "kb"]))
    assert line == (
        f"Error: cannot start the embedded PostgreSQL: cannot create the folder {home / 'pg'}: "
        f"{a_file} is a file, not a folder {HINT}"
    )
    assert a_file.read_text() == "not a folder\n"


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="no /proc on this system")
@pytest.mark.parametrize("home", ["/proc/kbctl-test-home", "/proc", "/proc/self/kbctl"])
def test_home_under_proc(home: str) -> None:
    """/proc takes no new folders: one line saying so."""
    line = one_error_line(embedded(Path(home)).invoke(app, ["get", "kb"]))
    assert line.startswith("Error: cannot start the embedded PostgreSQL: cannot create the folder ")
    assert line.endswith(f"does not allow creating folders {HINT}")


def test_home_that_cannot_be_created(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder the OS refuses to create (permission denied, read-only file system) is one line with the reason."""
    home = tmp_path / "locked" / "home"
    original = Path.mkdir

    def mkdir(self: Path, *args: object, **kwargs: object) -> None:
        if self.is_relative_to(tmp_path / "locked"):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))
        original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "mkdir", mkdir)
    line = one_error_line(embedded(home).invoke(app, ["get", "kb"]))
    assert line == (
        f"Error: cannot start the embedded PostgreSQL: cannot create the folder {home / 'pg'}: permission denied {HINT}"
    )
    monkeypatch.setattr(Path, "mkdir", lambda self, *a, **k: (_ for _ in ()).throw(OSError(errno.EROFS, "x")))
    with pytest.raises(StoreError, match=r"cannot create the folder .*: read-only file system \(set KBCTL_HOME"):
        embedded_url(home / "pg")


def test_home_that_is_not_writable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An existing folder kbctl cannot write in is refused before the server tries (os.access is faked when the
    tests run as root, who may write anywhere)."""
    home = tmp_path / "read-only"
    home.mkdir()
    home.chmod(0o555)
    try:
        if os.geteuid() == 0:
            real_access = os.access
            monkeypatch.setattr(
                os,
                "access",
                lambda p, mode, **kw: False if Path(p).is_relative_to(home) else real_access(p, mode, **kw),
            )
        # As root, `pg` is created and then found unwritable; otherwise it cannot be created.
        line = one_error_line(embedded(home).invoke(app, ["get", "kb"]))
        assert re.fullmatch(
            rf"Error: cannot start the embedded PostgreSQL: cannot (create|write in) the folder "
            rf"{re.escape(str(home / 'pg'))}: permission denied {re.escape(HINT)}",
            line,
        ), line
        with pytest.raises(KbctlError, match=r"cannot (create|write in) the folder .*models: permission denied"):
            _ = Settings(home=home).models_dir
    finally:
        home.chmod(0o755)


def test_server_commands_with_an_unusable_home(a_file: Path) -> None:
    """`server status` and `server stop` only look: a home that is a file means nothing runs there."""
    for args in (["server", "status"], ["server", "stop"]):
        result = embedded(a_file).invoke(app, args)
        assert (result.exit_code, result.stdout) == (0, f"not running ({a_file / 'pg'})\n")


def test_models_folder_with_an_unusable_home(a_file: Path) -> None:
    """The local model's folder ($KBCTL_HOME/models) is created on first use: a KbctlError, not an OSError."""
    settings = Settings(home=a_file)
    with pytest.raises(KbctlError) as raised:
        _ = settings.models_dir
    assert str(raised.value) == (
        f"cannot create the folder {a_file / 'models'}: {a_file} is a file, not a folder "
        f"(kbctl keeps its files in {a_file}; set KBCTL_HOME to a writable folder)"
    )
    embedder = LocalEmbedder("all-MiniLM-L6-v2", settings)
    with pytest.raises(KbctlError, match="is a file, not a folder"):
        embedder.count_tokens(["some text"])
    with pytest.raises(KbctlError, match="is a file, not a folder"):
        embedder.embed(["some text"])


def test_apply_with_an_external_database_and_an_unusable_home(
    store: KnowledgeBaseStore, database_url: str, a_file: Path, tmp_path: Path
) -> None:
    """With KBCTL_DATABASE_URL the home only holds the model files: the knowledge base fails with the reason."""
    manifest = tmp_path / "kb.yaml"
    manifest.write_text(
        "apiVersion: kbctl.dev/v1alpha1\nkind: KnowledgeBase\nmetadata: {name: home-test}\n"
        "spec:\n  sources: [{name: s, text: Some text.}]\n"
    )
    runner = CliRunner(env={"KBCTL_HOME": str(a_file), "KBCTL_DATABASE_URL": database_url, "KBCTL_CONFIG": ""})
    result = runner.invoke(app, ["apply", "--wait", "-f", str(manifest)])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and "Errno" not in result.output
    assert (
        f"KnowledgeBase/home-test failed: cannot create the folder {a_file / 'models'}: {a_file} is a file, not a "
        f"folder (kbctl keeps its files in {a_file}; set KBCTL_HOME to a writable folder)"
    ) in result.output.splitlines()


def test_ensure_dir(tmp_path: Path) -> None:
    """ensure_dir creates missing parents, accepts an existing folder, and refuses a file in the way."""
    target = tmp_path / "a" / "b"
    assert ensure_dir(target) == target and target.is_dir()
    assert ensure_dir(target) == target
    (tmp_path / "f").write_text("")
    with pytest.raises(KbctlError, match=r"f is a file, not a folder$"):
        ensure_dir(tmp_path / "f")
