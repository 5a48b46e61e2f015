"""The `spec.sources[]` models of a KnowledgeBase manifest: a `Source` (exactly one of url, text, path, git or
crawl; its kind), a git repository ref (`GitRef`, shared with the Sync kind; `GitRepository`), a crawl (`Crawl`),
document-level `Access`, and the formats a source is read in."""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import (
    AfterValidator,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from kbctl.inputs.access import ACCESS_GROUPS_MAX, ACCESS_LABELS_MAX, check_group, label_terms
from kbctl.manifest._field_checks import (
    NAME_MAX,
    SOURCE_NAME,
    check_git_ref,
    check_git_url,
    check_name,
    check_relative_path,
    check_url,
)
from kbctl.manifest.base import _field_error, _LabelKey, _LabelValue, _Model, _StrictInt, _without_unset

Format = Literal["markdown", "text", "html", "pdf", "docx", "json", "jsonl", "csv", "auto"]
SourceKind = Literal["text", "url", "path", "git", "crawl"]
FILE_FORMATS: Final = ("html", "pdf", "docx", "json", "jsonl", "csv", "auto")  # path: and git: sources only


class GitRef(_Model):
    """A branch or tag of a git repository, checked before git ever sees it (a git source's, a Sync's)."""

    url: str = Field(
        description="https://host/org/repo(.git), ssh://git@host/org/repo or git@host:org/repo (an absolute folder "
        "or file:/// URL only with KBCTL_ALLOW_LOCAL_GIT=1); no part may start with '-' and no 'transport::' form "
        "is read. Credentials come from the environment (SSH agent, credential helpers), never from the manifest.",
    )
    ref: str | None = Field(default=None, description="A branch or tag (default: the repository's default branch).")

    @field_validator("url")
    @classmethod
    def _valid_url(cls, value: str) -> str:
        return check_git_url(value)

    @field_validator("ref")
    @classmethod
    def _valid_ref(cls, value: str | None) -> str | None:
        return None if value is None else check_git_ref(value)


class GitRepository(GitRef):
    """A ref of a git repository whose files are the documents (`spec.sources[].git`)."""

    paths: list[str] = Field(
        default_factory=lambda: ["."],
        min_length=1,
        max_length=50,
        description="Folders, files or globs in the repository to read (default: all of it).",
    )

    @field_validator("paths")
    @classmethod
    def _valid_paths(cls, value: list[str]) -> list[str]:
        for path in value:
            check_relative_path(path)
            if path.startswith("-") or "/-" in path:
                raise ValueError("must not hold a path part starting with '-'")
        return value


class Crawl(_Model):
    """A site crawled from one page (`spec.sources[].crawl`): same-site links followed breadth-first."""

    url: str = Field(description="The page to start from (http or https, no credentials).")
    max_pages: _StrictInt = Field(default=100, ge=1, le=5000, description="Pages fetched at most.")
    max_depth: _StrictInt = Field(default=3, ge=0, le=20, description="Links followed from the start page at most.")
    sitemap: bool = Field(default=True, description="Also start from the pages of the site's sitemap.xml.")

    @field_validator("url")
    @classmethod
    def _valid_url(cls, value: str) -> str:
        return check_url(value)


def _group(value: str) -> str:
    return check_group(value)


_Group = Annotated[str, AfterValidator(_group)]


class Access(_Model):
    """Who may retrieve documents (`spec.access`, `spec.sources[].access`): callers in one of `groups`, holding
    every label of `labels` among their claims. A source without access has its knowledge base's; with neither,
    every caller that may see the knowledge base reads it."""

    groups: list[_Group] = Field(
        default_factory=list,
        max_length=ACCESS_GROUPS_MAX,
        description="Callers in any one of these groups may read (a token's `groups`, a JWT's groups claim, "
        "`--as-group`).",
    )
    labels: dict[_LabelKey, _LabelValue] = Field(
        default_factory=dict,
        max_length=ACCESS_LABELS_MAX,
        description="Claims the caller must all hold (`department: hr`: a claim `department` with value `hr`).",
    )

    @model_validator(mode="after")
    def _names_someone(self) -> Access:
        if not self.groups and not self.labels:
            raise ValueError("name at least one group or label (leave access out to let every caller read)")
        return self

    def columns(self) -> tuple[list[str] | None, list[str] | None]:
        """The rule as the store keeps it: its groups and its label terms (`key=value`), each None when empty."""
        return (sorted(set(self.groups)) or None, label_terms(self.labels) or None)


class Source(_Model):
    """Documents to index: fetched from a URL, given inline as text, read from files next to the manifest, from a
    git repository, or crawled from a site (exactly one of them)."""

    name: str = Field(
        description="Unique within the knowledge base: lowercase letters, digits, '-', '_' and '.'.",
        json_schema_extra={"pattern": SOURCE_NAME, "maxLength": NAME_MAX},
    )
    url: str | None = Field(
        default=None, description="An http(s) URL without credentials.", json_schema_extra={"format": "uri"}
    )
    text: str | None = Field(default=None, description="The document inline.")
    path: str | None = Field(
        default=None,
        description="A file, a folder (every file of a known format below it) or a glob (docs/**/*.md), relative "
        "to the manifest's folder; each file is one document.",
    )
    git: GitRepository | None = Field(
        default=None, description="A git repository ref whose files are the documents, read as path files are."
    )
    crawl: Crawl | None = Field(default=None, description="A site whose pages are the documents, crawled from a page.")
    include: list[str] | None = Field(
        default=None, description="With path or git: only files matching one of these globs (relative to the path)."
    )
    exclude: list[str] | None = Field(
        default=None, description="With path or git: leave out files matching one of these globs."
    )
    format: Format = Field(
        default="markdown",
        description="How to read the text: markdown or text (inline and URL sources); for path sources also html, "
        "pdf, docx, json, jsonl, csv, or auto (the default there: by each file's extension).",
    )
    title_field: str | None = Field(
        default=None, description="json / jsonl: the field whose value titles each entry (default: none)."
    )
    text_fields: list[str] | None = Field(
        default=None, description="json / jsonl: the fields an entry's text is made of, in order (default: all)."
    )
    access: Access | None = Field(
        default=None,
        description="Who may retrieve this source's documents (default: the knowledge base's spec.access). Changing "
        "it publishes a new version without fetching or embedding anything.",
    )

    @model_validator(mode="before")
    @classmethod
    def _auto_format(cls, data: Any) -> Any:
        if isinstance(data, dict) and (data.get("path") or data.get("git")) is not None and "format" not in data:
            return {**data, "format": "auto"}
        return data

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        return check_name(value, SOURCE_NAME, "lowercase letters, digits, '-', '_' and '.'")

    @field_validator("url")
    @classmethod
    def _valid_url(cls, value: str | None) -> str | None:
        return None if value is None else check_url(value)

    @field_validator("path")
    @classmethod
    def _valid_path(cls, value: str | None) -> str | None:
        return None if value is None else check_relative_path(value)

    @field_validator("include", "exclude")
    @classmethod
    def _valid_globs(cls, value: list[str] | None) -> list[str] | None:
        for glob in value or []:
            check_relative_path(glob)
        return value

    @field_validator("text")
    @classmethod
    def _valid_text(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be empty or whitespace-only")
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> Source:
        if sum(v is not None for v in (self.url, self.text, self.path, self.git, self.crawl)) != 1:
            raise ValueError("set exactly one of url, text, path, git or crawl")
        errors = []
        if self.path is None and self.git is None:
            if self.crawl is None:
                for field in ("include", "exclude"):
                    if getattr(self, field) is not None:
                        errors.append(_field_error(field, "goes with path, git or crawl"))
            if self.format in FILE_FORMATS:
                errors.append(_field_error("format", "must be one of: markdown, text (the others go with path or git)"))
        if self.format not in ("json", "jsonl", "auto"):
            for field, alias in (("title_field", "titleField"), ("text_fields", "textFields")):
                if getattr(self, field) is not None:
                    errors.append(_field_error(alias, "goes with format json, jsonl or auto"))
        if errors:
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self

    @property
    def kind(self) -> SourceKind:
        """Whether this source is inline text, a URL to fetch, files to read, a repository or a site to crawl."""
        if self.crawl is not None:
            return "crawl"
        if self.git is not None:
            return "git"
        if self.path is not None:
            return "path"
        return "text" if self.text is not None else "url"

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_unset(
            handler(self),
            "path",
            "git",
            "crawl",
            "include",
            "exclude",
            "title_field",
            "titleField",
            "text_fields",
            "textFields",
            "access",
        )
