"""Render docs/cli.md from the CLI's own --help, so the reference cannot drift from the code.

python -m kbctl._clidocs > docs/cli.md
"""

from __future__ import annotations

from typer.testing import CliRunner

COMMANDS: list[list[str]] = [
    [],
    ["apply"],
    ["refresh"],
    ["validate"],
    ["get"],
    ["describe"],
    ["query"],
    ["delete"],
    ["rollout", "history"],
    ["rollout", "undo"],
    ["gc"],
    ["schema"],
    ["server", "status"],
    ["server", "stop"],
    ["version"],
]

HEADER = """# kbctl command reference

Generated from `kbctl <command> --help` by `python -m kbctl._clidocs > docs/cli.md`; a test fails when
this file is stale.

Exit codes: 0 success; 1 failure (invalid manifest, failed source or knowledge base, unknown name,
database or model error); 2 usage error (unknown command, option or resource type).
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
