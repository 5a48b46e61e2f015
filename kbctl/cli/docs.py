"""Render docs/cli.md from the CLI's own --help, so the reference cannot drift from the code.

python -m kbctl.cli.docs > docs/cli.md
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
    ["ask"],
    ["eval"],
    ["import", "beir"],
    ["delete"],
    ["rollout", "history"],
    ["rollout", "diff"],
    ["rollout", "status"],
    ["rollout", "undo"],
    ["gc"],
    ["serve"],
    ["mcp"],
    ["controller"],
    ["wait"],
    ["schema"],
    ["explain"],
    ["completion"],
    ["config", "view"],
    ["server", "status"],
    ["server", "stop"],
    ["version"],
]

HEADER = """# kbctl command reference

Generated from `kbctl <command> --help` by `python -m kbctl.cli.docs > docs/cli.md`; a test fails when
this file is stale.

## Exit codes

| code | meaning | where |
|---|---|---|
| 0 | success (for `diff`: no differences; `apply --exit-code`: nothing changed) | every command |
| 1 | failure: invalid manifest, failed source or knowledge base, unknown name, database or model error, `wait` timed out; for `diff`: differences | every command |
| 2 | usage error: unknown command, option, value or resource type, bad duration or selector; for `diff`: any error; `apply --exit-code`: something was created, configured or pruned | every command |
| 3 | the knowledge base does not cover the question: nothing passed the threshold (or, for `ask`, the model found no answer in the passages) | `ask`; `query` and `context` with `--exit-code` |

`diff` follows kubectl (1 means "differences", so errors are 2); `apply --exit-code` is kbctl's own
(kubectl has none: kubernetes#52577).

## Output formats

`get`, `describe` and `rollout history` take kubectl's `-o`: `json` and `yaml` print the objects (apiVersion, kind,
metadata, the applied spec with every default, status; one name prints the object, otherwise
`kind: List`), and that output can be applied again unchanged; `wide` adds MODEL, LABELS and
DESCRIPTION; `name` prints `knowledgebase/NAME`; `jsonpath=TEMPLATE` (e.g.
`'{range .items[*]}{.metadata.name}{"\\n"}{end}'`) and `custom-columns=NAME:.metadata.name,...` pick
fields. Other commands print their result as `-o json|yaml`.

Field names are camelCase everywhere (`headingPath`, `tokensToEmbed`, `changeCause`), as in the HTTP API, the
MCP tools and the manifests. Scripts written against kbctl before it read snake_case (`heading_path`) from
`query`, `ask`, `diff`, `eval`, `rollout history`, `gc` and `import` output: rename the keys they read.
"""  # noqa: E501  (the exit-code table's rows are one line each in markdown)


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
