"""No module of kbctl/ runs over MAX_LINES lines: a longer one has a seam to split at (a job of its own for another
module), or is named in EXCEPTIONS with why, and in docs/architecture.md's "Size exceptions" paragraph."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "kbctl"
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"

MAX_LINES = 600

# A module allowed past MAX_LINES, by its path under kbctl/, with why. An entry whose module is back under the
# limit fails the suite, so the list only ever names modules that need it.
EXCEPTIONS: dict[str, str] = {}


def lines(path: Path) -> int:
    """How many lines the file holds (as `wc -l` counts them, a last line without a newline included)."""
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_module_runs_over_the_limit() -> None:
    too_long = {
        name: count
        for path in sorted(PACKAGE.rglob("*.py"))
        if (name := path.relative_to(PACKAGE).as_posix()) not in EXCEPTIONS and (count := lines(path)) > MAX_LINES
    }
    assert not too_long, (
        f"modules over {MAX_LINES} lines: split each at its seam (one job a module), or name it in EXCEPTIONS "
        f"and in docs/architecture.md's Size exceptions with why: {too_long}"
    )


def test_every_exception_is_needed_and_documented() -> None:
    """An excepted module exists, still runs over the limit, and docs/architecture.md names it."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text[text.index("Size exceptions") :]
    for name in EXCEPTIONS:
        path = PACKAGE / name
        assert path.exists(), f"kbctl/{name} is gone: remove it from EXCEPTIONS"
        assert lines(path) > MAX_LINES, f"kbctl/{name} is within {MAX_LINES} lines now: remove it from EXCEPTIONS"
        assert f"kbctl/{name}" in section, f"docs/architecture.md's Size exceptions does not name kbctl/{name}"


def test_the_rule_sees_every_module() -> None:
    """The walk finds the package's modules, subpackages included, and counts as wc -l does."""
    assert len(list(PACKAGE.rglob("*.py"))) > 50
    assert (PACKAGE / "cli" / "render" / "__init__.py").exists()
    assert lines(PACKAGE / "_version.py") >= 1
