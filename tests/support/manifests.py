"""KnowledgeBase manifests for tests, built as data: one helper instead of a YAML template in every test file."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["knowledge_base", "text_source", "url_source"]


def text_source(name: str, text: str, **fields: Any) -> dict[str, Any]:
    """An inline source (`format` and other fields as keywords)."""
    return {"name": name, "text": text, **fields}


def url_source(name: str, url: str) -> dict[str, Any]:
    """A URL source."""
    return {"name": name, "url": url}


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
