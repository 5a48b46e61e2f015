"""Shell completion as bash, zsh and fish ask for it: resource types, `-o` formats and knowledge-base names read from
the store, and nothing (silently, promptly) when the store is not there."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings
from kbctl.manifest import parse_manifests
from kbctl.store.names import knowledge_base_names
from tests.support.manifests import knowledge_base, text_source

SHELLS = ("bash", "zsh", "fish")
NAMES = ("alpha", "alpine", "beta")


def _entry() -> list[str]:
    """The installed `kbctl` console script beside this interpreter, else `python -m kbctl`."""
    script = shutil.which("kbctl", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-m", "kbctl"]


def _instruction(shell: str) -> str:
    """What the script `kbctl completion SHELL` prints sets _KBCTL_COMPLETE to (complete_bash...)."""
    script = subprocess.run([*_entry(), "completion", shell], capture_output=True, text=True, check=True, timeout=120)
    found = re.search(r"_KBCTL_COMPLETE=(\w+)", script.stdout)
    assert found, script.stdout
    return found.group(1)


def _shell_env(shell: str, line: str) -> dict[str, str]:
    """The variables the shell's completion script sets for a command line (the cursor at its end)."""
    if shell == "bash":
        words = line.split()
        cword = len(words) if line.endswith(" ") else len(words) - 1
        return {"COMP_WORDS": line, "COMP_CWORD": str(cword)}
    extra = {"_TYPER_COMPLETE_FISH_ACTION": "get-args"} if shell == "fish" else {}
    return {"_TYPER_COMPLETE_ARGS": line, **extra}


def _values(shell: str, output: str) -> list[str]:
    """The values offered, read from what the shell's script evaluates (zsh) or splits (bash, fish)."""
    if shell == "zsh":
        if output.strip() == "_files":  # nothing to offer: zsh falls back to file names
            return []
        return [v.replace('""', '"') for v in re.findall(r'^(?:_arguments \'\*: :\(\()?"((?:[^"]|"")*)"', output, re.M)]
    return [line.split("\t")[0] for line in output.splitlines() if line]


def complete(shell: str, line: str, env: dict[str, str]) -> list[str]:
    """The completions `kbctl` offers `shell` for `line`, run as the shell runs it; stderr must stay empty."""
    done = subprocess.run(
        _entry(),
        env={**env, **_shell_env(shell, line), "_KBCTL_COMPLETE": _instruction_of[shell]},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr
    return _values(shell, done.stdout)


_instruction_of: dict[str, str] = {}


@pytest.fixture(scope="module", autouse=True)
def _instructions() -> None:
    for shell in SHELLS:
        _instruction_of[shell] = _instruction(shell)


def _env(**values: str) -> dict[str, str]:
    """This process's environment without a database URL, with `values`."""
    base = {k: v for k, v in os.environ.items() if k not in ("KBCTL_DATABASE_URL", "KBCTL_QUERY_DATABASE_URL")}
    return {**base, **values}


@pytest.fixture
def stored(store: KnowledgeBaseStore, database_url: str) -> dict[str, str]:
    """Knowledge bases alpha, alpine and beta applied; the environment of a kbctl that reaches them."""
    for name in NAMES:
        store.apply(parse_manifests(knowledge_base(name, text_source("notes", f"{name} opens at nine.")), "kb.yaml"))
    return _env(KBCTL_DATABASE_URL=database_url, KBCTL_HOME=str(store.settings.home))


@pytest.fixture
def fresh_home() -> Iterator[Path]:
    """A KBCTL_HOME where no embedded server has ever run."""
    home = Path(tempfile.mkdtemp(prefix="kbctl-test-completion-"))
    try:
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.parametrize("shell", SHELLS)
def test_names_come_from_the_store(shell: str, stored: dict[str, str]) -> None:
    """NAME completes to the stored knowledge bases starting with what was typed, leaving out those named already."""
    assert complete(shell, "kbctl describe kb ", stored) == list(NAMES)
    assert complete(shell, "kbctl describe kb al", stored) == ["alpha", "alpine"]
    assert complete(shell, "kbctl get kb alpha ", stored) == ["alpine", "beta"]
    assert complete(shell, "kbctl query alpha,", stored) == ["alpha,alpine", "alpha,beta"]
    assert complete(shell, "kbctl get syncs ", stored) == []  # a Sync's name is not a knowledge base's


def test_every_name_argument_completes(stored: dict[str, str]) -> None:
    """Each command that takes a knowledge base's name completes it (and query's question completes nothing)."""
    for line in (
        "kbctl get events alp",
        "kbctl context alp",
        "kbctl ask alp",
        "kbctl eval -f set.yaml alp",
        "kbctl refresh kb alp",
        "kbctl delete kb alp",
        "kbctl rollout history kb alp",
        "kbctl rollout undo kb alp",
        "kbctl rollout status kb alp",
        "kbctl wait kb alp",
        "kbctl query alp",
    ):
        assert complete("bash", line, stored) == ["alpha", "alpine"], line
    assert complete("bash", "kbctl query alpha ", stored) == []


@pytest.mark.parametrize("shell", SHELLS)
def test_typed_names_and_the_database_url_option(
    shell: str, stored: dict[str, str], database_url: str, fresh_home: Path
) -> None:
    """kubectl's TYPE/NAME form completes as kb/NAME, and --database-url on the command line is the store read."""
    assert complete(shell, "kbctl get kb/al", stored) == ["kb/alpha", "kb/alpine"]
    assert complete(shell, "kbctl delete kb/alpha kb/", stored) == ["kb/alpine", "kb/beta"]
    assert complete(shell, "kbctl describe kb/", stored) == []  # describe takes RESOURCE NAME only
    without_url = {k: v for k, v in stored.items() if k != "KBCTL_DATABASE_URL"}
    without_url["KBCTL_HOME"] = str(fresh_home)  # no embedded server here: only the option can name the store
    assert complete(shell, f"kbctl --database-url {database_url} describe kb b", without_url) == ["beta"]


@pytest.mark.parametrize("shell", SHELLS)
def test_resource_types_and_output_formats(shell: str, stored: dict[str, str]) -> None:
    """RESOURCE completes to the types each command takes, and -o to the formats each command prints."""
    kb = ["kb", "kbs", "knowledgebase", "knowledgebases"]
    assert complete(shell, "kbctl get ", stored) == sorted([*kb, "all", "ev", "event", "events", "sync", "syncs"])
    assert complete(shell, "kbctl get k", stored) == kb
    assert complete(shell, "kbctl describe ", stored) == sorted([*kb, "sync", "syncs"])
    assert complete(shell, "kbctl rollout history ", stored) == kb
    assert complete(shell, "kbctl delete s", stored) == ["sync", "syncs"]
    objects = ["json", "yaml", "wide", "name", "jsonpath=", "custom-columns="]
    assert complete(shell, "kbctl get kb -o ", stored) == objects
    assert complete(shell, "kbctl describe kb alpha --output ", stored) == objects
    assert complete(shell, "kbctl rollout history kb alpha -o j", stored) == ["json", "jsonpath="]
    assert complete(shell, "kbctl get events -o ", stored) == ["json", "yaml"]
    assert complete(shell, "kbctl query alpha q -o ", stored) == ["json", "yaml"]
    assert complete(shell, "kbctl completion ", stored) == list(SHELLS)


@pytest.mark.parametrize("shell", SHELLS)
def test_an_unreachable_store_completes_no_names_and_says_nothing(shell: str, fresh_home: Path) -> None:
    """A refused connection, a server that never answers, or no store at all: no names, no error, and the
    embedded server is not started for a completion."""
    with socket.socket() as silent:  # accepts connections (the kernel's backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        for url in (f"postgresql://kbctl@127.0.0.1:{port}/kbctl", "postgresql://kbctl@127.0.0.1:1/kbctl"):
            env = _env(KBCTL_DATABASE_URL=url, KBCTL_HOME=str(fresh_home))
            assert complete(shell, "kbctl describe kb ", env) == []
            assert complete(shell, "kbctl get kb ", env) == []
    no_store = _env(KBCTL_HOME=str(fresh_home))
    assert complete(shell, "kbctl describe kb ", no_store) == []
    assert complete(shell, "kbctl get ", no_store)[:1] == ["all"]  # what needs no store still completes
    assert not (fresh_home / "pg").exists()


def test_the_embedded_server_is_read_when_it_runs(stored: dict[str, str], kbctl_home: Path) -> None:
    """Without a database URL, names come from the embedded server when it is up (by its socket)."""
    if os.environ.get("KBCTL_TEST_DATABASE_URL"):
        pytest.skip("the tests use an external database: no embedded server runs")
    env = _env(KBCTL_HOME=str(kbctl_home))
    assert complete("bash", "kbctl describe kb b", env) == ["beta"]


def test_the_library_lookup(stored: dict[str, str], database_url: str, fresh_home: Path) -> None:
    """knowledge_base_names and KnowledgeBaseStore.peek_names read names by prefix, [] when there is no store."""
    assert knowledge_base_names(database_url, "al") == ["alpha", "alpine"]
    assert knowledge_base_names(database_url) == list(NAMES)
    assert knowledge_base_names("postgresql://kbctl@127.0.0.1:1/kbctl") == []
    assert knowledge_base_names("not a url") == []
    reached = Settings(home=fresh_home, database_url=database_url)
    assert KnowledgeBaseStore.peek_names("b", settings=reached) == ["beta"]
    assert KnowledgeBaseStore.peek_names(settings=Settings(home=fresh_home)) == []
    assert not (fresh_home / "pg").exists()
    with pytest.raises(ValueError, match="timeout"):
        knowledge_base_names(database_url, timeout=0)
