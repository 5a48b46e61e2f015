"""Module docstrings say what a module is for, what it holds and where its figures and design live, in a few lines.

Benchmark figures, measurements and design essays belong in docs/ and bench/README.md, where they are kept up to
date with the commands that produced them; a module docstring points there instead of carrying them.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "kbctl"

# A module docstring, from its opening quotes to its closing ones, runs at most this many lines (twelve lines of
# text and the closing quotes' line).
MAX_LINES = 13


def docstring_lines(path: Path) -> int:
    """How many source lines the module's docstring spans (0 without one)."""
    body = ast.parse(path.read_text(), str(path)).body
    if not body:
        return 0
    first = body[0]
    if not isinstance(first, ast.Expr) or not isinstance(first.value, ast.Constant):
        return 0
    if not isinstance(first.value.value, str):
        return 0
    return (first.end_lineno or first.lineno) - first.lineno + 1


def test_module_docstrings_are_short() -> None:
    too_long = {
        path.relative_to(PACKAGE).as_posix(): lines
        for path in sorted(PACKAGE.rglob("*.py"))
        if (lines := docstring_lines(path)) > MAX_LINES
    }
    assert not too_long, (
        f"module docstrings over {MAX_LINES} lines (move figures and design to docs/ or bench/README.md "
        f"and point there): {too_long}"
    )


def test_the_rule_sees_every_module() -> None:
    """The walk finds the package, and the count measures what it means to."""
    assert len(list(PACKAGE.rglob("*.py"))) > 50
    assert docstring_lines(PACKAGE / "errors.py") >= 3
