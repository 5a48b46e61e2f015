"""Rerankers: a second stage that scores (question, passage) pairs and reorders the best candidates.

A manifest names one as `spec.retrieval.rerank.model: provider/name`. `local/NAME` is a cross-encoder run
by fastembed from model files on this machine (`rerank.localModels` in the kbctl configuration); any other
provider is a `/rerank` endpoint of the configuration (`rerank.providers`; cohere and jina are built in).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from kbctl._providers import ModelRef, ProviderRegistry
from kbctl.config import Settings
from kbctl.errors import RerankError
from kbctl.userconfig import RerankProvider

__all__ = ["Reranker", "get_reranker"]


class Reranker(Protocol):
    """Scores passages against a question; higher is more relevant, on the model's own scale."""

    model_id: str

    def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        """One score per document, in the order given."""
        ...


def _parse_ref(ref: str, settings: Settings) -> ModelRef:
    provider, _, model = ref.partition("/")
    if not model:
        raise RerankError(f"invalid rerank model '{ref}': expected provider/name")
    return ModelRef(provider, model)


def _local(name: str, settings: Settings) -> Reranker:
    from kbctl.rerank.local import LocalReranker

    return LocalReranker(name, settings)


def _remote(ref: str, target: ModelRef, provider: RerankProvider) -> Reranker:
    from kbctl._http import RERANK_POLICY
    from kbctl.rerank.http import HttpRerankConfig, HttpReranker

    config = HttpRerankConfig(
        base_url=provider.base_url,
        model=target.model,
        model_id=ref,
        api=provider.api,
        api_key_env=provider.api_key_env,
        http=RERANK_POLICY.with_(timeout=provider.timeout, retries=provider.retries),
    )
    return HttpReranker(config)


_RERANKERS = ProviderRegistry[RerankProvider, Reranker](
    kind="rerank",
    error=RerankError,
    parse=_parse_ref,
    local=_local,
    lookup=lambda settings, name: settings.config.rerank_provider(name),
    remote=_remote,
)


def get_reranker(ref: str, settings: Settings) -> Reranker:
    """The reranker of a `provider/name` model id, created once per process (local models load on first use)."""
    return _RERANKERS.get(ref, settings)
