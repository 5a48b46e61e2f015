"""Where kbctl keeps its files and which database it talks to, from the environment."""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbctl.errors import KbctlError
from kbctl.userconfig import (
    BUILTIN_CHAT_PROVIDERS,
    BUILTIN_PROVIDERS,
    BUILTIN_RERANKERS,
    REDACTED,
    ChatProvider,
    ConfigFile,
    Provider,
    RerankProvider,
    config_path,
    is_secret_name,
    load_config,
    redact,
    with_env_overrides,
)

__all__ = ["Settings", "effective_config", "ensure_dir", "redact"]

DEFAULT_HOME = Path("~/.local/share/kbctl")


@dataclass(frozen=True)
class Settings:
    """The effective settings of one kbctl invocation.

    `home` holds the embedded PostgreSQL data directory (`home/pg`) and the prepared local model files
    (`home/models`); `database_url`, when set, points at an external PostgreSQL with pgvector and the
    embedded server is not used. `query_database_url`, when set, is where queries read (a read replica of
    that database); everything else uses `database_url`. `model_dir` names a folder that holds the default
    model's files. `model_threads` caps the threads the local embedding model uses per call (None: every core,
    the lowest latency; 1 serves more queries/s to many concurrent callers, see docs/serve.md).
    """

    home: Path
    database_url: str | None = None
    query_database_url: str | None = None
    model_dir: Path | None = None
    config: ConfigFile = field(default_factory=ConfigFile)
    config_file: Path | None = None
    model_threads: int | None = None

    @classmethod
    def from_env(
        cls, *, home: str | Path | None = None, database_url: str | None = None, query_database_url: str | None = None
    ) -> Settings:
        """Build settings from explicit values, then `KBCTL_HOME`, `KBCTL_DATABASE_URL`, `KBCTL_QUERY_DATABASE_URL`,
        `KBCTL_MODEL_DIR`, and the configuration file (`KBCTL_CONFIG`, default ~/.config/kbctl/config.yaml)."""
        raw_home = home or os.environ.get("KBCTL_HOME") or DEFAULT_HOME
        url = database_url or os.environ.get("KBCTL_DATABASE_URL") or None
        query_url = query_database_url or os.environ.get("KBCTL_QUERY_DATABASE_URL") or None
        model_dir = os.environ.get("KBCTL_MODEL_DIR") or None
        path = config_path()
        threads = os.environ.get("KBCTL_MODEL_THREADS", "").strip()
        if threads and not (threads.isdigit() and 1 <= int(threads) <= 256):
            raise KbctlError(f"KBCTL_MODEL_THREADS must be a number of threads from 1 to 256, got {threads!r}")
        return cls(
            home=Path(raw_home).expanduser().resolve(),
            database_url=url,
            query_database_url=query_url,
            model_dir=Path(model_dir).expanduser().resolve() if model_dir else None,
            config=with_env_overrides(load_config(path), os.environ),
            config_file=path,
            model_threads=int(threads) if threads else None,
        )

    def __repr__(self) -> str:
        url = None if self.database_url is None else redact(self.database_url)
        query_url = None if self.query_database_url is None else redact(self.query_database_url)
        return (
            f"Settings(home={self.home!r}, database_url={url!r}, query_database_url={query_url!r}, "
            f"model_dir={self.model_dir!r}, "
            f"config={self.config!r}, config_file={self.config_file!r})"
        )

    @property
    def pgdata(self) -> Path:
        """The embedded PostgreSQL data directory (not created here: the server lays it out)."""
        return self.home / "pg"

    @property
    def models_dir(self) -> Path:
        """Where prepared local model folders live; created (with the home) when first asked for.

        Raises KbctlError, one line naming the folder and the reason, when it cannot be created or written
        (the home is a file, lies under /proc, or is read-only).
        """
        return self.ensure_dir(self.home / "models")

    def ensure_dir(self, path: Path) -> Path:
        """`path` (a folder under the home) created if needed and writable, else a KbctlError saying why."""
        try:
            return ensure_dir(path)
        except KbctlError as exc:
            hint = f"kbctl keeps its files in {self.home}; set KBCTL_HOME to a writable folder"
            raise KbctlError(f"{exc} ({hint})") from exc


def _blocking_file(path: Path) -> Path | None:
    """The first of `path` and its parents that exists and is not a folder, if any."""
    for candidate in (path, *path.parents):
        if candidate.exists() or candidate.is_symlink():
            return None if candidate.is_dir() else candidate
    return None


def ensure_dir(path: Path) -> Path:
    """Create the folder `path` (and its parents) if needed and check that kbctl can write in it.

    Every failure is one KbctlError line naming the folder and the reason ("... is a file, not a folder",
    "permission denied", "read-only file system"), never an OSError traceback.
    """
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        blocking = _blocking_file(path)
        if blocking is not None:
            raise KbctlError(f"cannot create the folder {path}: {blocking} is a file, not a folder") from exc
        code = exc.errno if exc.errno is not None else errno.EIO
        reason = os.strerror(code).lower()
        existing = next((a for a in path.parents if a.exists()), None)
        if code == errno.ENOENT and existing is not None and existing.is_dir():  # e.g. /proc takes no new folders
            reason = f"{existing} does not allow creating folders"
        raise KbctlError(f"cannot create the folder {path}: {reason}") from exc
    if not os.access(path, os.W_OK | os.X_OK):
        raise KbctlError(f"cannot write in the folder {path}: permission denied")
    return path


def effective_config(settings: Settings) -> dict[str, Any]:
    """What `kbctl config view` shows: every setting in force, secrets redacted.

    API keys are never read out: each provider shows the name of its key variable and whether it is set. A
    database password (URL userinfo, `?password=`, conninfo `password=`), credentials and secret query
    parameters of a provider's baseURL, and extra request fields named like secrets are shown as ***; every
    string shown passes through `redact`.
    """
    providers = _shown({**BUILTIN_PROVIDERS, **settings.config.embedding.providers})
    rerankers = _shown({**BUILTIN_RERANKERS, **settings.config.rerank.providers})
    chats = _shown({**BUILTIN_CHAT_PROVIDERS, **settings.config.chat.providers})
    found = settings.config_file is not None and settings.config_file.is_file()
    shown = {
        "configFile": f"{settings.config_file} ({'found' if found else 'absent'})",
        "home": str(settings.home),
        "database": settings.database_url if settings.database_url else f"embedded ({settings.pgdata})",
        "queryDatabase": settings.query_database_url,  # None: queries read the database above
        "modelDir": str(settings.model_dir) if settings.model_dir else None,
        "allowPrivateNetworks": settings.config.allow_private_networks,
        "allowNetworks": list(settings.config.allow_networks),
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
        "chat": {
            "defaultModel": settings.config.chat.default_model,
            "judgeModel": settings.config.chat.judge_model,
            "providers": chats,
            "profiles": {
                n: p.model_dump(by_alias=True, mode="json", exclude_none=True)
                for n, p in settings.config.chat.profiles.items()
            },
        },
        "serve": {
            "tokens": {  # the token's variable and whether it is set, never its value
                n: t.model_dump(by_alias=True, mode="json", exclude_none=True)
                | {"tokenEnv": f"{t.token_env} ({'set' if os.environ.get(t.token_env) else 'not set'})"}
                for n, t in settings.config.serve.tokens.items()
            }
        },
    }
    redacted: dict[str, Any] = _redacted(shown)
    return redacted


def _redacted(value: Any) -> Any:
    """Every string in `value` (dicts and lists walked) passed through `redact`."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: _redacted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v) for v in value]
    return value


def _shown(providers: Mapping[str, Provider | RerankProvider | ChatProvider]) -> dict[str, Any]:
    """Providers as `config view` shows them: each key variable named, with whether it is set; extra request
    fields named like secrets (`api_key`, `token`...) as ***."""
    shown: dict[str, Any] = {}
    for name, provider in providers.items():
        data = provider.model_dump(by_alias=True, mode="json")
        env = provider.api_key_env
        data["apiKeyEnv"] = None if env is None else f"{env} ({'set' if os.environ.get(env) else 'not set'})"
        for fields in ("documentFields", "queryFields", "requestFields"):
            if fields in data:
                data[fields] = {k: REDACTED if is_secret_name(k) else v for k, v in data[fields].items()}
        shown[name] = data
    return shown
