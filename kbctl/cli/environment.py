"""kbctl's own environment: `server status|stop` (the embedded PostgreSQL), `config view`, `completion` and
`version` (kubectl's settings and other commands)."""

from __future__ import annotations

from typing import Annotated

import typer

from kbctl._version import __version__
from kbctl.cli._common import (
    COMPLETE_VAR,
    Output,
    OutputOpt,
    app,
    config_app,
    emit,
    handles_errors,
    server_app,
    state,
)
from kbctl.cli.terminal import say


@server_app.command("status")
@handles_errors
def server_status_cmd(output: OutputOpt = None) -> None:
    """Say whether the embedded PostgreSQL runs, its pid and connection URL."""
    from kbctl import KnowledgeBaseStore
    from kbctl.cli.render import server_status_line

    status = KnowledgeBaseStore.server_status()
    if output:
        emit(status.__dict__, output)
    else:
        say(server_status_line(status))


@server_app.command("stop")
@handles_errors
def server_stop() -> None:
    """Stop the embedded PostgreSQL (the next command that needs it starts it again)."""
    from kbctl import KnowledgeBaseStore
    from kbctl.cli.render import server_stopped_line
    from kbctl.config import Settings

    pgdata = Settings.from_env().pgdata
    say(server_stopped_line(KnowledgeBaseStore.stop_server(), pgdata))


@config_app.command("view")
@handles_errors
def config_view(output: OutputOpt = None) -> None:
    """Show the effective configuration (file, environment, defaults) with secrets redacted.

    API keys are never shown: each provider names the variable that holds its key and says whether it
    is set. A database password (in the URL, a ?password= parameter or a conninfo password=), and
    credentials and key or token parameters in a provider's baseURL, are replaced by ***. Also shows
    the network allowances of URL sources (allowPrivateNetworks, allowNetworks). YAML by default, or
    -o json.
    """
    from kbctl.config import Settings, effective_config

    emit(effective_config(Settings.from_env(database_url=state["database_url"])), output or Output.yaml)


SHELLS = ("bash", "zsh", "fish")


def _shells() -> list[str]:
    return list(SHELLS)


@app.command()
def completion(
    shell: Annotated[str, typer.Argument(metavar="SHELL", help="bash, zsh or fish.", autocompletion=_shells)],
) -> None:
    """Print the shell completion script for kbctl.

    TAB then completes commands and options, resource types (`kbctl get <TAB>`: knowledgebase, kb, events, syncs, all),
    the values of -o (json, yaml, wide, name, jsonpath=, custom-columns=) and knowledge base names (`kbctl describe
    kb <TAB>`, `kbctl query <TAB>`, kb/<TAB>). Names are read from the store only when it answers at once: the
    embedded PostgreSQL is never started for a completion, and a store that is stopped, unreachable or slower
    than a second completes no names, silently.

    \b
    Examples:
      source <(kbctl completion bash)              # in ~/.bashrc (bash 4.4 or later)
      kbctl completion zsh > "${fpath[1]}/_kbctl"  # then start a new zsh
      kbctl completion fish > ~/.config/fish/completions/kbctl.fish
    """
    if shell not in SHELLS:
        raise typer.BadParameter(f"unknown shell {shell!r}; use one of: {', '.join(SHELLS)}", param_hint="SHELL")
    from typer._completion_classes import completion_init
    from typer._completion_shared import get_completion_script  # typer's own scripts (it has no public API)

    completion_init()
    typer.echo(get_completion_script(prog_name="kbctl", complete_var=COMPLETE_VAR, shell=shell))


@app.command()
def version() -> None:
    """Print the kbctl version."""
    from kbctl.cli.render import version_line

    say(version_line(__version__))
