"""Kustomize overlays in a Sync's folder: a folder holding a kustomization is rendered by `kustomize build` (or
`kubectl kustomize`), and its output is read as the folder's manifests.

A repository is hostile input, and so is every kustomization in it. Before the program runs, each kustomization the
folder's reaches (its `resources`, `bases` and `components`, folder by folder) is read with the bounds of a manifest,
and every path it names must be a file or folder of the checkout: a remote base (a URL, `github.com/org/repo`, an
ssh address), a path leading out of the checkout (`..`, a symlink) or a Helm chart is refused, so kustomize never
fetches anything. The program itself gets nothing of the repository on its command line (it runs in the folder, on
`.`, after `--`), an environment of its own (an empty HOME, no PATH, so no git, helm or plugin to run; a proxy that
reaches nothing, so no HTTP), a time limit and a limit on what it prints (a manifest file's).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from kbctl.errors import SourceError
from kbctl.inputs.bounds import UnreadableFile, format_size, manifest_limit, read_bounded_text
from kbctl.inputs.yaml_lines import SyntaxProblem, load_documents
from kbctl.sources._process import error_text, finish
from kbctl.userconfig import redact

__all__ = [
    "EXTERNAL_PROGRAMS",
    "KUSTOMIZATION_FILES",
    "KUSTOMIZE_TIMEOUT",
    "kustomization_in",
    "render_kustomization",
]

KUSTOMIZATION_FILES: Final = ("kustomization.yaml", "kustomization.yml", "Kustomization")
# The programs that render an overlay, the first one installed used: kustomize itself, or kubectl's copy of it.
EXTERNAL_PROGRAMS: Final = ("kustomize", "kubectl")
KUSTOMIZE_TIMEOUT: Final = 60.0  # seconds one rendering may take
MAX_KUSTOMIZATIONS: Final = 100  # kustomizations one rendering may reach (bases of bases)
# A proxy on a port nothing listens on: any HTTP request of the program fails at once (remote files, remote bases).
_NO_NETWORK: Final = "http://127.0.0.1:9"
# Fields whose entries name files or folders of the repository (a string with a line break is an inline patch).
_PATH_LISTS: Final = (
    "resources",
    "bases",
    "components",
    "crds",
    "configurations",
    "generators",
    "transformers",
    "validators",
    "patchesStrategicMerge",
)
_ENTRY_PATHS: Final = ("patches", "patchesJson6902", "replacements")  # entries with a `path`
_GENERATORS: Final = ("configMapGenerator", "secretGenerator")  # entries with `files`, `envs`, `env`
_REFUSED: Final = ("helmCharts", "helmChartInflationGenerator", "helmGlobals")
_REMOTE: Final = re.compile(r"^[a-z][a-z0-9+.-]*://|^[^/\s]+@[^/\s]+:|^(github\.com|gitlab\.com|bitbucket\.org)/", re.I)
_KLOG_PREFIX: Final = re.compile(r"^[EWIF]\d{4} [\d:.]+\s+\d+ [^\]]*\] ")


def kustomization_in(folder: Path) -> Path | None:
    """The kustomization file `folder` holds (a regular file), None when it holds none."""
    for name in KUSTOMIZATION_FILES:
        candidate = folder / name
        if candidate.is_file():
            return candidate
    return None


def render_kustomization(folder: Path, root: Path) -> str:
    """The output of `kustomize build` of `folder`, a folder of the checkout `root` holding a kustomization; SourceError
    when a kustomization names anything outside the checkout (see the module docstring), when neither program is
    installed, or when it fails, takes longer than KUSTOMIZE_TIMEOUT or prints more than a manifest file may hold."""
    root = root.resolve()
    _check_local(folder.resolve(), root)
    program = next((found for name in EXTERNAL_PROGRAMS if (found := shutil.which(name)) is not None), None)
    if program is None:
        raise SourceError(
            f"{_shown(folder, root)} holds a kustomization: rendering it needs the kustomize program (or kubectl, "
            "whose `kubectl kustomize` is the same), and neither is installed"
        )
    subcommand = "build" if Path(program).name == "kustomize" else "kustomize"
    with tempfile.TemporaryDirectory(prefix="kbctl-kustomize-") as home:
        env = {"HOME": home, "PATH": "", "LC_ALL": "C", "KUBECONFIG": os.devnull}
        env |= {name: _NO_NETWORK for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy")}
        return _run([program, subcommand, "--", "."], folder, env, f"{Path(program).name} {subcommand}")


def _shown(path: Path, root: Path) -> str:
    """`path` as the repository names it."""
    return str(path.relative_to(root)) if path.is_relative_to(root) and path != root else "."


def _check_local(folder: Path, root: Path) -> None:
    """Refuse (SourceError) a kustomization reachable from `folder` that names anything but the checkout's files."""
    seen: set[Path] = set()
    pending = [folder]
    while pending:
        here = pending.pop()
        if here in seen:
            continue
        seen.add(here)
        if len(seen) > MAX_KUSTOMIZATIONS:
            raise SourceError(f"{_shown(folder, root)}: more than {MAX_KUSTOMIZATIONS} kustomizations to render")
        file = kustomization_in(here)
        if file is None:
            continue  # a folder of plain manifests: kustomize refuses it itself
        shown = _shown(file, root)
        if not file.resolve().is_relative_to(root):  # a symlink: kbctl and kustomize would read what it leads to
            raise SourceError(f"{shown}: leads out of the repository")
        for field, entry in _paths_named(_read_kustomization(file, shown), shown):
            target = _local(here, root, entry, f"{shown}: {field}")
            if field in ("resources", "bases", "components") and target.is_dir():
                pending.append(target)


def _read_kustomization(file: Path, shown: str) -> dict[str, Any]:
    try:
        text = read_bounded_text(file, manifest_limit(), expected="a kustomization file")
    except UnreadableFile as exc:
        raise SourceError(f"{shown}: {exc}") from None
    documents = list(load_documents(text))
    if len(documents) != 1 or isinstance(documents[0], SyntaxProblem) or not isinstance(documents[0].data, dict):
        problem = next((d for d in documents if isinstance(d, SyntaxProblem)), None)
        why = f"line {problem.line}: {problem.message}" if problem else "not one YAML mapping"
        raise SourceError(f"{shown}: cannot read it as a kustomization: {why}")
    return documents[0].data


def _paths_named(kustomization: dict[str, Any], shown: str) -> Iterator[tuple[str, str]]:
    """(field, path) of every file or folder a kustomization names."""
    for field in _REFUSED:
        if field in kustomization:
            raise SourceError(f"{shown}: {field}: Helm charts are not rendered (kbctl runs kustomize without Helm)")
    for field in _PATH_LISTS:
        for entry in _listed(kustomization, field, shown):
            if isinstance(entry, str) and "\n" not in entry:
                yield field, entry
    for field in _ENTRY_PATHS:
        for entry in _listed(kustomization, field, shown):
            if isinstance(entry, dict) and isinstance(entry.get("path"), str):
                yield field, entry["path"]
    for field in _GENERATORS:
        for entry in _listed(kustomization, field, shown):
            if not isinstance(entry, dict):
                continue
            named = [*entry.get("files", []), *entry.get("envs", []), *([entry["env"]] if "env" in entry else [])]
            for item in named:
                if isinstance(item, str):
                    yield field, item.split("=", 1)[-1]  # `key=path` names a file too
    openapi = kustomization.get("openapi")
    if isinstance(openapi, dict) and isinstance(openapi.get("path"), str):
        yield "openapi", openapi["path"]


def _listed(kustomization: dict[str, Any], field: str, shown: str) -> list[Any]:
    value = kustomization.get(field, [])
    if not isinstance(value, list):
        raise SourceError(f"{shown}: {field}: must be a list")
    return value


def _local(here: Path, root: Path, entry: str, where: str) -> Path:
    """The file or folder of the checkout `entry` names from `here`; SourceError for anything else."""
    if _REMOTE.search(entry):
        raise SourceError(f"{where}: {redact(entry)[:200]!r} is remote: kbctl renders only the repository's own files")
    target = (here / entry).resolve()
    if not target.is_relative_to(root):
        raise SourceError(f"{where}: {entry[:200]!r} leads out of the repository")
    if not target.exists():
        # kustomize would try a path that is not there as a remote address (`github.com/org/repo//path`)
        raise SourceError(f"{where}: {entry[:200]!r} is no file or folder of the repository")
    return target


def _run(argv: list[str], folder: Path, env: dict[str, str], name: str) -> str:
    """The program's output, read within KUSTOMIZE_TIMEOUT and a manifest file's size; SourceError otherwise."""
    limit = manifest_limit()
    out = bytearray()

    def take(chunk: bytes) -> None:
        out.extend(chunk)
        if len(out) > limit:
            raise SourceError(f"{name} printed more than {format_size(limit)}, a manifest file's limit")

    try:
        process = subprocess.Popen(
            argv,
            cwd=folder,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # stopping it stops what it started
        )
    except OSError as exc:
        raise SourceError(f"{name} could not be started: {exc.strerror}") from None
    returncode, _, stderr = finish(process, name=name, timeout=KUSTOMIZE_TIMEOUT, on_output=take)
    if returncode != 0:
        raise SourceError(f"{name} failed: {_error_line(stderr, returncode)}")
    return out.decode("utf-8", errors="replace")


def _error_line(stderr: bytes, returncode: int) -> str:
    """The program's first error line (without klog's prefix), redacted and cut."""
    lines = [line.strip() for line in stderr.decode(errors="replace").splitlines() if line.strip()]
    if not lines:
        return f"exit code {returncode}"
    return error_text(_KLOG_PREFIX.sub("", lines[0]).removeprefix("Error: "))
