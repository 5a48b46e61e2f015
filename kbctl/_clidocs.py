"""Render docs/cli.md from the CLI's own --help, so the reference cannot drift from the code.

python -m kbctl._clidocs > docs/cli.md
"""

from __future__ import annotations

from typer.testing import CliRunner

COMMANDS: list[list[str]] = [
    [],
    ["apply"],
    ["diff"],
    ["refresh"],
    ["validate"],
    ["get"],
    ["describe"],
    ["query"],
    ["context"],
    ["eval"],
    ["import", "beir"],
    ["delete"],
    ["rollout", "history"],
    ["rollout", "undo"],
    ["gc"],
    ["controller"],
    ["wait"],
    ["schema"],
    ["config", "view"],
    ["server", "status"],
    ["server", "stop"],
    ["version"],
]

HEADER = """# kbctl command reference

Generated from `kbctl <command> --help` by `python -m kbctl._clidocs > docs/cli.md`; a test fails when
this file is stale.

Exit codes: 0 success; 1 failure (invalid manifest, failed source or knowledge base, unknown name,
database or model error, `wait` timed out); 2 usage error (unknown command, option or resource type).
Exceptions, as kubectl: `diff` exits 0 when nothing differs, 1 when something does and 2 on any
error; `apply --exit-code` exits 0 when nothing changed, 2 when something was created, configured or
pruned, and 1 on any failure.
"""


def render() -> str:
    """The whole reference as markdown."""
    from kbctl.cli import app

    runner = CliRunner(env={"COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb", "KBCTL_DATABASE_URL": ""})
    parts = [HEADER]
    for words in COMMANDS:
        result = runner.invoke(app, [*words, "--help"], prog_name="kbctl")
        title = " ".join(["kbctl", *words])
        body = "\n".join(line.rstrip() for line in result.stdout.strip("\n").splitlines())
        parts.append(f"## `{title}`\n\n```\n{body}\n```\n")
    return "\n".join(parts)


if __name__ == "__main__":
    print(render(), end="")
