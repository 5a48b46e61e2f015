"""Ownership: a knowledge base a Sync applied is managed by that Sync (it is in its apply set `sync-NAME`), and a
change by hand (`apply`, `rollout undo`, `delete`) would last only until the Sync's next pass. Such a change is
refused (ManagedError, before anything is written) unless forced, naming the Sync and how to stop it; forced, it is
done with a warning. A Sync that is suspended, or deleted, manages nothing, and an apply that leaves the manifest as
the Sync applied it changes nothing, so neither is refused. The Sync's own applies never come through here."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final, Literal

from kbctl.errors import ManagedError
from kbctl.store.database import Database

__all__ = ["Change", "check_hand_change"]

Change = Literal["apply", "rollback", "delete"]

_DONE: Final[dict[Change, tuple[str, str]]] = {  # what the change is, what the Sync's next pass does about it
    "apply": ("apply", "applies its repository's manifest again"),
    "rollback": ("roll back", "applies its repository's manifest again"),
    "delete": ("delete", "creates it again"),
}


def check_hand_change(
    db: Database,
    names: Sequence[str],
    change: Change,
    *,
    force: bool,
    applyset: str | None = None,
    digest_of: Callable[[str], str] | None = None,
) -> list[str]:
    """Refuse (ManagedError) a change by hand of knowledge bases a Sync manages, unless `force`; with it, the
    warnings to show (one per Sync). `applyset`: the apply set an apply joins them to (a Sync's is refused too);
    `digest_of`: the digest of the manifest an apply records for a name (one equal to the applied one changes
    nothing)."""
    managed = db.managers(names, applyset)
    if digest_of is not None:
        managed = {n: m for n, m in managed.items() if m.applied_sha256 != digest_of(n)}
    if not managed:
        return []
    by_sync: dict[str, list[str]] = {}
    for name in names:
        if name in managed:
            by_sync.setdefault(managed[name].sync, []).append(name)
    verb, undone = _DONE[change]
    lines = []
    for sync, kbs in by_sync.items():
        which = ", ".join(f"KnowledgeBase/{n}" for n in kbs)
        managed_by = f"{which} {'is' if len(kbs) == 1 else 'are'} managed by Sync/{sync}"
        if force:
            lines.append(f"{managed_by}, whose next pass {undone} (--force given: done anyway)")
        else:
            lines.append(
                f"{managed_by}, whose next pass {undone}: change it in the Sync's repository, or first suspend the "
                f"Sync (spec.suspend: true in its manifest, then kbctl apply -f it) or delete it (kbctl delete sync "
                f"{sync}); --force to {verb} anyway"
            )
    if not force:
        raise ManagedError("; ".join(lines))
    return lines
