"""Embedding providers behind one small protocol, chosen by the model id of a knowledge base."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from kbctl.config import Settings
from kbctl.errors import EmbeddingError

__all__ = ["Embedder", "Purpose", "Vector", "get_embedder"]

Vector = npt.NDArray[np.float32]
Purpose = Literal["document", "query"]


class Embedder(Protocol):
    """Turns texts into vectors; `model_id` is part of every stored vector's key."""

    model_id: str
    dimensions: int

    def embed(self, texts: Sequence[str], purpose: Purpose = "document") -> list[Vector]:
        """Embed texts, one normalized vector each, in order; `purpose` says documents or queries
        (some providers embed them differently, e.g. Voyage's input_type)."""
        ...

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """The number of model tokens of each text, without truncation."""
        ...


_EMBEDDERS: dict[tuple[str, str], Embedder] = {}


def get_embedder(model_id: str, settings: Settings) -> Embedder:
    """The embedder for `model_id`, loaded once per process."""
    key = (model_id, str(settings.home))
    if key not in _EMBEDDERS:
        provider, _, name = model_id.partition("/")
        if provider == "local":
            from kbctl.embedding.local import LocalEmbedder

            _EMBEDDERS[key] = LocalEmbedder(name, settings)
        else:
            raise EmbeddingError(f"unknown embedding model '{model_id}': this version supports local/all-MiniLM-L6-v2")
    return _EMBEDDERS[key]
