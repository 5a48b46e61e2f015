"""Load manifests from files, directories and stdin: YAML with line numbers, every problem as file:line: field."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TextIO

from pydantic import ValidationError
from pydantic.alias_generators import to_snake

from kbctl.errors import ManifestError, ManifestProblem
from kbctl.inputs.bounds import UnreadableFile, manifest_limit, read_bounded_stream, read_bounded_text
from kbctl.inputs.problems import problems_from
from kbctl.inputs.yaml_lines import SyntaxProblem, YamlDocument, load_documents, locate
from kbctl.manifest.models import API_VERSION, KIND, KnowledgeBase, _schema_text, write_schema
from kbctl.manifest.sync import SYNC_KIND, Sync, _sync_schema_text, write_sync_schema

__all__ = [
    "LoadedManifest",
    "LoadedSync",
    "ManifestFile",
    "ManifestSet",
    "Settled",
    "SettledManifest",
    "SkippedFile",
    "load_manifest_set",
    "load_manifests",
    "parse_manifests",
    "read_manifest_files",
]

MANIFEST_SUFFIXES: Final = (".yaml", ".yml", ".json")
STDIN_PATH: Final = "<stdin>"
_IDENTITY_KEYS: Final = ("apiVersion", "api_version", "kind")
API_GROUP: Final = API_VERSION.split("/")[0]
LIST_API_VERSIONS: Final = ("v1", API_VERSION)  # a `List` of objects, as `kbctl get -o yaml` and kubectl print it
KUSTOMIZE_FILES: Final = ("kustomization.yaml", "kustomization.yml", "Kustomization")
_SHOWN_CHARS: Final = 80  # of a skipped object's apiVersion and kind, as the note names them


@dataclass(frozen=True)
class LoadedManifest:
    """A valid KnowledgeBase and where it came from."""

    kb: KnowledgeBase
    path: str
    line: int  # 1-based line where the YAML document's content starts


@dataclass(frozen=True)
class LoadedSync:
    """A valid Sync (a git folder a controller keeps applied) and where it came from."""

    sync: Sync
    path: str
    line: int


@dataclass(frozen=True)
class ManifestFile:
    """One manifest file (or stdin) as read: its text, or why it (or the folder it was listed from) could not
    be read."""

    path: str
    text: str | None
    problem: str | None = None


@dataclass(frozen=True)
class SettledManifest:
    """A KnowledgeBase of a file the store applied byte for byte and still serves (see `load_manifest_set`):
    known by name and line, not parsed."""

    name: str
    path: str
    line: int
    key: str


@dataclass(frozen=True)
class SkippedFile:
    """A file whose objects are not kbctl's (a Deployment, a kustomization.yaml beside the manifests in a GitOps
    folder): left alone, and named once so that a typo cannot hide."""

    path: str
    objects: tuple[str, ...]  # "apiVersion kind" of each object skipped, in file order

    @property
    def message(self) -> str:
        shown = ", ".join(dict.fromkeys(self.objects))
        count = len(self.objects)
        return (
            f"{self.path}: skipped {count} object{'s' if count > 1 else ''} that {'are' if count > 1 else 'is'}"
            f" not kbctl's ({shown})"
        )


@dataclass(frozen=True)
class ManifestSet:
    """What `-f` names: the manifests parsed, the ones settled (not parsed), every name in file order, and the
    files of other tools' objects that were skipped."""

    manifests: list[LoadedManifest]
    settled: list[SettledManifest]
    names: list[str]
    skipped: list[SkippedFile] = field(default_factory=list)
    syncs: list[LoadedSync] = field(default_factory=list)


Settled = Callable[[list[ManifestFile]], Mapping[int, tuple[str, Sequence[tuple[str, int]]]]]
"""Given the readable files (not stdin), the settled ones: index in that list -> (key, (name, line) of each
KnowledgeBase it holds)."""


# ---------------------------------------------------------------- documents → KnowledgeBases


def _describe(value: Any) -> str:
    """Name the YAML type of a plain value, with an article."""
    names = {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer"}
    return names.get(type(value), "a number" if isinstance(value, float) else type(value).__name__)


def _check_document(document: YamlDocument, file: str) -> tuple[KnowledgeBase | None, list[ManifestProblem]]:
    """Validate one document; return the KnowledgeBase, or None and its problems sorted by line."""
    data = document.data
    if not isinstance(data, dict):
        message = f"expected a mapping with apiVersion, kind, metadata and spec, got {_describe(data)}"
        return None, [ManifestProblem(file, document.line, "", message)]
    if not any(key in data for key in _IDENTITY_KEYS):
        # Not a KnowledgeBase, maybe not meant as YAML at all (a symlink to a password file): naming its
        # keys would echo its lines, so say only what makes a manifest, like kubectl does.
        return None, [
            ManifestProblem(file, document.line, key, "required field is missing") for key in ("apiVersion", "kind")
        ]
    problems: list[ManifestProblem] = []
    for key, expected in (("apiVersion", API_VERSION), ("kind", KIND)):
        spelling = next((s for s in (key, to_snake(key)) if s in data), None)
        if spelling is not None and data[spelling] != expected:
            _, line = locate(document, [(spelling,)])
            message = f"unsupported {key} {data[spelling]!r}, expected {expected}"
            problems.append(ManifestProblem(file, line, spelling, message))
    if problems:  # another kind of object: its fields would only add noise
        return None, problems
    try:
        return KnowledgeBase.model_validate(data), []
    except ValidationError as invalid:
        return None, problems_from(invalid, KnowledgeBase, document, file)


def _shown(value: Any) -> str:
    """A skipped object's apiVersion or kind as a note shows it: printable, and short."""
    text = "".join(c if c.isprintable() else "?" for c in str(value))
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 1] + "…"


def _foreign(data: Any) -> str | None:
    """ "apiVersion kind" of another tool's object (an apiVersion outside kbctl.dev and a kind that is not
    KnowledgeBase), else None: kbctl's own objects, and those that only look like them, are checked as such."""
    if not isinstance(data, dict):
        return None
    api_version, kind = data.get("apiVersion"), data.get("kind")
    if not isinstance(api_version, str) or not api_version or kind == KIND:
        return None
    if api_version.split("/")[0] == API_GROUP or (kind == "List" and api_version in LIST_API_VERSIONS):
        return None
    return f"{_shown(api_version)} {_shown(kind)}"


def _list_items(document: YamlDocument, file: str) -> list[YamlDocument] | ManifestProblem | None:
    """The objects of a `List` document, each as a document of its own (with its lines), a problem when its
    items are not a list, or None for any other document."""
    data = document.data
    if not (isinstance(data, dict) and data.get("kind") == "List" and data.get("apiVersion") in LIST_API_VERSIONS):
        return None
    items = data.get("items")
    if not isinstance(items, list):
        _, line = locate(document, [("items",)])
        return ManifestProblem(file, line, "items", f"expected a list of objects, got {_describe(items)}")
    tree = document.tree["items"]
    found: list[YamlDocument] = []
    for index, item in enumerate(items):
        _, line = locate(document, [("items",), index])
        found.append(YamlDocument(tree[index], data=item, offset=document.offset, line=line))
    return found


def _declared_name(document: YamlDocument) -> str | None:
    """metadata.name of a would-be KnowledgeBase document, even when the rest of it is invalid."""
    data = document.data
    if not isinstance(data, dict) or data.get("kind", KIND) != KIND:
        return None
    if data.get("apiVersion", data.get("api_version", API_VERSION)) != API_VERSION:
        return None
    metadata = data.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return name if isinstance(name, str) and name else None


class _Collector:
    """Accumulates manifests and problems across files, and spots duplicate names."""

    def __init__(self) -> None:
        self.manifests: list[LoadedManifest] = []
        self.settled: list[SettledManifest] = []
        self.names: list[str] = []
        self.problems: list[ManifestProblem] = []
        self.skipped: list[SkippedFile] = []
        self.syncs: list[LoadedSync] = []
        self._first: dict[str, tuple[str, int]] = {}

    def add_settled(self, file: str, key: str, kbs: Sequence[tuple[str, int]]) -> bool:
        """Take a settled file's knowledge bases as they are; False (nothing taken) when one of their names is
        defined already, so that parsing the file reports the duplicate with its line."""
        if any(name in self._first for name, _ in kbs):
            return False
        for name, line in kbs:
            self._first[name] = (file, line)
            self.settled.append(SettledManifest(name, file, line, key))
            self.names.append(name)
        return True

    def add(self, file: ManifestFile) -> int:
        """Parse one file as read; a file that could not be read is a problem (counted as one document)."""
        if file.text is None:
            self.problems.append(ManifestProblem(file.path, None, "", file.problem or "cannot read"))
            return 1
        return self.add_text(file.text, file.path)

    def add_text(self, text: str, file: str) -> int:
        """Parse every document of text (the objects of a `List` one by one; other tools' objects skipped, and
        the file named once for them); return how many of kbctl's documents it held."""
        if os.path.basename(file) in KUSTOMIZE_FILES:
            self.skipped.append(SkippedFile(file, ("kustomize configuration",)))
            return 0
        count = 0
        skipped: list[str] = []
        for item in load_documents(text, known_keys=_IDENTITY_KEYS):
            if isinstance(item, SyntaxProblem):
                count += 1
                self.problems.append(ManifestProblem(file, item.line, "", item.message))
                continue
            listed = _list_items(item, file)
            if isinstance(listed, ManifestProblem):
                count += 1
                self.problems.append(listed)
                continue
            for document in listed if listed is not None else [item]:
                foreign = _foreign(document.data)
                if foreign is not None:
                    skipped.append(foreign)
                else:
                    count += 1
                    self._add_document(document, file)
        if skipped:
            self.skipped.append(SkippedFile(file, tuple(skipped)))
        return count

    def _add_document(self, item: YamlDocument, file: str) -> None:
        """Check one document of kbctl's and take its KnowledgeBase (or Sync), or its problems."""
        data = item.data
        if isinstance(data, dict) and data.get("kind") == SYNC_KIND and data.get("apiVersion") == API_VERSION:
            try:
                sync = Sync.model_validate(data)
            except ValidationError as invalid:
                self.problems.extend(problems_from(invalid, Sync, item, file))
                return
            if any(s.sync.name == sync.name for s in self.syncs):
                _, line = locate(item, [("metadata",), ("name",)])
                self.problems.append(ManifestProblem(file, line, "metadata.name", f"duplicate Sync name {sync.name!r}"))
                return
            self.syncs.append(LoadedSync(sync, file, item.line))
            return
        kb, problems = _check_document(item, file)
        name = kb.name if kb is not None else _declared_name(item)
        if name is not None and name in self._first:
            first_file, first_line = self._first[name]
            _, line = locate(item, [("metadata",), ("name",)])
            message = f"duplicate {KIND} name {name!r} (also defined at {first_file}:{first_line})"
            problems = sorted(
                [*problems, ManifestProblem(file, line, "metadata.name", message)],
                key=lambda p: p.line or 0,
            )
        elif name is not None:
            self._first[name] = (file, item.line)
        self.problems.extend(problems)
        if kb is not None and not problems:
            base = os.getcwd() if file == STDIN_PATH else os.path.dirname(os.path.abspath(file))
            status = data.get("status") if isinstance(data, dict) else None
            hint = status.get("appliedFrom") if isinstance(status, dict) and kb.reads_files else None
            self.manifests.append(LoadedManifest(kb=kb.located(base, applied_from=hint), path=file, line=item.line))
            self.names.append(kb.name)

    def no_manifests(self, where: str) -> None:
        self.problems.append(ManifestProblem(where, None, "", "no manifests found"))

    def result(self) -> ManifestSet:
        if self.problems:
            raise ManifestError(self.problems)
        return ManifestSet(self.manifests, self.settled, self.names, self.skipped, self.syncs)


def _read_file(file: str) -> ManifestFile:
    """Read one manifest file: only a regular file (symlinks followed) of at most MAX_FILE_BYTES (or
    KBCTL_MAX_MANIFEST_MIB)."""
    try:
        return ManifestFile(file, read_bounded_text(file, manifest_limit(), expected="a manifest file"))
    except UnreadableFile as error:
        return ManifestFile(file, None, str(error))


def _read_stream(stream: TextIO) -> ManifestFile:
    """Read stdin, at most MAX_FILE_BYTES (or KBCTL_MAX_MANIFEST_MIB) of it."""
    try:
        return ManifestFile(STDIN_PATH, read_bounded_stream(stream, manifest_limit()))
    except UnreadableFile as error:
        return ManifestFile(STDIN_PATH, None, str(error))


def _manifest_files(directory: str, recursive: bool) -> list[str]:
    """The *.yaml, *.yml and *.json files of directory, sorted by name.

    When recursive, subdirectories are walked in place (symlinked ones are not followed, like kubectl).
    """
    files: list[str] = []
    # A stack of directory listings rather than recursion: a tree nested thousands deep is no RecursionError.
    listings = [iter(_sorted_entries(directory))]
    while listings:
        entry = next(listings[-1], None)
        if entry is None:
            listings.pop()
        elif entry.is_dir():
            if recursive and not entry.is_symlink():
                listings.append(iter(_sorted_entries(entry.path)))
        elif entry.name.endswith(MANIFEST_SUFFIXES):
            files.append(entry.path)
    return files


def _sorted_entries(directory: str) -> list[os.DirEntry[str]]:
    with os.scandir(directory) as scan:
        return sorted(scan, key=lambda entry: entry.name)


def parse_manifests(text: str, path: str) -> list[LoadedManifest]:
    """Parse the KnowledgeBase documents of one YAML (or JSON) text; path only labels the problems.

    Raises ManifestError listing every problem. Text without documents gives an empty list.
    """
    collector = _Collector()
    collector.add_text(text, path)
    return collector.result().manifests


ManifestFiles = list[tuple[str, list[ManifestFile]]]
"""Each `-f` argument (STDIN_PATH for "-") with the files read for it, in order."""


def read_manifest_files(paths: Sequence[str], *, recursive: bool = False, stdin: TextIO | None = None) -> ManifestFiles:
    """Read what `-f` names, like `kubectl apply -f`: files, directories (recursive: with subdirectories), "-".
    A file or folder that cannot be read is kept with its problem, reported by `load_manifest_set`."""
    if isinstance(paths, str):
        raise TypeError("paths must be a sequence of paths, not a single string")
    read: ManifestFiles = []
    for path in paths:
        if path == "-":
            read.append((STDIN_PATH, [_read_stream(stdin if stdin is not None else sys.stdin)]))
        elif os.path.isdir(path):
            try:
                names = _manifest_files(path, recursive)
            except OSError as error:
                read.append((path, [ManifestFile(path, None, f"cannot read: {error.strerror}")]))
                continue
            read.append((path, [_read_file(name) for name in names]))
        else:
            read.append((path, [_read_file(path)]))
    return read


def load_manifest_set(files: ManifestFiles, *, settled: Settled | None = None) -> ManifestSet:
    """Parse the files read (every problem in every file collected first, then raised as one ManifestError in
    file order). `settled` names the files not to parse, with the knowledge bases each holds: the caller
    vouches that parsing them would give knowledge bases the store already serves as they are."""
    readable = [f for _, group in files for f in group if f.text is not None and f.path != STDIN_PATH]
    found = settled(readable) if settled is not None and readable else {}
    by_file = {id(readable[i]): entry for i, entry in found.items()}
    collector = _Collector()
    for where, group in files:
        count = 0
        for file in group:
            entry = by_file.get(id(file))
            if entry is not None and collector.add_settled(file.path, entry[0], entry[1]):
                count += len(entry[1])
            else:
                count += collector.add(file)
        if not count:
            collector.no_manifests(where)
    return collector.result()


def load_manifests(
    paths: Sequence[str], *, recursive: bool = False, stdin: TextIO | None = None
) -> list[LoadedManifest]:
    """Load manifests like `kubectl apply -f`: files, directories (recursive: with subdirectories), "-".

    Every problem in every file is collected first, then raised as one ManifestError in file order.
    """
    return load_manifest_set(read_manifest_files(paths, recursive=recursive, stdin=stdin)).manifests


def _main(argv: Sequence[str] | None = None) -> int:
    """Print the JSON schema of a kind (--kind, default KnowledgeBase), or write it with --write-schema PATH."""
    parser = argparse.ArgumentParser(prog="python -m kbctl.manifest", description=_main.__doc__)
    parser.add_argument("--write-schema", metavar="PATH", help="write the schema to PATH instead of stdout")
    parser.add_argument("--kind", choices=(KIND, SYNC_KIND), default=KIND, help="the kind (default: %(default)s)")
    args = parser.parse_args(argv)
    write, text = (write_sync_schema, _sync_schema_text) if args.kind == SYNC_KIND else (write_schema, _schema_text)
    if args.write_schema:
        write(args.write_schema)
    else:
        sys.stdout.write(text())
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
