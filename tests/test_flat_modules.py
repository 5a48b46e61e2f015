"""kbctl/ keeps few modules at its top level: the core every stage shares, and at most four others, each named here
with the job that keeps it out of the stage packages. New work goes in the package of its stage."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "kbctl"

# The core: the facade, the entry point, the version, the error root, the defaults, the client, the settings, the
# chunker every stage shares, and the one HTTP policy every client uses.
CORE = frozenset(
    {
        "__init__",
        "__main__",
        "_version",
        "errors",
        "defaults",
        "client",
        "config",
        "chunking",
        "_http",
    }
)

# The others, with why each is flat; at most MAX_OTHERS.
OTHERS = {
    "_lazy": "attributes imported on first use (PEP 562), which the facade and the stage packages share",
    "_providers": "model id to provider, and the per-process model cache, shared by embedding and rerank",
    "telemetry": "OpenTelemetry set-up and kbctl's spans, used by the client's commands and by the server",
    "userconfig": "kbctl's own configuration file (providers, profiles, network allowances), read by every stage",
}
MAX_OTHERS = 4


def flat_modules() -> set[str]:
    """The modules (and packages named like modules) at kbctl/'s top level."""
    return {p.stem for p in PACKAGE.glob("*.py")}


def test_only_the_named_modules_are_flat() -> None:
    unexpected = flat_modules() - CORE - set(OTHERS)
    assert not unexpected, f"new flat modules in kbctl/: put each in the package of its stage: {sorted(unexpected)}"


def test_the_list_of_others_is_short_and_true() -> None:
    assert len(OTHERS) <= MAX_OTHERS
    found = flat_modules()
    gone = (set(OTHERS) | (CORE - {"client"})) - found
    assert not gone, f"named as flat modules but absent: remove them from the lists: {sorted(gone)}"
