"""The `kbctl` command line: parses arguments, calls the Python API, formats the result. No logic.

Each module registers its commands on the one typer app of `_common`; importing them wires the CLI. `main`
answers `kbctl version` and `kbctl --version` before any of that is imported (they print one constant), and a
command line that names a command wires only the module of that command (typer builds every registered
command's parameters on each run: ~30 ms for all of kbctl's); anything else (`kbctl`, `kbctl --help`, a
misspelt command, shell completion) wires them all.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import typer

__all__ = ["app", "main"]

_VERSION_ARGS = (["version"], ["--version"])
# The module that registers each top-level command (tests/test_cli_wiring.py keeps this true to the app).
COMMAND_MODULES: dict[str, str] = {
    "apply": "apply",
    "ask": "ask",
    "refresh": "refresh",
    "validate": "validate",
    "schema": "validate",
    "get": "get",
    "describe": "describe",
    "query": "query",
    "context": "query",
    "delete": "delete",
    "explain": "explain",
    "completion": "environment",
    "version": "environment",
    "server": "environment",
    "config": "environment",
    "controller": "controller",
    "wait": "controller",
    "diff": "diff",
    "eval": "evaluate",
    "import": "imports",
    "rollout": "rollout",
    "gc": "rollout",
    "serve": "serve",
    "mcp": "serve",
}
_MODULES = tuple(dict.fromkeys(COMMAND_MODULES.values()))  # every module, in the order help lists them
_VALUED_GLOBALS = frozenset({"--database-url"})  # the app's options that take a value


def main() -> None:
    """Console-script entry point."""
    if sys.argv[1:] in _VERSION_ARGS:
        from kbctl._version import __version__

        sys.stdout.write(f"kbctl {__version__}\n")
        return
    # A command-line run has no use for pydantic plugins, and looking for them reads every installed
    # package's metadata (tens of milliseconds on each command).
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    if os.environ.get("_KBCTL_COMPLETE"):  # the shell asks for completions (`kbctl completion SHELL` scripts)
        from typer._completion_classes import completion_init

        completion_init()
        _app()(prog_name="kbctl")
        return
    _app(COMMAND_MODULES.get(command_name(sys.argv[1:]) or ""))(prog_name="kbctl")


def command_name(args: list[str]) -> str | None:
    """The command a command line runs: its first word that is neither a global option nor an option's value
    (None when there is none, or when it asks for the app's own help)."""
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("-h", "--help", "--"):
            return None
        elif arg in _VALUED_GLOBALS:
            skip = True
        elif not arg.startswith("-"):
            return arg
    return None


def _app(module: str | None = None) -> typer.Typer:
    """The app with the commands of `module` wired (all of them when None)."""
    import importlib

    for name in (module,) if module else _MODULES:
        importlib.import_module(f"kbctl.cli.{name}")
    from kbctl.cli._common import app

    return app


def __getattr__(name: str) -> typer.Typer:
    if name == "app":  # `from kbctl.cli import app` (tests, docs generation) wires every command
        return _app()
    raise AttributeError(f"module 'kbctl.cli' has no attribute {name!r}")
