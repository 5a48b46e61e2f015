"""KnowledgeBase manifests for tests, built as data: one helper instead of a YAML template in every test file; and
the repository a manifest of a path source is applied from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["docs_repository", "knowledge_base", "path_source", "text_source", "url_source"]


def text_source(name: str, text: str, **fields: Any) -> dict[str, Any]:
    """An inline source (`format` and other fields as keywords)."""
    return {"name": name, "text": text, **fields}


def url_source(name: str, url: str) -> dict[str, Any]:
    """A URL source."""
    return {"name": name, "url": url}


def path_source(name: str, path: str) -> dict[str, Any]:
    """A path source: a file or folder, relative to the manifest."""
    return {"name": name, "path": path}


def knowledge_base(name: str, *sources: dict[str, Any], labels: dict[str, str] | None = None, **spec: Any) -> str:
    """A KnowledgeBase manifest (JSON, which is YAML) with these sources and other spec fields in camelCase."""
    return json.dumps(
        {
            "apiVersion": "kbctl.dev/v1alpha1",
            "kind": "KnowledgeBase",
            "metadata": {"name": name, **({"labels": labels} if labels else {})},
            "spec": {"sources": list(sources), **spec},
        },
        indent=2,
    )


def docs_repository(parent: Path, name: str, docs: dict[str, str], *, path: str = "../docs", **spec: Any) -> Path:
    """A repository `parent/repo` (it has .git) whose kb/NAME.yaml reads docs/, holding `docs` (file name: text),
    through one path source `docs` (other spec fields as keywords); the repository's folder."""
    repo = parent / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "docs").mkdir()
    (repo / "kb").mkdir()
    for file, text in docs.items():
        (repo / "docs" / file).write_text(text)
    (repo / "kb" / f"{name}.yaml").write_text(knowledge_base(name, path_source("docs", path), **spec))
    return repo
