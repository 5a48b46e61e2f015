"""The first stage: KnowledgeBase manifests as models, loaded from YAML with file:line problems, selected by labels.

models (fields, defaults, JSON Schema) · load (files, directories, stdin, every problem located) ·
selectors (kubectl label selectors) · changes (what differs between two manifests).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kbctl._lazy import lazy_attributes

if TYPE_CHECKING:
    from kbctl.manifest._field_checks import (
        CONTEXT_TOKENS_MAX,
        DNS_LABEL,
        NAME_MAX,
        TOP_K_MAX,
        check_dns_label,
        check_git_ref,
        check_git_url,
        check_text,
        duration_seconds,
        git_url_host,
    )
    from kbctl.manifest.load import (
        LoadedManifest,
        LoadedSync,
        ManifestFile,
        ManifestSet,
        SettledManifest,
        SkippedFile,
        load_manifest_set,
        load_manifests,
        parse_manifests,
        read_manifest_files,
    )
    from kbctl.manifest.models import (
        API_VERSION,
        DEFAULT_MODEL,
        KIND,
        Access,
        Answer,
        Chunking,
        Crawl,
        Embedding,
        GitRepository,
        KnowledgeBase,
        Limits,
        Metadata,
        Refresh,
        Rerank,
        Retrieval,
        Source,
        Spec,
        json_schema,
        write_schema,
    )
    from kbctl.manifest.sync import Sync

# Each name is imported on first use: a command that only reads the store (or its digests) never loads the
# YAML loader and its error locating.
_WHERE = {
    "CONTEXT_TOKENS_MAX": "kbctl.manifest._field_checks",
    "DNS_LABEL": "kbctl.manifest._field_checks",
    "NAME_MAX": "kbctl.manifest._field_checks",
    "check_dns_label": "kbctl.manifest._field_checks",
    "git_url_host": "kbctl.manifest._field_checks",
    "check_text": "kbctl.manifest._field_checks",
    "duration_seconds": "kbctl.manifest._field_checks",
    "TOP_K_MAX": "kbctl.manifest._field_checks",
    "check_git_ref": "kbctl.manifest._field_checks",
    "check_git_url": "kbctl.manifest._field_checks",
    "LoadedManifest": "kbctl.manifest.load",
    "LoadedSync": "kbctl.manifest.load",
    "Sync": "kbctl.manifest.sync",
    "ManifestFile": "kbctl.manifest.load",
    "ManifestSet": "kbctl.manifest.load",
    "SettledManifest": "kbctl.manifest.load",
    "SkippedFile": "kbctl.manifest.load",
    "load_manifest_set": "kbctl.manifest.load",
    "load_manifests": "kbctl.manifest.load",
    "parse_manifests": "kbctl.manifest.load",
    "read_manifest_files": "kbctl.manifest.load",
    "API_VERSION": "kbctl.manifest.models",
    "DEFAULT_MODEL": "kbctl.manifest.models",
    "KIND": "kbctl.manifest.models",
    "Access": "kbctl.manifest.models",
    "Answer": "kbctl.manifest.models",
    "Chunking": "kbctl.manifest.models",
    "Crawl": "kbctl.manifest.models",
    "Embedding": "kbctl.manifest.models",
    "GitRepository": "kbctl.manifest.models",
    "KnowledgeBase": "kbctl.manifest.models",
    "Limits": "kbctl.manifest.models",
    "Metadata": "kbctl.manifest.models",
    "Refresh": "kbctl.manifest.models",
    "Rerank": "kbctl.manifest.models",
    "Retrieval": "kbctl.manifest.models",
    "Source": "kbctl.manifest.models",
    "Spec": "kbctl.manifest.models",
    "json_schema": "kbctl.manifest.models",
    "write_schema": "kbctl.manifest.models",
}

__all__ = [
    "API_VERSION",
    "CONTEXT_TOKENS_MAX",
    "DEFAULT_MODEL",
    "DNS_LABEL",
    "KIND",
    "NAME_MAX",
    "TOP_K_MAX",
    "Access",
    "Answer",
    "Chunking",
    "Crawl",
    "Embedding",
    "GitRepository",
    "KnowledgeBase",
    "Limits",
    "LoadedManifest",
    "LoadedSync",
    "ManifestFile",
    "ManifestSet",
    "Metadata",
    "Refresh",
    "Rerank",
    "Retrieval",
    "SettledManifest",
    "SkippedFile",
    "Source",
    "Spec",
    "Sync",
    "check_dns_label",
    "check_git_ref",
    "check_git_url",
    "check_text",
    "duration_seconds",
    "git_url_host",
    "json_schema",
    "load_manifest_set",
    "load_manifests",
    "parse_manifests",
    "read_manifest_files",
    "write_schema",
]

__getattr__ = lazy_attributes(__name__, _WHERE, globals())
