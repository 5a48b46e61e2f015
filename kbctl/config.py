"""Where kbctl keeps its files and which database it talks to, from the environment."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from kbctl.userconfig import (
    BUILTIN_PROVIDERS,
    BUILTIN_RERANKERS,
    ConfigFile,
    Provider,
    RerankProvider,
    config_path,
    load_config,
    with_env_overrides,
)

__all__ = ["Settings", "effective_config"]

DEFAULT_HOME = Path("~/.local/share/kbctl")


@dataclass(frozen=True)
class Settings:
    """The effective settings of one kbctl invocation.

    `home` holds the embedded PostgreSQL data directory (`home/pg`) and the prepared local model files
    (`home/models`); `database_url`, when set, points at an external PostgreSQL with pgvector and the
    embedded server is not used. `model_dir` names a folder that holds the default model's files.
    """

    home: Path
    database_url: str | None = None
    model_dir: Path | None = None
    config: ConfigFile = field(default_factory=ConfigFile)
    config_file: Path | None = None

    @classmethod
    def from_env(cls, *, home: str | Path | None = None, database_url: str | None = None) -> Settings:
        """Build settings from explicit values, then `KBCTL_HOME`, `KBCTL_DATABASE_URL`, `KBCTL_MODEL_DIR`,
        and the configuration file (`KBCTL_CONFIG`, default ~/.config/kbctl/config.yaml)."""
        raw_home = home or os.environ.get("KBCTL_HOME") or DEFAULT_HOME
        url = database_url or os.environ.get("KBCTL_DATABASE_URL") or None
        model_dir = os.environ.get("KBCTL_MODEL_DIR") or None
        path = config_path()
        return cls(
            home=Path(raw_home).expanduser().resolve(),
            database_url=url,
            model_dir=Path(model_dir).expanduser().resolve() if model_dir else None,
            config=with_env_overrides(load_config(path), os.environ),
            config_file=path,
        )

    @property
    def pgdata(self) -> Path:
        """The embedded PostgreSQL data directory."""
        return self.home / "pg"

    @property
    def models_dir(self) -> Path:
        """Where prepared local model folders live."""
        return self.home / "models"


def _redact_url(url: str) -> str:
    """A connection URL with its password replaced by ***."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def effective_config(settings: Settings) -> dict[str, Any]:
    """What `kbctl config view` shows: every setting in force, secrets redacted.

    API keys are never read out: each provider shows the name of its key variable and whether it is set.
    """
    providers = _shown({**BUILTIN_PROVIDERS, **settings.config.embedding.providers})
    rerankers = _shown({**BUILTIN_RERANKERS, **settings.config.rerank.providers})
    found = settings.config_file is not None and settings.config_file.is_file()
    return {
        "configFile": f"{settings.config_file} ({'found' if found else 'absent'})",
        "home": str(settings.home),
        "database": _redact_url(settings.database_url) if settings.database_url else f"embedded ({settings.pgdata})",
        "modelDir": str(settings.model_dir) if settings.model_dir else None,
        "allowPrivateNetworks": settings.config.allow_private_networks,
        "embedding": {
            "providers": providers,
            "profiles": {
                n: p.model_dump(by_alias=True, mode="json") for n, p in settings.config.embedding.profiles.items()
            },
        },
        "rerank": {
            "providers": rerankers,
            "localModels": {n: str(p) for n, p in settings.config.rerank.local_models.items()},
        },
    }


def _shown(providers: Mapping[str, Provider | RerankProvider]) -> dict[str, Any]:
    """Providers as `config view` shows them: each key variable named, with whether it is set."""
    shown: dict[str, Any] = {}
    for name, provider in providers.items():
        data = provider.model_dump(by_alias=True, mode="json")
        env = provider.api_key_env
        data["apiKeyEnv"] = None if env is None else f"{env} ({'set' if os.environ.get(env) else 'not set'})"
        shown[name] = data
    return shown
