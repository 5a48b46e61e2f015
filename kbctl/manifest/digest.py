"""The canonical hash of JSON data: what a stored manifest, a source spec or a version is compared by."""

from __future__ import annotations

import hashlib
import json

__all__ = ["sha256_json"]


def sha256_json(data: object) -> str:
    """sha256 of the canonical JSON of `data` (sorted keys, no spaces)."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
