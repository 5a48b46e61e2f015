"""Embedding providers behind one small protocol, chosen by the model id of a knowledge base."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from kbctl._providers import ModelRef, ProviderRegistry
from kbctl.config import Settings
from kbctl.errors import EmbeddingError
from kbctl.userconfig import Provider

__all__ = ["Embedder", "Purpose", "Vector", "get_embedder", "preload"]

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Vector = npt.NDArray[np.float32]
Purpose = Literal["document", "query"]


def __getattr__(name: str) -> Any:
    """`Vector`, numpy's float32 array type, made on first use: numpy's import costs a command ~0.1 s, and commands
    that only read statuses (`get -o json`: a version's threshold) import this package without embedding anything."""
    if name == "Vector":
        import numpy as np
        import numpy.typing as npt

        return npt.NDArray[np.float32]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


def _parse_ref(ref: str, settings: Settings) -> ModelRef:
    """The provider, model name and dimensions of a model id (`provider/name[@dims]`) or a `profile:NAME`."""
    if ref.startswith("profile:"):
        name = ref.removeprefix("profile:")
        profile = settings.config.embedding.profiles.get(name)
        if profile is None:
            raise EmbeddingError(
                f"unknown embedding profile '{name}': define it under embedding.profiles in {settings.config_file}"
            )
        return ModelRef(profile.provider, profile.model, profile.dimensions)
    provider, _, rest = ref.partition("/")
    model, _, dims = rest.partition("@")
    if dims and not dims.isdigit():
        raise EmbeddingError(f"invalid model id '{ref}': the part after @ is a number of dimensions")
    return ModelRef(provider, model, int(dims) if dims else None)


def _local(name: str, settings: Settings) -> Embedder:
    from kbctl.embedding.local import LocalEmbedder

    return LocalEmbedder(name, settings)


def _remote(ref: str, target: ModelRef, provider: Provider) -> Embedder:
    from kbctl._http import EMBEDDING_POLICY
    from kbctl.embedding.http import HttpEmbedder, HttpEmbeddingConfig

    dims = target.dimensions
    config = HttpEmbeddingConfig(
        base_url=provider.base_url,
        model=target.model,
        model_id=f"{target.provider}/{target.model}" + (f"@{dims}" if dims else ""),
        api_key_env=provider.api_key_env,
        dimensions=dims,
        batch_size=provider.batch_size,
        max_batch_tokens=provider.max_batch_tokens,
        max_concurrency=provider.max_concurrency,
        max_input_tokens=provider.max_input_tokens,
        document_fields=provider.document_fields,
        query_fields=provider.query_fields,
        http=EMBEDDING_POLICY.with_(timeout=provider.timeout, retries=provider.retries),
        encoding_format=provider.encoding_format,
    )
    return HttpEmbedder(config)


_EMBEDDERS = ProviderRegistry[Provider, Embedder](
    kind="embedding",
    error=EmbeddingError,
    parse=_parse_ref,
    local=_local,
    lookup=lambda settings, name: settings.config.provider(name),
    remote=_remote,
)


def get_embedder(ref: str, settings: Settings) -> Embedder:
    """The embedder for a model id (`local/all-MiniLM-L6-v2`, `openai/text-embedding-3-small[@512]`) or
    a `profile:NAME` of the configuration, created once per process (models load on first use)."""
    return _EMBEDDERS.get(ref, settings)


def preload(embedder: Embedder) -> None:
    """Start loading `embedder`'s model in a background thread, if it has one to load (a local model that is not in
    memory yet): ONNX Runtime builds its session without holding the GIL, so the imports and planning of a query
    run beside it on another core (~0.2 s of a CLI query). A failure there is not reported: the first `embed`
    loads the model again and raises it."""
    load = getattr(embedder, "load", None)
    if load is None or getattr(embedder, "loaded", True):
        return

    def quietly() -> None:
        try:
            load()
        except Exception:  # raised again, in the caller's thread, by the first embed
            return

    # Not a daemon: a process that ends while ONNX Runtime builds the session (a query refused after its model began
    # loading) waits for it, rather than tearing it down mid-build, which aborts the process.
    threading.Thread(target=quietly, name="kbctl-model-load", daemon=False).start()
