"""Commands that never touch a database (validate, explain, schema) go through KnowledgeBaseStore's static methods
like every other command, yet load nothing of the store: importing kbctl.client costs no driver, no store module
and no configuration file reader until a store is opened (bench/startup.py measures what that is worth)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

_RUN = """
import sys
from kbctl.cli import main
sys.argv = ["kbctl", *sys.argv[1:]]
try:
    main()
except SystemExit as exit:
    assert not exit.code, exit.code
heavy = ("psycopg", "kbctl.store.database", "kbctl.store.embedded", "kbctl.config", "kbctl.engine")
print("LOADED", sorted(m for m in sys.modules if m.startswith(heavy)), file=sys.stderr)
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["validate", "-f", "examples/kb/"],
        ["explain", "knowledgebase.spec.retrieval"],
        ["schema"],
    ],
)
def test_a_database_free_command_loads_nothing_of_the_store(argv: list[str]) -> None:
    done = subprocess.run([sys.executable, "-c", _RUN, *argv], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "LOADED []" in done.stderr, done.stderr


def test_the_check_sees_a_store_command_load_the_store() -> None:
    """The same probe after a command that reads the store lists its modules (so the check above can fail)."""
    probe = "import kbctl.client, sys; kbctl.client.KnowledgeBaseStore.server_status(); "
    probe += "print(sorted(m for m in sys.modules if m.startswith(('kbctl.config', 'kbctl.store.embedded'))))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "kbctl.config" in done.stdout and "kbctl.store.embedded" in done.stdout
