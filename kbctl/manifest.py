"""Define the KnowledgeBase manifest models and load, validate and locate manifests from files and stdin."""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import re
import sys
import types
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Final, Literal, TextIO, Union, get_args, get_origin
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel, to_snake
from pydantic_core import ErrorDetails, InitErrorDetails

from kbctl._yaml_lines import Document, SyntaxProblem, load_documents, locate
from kbctl.errors import ManifestError, ManifestProblem

__all__ = [
    "API_VERSION",
    "DEFAULT_MODEL",
    "KIND",
    "Chunking",
    "Embedding",
    "KnowledgeBase",
    "LoadedManifest",
    "Metadata",
    "Retrieval",
    "Source",
    "Spec",
    "json_schema",
    "load_manifests",
    "parse_manifests",
    "write_schema",
]

ApiVersion = Literal["kbctl.dev/v1alpha1"]
Kind = Literal["KnowledgeBase"]
API_VERSION: Final[ApiVersion] = "kbctl.dev/v1alpha1"  # mypy checks these two stay in step with the types
KIND: Final[Kind] = "KnowledgeBase"
DEFAULT_MODEL: Final = "local/all-MiniLM-L6-v2"

JSON_SCHEMA_DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"
MANIFEST_SUFFIXES: Final = (".yaml", ".yml", ".json")
STDIN_PATH: Final = "<stdin>"

_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_SOURCE_NAME = r"^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$"
_LABEL_NAME = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_NAME_MAX = 63
_LABEL_CHARS = "letters, digits, '-', '_' and '.', starting and ending with a letter or digit"

StrictInt = Annotated[int, Strict()]
StrictFloat = Annotated[float, Strict()]  # strict still takes ints; it refuses strings and booleans


def _check_name(value: str, pattern: str, charset: str) -> str:
    """Validate a name against pattern and the 63-character limit, with a message naming charset."""
    if not value:
        raise ValueError("must not be empty")
    if len(value) > _NAME_MAX:
        raise ValueError(f"must be at most {_NAME_MAX} characters")
    if not re.match(pattern, value):
        raise ValueError(f"must consist of {charset}, and start and end with a letter or digit")
    return value


def _check_label_key(key: str) -> str:
    """Validate a Kubernetes-style label key: an optional DNS-subdomain prefix and '/', then a name."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not re.match(_DNS_SUBDOMAIN, prefix)):
        raise ValueError(
            "invalid label key: the prefix before '/' must be a DNS subdomain "
            "(lowercase letters, digits, '-' and '.', at most 253 characters)"
        )
    if not name or len(name) > _NAME_MAX or not re.match(_LABEL_NAME, name):
        raise ValueError(f"invalid label key: the name must be 1-{_NAME_MAX} characters of {_LABEL_CHARS}")
    return key


def _check_label_value(value: str) -> str:
    """Validate a Kubernetes-style label value: empty, or a name of at most 63 characters."""
    if value and (len(value) > _NAME_MAX or not re.match(_LABEL_NAME, value)):
        raise ValueError(f"invalid label value: must be empty or 1-{_NAME_MAX} characters of {_LABEL_CHARS}")
    return value


LabelKey = Annotated[str, AfterValidator(_check_label_key)]
LabelValue = Annotated[str, AfterValidator(_check_label_value)]


def _check_url(url: str) -> str:
    """Validate a source URL: absolute http(s), with a host, without credentials."""
    if not url.strip():
        raise ValueError("must not be empty")
    if any(ch.isspace() or ord(ch) < 0x20 for ch in url):
        raise ValueError("URL must not contain whitespace or control characters")
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises ValueError for a bad port
    except ValueError as error:
        raise ValueError(f"URL is malformed: {error}") from None
    if not parts.scheme:
        raise ValueError("URL must start with http:// or https://")
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"URL scheme must be http or https, got {parts.scheme!r}")
    if "@" in parts.netloc:
        raise ValueError("URL must not contain credentials")
    if not parts.hostname:
        raise ValueError("URL must have a host")
    return url


class _Model(BaseModel):
    """Shared configuration: strict keys, snake_case in Python, camelCase in YAML, immutable."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, alias_generator=to_camel, frozen=True)


class Metadata(_Model):
    """Identity of a knowledge base."""

    name: str = Field(
        description="DNS-1123 label: lowercase letters, digits and '-', at most 63 characters.",
        json_schema_extra={"pattern": _DNS_LABEL, "maxLength": _NAME_MAX},
    )
    labels: dict[LabelKey, LabelValue] = Field(
        default_factory=dict, description="Kubernetes-style labels (string keys and values)."
    )

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        return _check_name(value, _DNS_LABEL, "lowercase letters, digits and '-'")


class Source(_Model):
    """One document to index: fetched from a URL or given inline as text (exactly one of them)."""

    name: str = Field(
        description="Unique within the knowledge base: lowercase letters, digits, '-', '_' and '.'.",
        json_schema_extra={"pattern": _SOURCE_NAME, "maxLength": _NAME_MAX},
    )
    url: str | None = Field(
        default=None, description="An http(s) URL without credentials.", json_schema_extra={"format": "uri"}
    )
    text: str | None = Field(default=None, description="The document inline.")
    format: Literal["markdown", "text"] = Field(default="markdown", description="How to split the text.")

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        return _check_name(value, _SOURCE_NAME, "lowercase letters, digits, '-', '_' and '.'")

    @field_validator("url")
    @classmethod
    def _valid_url(cls, value: str | None) -> str | None:
        return None if value is None else _check_url(value)

    @field_validator("text")
    @classmethod
    def _valid_text(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be empty or whitespace-only")
        return value

    @model_validator(mode="after")
    def _url_xor_text(self) -> Source:
        if (self.url is None) == (self.text is None):
            raise ValueError("set exactly one of url or text")
        return self

    @property
    def kind(self) -> Literal["text", "url"]:
        """Whether this source is inline text or a URL to fetch."""
        return "text" if self.text is not None else "url"


class Chunking(_Model):
    """How documents are split into chunks before embedding."""

    max_chars: StrictInt = Field(
        default=1200, ge=100, le=100_000, description="Maximum characters per chunk."
    )
    overlap_chars: StrictInt = Field(
        default=150, ge=0, validate_default=True, description="Characters shared by neighbouring chunks."
    )

    @field_validator("overlap_chars")
    @classmethod
    def _overlap_below_max(cls, value: int, info: ValidationInfo) -> int:
        max_chars = info.data.get("max_chars")
        if max_chars is not None and value >= max_chars:
            raise ValueError(f"must be less than maxChars ({max_chars})")
        return value


class Retrieval(_Model):
    """How chunks are retrieved for a query."""

    top_k: StrictInt = Field(default=8, ge=1, le=200, description="How many chunks to return at most.")
    similarity_threshold: StrictFloat = Field(
        default=0.2, ge=-1.0, le=1.0, allow_inf_nan=False, description="Minimum cosine similarity."
    )
    max_context_tokens: StrictInt = Field(
        default=1500, ge=1, description="Token budget for the returned context."
    )


class Embedding(_Model):
    """Which embedding model turns chunks into vectors."""

    model: str = Field(default=DEFAULT_MODEL, description="'provider/name', e.g. local/all-MiniLM-L6-v2.")

    @field_validator("model")
    @classmethod
    def _provider_slash_name(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        provider, slash, name = value.partition("/")
        if not slash or not provider or not name or any(ch.isspace() for ch in value):
            raise ValueError(f"must be of the form provider/name, got {value!r}")
        return value


class Spec(_Model):
    """The desired state of a knowledge base."""

    description: str = Field(default="", description="Free text for humans.")
    sources: list[Source] = Field(min_length=1, description="The documents to index; names must be unique.")
    chunking: Chunking = Field(default_factory=Chunking)
    retrieval: Retrieval = Field(default_factory=Retrieval)
    embedding: Embedding = Field(default_factory=Embedding)

    @field_validator("sources", mode="wrap")
    @classmethod
    def _unique_names(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> list[Source]:
        # Wrapping (not "after") so duplicates are reported even when some source is invalid too.
        errors = _duplicate_source_names(value)
        try:
            sources: list[Source] = handler(value)
        except ValidationError as invalid:
            errors = [*errors, *(_reraisable(error) for error in invalid.errors())]
        if errors:  # a ValidationError raised here keeps each error's own location, under spec.sources
            raise ValidationError.from_exception_data(cls.__name__, errors)
        return sources


def _duplicate_source_names(sources: Any) -> list[InitErrorDetails]:
    """An error at spec.sources[i].name for each source reusing an earlier source's name."""
    first: dict[str, int] = {}
    errors: list[InitErrorDetails] = []
    for index, source in enumerate(sources if isinstance(sources, list) else []):
        name = (
            source.name
            if isinstance(source, Source)
            else source.get("name")
            if isinstance(source, dict)
            else None
        )
        if not isinstance(name, str):
            continue
        if name in first:
            message = f"duplicate source name {name!r} (also spec.sources[{first[name]}])"
            errors.append(
                InitErrorDetails(
                    type="value_error", loc=(index, "name"), input=name, ctx={"error": ValueError(message)}
                )
            )
        first.setdefault(name, index)
    return errors


def _reraisable(error: ErrorDetails) -> InitErrorDetails:
    """An error caught from pydantic, in the form ValidationError.from_exception_data takes back."""
    details = InitErrorDetails(type=error["type"], loc=error["loc"], input=error["input"])
    if "ctx" in error:
        details["ctx"] = error["ctx"]
    return details


class KnowledgeBase(_Model):
    """A retrieval knowledge base, declared like a Kubernetes object."""

    api_version: ApiVersion
    kind: Kind
    metadata: Metadata
    spec: Spec

    @property
    def name(self) -> str:
        """The knowledge base's name (metadata.name)."""
        return self.metadata.name

    def to_manifest(self) -> dict[str, Any]:
        """The full manifest as plain JSON-able data, camelCase keys, defaults filled in."""
        return self.model_dump(by_alias=True, mode="json")

    def spec_hash(self) -> str:
        """SHA-256 (hex) of the spec as canonical JSON, defaults filled in: equal specs hash equal."""
        spec = self.spec.model_dump(by_alias=True, mode="json")
        canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class LoadedManifest:
    """A valid KnowledgeBase and where it came from."""

    kb: KnowledgeBase
    path: str
    line: int  # 1-based line where the YAML document's content starts


# ---------------------------------------------------------------- JSON schema


def json_schema() -> dict[str, Any]:
    """The JSON schema of a KnowledgeBase manifest (for editors and CI), deterministic."""
    schema = KnowledgeBase.model_json_schema(by_alias=True)
    schema.pop("title", None)
    return {"$schema": JSON_SCHEMA_DIALECT, "title": f"{KIND} ({API_VERSION})", **schema}


def _schema_text() -> str:
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"


def write_schema(path: str | Path) -> None:
    """Write json_schema() to path as indented JSON with a trailing newline."""
    Path(path).write_text(_schema_text(), encoding="utf-8")


# ---------------------------------------------------------------- pydantic errors → problems


def _unwrap(annotation: Any) -> Any:
    """Strip Annotated[...] and Optional from a type annotation."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            args = [a for a in get_args(annotation) if a is not type(None)]
            if len(args) != 1:
                return annotation
            annotation = args[0]
        else:
            return annotation


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


@dataclass
class _ErrorPath:
    """A pydantic error location resolved against the models."""

    steps: list[tuple[str, ...] | int]  # key spellings to look up in the YAML (alias first), or indices
    parts: list[tuple[str, str | int]]  # ("field"|"key"|"index", default rendering)
    container: Any  # the type holding the last step (a model class for unknown fields)
    leaf: Any  # the type of the last step, None when unknown
    is_key: bool  # the error is about a mapping key itself, not its value


def _resolve(loc: tuple[int | str, ...]) -> _ErrorPath:
    """Walk loc through the models from KnowledgeBase, learning aliases, dict keys and leaf types."""
    path = _ErrorPath(steps=[], parts=[], container=None, leaf=KnowledgeBase, is_key=False)
    for element in loc:
        if element == "[key]":
            path.is_key = True
            continue
        current = _unwrap(path.leaf)
        path.container = current
        if _is_model(current) and isinstance(element, str):
            fields = current.model_fields
            name = next((n for n, f in fields.items() if element in (n, f.alias)), None)
            if name is None:
                path.steps.append((element,))
                path.parts.append(("field", element))
                path.leaf = None
            else:
                alias = fields[name].alias or name
                path.steps.append((alias, name) if alias != name else (name,))
                path.parts.append(("field", alias))
                path.leaf = fields[name].annotation
        elif get_origin(current) is dict:
            path.steps.append((str(element),))
            path.parts.append(("key", str(element)))
            path.leaf = get_args(current)[1]
        elif isinstance(element, int):
            path.steps.append(element)
            path.parts.append(("index", element))
            path.leaf = get_args(current)[0] if get_origin(current) is list else None
        else:
            path.steps.append((element,))
            path.parts.append(("field", element))
            path.leaf = None
    path.leaf = _unwrap(path.leaf)
    return path


def _render(parts: Sequence[tuple[str, str | int]]) -> str:
    """Render a field path like spec.sources[1].url or metadata.labels["app"]."""
    text = ""
    for kind, value in parts:
        if kind == "index":
            text += f"[{value}]"
        elif kind == "key":
            text += f"[{json.dumps(value, ensure_ascii=False)}]"
        else:
            text += f".{value}" if text else str(value)
    return text


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


_SIMPLE_MESSAGES: Final = {
    "missing": "required field is missing",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "finite_number": "must be a finite number",
    "string_type": "must be a string",
    "bool_type": "must be a boolean",
    "bool_parsing": "must be a boolean",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "dict_type": "must be a mapping",
    "list_type": "must be a list",
}


def _message(error: ErrorDetails, path: _ErrorPath) -> str:
    """A short human message for one pydantic error."""
    kind = error["type"]
    ctx: dict[str, Any] = dict(error.get("ctx") or {})
    if kind in _SIMPLE_MESSAGES:
        return _SIMPLE_MESSAGES[kind]
    if kind == "extra_forbidden":
        key = str(error["loc"][-1])
        fields = path.container.model_fields if _is_model(path.container) else {}
        allowed = [f.alias or n for n, f in fields.items()]
        close = difflib.get_close_matches(key, allowed, n=1)
        return f"unknown field {key!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
    if kind == "literal_error":
        choices = get_args(path.leaf) if get_origin(path.leaf) is Literal else ()
        return "must be one of: " + (", ".join(map(str, choices)) if choices else str(ctx.get("expected")))
    bounds = {"greater_than_equal": ("at least", "ge"), "greater_than": ("greater than", "gt")}
    bounds |= {"less_than_equal": ("at most", "le"), "less_than": ("less than", "lt")}
    if kind in bounds:
        words, key = bounds[kind]
        return f"must be {words} {ctx[key]}"
    if kind in ("too_short", "too_long"):
        words, key = ("at least", "min_length") if kind == "too_short" else ("at most", "max_length")
        return f"must have {words} {_plural(ctx[key], 'item')}"
    if kind in ("string_too_short", "string_too_long"):
        words, key = ("at least", "min_length") if kind == "string_too_short" else ("at most", "max_length")
        return f"must be {words} {_plural(ctx[key], 'character')}"
    if kind in ("value_error", "assertion_error") and "error" in ctx:
        return str(ctx["error"])
    return error["msg"]


def _problem(error: ErrorDetails, document: Document, file: str) -> ManifestProblem:
    """Turn one pydantic error into a problem with the field as written and its line in the file."""
    path = _resolve(error["loc"])
    want_key = path.is_key or error["type"] == "extra_forbidden"
    written, line = locate(document, path.steps, want_key=want_key)
    parts = [
        (kind, value if seen is None else seen)
        for (kind, value), seen in zip(path.parts, written, strict=True)
    ]
    return ManifestProblem(file, line, _render(parts), _message(error, path))


# ---------------------------------------------------------------- documents → KnowledgeBases


def _describe(value: Any) -> str:
    """Name the YAML type of a plain value, with an article."""
    names = {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer"}
    return names.get(type(value), "a number" if isinstance(value, float) else type(value).__name__)


def _check_document(document: Document, file: str) -> tuple[KnowledgeBase | None, list[ManifestProblem]]:
    """Validate one document; return the KnowledgeBase, or None and its problems sorted by line."""
    data = document.data
    if not isinstance(data, dict):
        message = f"expected a mapping with apiVersion, kind, metadata and spec, got {_describe(data)}"
        return None, [ManifestProblem(file, document.line, "", message)]
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
        problems = [_problem(error, document, file) for error in invalid.errors(include_url=False)]
        return None, sorted(problems, key=lambda p: p.line or 0)


def _declared_name(document: Document) -> str | None:
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
        self.problems: list[ManifestProblem] = []
        self._first: dict[str, tuple[str, int]] = {}

    def add_text(self, text: str, file: str) -> int:
        """Parse every document of text; return how many non-empty documents it held."""
        count = 0
        for item in load_documents(text):
            count += 1
            if isinstance(item, SyntaxProblem):
                self.problems.append(ManifestProblem(file, item.line, "", item.message))
                continue
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
                self.manifests.append(LoadedManifest(kb=kb, path=file, line=item.line))
        return count

    def add_file(self, file: str) -> int:
        """Read and parse one file; a file that cannot be read is a problem (counted as one document)."""
        try:
            with open(file, encoding="utf-8-sig") as handle:
                text = handle.read()
        except FileNotFoundError:
            self.problems.append(ManifestProblem(file, None, "", "no such file or directory"))
            return 1
        except UnicodeDecodeError:
            self.problems.append(ManifestProblem(file, None, "", "cannot read: not valid UTF-8"))
            return 1
        except OSError as error:
            self.problems.append(ManifestProblem(file, None, "", f"cannot read: {error.strerror or error}"))
            return 1
        return self.add_text(text, file)

    def no_manifests(self, where: str) -> None:
        self.problems.append(ManifestProblem(where, None, "", "no manifests found"))

    def result(self) -> list[LoadedManifest]:
        if self.problems:
            raise ManifestError(self.problems)
        return self.manifests


def _manifest_files(directory: str, recursive: bool) -> list[str]:
    """The *.yaml, *.yml and *.json files of directory sorted by name, subdirectories (not symlinked
    ones) walked in place when recursive."""
    files: list[str] = []
    with os.scandir(directory) as scan:
        entries = sorted(scan, key=lambda entry: entry.name)
    for entry in entries:
        full = os.path.join(directory, entry.name)
        if entry.is_dir():
            if recursive and not entry.is_symlink():
                files.extend(_manifest_files(full, recursive))
        elif entry.name.endswith(MANIFEST_SUFFIXES):
            files.append(full)
    return files


def parse_manifests(text: str, path: str) -> list[LoadedManifest]:
    """Parse the KnowledgeBase documents of one YAML (or JSON) text; path only labels the problems.

    Raises ManifestError listing every problem. Text without documents gives an empty list.
    """
    collector = _Collector()
    collector.add_text(text, path)
    return collector.result()


def load_manifests(
    paths: Sequence[str], *, recursive: bool = False, stdin: TextIO | None = None
) -> list[LoadedManifest]:
    """Load manifests like `kubectl apply -f`: files, directories (recursive: with subdirectories), "-".

    Every problem in every file is collected first, then raised as one ManifestError in file order.
    """
    if isinstance(paths, str):
        raise TypeError("paths must be a sequence of paths, not a single string")
    collector = _Collector()
    for path in paths:
        if path == "-":
            text = (stdin if stdin is not None else sys.stdin).read()
            if not collector.add_text(text, STDIN_PATH):
                collector.no_manifests(STDIN_PATH)
        elif os.path.isdir(path):
            try:
                files = _manifest_files(path, recursive)
            except OSError as error:
                collector.problems.append(ManifestProblem(path, None, "", f"cannot read: {error.strerror}"))
                continue
            if not sum(collector.add_file(file) for file in files):
                collector.no_manifests(path)
        elif not collector.add_file(path):
            collector.no_manifests(path)
    return collector.result()


def _main(argv: Sequence[str] | None = None) -> int:
    """Print the KnowledgeBase JSON schema, or write it with --write-schema PATH."""
    parser = argparse.ArgumentParser(prog="python -m kbctl.manifest", description=_main.__doc__)
    parser.add_argument("--write-schema", metavar="PATH", help="write the schema to PATH instead of stdout")
    args = parser.parse_args(argv)
    if args.write_schema:
        write_schema(args.write_schema)
    else:
        sys.stdout.write(_schema_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
