"""Inline source text stored once, content-addressed: a manifest in the store names each text by its sha256.

With inline sources a manifest holds all their text, and the store keeps several copies of it: the desired
manifest, the last applied one, and one per version. Packed, each copy holds a `textSha256` in place of every
inline `text`, and `kb_texts` holds each distinct text once. A manifest of 100,000 chunks shrinks from ~90 MB
to ~2 MB, so recording, publishing and reading one costs milliseconds instead of seconds. Texts no manifest
names any more are deleted by garbage collection (`kbctl gc`). Manifests stored unpacked (before this table
existed) are read as they are.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

import psycopg

from kbctl.errors import StoreError

__all__ = ["TEXT_KEY", "Packed", "Packing", "delete_unused_texts", "pack", "packing", "store_texts", "unpack"]

TEXT_KEY = "textSha256"  # in a packed manifest, the key that stands for an inline source's `text`
Packed = tuple[dict[str, Any], dict[str, str]]  # what pack returns: the packed manifest, and its texts by sha256
Packing = Callable[[], Packed]  # pack of one manifest, made on first call (see packing)


def _sources(manifest: Mapping[str, Any]) -> list[Any] | None:
    spec = manifest.get("spec")
    sources = spec.get("sources") if isinstance(spec, Mapping) else None
    return sources if isinstance(sources, list) else None


def pack(manifest: dict[str, Any]) -> Packed:
    """The manifest with each inline text replaced by its sha256, and those texts by sha256 (a new dict: the
    argument is not changed)."""
    sources = _sources(manifest)
    if not sources or not any(isinstance(s, Mapping) and isinstance(s.get("text"), str) for s in sources):
        return manifest, {}
    texts: dict[str, str] = {}
    packed: list[Any] = []
    for source in sources:
        if isinstance(source, Mapping) and isinstance(source.get("text"), str):
            body = source["text"]
            sha = hashlib.sha256(body.encode()).hexdigest()
            texts[sha] = body
            source = {(TEXT_KEY if k == "text" else k): (sha if k == "text" else v) for k, v in source.items()}
        packed.append(source)
    return {**manifest, "spec": {**manifest["spec"], "sources": packed}}, texts


def packing(manifest: dict[str, Any]) -> Packing:
    """`pack(manifest)`, made when first asked for and then kept: an apply that records, compares and publishes a
    manifest hashes its inline texts (~0.15 s per 90 MB) once, and one that finds it unchanged not at all."""
    return cache(lambda: pack(manifest))


def store_texts(conn: psycopg.Connection[Any], texts: Mapping[str, str]) -> None:
    """Store the texts the table lacks (inside the caller's transaction, with the manifest that names them)."""
    if not texts:
        return
    have = {r[0] for r in conn.execute("SELECT sha256 FROM kb_texts WHERE sha256 = ANY(%s)", (list(texts),))}
    missing = [sha for sha in texts if sha not in have]
    if missing:
        conn.execute(
            "INSERT INTO kb_texts (sha256, body) SELECT * FROM unnest(%s::text[], %s::text[]) ON CONFLICT DO NOTHING",
            (missing, [texts[sha] for sha in missing]),
        )


def unpack(conn: psycopg.Connection[Any], manifest: dict[str, Any]) -> dict[str, Any]:
    """A stored manifest with every inline text back in place (a manifest stored unpacked comes back as it is)."""
    sources = _sources(manifest)
    shas = [s[TEXT_KEY] for s in sources or () if isinstance(s, Mapping) and isinstance(s.get(TEXT_KEY), str)]
    if not sources or not shas:
        return manifest
    rows = conn.execute("SELECT sha256, body FROM kb_texts WHERE sha256 = ANY(%s)", (list(set(shas)),)).fetchall()
    bodies = {str(sha): str(body) for sha, body in rows}
    lost = sorted(set(shas) - set(bodies))
    if lost:
        raise StoreError(f"a stored manifest names {len(lost)} source text(s) the store does not hold ({lost[0]}...)")
    full: list[Any] = []
    for source in sources:
        if isinstance(source, Mapping) and isinstance(source.get(TEXT_KEY), str):
            source = {("text" if k == TEXT_KEY else k): (bodies[v] if k == TEXT_KEY else v) for k, v in source.items()}
        full.append(source)
    return {**manifest, "spec": {**manifest["spec"], "sources": full}}


def delete_unused_texts(conn: psycopg.Connection[Any]) -> int:
    """Delete the texts no stored manifest names (versions, in force, desired, last applied); return how many."""
    cur = conn.execute(
        "WITH manifests AS ("
        "  SELECT manifest AS m FROM kb_versions"
        "  UNION ALL SELECT manifest FROM kb_knowledge_bases"
        "  UNION ALL SELECT desired_manifest FROM kb_knowledge_bases WHERE desired_manifest IS NOT NULL"
        "  UNION ALL SELECT applied_manifest FROM kb_knowledge_bases WHERE applied_manifest IS NOT NULL),"
        " used AS (SELECT DISTINCT s ->> %s AS sha FROM manifests,"
        "  jsonb_array_elements(CASE WHEN jsonb_typeof(m -> 'spec' -> 'sources') = 'array'"
        "   THEN m -> 'spec' -> 'sources' ELSE '[]' END) s)"
        " DELETE FROM kb_texts t WHERE NOT EXISTS (SELECT 1 FROM used WHERE used.sha = t.sha256)",
        (TEXT_KEY,),
    )
    return cur.rowcount
