"""The model-id resolution and per-process cache that `get_embedder` and `get_reranker` share.

A model id names a provider and a model at it (`provider/name`). `local` is built in; any other provider is
looked up in kbctl's configuration (or its built-ins), and an unknown one is an error naming the section of
the configuration file to add it to. What is built is kept per (model id, kbctl home, configuration file),
so a process builds each embedder or reranker once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from kbctl.config import Settings
from kbctl.errors import KbctlError

__all__ = ["ModelRef", "ProviderRegistry"]

P = TypeVar("P")  # a configured provider (userconfig.Provider, userconfig.RerankProvider)
T = TypeVar("T")  # what is built (an Embedder, a Reranker)


@dataclass(frozen=True)
class ModelRef:
    """A parsed model id: the provider's name, the model's name there, and (embeddings) the dimensions asked."""

    provider: str
    model: str
    dimensions: int | None = None


class ProviderRegistry(Generic[P, T]):
    """Builds the models of one kind (`kind`: "embedding", "rerank") from model ids, once per process.

    `parse` reads a model id (raising `error` when it is malformed); `local` builds `local/NAME`; `lookup` finds
    a provider of the configuration by name (None: unknown); `remote` builds the model served by that provider.
    """

    def __init__(
        self,
        *,
        kind: str,
        error: type[KbctlError],
        parse: Callable[[str, Settings], ModelRef],
        local: Callable[[str, Settings], T],
        lookup: Callable[[Settings, str], P | None],
        remote: Callable[[str, ModelRef, P], T],
    ) -> None:
        self._kind = kind
        self._error = error
        self._parse = parse
        self._local = local
        self._lookup = lookup
        self._remote = remote
        self._built: dict[tuple[str, str, str], T] = {}
        self._lock = threading.Lock()

    def get(self, ref: str, settings: Settings) -> T:
        """The model of `ref` for these settings: built on the first call, the same object afterwards."""
        key = (ref, str(settings.home), str(settings.config_file))
        with self._lock:
            if key not in self._built:
                self._built[key] = self._build(ref, settings)
            return self._built[key]

    def _build(self, ref: str, settings: Settings) -> T:
        target = self._parse(ref, settings)
        if target.provider == "local":
            return self._local(target.model, settings)
        provider = self._lookup(settings, target.provider)
        if provider is None:
            raise self._error(
                f"unknown {self._kind} provider '{target.provider}' (in '{ref}'): configure it under "
                f"{self._kind}.providers in {settings.config_file}"
            )
        return self._remote(ref, target, provider)
