"""`git:` sources: a shallow fetch of one ref of a repository into kbctl's cache, its files read as `path:` files.

`git` runs with `--depth 1`, no tags, no submodules, hooks off and no terminal prompt, into one checkout per URL
under a file lock; the documents are the files of `paths` in it, each named by its path in the repository.
Credentials come from git's environment, never from a manifest, and the host must pass the URL sources' network
guard. A manifest and a repository are both hostile input: the URL and ref are checked again and passed after
`--`, protocols are allow-listed (GIT_ALLOW_PROTOCOL), redirects are not followed, a fetch is bounded
(MAX_FETCH_BYTES) and a commit's tree is checked (MAX_REPOSITORY_FILES, MAX_REPOSITORY_BYTES) before checkout,
which writes blobs as stored (no filters, no conversion).

Design and guarantees: docs/reliability.md ("No command runs from a manifest", "Bounded work"), docs/manifest.md.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from kbctl.errors import SourceError
from kbctl.manifest import Source, check_git_ref, check_git_url, git_url_host
from kbctl.sources import Document
from kbctl.sources._guard import Guard
from kbctl.sources._process import MAX_ERROR_CHARS, error_text, finish
from kbctl.sources.bounds import MiB
from kbctl.sources.files import DocumentsRead, ListedDocument, NotModified, list_files, read_entry
from kbctl.userconfig import redact

__all__ = [
    "ALLOW_LOCAL_ENV",
    "EXTERNAL_PROGRAMS",
    "GIT_TIMEOUT",
    "MAX_ERROR_CHARS",
    "MAX_FETCH_BYTES",
    "MAX_REPOSITORY_BYTES",
    "MAX_REPOSITORY_FILES",
    "Checkout",
    "fetch_repository",
    "read_repository",
]

ALLOW_LOCAL_ENV: Final = "KBCTL_ALLOW_LOCAL_GIT"
# The programs this module runs (git runs ssh for ssh:// and git@host:path URLs): the image installs each
# (deploy/Dockerfile; tests/test_image.py reads this tuple).
EXTERNAL_PROGRAMS: Final = ("git", "ssh")
GIT_TIMEOUT: Final = 300.0  # seconds one git command may take
# What one repository may put in kbctl's cache. A source lists at most 10,000 files of at most 32 MiB each
# (kbctl.sources.files), but it may read one folder of a larger repository, and the whole commit is checked out:
# these bounds leave room for a documentation repository with its images, and none for one made to fill a disk.
MAX_REPOSITORY_FILES: Final = 50_000  # files (blobs, symlinks) in the tree of the commit checked out
MAX_REPOSITORY_BYTES: Final = 256 * MiB  # their sizes in all: what the checkout writes
MAX_FETCH_BYTES: Final = 256 * MiB  # what one fetch may add to the repository's .git (packs arrive compressed)
WATCH_SECONDS: Final = 0.2  # how often a fetch's growth is measured
# Blobs are checked out as stored: no filter (an LFS smudge fetches from a server of the repository's choosing),
# no end-of-line or working-tree-encoding conversion (which would make files larger than the sizes checked).
_ATTRIBUTES: Final = "* -filter -text -ident -working-tree-encoding\n"
_ERROR_PREFIXES: Final = ("fatal:", "error:")
_CHATTER_PREFIXES: Final = ("hint:", "warning:", "remote:")


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


def _command(folder: Path) -> tuple[list[str], dict[str, str]]:
    """The git command line (before its subcommand) and environment every git run uses."""
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
    return command, env


def _git(
    folder: Path,
    *args: str,
    watch: Callable[[], str | None] | None = None,
    on_output: Callable[[bytes], None] | None = None,
) -> str:
    """git's output (none when `on_output` takes it as it comes); SourceError when it fails, takes longer than
    GIT_TIMEOUT, or `watch` (asked every WATCH_SECONDS while git runs) or `on_output` gives a reason to stop it."""
    command, env = _command(folder)
    try:  # a session of its own, so that stopping git stops what it started (index-pack, a local upload-pack)
        process = subprocess.Popen(
            [*command, *args],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except FileNotFoundError:
        raise SourceError("git sources need the git program, which is not installed") from None
    name = f"git {args[0]}"
    returncode, stdout, stderr = finish(
        process, name=name, timeout=GIT_TIMEOUT, on_output=on_output, watch=watch, watch_every=WATCH_SECONDS
    )
    if returncode != 0:
        raise SourceError(f"{name} failed: {_first_error(stderr, returncode)}")
    return stdout.decode(errors="replace").strip()


def _first_error(stderr: bytes, returncode: int) -> str:
    """git's own first meaningful error line, redacted and cut: its first `fatal:` or `error:` line (the prefix left
    out), else its first line that is no hint, warning or server chatter, else its first line; the exit code when it
    said nothing. (Its last line is often advice: `and the repository exists.`)"""
    lines = [line.strip() for line in stderr.decode(errors="replace").splitlines() if line.strip()]
    chosen = next((line for line in lines if line.startswith(_ERROR_PREFIXES)), None)
    if chosen is None:
        chosen = next((line for line in lines if not line.startswith(_CHATTER_PREFIXES)), lines[0] if lines else None)
    if chosen is None:
        return f"exit code {returncode}"
    for prefix in _ERROR_PREFIXES:
        chosen = chosen.removeprefix(prefix).strip()
    return error_text(chosen)


def _bytes_in(folder: Path) -> int:
    """The bytes of the files under `folder` (those git is writing included)."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue  # gone between listing and measuring (git renames its temporary packs)
    return total


def _fetch_watch(git_dir: Path) -> Callable[[], str | None]:
    """A watch refusing a fetch once it has added more than MAX_FETCH_BYTES to `git_dir`."""
    before = _bytes_in(git_dir)

    def over() -> str | None:
        added = _bytes_in(git_dir) - before
        if added <= MAX_FETCH_BYTES:
            return None
        return f"the fetch wrote more than {_mib(added)}, over the {MAX_FETCH_BYTES // MiB} MiB limit of one fetch"

    return over


def _mib(size: int) -> str:
    return f"{size / MiB:.1f} MiB"


def _check_tree(folder: Path, commit: str) -> None:
    """Refuse the commit's tree when it holds more than MAX_REPOSITORY_FILES files or more than MAX_REPOSITORY_BYTES
    (read from the objects, streamed, before anything is checked out)."""
    files = size = 0
    pending = b""

    def count(chunk: bytes) -> None:
        nonlocal files, size, pending
        *records, pending = (pending + chunk).split(b"\0")
        for record in records:
            meta = record.split(b"\t", 1)[0].split()
            if len(meta) == 4 and meta[1] == b"blob":
                files += 1
                try:
                    size += int(meta[3])
                except ValueError as exc:
                    raise SourceError(f"git ls-tree gave a line kbctl cannot read: {exc}") from None
            elif len(meta) == 4 and meta[1] == b"commit":
                files += 1  # a submodule: an empty folder
        if files > MAX_REPOSITORY_FILES:
            raise SourceError(f"commit {commit[:12]} has more than {MAX_REPOSITORY_FILES} files")
        if size > MAX_REPOSITORY_BYTES:
            raise SourceError(
                f"commit {commit[:12]} holds files of {_mib(size)}, over the"
                f" {MAX_REPOSITORY_BYTES // MiB} MiB limit of a repository's checkout"
            )

    _git(folder, "ls-tree", "-r", "-l", "-z", "--full-tree", commit, on_output=count)


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
        try:
            commit = _fetch(folder, url, ref)
        except SourceError:
            # Whatever failed (a bound, a fetch stopped half-way with its temporary pack, a bad ref), nothing of it
            # stays in the cache: the next fetch starts afresh, as the first one did.
            shutil.rmtree(folder, ignore_errors=True)
            raise
    return Checkout(url=url, commit=commit, folder=folder)


def _fetch(folder: Path, url: str, ref: str | None) -> str:
    """Fetch and check out (the caller holds the folder's lock) within the bounds; the commit checked out."""
    if not (folder / ".git").is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        _git(folder, "init", "--quiet")
    (folder / ".git" / "info").mkdir(exist_ok=True)
    (folder / ".git" / "info" / "attributes").write_text(_ATTRIBUTES)
    fetch = ("fetch", "--quiet", "--depth", "1", "--no-tags", "--no-recurse-submodules")
    watch = _fetch_watch(folder / ".git")
    _git(folder, *fetch, "--", url, ref or "HEAD", watch=watch)
    if (reason := watch()) is not None:  # a fetch quicker than one look
        raise SourceError(reason)
    commit = _git(folder, "rev-parse", "--verify", "--end-of-options", "FETCH_HEAD^{commit}")
    if not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", commit):
        raise SourceError(f"git rev-parse gave {commit[:80]!r}, not a commit id")
    _check_tree(folder, commit)
    _git(folder, "checkout", "--quiet", "--force", "--detach", commit)
    _git(folder, "clean", "--quiet", "-ffdx")
    return commit


def read_repository(source: Source, cache: Path, guard: Guard) -> tuple[str, DocumentsRead]:
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
