"""A store configured with an embedding provider (and more) written to a config file of the test's own."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings

__all__ = ["configured_store"]


@contextmanager
def configured_store(
    store: KnowledgeBaseStore, config: str, folder: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> Iterator[KnowledgeBaseStore]:
    """A second store on `store`'s database and home whose KBCTL_CONFIG is `config` (YAML, written in `folder`),
    with the variables of `env` set (the providers' keys)."""
    path = folder / "config.yaml"
    path.write_text(config)
    monkeypatch.setenv("KBCTL_CONFIG", str(path))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    s = KnowledgeBaseStore(
        settings=Settings.from_env(home=store.settings.home, database_url=store.settings.database_url)
    )
    try:
        yield s
    finally:
        s.close()
