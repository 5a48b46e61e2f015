"""The canonical hash of JSON data: what a stored manifest, a source spec or a version is compared by."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ManifestDigests", "canonical_json", "manifest_digests", "sha256_json", "source_sha256"]


def canonical_json(data: object) -> str:
    """The canonical JSON of `data`: sorted keys, no spaces, non-ASCII escaped."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def sha256_json(data: object) -> str:
    """sha256 of the canonical JSON of `data` (sorted keys, no spaces)."""
    return hashlib.sha256(canonical_json(data).encode()).hexdigest()


def source_sha256(source: Mapping[str, Any]) -> str:
    """A source's spec hash, what its stored documents are keyed by: sha256_json of its manifest entry without
    `access` (who may read the documents changes none of them: a new version serves the same revisions)."""
    if "access" not in source:
        return sha256_json(source)
    return sha256_json({k: v for k, v in source.items() if k != "access"})


@dataclass(frozen=True)
class ManifestDigests:
    """sha256_json of a manifest, and `source_sha256` of each of its `spec.sources` entries in order."""

    manifest: str
    sources: tuple[str, ...]


def manifest_digests(manifest: Mapping[str, Any]) -> ManifestDigests:
    """The digests of a manifest and of its sources, equal to sha256_json of each, from one encoding.

    A source's canonical JSON is a piece of the manifest's (inline sources hold nearly all of a manifest's
    text), so the manifest's digest is fed the pieces already encoded instead of encoding the text again.
    """
    spec = manifest.get("spec")
    if not isinstance(spec, Mapping) or not isinstance(spec.get("sources"), list):
        return ManifestDigests(sha256_json(manifest), ())
    sources: list[Any] = spec["sources"]
    pieces = [canonical_json(source).encode() for source in sources]
    digest = hashlib.sha256()
    for piece in _object_pieces(manifest, {"spec": _object_pieces(spec, {"sources": _array_pieces(pieces)})}):
        digest.update(piece)
    hashes = (
        source_sha256(source)
        if isinstance(source, Mapping) and "access" in source
        else hashlib.sha256(piece).hexdigest()
        for source, piece in zip(sources, pieces, strict=True)
    )
    return ManifestDigests(digest.hexdigest(), tuple(hashes))


def _object_pieces(data: Mapping[str, Any], encoded: Mapping[str, list[bytes]]) -> list[bytes]:
    """canonical_json(data) as pieces, the values of the keys in `encoded` given as pieces already."""
    pieces = [b"{"]
    for position, key in enumerate(sorted(data)):
        pieces.append((b"," if position else b"") + canonical_json(key).encode() + b":")
        pieces.extend(encoded[key] if key in encoded else [canonical_json(data[key]).encode()])
    pieces.append(b"}")
    return pieces


def _array_pieces(items: list[bytes]) -> list[bytes]:
    """canonical_json of a list, from its items' canonical JSON."""
    pieces = [b"["]
    for position, item in enumerate(items):
        pieces.extend((b",", item) if position else (item,))
    pieces.append(b"]")
    return pieces
