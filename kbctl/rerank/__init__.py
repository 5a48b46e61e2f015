"""Rerankers: a second stage that scores (question, passage) pairs and reorders the best candidates.

A manifest names one as `spec.retrieval.rerank.model: provider/name`. `local/NAME` is a cross-encoder run
by fastembed from model files on this machine (`rerank.localModels` in the kbctl configuration); any other
provider is a `/rerank` endpoint of the configuration (`rerank.providers`; cohere and jina are built in).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from kbctl.config import Settings
from kbctl.errors import RerankError

__all__ = ["Reranker", "get_reranker"]


class Reranker(Protocol):
    """Scores passages against a question; higher is more relevant, on the model's own scale."""

    model_id: str

    def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        """One score per document, in the order given."""
        ...


_RERANKERS: dict[tuple[str, str, str], Reranker] = {}


def get_reranker(ref: str, settings: Settings) -> Reranker:
    """The reranker of a `provider/name` model id, created once per process (local models load on first use)."""
    key = (ref, str(settings.home), str(settings.config_file))
    if key not in _RERANKERS:
        provider_name, _, model = ref.partition("/")
        if not model:
            raise RerankError(f"invalid rerank model '{ref}': expected provider/name")
        if provider_name == "local":
            from kbctl.rerank.local import LocalReranker

            _RERANKERS[key] = LocalReranker(model, settings)
        else:
            provider = settings.config.rerank_provider(provider_name)
            if provider is None:
                raise RerankError(
                    f"unknown rerank provider '{provider_name}' (in '{ref}'): configure it under "
                    f"rerank.providers in {settings.config_file}"
                )
            from kbctl.rerank.http import HttpRerankConfig, HttpReranker

            config = HttpRerankConfig(
                base_url=provider.base_url,
                model=model,
                model_id=ref,
                api=provider.api,
                api_key_env=provider.api_key_env,
                timeout=provider.timeout,
                retries=provider.retries,
            )
            _RERANKERS[key] = HttpReranker(config)
    return _RERANKERS[key]
