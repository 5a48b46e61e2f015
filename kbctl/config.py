"""Where kbctl keeps its files and which database it talks to, from the environment."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Settings"]

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

    @classmethod
    def from_env(cls, *, home: str | Path | None = None, database_url: str | None = None) -> Settings:
        """Build settings from explicit values, then `KBCTL_HOME`, `KBCTL_DATABASE_URL`, `KBCTL_MODEL_DIR`."""
        raw_home = home or os.environ.get("KBCTL_HOME") or DEFAULT_HOME
        url = database_url or os.environ.get("KBCTL_DATABASE_URL") or None
        model_dir = os.environ.get("KBCTL_MODEL_DIR") or None
        return cls(
            home=Path(raw_home).expanduser().resolve(),
            database_url=url,
            model_dir=Path(model_dir).expanduser().resolve() if model_dir else None,
        )

    @property
    def pgdata(self) -> Path:
        """The embedded PostgreSQL data directory."""
        return self.home / "pg"

    @property
    def models_dir(self) -> Path:
        """Where prepared local model folders live."""
        return self.home / "models"
