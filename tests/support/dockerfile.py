"""A Dockerfile read as its instructions, for the tests that check the image without building it."""

from __future__ import annotations

import re

__all__ = ["steps"]


def steps(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n\s*", " ", "\n".join(lines))
    found = []
    for line in joined.splitlines():
        if line.strip():
            instruction, _, arguments = line.strip().partition(" ")
            found.append((instruction.upper(), arguments.strip()))
    return found
