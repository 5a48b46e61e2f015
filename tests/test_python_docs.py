"""docs/python.md stays true: each of its Python examples runs, in order, against the real store and model."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from kbctl.client import KnowledgeBaseStore

DOC = Path(__file__).resolve().parent.parent / "docs" / "python.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL)


def test_the_examples_run(store: KnowledgeBaseStore, monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(BLOCKS) >= 4
    monkeypatch.chdir(DOC.parent.parent)  # the examples name examples/kb/ relative to the repository
    monkeypatch.setenv("KBCTL_DATABASE_URL", store.db.url)
    monkeypatch.setenv("KBCTL_HOME", str(store.settings.home))
    out = io.StringIO()
    for number, block in enumerate(BLOCKS, start=1):
        with contextlib.redirect_stdout(out):
            try:
                exec(compile(block, f"{DOC.name} example {number}", "exec"), {"__name__": "docs_example"})
            except Exception as exc:
                raise AssertionError(f"{DOC.name} example {number} failed: {exc!r}") from exc
    printed = out.getvalue()
    assert "client-service-policy" in printed and "embed question" in printed
