"""promtool, which checks and unit-tests the alert rules of deploy/alerts."""

from __future__ import annotations

import shutil

import pytest

__all__ = ["promtool"]


def promtool() -> str:
    """promtool (Debian's prometheus package); a test that needs it fails, never skips, without it."""
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool is not installed (apt-get install --no-install-recommends prometheus)")
    return found
