"""`git:` sources: a shallow fetch of one ref of a repository into kbctl's cache, its files read as `path:` files.

The repository is fetched with the `git` program (`--depth 1`, no tags, no submodules, hooks off, no terminal
prompt) into `<cache>/<sha256 of the URL>`, one checkout per URL under a file lock, then checked out at the
commit fetched; the documents are the files of `paths` in it, read like those of a `path:` source (formats,
include / exclude, hidden files skipped, nothing read outside the checkout), each named by its path in the
repository. URLs are https, ssh (`ssh://`, `git@host:path`) or, only with KBCTL_ALLOW_LOCAL_GIT=1 (tests,
local mirrors), absolute local folders and `file:///`; credentials never come from a manifest (a URL with a
password is refused): git takes them from the environment as always (SSH agent, credential helpers, GIT_ASKPASS).
The host of an https or ssh URL must pass the same network guard as URL sources before git runs.

A manifest is hostile input, and its URL and ref reach the git program: both are checked again here (the
manifest's own checks: nothing starting with '-', no `transport::` form), passed after `--`, and git may use
only the protocols of the allow-list (`GIT_ALLOW_PROTOCOL`: https and ssh; file with KBCTL_ALLOW_LOCAL_GIT=1),
without following HTTP redirects (which could lead past the network guard).
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import os
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from kbctl.errors import SourceError
from kbctl.manifest import Source, check_git_ref, check_git_url, git_url_host
from kbctl.sources import Document
from kbctl.sources._guard import Guard
from kbctl.sources.files import ListedDocument, NotModified, ReadOutcome, list_files, read_entry
from kbctl.userconfig import redact

__all__ = ["ALLOW_LOCAL_ENV", "GIT_TIMEOUT", "Checkout", "fetch_repository", "read_repository"]

ALLOW_LOCAL_ENV: Final = "KBCTL_ALLOW_LOCAL_GIT"
GIT_TIMEOUT: Final = 300.0  # seconds one git command may take


@dataclass(frozen=True)
class Checkout:
    """A repository checked out at one commit."""

    url: str
    commit: str
    folder: Path


def _local_allowed() -> bool:
    return os.environ.get(ALLOW_LOCAL_ENV, "").strip().lower() in ("1", "true")


def _host_port(url: str, ref: str | None) -> tuple[str, int] | None:
    """The manifest's checks once more (for callers that did not come through a manifest), then the (host, port)
    the URL reaches, None for a local repository; SourceError for one kbctl does not fetch."""
    try:
        check_git_url(url)
        if ref is not None:
            check_git_ref(ref)
        target = git_url_host(url)
    except ValueError as exc:
        what = f"{redact(url)!r}" if ref is None else f"{redact(url)!r} ref {ref!r}"
        raise SourceError(f"refused git repository {what}: {exc}") from None
    if target is None and not _local_allowed():
        raise SourceError(f"local repositories are read only with {ALLOW_LOCAL_ENV}=1 (tests, local mirrors)")
    return target


def _check_host(url: str, ref: str | None, guard: Guard) -> None:
    target = _host_port(url, ref)
    if target is None:
        return
    host, port = target
    for ip in asyncio.run(guard.resolve(host, port)):
        refusal = guard.refusal(host, ip, port)
        if refusal is not None:
            raise SourceError(refusal)


def _git(folder: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_TERMINAL_PROMPT": "0",  # never wait for a password on a terminal
        "GIT_CONFIG_NOSYSTEM": "1",
        # the allow-list of transports, which overrides every protocol.*.allow setting: no ext::, fd::, git://
        "GIT_ALLOW_PROTOCOL": "https:ssh:file" if _local_allowed() else "https:ssh",
        "GIT_PROTOCOL_FROM_USER": "0",
        "LC_ALL": "C",
    }
    command = ["git", "-C", str(folder), "-c", "core.hooksPath=/dev/null", "-c", "protocol.ext.allow=never"]
    command += ["-c", "http.followRedirects=false", "-c", "submodule.recurse=false"]
    if not _local_allowed():
        command += ["-c", "protocol.file.allow=never"]
    try:
        done = subprocess.run(
            [*command, *args], env=env, capture_output=True, text=True, timeout=GIT_TIMEOUT, check=False
        )
    except FileNotFoundError:
        raise SourceError("git sources need the git program, which is not installed") from None
    except subprocess.TimeoutExpired:
        raise SourceError(f"git {args[0]} took longer than {GIT_TIMEOUT:g} s") from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        raise SourceError(f"git {args[0]} failed: {redact(lines[-1] if lines else f'exit code {done.returncode}')}")
    return done.stdout.strip()


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{folder}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def fetch_repository(url: str, ref: str | None, cache: Path, guard: Guard) -> Checkout:
    """Fetch `ref` (a branch or tag; None: the remote's default branch) of `url` into `cache`, shallow, and check
    out the commit it names; SourceError when the host is refused or git fails."""
    _check_host(url, ref, guard)
    folder = cache / hashlib.sha256(url.encode()).hexdigest()[:24]
    with _locked(folder):
        if not (folder / ".git").is_dir():
            folder.mkdir(parents=True, exist_ok=True)
            _git(folder, "init", "--quiet")
        fetch = ("fetch", "--quiet", "--depth", "1", "--no-tags", "--no-recurse-submodules")
        _git(folder, *fetch, "--", url, ref or "HEAD")
        commit = _git(folder, "rev-parse", "--verify", "--end-of-options", "FETCH_HEAD^{commit}")
        if not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", commit):
            raise SourceError(f"git rev-parse gave {commit[:80]!r}, not a commit id")
        _git(folder, "checkout", "--quiet", "--force", "--detach", commit)
        _git(folder, "clean", "--quiet", "-ffdx")
    return Checkout(url=url, commit=commit, folder=folder)


def read_repository(source: Source, cache: Path, guard: Guard) -> tuple[str, ReadOutcome]:
    """(the commit, every file of the git source's paths with its Document or why it could not be read); each
    document named by its path in the repository."""
    assert source.git is not None
    checkout = fetch_repository(source.git.url, source.git.ref, cache, guard)
    seen: dict[str, tuple[ListedDocument, Document | SourceError | NotModified]] = {}
    for path in source.git.paths:
        spec = source.model_copy(update={"path": path, "git": None})
        for entry in list_files(spec, checkout.folder):
            origin = f"{redact(source.git.url)}@{checkout.commit[:12]}:{entry.origin}"  # the commit it was read at
            named = ListedDocument(entry.origin, entry.path, entry.format, origin)  # no stamp: a checkout's times vary
            if named.doc_id not in seen:
                seen[named.doc_id] = (named, read_entry(named, source))
    return checkout.commit, [seen[k] for k in sorted(seen)]
