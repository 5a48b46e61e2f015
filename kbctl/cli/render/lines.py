"""The one-line results of every command (names, not found, deleted, server, version) and the notes, warnings,
lock waits and error lines apply, ask, wait, diff, rollout, gc and the controller print."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from kbctl.cli.render.tables import count
from kbctl.cli.terminal import inert

if TYPE_CHECKING:  # imported by the commands that print them (a command's start-up pays only for its own)
    from kbctl import DeleteResult, GcResult, ManifestSet, ServerStatus


def gc_line(result: GcResult) -> str:
    """What `kbctl gc` removed, in one line."""
    line = f"removed {count(result.removed, 'unreferenced vector')}"
    return line + (f", {count(result.texts_removed, 'unused source text')}" if result.texts_removed else "")


# ---------------------------------------------------------------- the lines of get, describe, delete, validate, server


def object_name(kind: str, name: str) -> str:
    """kubectl's `-o name`: KIND/NAME (knowledgebase/NAME, sync/NAME)."""
    return inert(f"{kind}/{name}")


def nothing_found_line(what: str) -> str:
    """What a list with nothing to show says on stderr: `No knowledge bases found.`"""
    return f"No {what} found."


def not_found_line(kind: str, name: str) -> str:
    """kubectl's error for a name that does not exist: `Error: knowledgebase "NAME" not found`."""
    return f'Error: {kind} "{inert(name)}" not found'


def error_line(message: str) -> str:
    """An error a command reports and goes on past: `Error: MESSAGE`."""
    return f"Error: {inert(message)}"


def valid_lines(loaded: ManifestSet) -> Iterator[str]:
    """`kbctl validate`: FILE:LINE: KIND/NAME valid, for each object the files hold."""
    for m in loaded.manifests:
        yield inert(f"{m.path}:{m.line}: KnowledgeBase/{m.kb.name} valid")
    for s in loaded.syncs:
        yield inert(f"{s.path}:{s.line}: Sync/{s.sync.name} valid")


def deleted_line(
    kind: str, name: str, *, result: DeleteResult | None = None, dry_run: bool = False, consulted: bool = True
) -> str:
    """`kbctl delete`: KIND/NAME deleted, with what it removed, or that it was a dry run (one that named what to
    delete without a store: not `consulted`)."""
    if dry_run and not consulted:
        return f"{kind}/{name} deleted (dry run: client, the store was not consulted)"
    if dry_run:
        return f"{kind}/{name} deleted (dry run)"
    if result is not None:
        return f"{kind}/{name} deleted ({result.chunks} chunks, {result.vectors} vectors)"
    return f"{kind}/{name} deleted"


def server_status_line(status: ServerStatus) -> str:
    """`kbctl server status`: running (its pid, data folder and URL), or not."""
    if status.running:
        return f"running (pid {status.pid}) in {status.pgdata}: {status.url}"
    return f"not running ({status.pgdata})"


def server_stopped_line(stopped: bool, pgdata: object) -> str:
    """`kbctl server stop`: stopped, or it was not running."""
    return "stopped" if stopped else f"not running ({pgdata})"


def version_line(version: str) -> str:
    """`kbctl version`: kbctl VERSION."""
    return f"kbctl {version}"


# ------------------------------------------------- the lines apply, ask, wait, diff, rollout and every command share
# (their notes, warnings, waits, progress and errors: the commands print these and word none of their own)


def skipped_note(message: str) -> str:
    """What -f says on stderr of a file of another tool's objects it skipped: `note: MESSAGE`."""
    return f"note: {inert(message)}"


def warning_line(warning: str) -> str:
    """A warning a library result carries, as every command says it on stderr: `warning: ...`."""
    return f"warning: {inert(warning)}"


def rerank_skipped_line(error: str) -> str:
    """The reranker failed, so the answer is in fused order (stderr)."""
    return f"warning: rerank skipped, results are in fused order: {inert(error)}"


def lock_waiting_line(name: str) -> str:
    """What a command says on stderr while another one holds the knowledge base's lock."""
    return f"waiting for another apply, delete or rollback of KnowledgeBase/{name}"


def client_valid_line(name: str) -> str:
    """`apply --dry-run=client`: a manifest is valid, and no store was asked."""
    return f"KnowledgeBase/{name} valid (dry run: client, the store was not consulted)"


def pruned_line(name: str) -> str:
    """`apply --prune`: a member of the apply set the manifests no longer name was deleted."""
    return f"KnowledgeBase/{name} pruned"


def sync_applied_line(name: str, action: str) -> str:
    """`apply`: what became of a Sync of the manifests (`Sync/NAME created`)."""
    return f"Sync/{name} {action}"


def recorded_line(name: str, action: str, version: int | None, *, pending: bool) -> str:
    """`apply` without --wait: what was recorded for a controller (`KnowledgeBase/NAME configured (version 3
    pending)`), or that nothing was (`unchanged (version 3)`)."""
    state = f"version {version} pending" if pending else f"version {version}"
    return f"KnowledgeBase/{name} {action if pending else 'unchanged'} ({state})"


def read_here_line(names: Sequence[str]) -> str:
    """`apply` without --wait: the knowledge bases of path: sources, which this process applies (stderr)."""
    return f"{', '.join(names)}: path: sources are read here (as with --wait), not by a controller"


def no_controller_line() -> str:
    """`apply` without --wait, when work was recorded and no controller runs to do it."""
    return (
        "no controller is running, so nothing is ingested yet: run `kbctl controller` (or `kbctl controller "
        "--once`), or apply again with --wait"
    )


def legacy_prune_warning() -> str:
    """`--prune -l` without `--applyset` (kubectl's legacy prune), said on stderr."""
    return (
        "warning: --prune -l without --applyset prunes by labels alone (and never a member of an apply set); "
        "give each repository an apply set: --applyset NAME"
    )


def pass_finished_line(done: int, failed: int) -> str:
    """`kbctl controller --once`: how many knowledge bases the pass reconciled, and how many failed."""
    plural = "s" if done != 1 else ""
    return f"reconciled {done} knowledge base{plural}" + (f", {failed} failed" if failed else "")


def controller_started_line(controller_id: str, port: int | None) -> str:
    """`kbctl controller`: it runs, and where its metrics are served (stderr)."""
    where = f"; metrics and /healthz on port {port}" if port is not None else ""
    return f"controller {controller_id} running{where}"


def wait_met_line(name: str, *, deleted: bool) -> str:
    """`kbctl wait`: a knowledge base has the condition (`knowledgebase/NAME condition met`), or is deleted."""
    return inert(f"knowledgebase/{name} {'deleted' if deleted else 'condition met'}")


def wait_timed_out_line(timeout: str, condition: tuple[str, bool] | None, left: Sequence[str]) -> str:
    """`kbctl wait`: the --timeout passed before the knowledge bases `left` had `condition` (None: were deleted)."""
    what = "the deletion of" if condition is None else f"{condition[0]}={condition[1]} on"
    names = ", ".join(f"knowledgebase/{n}" for n in left)
    return inert(f"Error: timed out after {timeout} waiting for {what} {names}")


def rollout_stalled_line(name: str, deadline: str, detail: str) -> str:
    """`kbctl rollout status`: the rollout made no progress for --progress-deadline, and why."""
    stuck = f'knowledgebase "{name}" exceeded its progress deadline ({deadline})'
    return f"Error: {inert(stuck)}: {inert(detail)}"


def rollout_timed_out_line(name: str, timeout: str, detail: str) -> str:
    """`kbctl rollout status`: --timeout passed before the rollout finished, and where it stands."""
    waited = f'timed out after {timeout} waiting for knowledgebase "{name}" rollout to finish'
    return f"Error: {inert(waited)}: {inert(detail)}"


def rolled_back_line(name: str, version: int) -> str:
    """`kbctl rollout undo`: the version now serving."""
    return f"KnowledgeBase/{name} rolled back to version {version}"


def nothing_collected_line() -> str:
    """`kbctl gc` while an apply or refresh runs: it does nothing."""
    return "skipped: an apply is in progress"
