"""Every bench/ script that takes arguments still starts: `--help` prints its usage and exits 0.

A bench script runs only when someone measures, often sessions after the library under it changed; a constant it
builds at import (a QueryOptions outside today's bounds, a renamed import) then fails the measurement instead of a
test. `--help` runs the imports and module-level code and stops at argument parsing, without a store or a model.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
SCRIPTS = sorted(p for p in BENCH.glob("*.py") if "argparse" in p.read_text(encoding="utf-8"))


def test_the_bench_folder_has_scripts_with_arguments() -> None:
    assert len(SCRIPTS) >= 20, [p.name for p in SCRIPTS]


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_a_bench_script_prints_its_usage(script: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120, cwd=BENCH.parent
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
