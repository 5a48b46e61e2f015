"""The first stage: KnowledgeBase manifests as models, loaded from YAML with file:line problems, selected by labels.

models (fields, defaults, JSON Schema) · load (files, directories, stdin, every problem located) ·
selectors (kubectl label selectors) · changes (what differs between two manifests).
"""

from kbctl.manifest.load import LoadedManifest, load_manifests, parse_manifests
from kbctl.manifest.models import (
    API_VERSION,
    DEFAULT_MODEL,
    KIND,
    Answer,
    Chunking,
    Crawl,
    Embedding,
    GitRepository,
    KnowledgeBase,
    Limits,
    Metadata,
    Rerank,
    Retrieval,
    Source,
    Spec,
    json_schema,
    write_schema,
)

__all__ = [
    "API_VERSION",
    "DEFAULT_MODEL",
    "KIND",
    "Answer",
    "Chunking",
    "Crawl",
    "Embedding",
    "GitRepository",
    "KnowledgeBase",
    "Limits",
    "LoadedManifest",
    "Metadata",
    "Rerank",
    "Retrieval",
    "Source",
    "Spec",
    "json_schema",
    "load_manifests",
    "parse_manifests",
    "write_schema",
]
