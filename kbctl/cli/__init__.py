"""The `kbctl` command line: parses arguments, calls the Python API, formats the result. No logic.

Each module registers its commands on the one typer app of `_common`; importing them here wires the CLI.
"""

from kbctl.cli import apply, ask, commands, controller, diff, evaluate, imports, rollout, serve  # noqa: F401  (registers the commands)
from kbctl.cli._common import app

__all__ = ["app", "main"]


def main() -> None:
    """Console-script entry point."""
    app()
