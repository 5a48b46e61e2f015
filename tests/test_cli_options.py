"""Each command-line option is declared once: an option name on several commands means the same everywhere."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import typer

from kbctl.cli import app

# Option names that mean different things on different commands, each with distinct help of its own. The list only
# shrinks: a name here whose commands now share one help fails the test (remove it).
DIFFERENT_MEANINGS = {
    "--watch": "get: keep printing rows as they change; rollout status: wait until the rollout finishes",
    "--exit-code": "apply: exit 2 when something changed; query, context: exit 3 when nothing is found",
    "--filename": "a manifest (apply, diff, validate, delete) or an eval set (eval)",
    "--max-tokens": "a query's token budget, or the spec.retrieval value `import beir` writes",
    "--mode": "one mode to query, or the modes eval measures (repeatable, +rerank)",
    "--model": "ask's chat model, or the embedding model `import beir` writes",
    "--output": "an object's formats (get, describe, rollout history), or a result's json / yaml",
    "--recursive": "read folders of manifests recursively, or explain every field below",
    "--selector": "which knowledge bases (get, delete), or what --prune may delete (apply, diff)",
    "--threshold": "a query's threshold, or the spec.retrieval value `import beir` writes",
    "--timeout": "a lock, a controller, a condition (wait) or a request (serve)",
}


def _options(command: Any, path: str, found: dict[str, dict[str, str]]) -> None:
    """Every option of `command` and its subcommands: option name -> {command path: help}."""
    for name, sub in getattr(command, "commands", {}).items():
        _options(sub, f"{path} {name}", found)
    for param in command.params:
        if param.param_type_name == "option":
            for flag in [*param.opts, *param.secondary_opts]:
                if flag.startswith("--"):
                    found[flag][path] = param.help or ""


def options() -> dict[str, dict[str, str]]:
    found: dict[str, dict[str, str]] = defaultdict(dict)
    _options(typer.main.get_command(app), "kbctl", found)
    return found


def test_an_option_on_several_commands_has_one_help() -> None:
    """An option name shared by commands has the same help on each (one declaration in kbctl/cli/_common.py),
    unless it is listed in DIFFERENT_MEANINGS."""
    found = options()
    shared = {flag: uses for flag, uses in found.items() if len(uses) > 1}
    assert {"--top-k", "--threshold", "--max-tokens", "--mode", "--filename", "--selector", "--all"} <= set(shared)
    differing = {flag: uses for flag, uses in shared.items() if len(set(uses.values())) > 1}
    unexplained = {flag: uses for flag, uses in differing.items() if flag not in DIFFERENT_MEANINGS}
    assert not unexplained, f"options declared more than once with different help: {unexplained}"
    stale = sorted(set(DIFFERENT_MEANINGS) - set(differing))
    assert not stale, f"these now have one help everywhere: remove them from DIFFERENT_MEANINGS: {stale}"


def test_the_query_options_say_what_they_set() -> None:
    """--top-k is how many chunks come back (not the candidates considered), on every command that takes it."""
    found = options()
    assert set(found["--top-k"]) == {"kbctl query", "kbctl context", "kbctl ask"}
    assert all(h.startswith("How many chunks to return at most") for h in found["--top-k"].values())
    for flag, field in (("--top-k", "topK"), ("--max-tokens", "maxContextTokens"), ("--mode", "mode")):
        assert all(f"spec.retrieval.{field}" in found[flag][c] for c in ("kbctl query", "kbctl context", "kbctl ask"))
