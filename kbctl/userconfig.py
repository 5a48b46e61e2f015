"""kbctl's own configuration file: embedding providers and profiles, and the private-network allowance.

Endpoints, key variable names and limits live here (`~/.config/kbctl/config.yaml`, or the file named
by `KBCTL_CONFIG`), never in manifests, which a pull request can change. Keys themselves live in the
environment: the file names the variable (`apiKeyEnv`).

    allowPrivateNetworks: false
    embedding:
      providers:
        openai:   {baseURL: https://api.openai.com/v1, apiKeyEnv: OPENAI_API_KEY}
        voyage:   {baseURL: https://api.voyageai.com/v1, apiKeyEnv: VOYAGE_API_KEY,
                   documentFields: {input_type: document}, queryFields: {input_type: query}}
        gateway:  {baseURL: http://litellm.internal:4000/v1, apiKeyEnv: LITELLM_KEY, maxConcurrency: 8}
      profiles:
        corp-gateway: {provider: gateway, model: text-embedding-3-small, dimensions: 512}
    rerank:
      providers:
        cohere:   {baseURL: https://api.cohere.com/v2, apiKeyEnv: COHERE_API_KEY}
        tei:      {baseURL: http://reranker.internal:8080, api: tei}
      localModels:
        ms-marco-minilm: /opt/models/ms-marco-MiniLM-L-6-v2    # model.onnx + tokenizer.json
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from kbctl.errors import KbctlError

__all__ = [
    "BUILTIN_PROVIDERS",
    "BUILTIN_RERANKERS",
    "ConfigFile",
    "Profile",
    "Provider",
    "RerankProvider",
    "config_path",
    "load_config",
    "with_env_overrides",
]

DEFAULT_CONFIG = Path("~/.config/kbctl/config.yaml")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, alias_generator=to_camel, frozen=True)


class Provider(_Model):
    """An OpenAI-compatible /v1/embeddings endpoint and how to talk to it."""

    base_url: str = Field(alias="baseURL")
    api_key_env: str | None = None
    batch_size: int = Field(64, ge=1, le=2048)
    max_batch_tokens: int = Field(100_000, ge=1)
    max_concurrency: int = Field(4, ge=1, le=64)
    max_input_tokens: int = Field(8191, ge=1)
    document_fields: dict[str, Any] = Field(default_factory=dict)
    query_fields: dict[str, Any] = Field(default_factory=dict)
    timeout: float = Field(60.0, gt=0)
    retries: int = Field(4, ge=0, le=20)


class Profile(_Model):
    """A named embedding setup a manifest can refer to (`spec.embedding.profile`)."""

    provider: str
    model: str
    dimensions: int | None = Field(None, ge=1)


class EmbeddingConfig(_Model):
    """Embedding providers and profiles."""

    providers: dict[str, Provider] = Field(default_factory=dict)
    profiles: dict[str, Profile] = Field(default_factory=dict)


class RerankProvider(_Model):
    """A rerank endpoint: `{baseURL}/rerank`, Cohere-compatible (Cohere, Jina, vLLM, LiteLLM) or TEI."""

    base_url: str = Field(alias="baseURL")
    api: Literal["cohere", "tei"] = "cohere"
    api_key_env: str | None = None
    timeout: float = Field(30.0, gt=0)
    retries: int = Field(2, ge=0, le=20)


class RerankConfig(_Model):
    """Rerank providers, and local cross-encoder model folders by name (`local/NAME` in a manifest)."""

    providers: dict[str, RerankProvider] = Field(default_factory=dict)
    local_models: dict[str, Path] = Field(default_factory=dict)


class ConfigFile(_Model):
    """The whole configuration file."""

    allow_private_networks: bool = False
    embedding: EmbeddingConfig = Field(default_factory=EmbeddingConfig)
    rerank: RerankConfig = Field(default_factory=RerankConfig)

    def provider(self, name: str) -> Provider | None:
        """A provider from the file, else a built-in one (openai), else None."""
        return self.embedding.providers.get(name) or BUILTIN_PROVIDERS.get(name)

    def rerank_provider(self, name: str) -> RerankProvider | None:
        """A rerank provider from the file, else a built-in one (cohere, jina), else None."""
        return self.rerank.providers.get(name) or BUILTIN_RERANKERS.get(name)


BUILTIN_PROVIDERS: dict[str, Provider] = {
    "openai": Provider.model_validate({"baseURL": "https://api.openai.com/v1", "apiKeyEnv": "OPENAI_API_KEY"}),
}
BUILTIN_RERANKERS: dict[str, RerankProvider] = {
    "cohere": RerankProvider.model_validate({"baseURL": "https://api.cohere.com/v2", "apiKeyEnv": "COHERE_API_KEY"}),
    "jina": RerankProvider.model_validate({"baseURL": "https://api.jina.ai/v1", "apiKeyEnv": "JINA_API_KEY"}),
}


def config_path(environ: dict[str, str] | None = None) -> Path:
    """The configuration file kbctl reads: $KBCTL_CONFIG, else ~/.config/kbctl/config.yaml."""
    env = os.environ if environ is None else environ
    return Path(env.get("KBCTL_CONFIG") or DEFAULT_CONFIG).expanduser()


_ENV_PROVIDER = re.compile(r"^KBCTL_(PROVIDER|RERANKER)_([A-Z0-9_]+)_(BASE_URL|API_KEY_ENV)$")

_P = TypeVar("_P", Provider, RerankProvider)


def _override(
    kind: str, current: Mapping[str, _P], builtin: Mapping[str, _P], changes: dict[str, dict[str, str]], model: type[_P]
) -> dict[str, _P]:
    """`current` with the environment's fields merged over each named provider (file, else built-in)."""
    providers = dict(current)
    for name, fields in changes.items():
        base = providers.get(name) or builtin.get(name)
        merged = {**(base.model_dump(by_alias=True) if base else {}), **fields}
        try:
            providers[name] = model.model_validate(merged)
        except ValidationError as exc:
            variable = f"KBCTL_{kind}_{name.upper().replace('-', '_')}_*"
            raise KbctlError(f"{variable}: {exc.errors()[0]['msg']}") from exc
    return providers


def with_env_overrides(config: ConfigFile, environ: Mapping[str, str]) -> ConfigFile:
    """Apply `KBCTL_PROVIDER_<NAME>_BASE_URL` / `KBCTL_PROVIDER_<NAME>_API_KEY_ENV` (they define or override
    embedding provider `<name>`, lower-cased with '_' as '-'), the same `KBCTL_RERANKER_<NAME>_*` for rerank
    providers, and `KBCTL_ALLOW_PRIVATE_NETWORKS`."""
    changes: dict[str, dict[str, dict[str, str]]] = {"PROVIDER": {}, "RERANKER": {}}
    for key, value in environ.items():
        match = _ENV_PROVIDER.match(key)
        if match and value:
            name = match.group(2).lower().replace("_", "-")
            field = "baseURL" if match.group(3) == "BASE_URL" else "apiKeyEnv"
            changes[match.group(1)].setdefault(name, {})[field] = value
    providers = _override("PROVIDER", config.embedding.providers, BUILTIN_PROVIDERS, changes["PROVIDER"], Provider)
    rerankers = _override("RERANKER", config.rerank.providers, BUILTIN_RERANKERS, changes["RERANKER"], RerankProvider)
    allow = config.allow_private_networks or environ.get("KBCTL_ALLOW_PRIVATE_NETWORKS", "").strip().lower() in (
        "1",
        "true",
    )
    embedding = config.embedding.model_copy(update={"providers": providers})
    rerank = config.rerank.model_copy(update={"providers": rerankers})
    return config.model_copy(update={"embedding": embedding, "rerank": rerank, "allow_private_networks": allow})


def load_config(path: Path) -> ConfigFile:
    """Read and validate the configuration file; a missing file is an empty configuration."""
    if not path.is_file():
        if os.environ.get("KBCTL_CONFIG"):
            raise KbctlError(f"{path}: no such file (named by KBCTL_CONFIG)")
        return ConfigFile()
    try:
        data = YAML(typ="safe", pure=True).load(path.read_text()) or {}
    except (OSError, YAMLError) as exc:
        raise KbctlError(f"{path}: cannot read the configuration: {str(exc).splitlines()[0]}") from exc
    try:
        return ConfigFile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise KbctlError(f"{path}: {where}: {err['msg']}") from exc
