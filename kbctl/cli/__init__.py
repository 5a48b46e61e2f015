"""The `kbctl` command line: parses arguments, calls the Python API, formats the result. No logic.

Each module registers its commands on the one typer app of `_common`; importing them wires the CLI. `main`
answers `kbctl version` and `kbctl --version` before any of that is imported (they print one constant).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import typer

__all__ = ["app", "main"]

_VERSION_ARGS = (["version"], ["--version"])


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


def _app() -> typer.Typer:
    from kbctl.cli import apply, ask, commands, controller, diff, evaluate, imports, rollout, serve  # noqa: F401
    from kbctl.cli._common import app

    return app


def __getattr__(name: str) -> typer.Typer:
    if name == "app":  # `from kbctl.cli import app` (tests, docs generation) wires every command
        return _app()
    raise AttributeError(f"module 'kbctl.cli' has no attribute {name!r}")
