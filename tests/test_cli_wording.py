"""The CLI's wording lives in kbctl/cli/render/: a command module prints what render (or progress.py, for the
engine's events) worded, never a sentence of its own. An AST check, so the rule holds for commands added later."""

from __future__ import annotations

import ast
from pathlib import Path

import kbctl

CLI = Path(kbctl.__file__).resolve().parent / "cli"

# The modules that word or print text themselves: the renderers, the inert printer, kubectl's -o, the apply log,
# the CLI reference generator.
WORDING_MODULES = frozenset({"render", "terminal.py", "output.py", "progress.py", "docs.py"})
# terminal.say (and a controller log's say(event, message)), typer.echo / click.echo, typer.secho, print.
PRINTERS = frozenset({"say", "echo", "secho", "print"})


def _printer(call: ast.Call) -> str | None:
    func = call.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    return name if name in PRINTERS else None


def _texts(call: ast.Call) -> list[ast.expr]:
    """The arguments a printing call prints: a log's `say(EVENT, message)` names its event first (PassFinished,
    a name for the JSON log, not wording)."""
    args = list(call.args)
    if isinstance(call.func, ast.Attribute) and call.func.attr == "say" and len(args) >= 2:
        args = args[1:]
    return args + [k.value for k in call.keywords if k.arg in ("message", "text")]


def _worded(node: ast.expr) -> bool:
    """Whether `node` makes text here: a string literal or an f-string, alone, concatenated, chosen by `if`,
    made inert (`inert(f"...")`), or formatted or joined (`"...".join(...)`). A call on a renderer is not,
    whatever its arguments: kbctl/cli/render/ words it."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp):
        return _worded(node.left) or _worded(node.right)
    if isinstance(node, ast.IfExp):
        return _worded(node.body) or _worded(node.orelse)
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("inert", "inert_text", "str"):
            return any(_worded(a) for a in node.args)
        return isinstance(func, ast.Attribute) and _worded(func.value)
    return False


def worded_prints(source: str) -> list[int]:
    """The lines of `source` where a printing call prints text it words itself."""
    return sorted(
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and _printer(node) and any(_worded(t) for t in _texts(node))
    )


def test_command_modules_print_only_what_render_worded() -> None:
    """Every sentence a command prints (its notes, warnings, waits, errors) is made in kbctl/cli/render/: the
    command modules parse, call KnowledgeBaseStore and print what the renderers return."""
    found = [
        f"kbctl/cli/{path.relative_to(CLI).as_posix()}:{line}"
        for path in sorted(CLI.rglob("*.py"))
        if path.relative_to(CLI).parts[0] not in WORDING_MODULES
        for line in worded_prints(path.read_text(encoding="utf-8"))
    ]
    assert not found, f"word these lines in a kbctl/cli/render/ function and print what it returns: {found}"


def test_the_wording_modules_exist() -> None:
    """The exempt modules are still there (a renamed one must not leave its name exempt for a newcomer)."""
    assert {p.name for p in CLI.iterdir()} >= WORDING_MODULES


def test_the_wording_check_finds_sentences() -> None:
    """The check sees each way a command could word a line, and lets through what a renderer or -o made."""
    worded = """
say("skipped")
say(f"KnowledgeBase/{name} pruned", err=True)
say(inert(f"knowledgebase/{name}"))
say("Error: " + message)
say("a" if done else "b")
say(", ".join(names))
typer.echo(f"{n} found")
typer.secho("done")
print("hello")
log.say("PassFinished", f"reconciled {n}", level="info")
say(message="text")
"""
    assert worded_prints(worded) == list(range(2, 13))
    rendered = """
say()
say(line)
say(pruned_line(name))
say(object_name("knowledgebase", name))
say(inert(result.message), err=True)
typer.echo(json.dumps(data, indent=2))
log.say("ControllerStarted", controller_started_line(ctl.id, port), err=True)
"""
    assert worded_prints(rendered) == []
