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


_EMBEDDERS: dict[tuple[str, str, str], Embedder] = {}


def _parse_ref(ref: str, settings: Settings) -> tuple[str, str, int | None]:
    """(provider, model name, dimensions) of a model id (`provider/name[@dims]`) or a `profile:NAME`."""
    if ref.startswith("profile:"):
        name = ref.removeprefix("profile:")
        profile = settings.config.embedding.profiles.get(name)
        if profile is None:
            raise EmbeddingError(
                f"unknown embedding profile '{name}': define it under embedding.profiles in {settings.config_file}"
            )
        return profile.provider, profile.model, profile.dimensions
    provider, _, rest = ref.partition("/")
    model, _, dims = rest.partition("@")
    if dims and not dims.isdigit():
        raise EmbeddingError(f"invalid model id '{ref}': the part after @ is a number of dimensions")
    return provider, model, int(dims) if dims else None


def get_embedder(ref: str, settings: Settings) -> Embedder:
    """The embedder for a model id (`local/all-MiniLM-L6-v2`, `openai/text-embedding-3-small[@512]`) or
    a `profile:NAME` of the configuration, created once per process (models load on first use)."""
    key = (ref, str(settings.home), str(settings.config_file))
    if key not in _EMBEDDERS:
        provider_name, model, dims = _parse_ref(ref, settings)
        if provider_name == "local":
            from kbctl.embedding.local import LocalEmbedder

            _EMBEDDERS[key] = LocalEmbedder(model, settings)
        else:
            provider = settings.config.provider(provider_name)
            if provider is None:
                raise EmbeddingError(
                    f"unknown embedding provider '{provider_name}' (in '{ref}'): configure it under "
                    f"embedding.providers in {settings.config_file}"
                )
            from kbctl.embedding.http import HttpEmbedder, HttpEmbeddingConfig

            config = HttpEmbeddingConfig(
                base_url=provider.base_url,
                model=model,
                model_id=f"{provider_name}/{model}" + (f"@{dims}" if dims else ""),
                api_key_env=provider.api_key_env,
                dimensions=dims,
                batch_size=provider.batch_size,
                max_batch_tokens=provider.max_batch_tokens,
                max_concurrency=provider.max_concurrency,
                max_input_tokens=provider.max_input_tokens,
                document_fields=provider.document_fields,
                query_fields=provider.query_fields,
                timeout=provider.timeout,
                retries=provider.retries,
            )
            _EMBEDDERS[key] = HttpEmbedder(config)
    return _EMBEDDERS[key]
