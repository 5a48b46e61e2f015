"""A command line that names a command wires only that command's module (kbctl.cli.COMMAND_MODULES): the map must
name every command of the app, each with the module that registers it, and each module must wire alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import typer.main

from kbctl.cli import _VALUED_GLOBALS, COMMAND_MODULES, app, command_name

_WIRE_ALONE = """
import json, sys
import typer.main
from kbctl.cli import _app
group = typer.main.get_command(_app(sys.argv[1]))
print(json.dumps(sorted(group.commands)))
"""


def _registered() -> dict[str, str]:
    """Every top-level command of the fully wired app, with the kbctl.cli module that registers it."""
    group = typer.main.get_group(app)
    found: dict[str, str] = {}
    for name, command in group.commands.items():
        callback = command.callback
        if callback is None:  # a group (server, config, rollout, import): its subcommands' module registers them
            callback = next(iter(command.commands.values())).callback  # type: ignore[attr-defined]
        assert callback is not None
        found[name] = callback.__module__.rsplit(".", 1)[1]
    return found


def test_the_map_names_every_command_with_the_module_that_registers_it() -> None:
    assert _registered() == COMMAND_MODULES


@pytest.mark.parametrize("module", sorted(set(COMMAND_MODULES.values())))
def test_each_module_wires_its_commands_alone(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WIRE_ALONE, module], capture_output=True, text=True, check=True, timeout=120
    )
    wired = set(json.loads(done.stdout))  # with the groups of _common and what the module imports
    assert {n for n, m in COMMAND_MODULES.items() if m == module} <= wired


def test_the_global_options_that_take_a_value_are_known() -> None:
    """command_name skips the value of a global option: it must know every one that takes a value."""
    group = typer.main.get_group(app)
    valued = {opt for p in group.params if not getattr(p, "is_flag", False) for opt in p.opts}
    assert valued == _VALUED_GLOBALS


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["get", "kb"], "get"),
        (["--debug", "get", "kb"], "get"),
        (["--database-url", "postgresql://h/db", "query", "kb", "q"], "query"),
        (["--database-url=postgresql://h/db", "rollout", "history"], "rollout"),
        (["--help"], None),
        (["-h", "get"], None),
        ([], None),
    ],
)
def test_command_name_skips_global_options(args: list[str], expected: str | None) -> None:
    assert command_name(args) == expected


def test_a_command_run_alone_and_the_full_app_help_agree() -> None:
    """`kbctl get --help` through the console entry point (only `get`'s module wired) prints what the fully wired
    app prints for it; an unknown command still gets click's usage error with the full list."""
    entry = [sys.executable, "-m", "kbctl"]
    env = {**os.environ, "COLUMNS": "80"}
    alone = subprocess.run([*entry, "get", "--help"], capture_output=True, text=True, timeout=120, env=env)
    wired = "from kbctl.cli import app; app(['get', '--help'], prog_name='kbctl')"
    full = subprocess.run([sys.executable, "-c", wired], capture_output=True, text=True, timeout=120, env=env)
    assert alone.returncode == 0 and full.returncode == 0
    assert "Usage: kbctl get" in alone.stdout and alone.stdout == full.stdout
    wrong = subprocess.run([*entry, "gett", "kb"], capture_output=True, text=True, timeout=120, env=env)
    assert wrong.returncode == 2 and "No such command 'gett'" in wrong.stderr
