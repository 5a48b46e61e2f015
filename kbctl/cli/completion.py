"""The resource types kbctl's commands take, and shell completion of arguments: those types, knowledge-base names
(from the store, if it answers at once) and `-o` formats, for the scripts of `kbctl completion bash|zsh|fish`.

Each completer is a typer `autocompletion` callback: typer keeps the values that start with what was typed, and
zsh and fish show the help beside each. A completer never raises and never prints: no store, no names.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import typer

__all__ = [
    "ALL_RESOURCES",
    "EVENT_RESOURCES",
    "RESOURCES",
    "SYNC_RESOURCES",
    "Completer",
    "kb_names",
    "object_formats",
    "query_names",
    "resource_types",
]

RESOURCES = {"knowledgebase", "knowledgebases", "kb", "kbs"}
EVENT_RESOURCES = {"events", "event", "ev"}  # `kbctl get events` only
SYNC_RESOURCES = {"syncs", "sync"}  # `kbctl get syncs`, `kbctl describe sync`, `kbctl delete sync` only
ALL_RESOURCES = {"all"}  # `kbctl get all` only

Completion = list[tuple[str, str]]  # (value, help shown by zsh and fish)
Completer = Callable[[typer.Context, str], Completion]

_KB_HELP = "KnowledgeBase"
_EVENT_HELP = "what happened to knowledge bases (get events)"
_SYNC_HELP = "Sync: a git folder a controller keeps applied"
_ALL_HELP = "every kind: knowledge bases and Syncs (get all)"
_OBJECT_FORMATS: Completion = [
    ("json", "the objects as JSON (they apply again unchanged)"),
    ("yaml", "the objects as YAML (they apply again unchanged)"),
    ("wide", "the table with more columns"),
    ("name", "knowledgebase/NAME"),
    ("jsonpath=", "jsonpath=TEMPLATE, e.g. jsonpath={.items[*].metadata.name}"),
    ("custom-columns=", "custom-columns=SPEC, e.g. custom-columns=NAME:.metadata.name"),
]
_DATA_FORMATS = ("json", "yaml")  # what get events and get syncs print besides their table


def _spellings(kinds: Collection[str]) -> Completion:
    helps = {
        "kb": (RESOURCES, _KB_HELP),
        "events": (EVENT_RESOURCES, _EVENT_HELP),
        "syncs": (SYNC_RESOURCES, _SYNC_HELP),
        "all": (ALL_RESOURCES, _ALL_HELP),
    }
    return sorted((spelling, helps[kind][1]) for kind in kinds for spelling in helps[kind][0])


def resource_types(*kinds: str, typed_names: bool = False) -> Completer:
    """A completer of RESOURCE: the spellings of `kinds` (kb, events, syncs, all); with `typed_names`, also kb/NAME
    once a slash is typed, for the commands that take kubectl's TYPE/NAME form."""

    def complete(ctx: typer.Context, incomplete: str) -> Completion:
        kind, slash, prefix = incomplete.partition("/")
        if not slash:
            return _spellings(kinds)
        return _names(ctx, prefix, kind=kind) if typed_names and _is_kb(kind) else []

    return complete


def kb_names(ctx: typer.Context, incomplete: str) -> Completion:
    """A completer of NAME: the stored knowledge bases not named already, as TYPE/NAME when the RESOURCE was
    written so (`get kb/a kb/<TAB>`); none after a RESOURCE whose names are not knowledge bases' (syncs)."""
    resource = _resource(ctx)
    kind, slash, _ = resource.partition("/") if isinstance(resource, str) else ("", "", "")
    if isinstance(resource, str) and not (_is_kb(kind) or kind.lower() in EVENT_RESOURCES):
        return []
    if not slash:
        return _names(ctx, incomplete)
    typed, _, prefix = incomplete.rpartition("/")
    return _names(ctx, prefix, kind=kind) if typed in ("", kind) else []


def query_names(ctx: typer.Context, incomplete: str) -> Completion:
    """A completer of query's NAME[,NAME...] QUESTION: names (after a comma too) for the first word, unless --all
    or -l stand for them; nothing for the question."""
    if ctx.params.get("args") or ctx.params.get("all_kbs") or ctx.params.get("selector") is not None:
        return []
    typed, comma, prefix = incomplete.rpartition(",")
    named = set(typed.split(",")) if comma else set()
    return [(typed + comma + name, "") for name, _ in _names(ctx, prefix) if name not in named]


def object_formats(ctx: typer.Context, incomplete: str) -> Completion:
    """A completer of the objects' `-o` (get, describe, rollout history): kubectl's formats, json and yaml alone
    for `get events` and `get syncs`."""
    resource = _resource(ctx)
    if isinstance(resource, str) and resource.lower() in {*EVENT_RESOURCES, *SYNC_RESOURCES}:
        return [(value, help) for value, help in _OBJECT_FORMATS if value in _DATA_FORMATS]
    return list(_OBJECT_FORMATS)


def _resource(ctx: typer.Context) -> str | None:
    """RESOURCE as typed: parsed, else the first word left over (while the option being completed has no value yet,
    click leaves the positional arguments unassigned)."""
    resource = ctx.params.get("resource")
    if isinstance(resource, str):
        return resource
    return ctx.args[0] if ctx.args and any(p.name == "resource" for p in ctx.command.params) else None


def _is_kb(kind: str) -> bool:
    return kind.lower() in RESOURCES


def _names(ctx: typer.Context, prefix: str, *, kind: str = "") -> Completion:
    """The stored knowledge bases starting with `prefix` and not on the command line already (RESOURCE kb/NAME or
    NAME arguments), written `kind`/NAME when a kind is given."""
    given = [ctx.params.get("resource"), *(ctx.params.get("names") or ())]
    named = {str(g).rpartition("/")[2] for g in given if isinstance(g, str) and "/" in g}
    named |= {g for g in given[1:] if isinstance(g, str) and "/" not in g}
    return [(f"{kind}/{name}" if kind else name, "") for name in _stored(ctx, prefix) if name not in named]


def _stored(ctx: typer.Context, prefix: str) -> list[str]:
    """The stored knowledge bases starting with `prefix`, as quick as the store answers (see
    KnowledgeBaseStore.peek_names); [] on any failure: a completion prints no error."""
    try:
        from kbctl.client import KnowledgeBaseStore
        from kbctl.config import Settings

        url = ctx.find_root().params.get("database_url")
        settings = Settings.from_env(database_url=url if isinstance(url, str) else None)
        return KnowledgeBaseStore.peek_names(prefix, settings=settings)
    except Exception:  # a broken configuration file, a bad KBCTL_HOME: nothing to offer, nothing to say
        return []
