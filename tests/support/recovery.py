"""What the recovery tests and bench/interrupted_apply.py share: a corpus of policy files, and reads of an embedded
server that never start it (only the process under test may)."""

from __future__ import annotations

from pathlib import Path

from kbctl.errors import StoreError
from kbctl.store.database import Database
from kbctl.store.embedded import running_url

__all__ = ["read_running", "write_policies"]


def write_policies(folder: Path, files: int, sections: int) -> None:
    """`files` Markdown files of `sections` sections of ~1,000 characters each (one chunk a section)."""
    folder.mkdir(exist_ok=True)
    for f in range(files):
        (folder / f"policy-{f}.md").write_text(
            "\n\n".join(
                f"## Clause {i}\n\n"
                + " ".join(
                    f"Record {j} of clause {i} in policy {f} is kept by the finance team, then archived."
                    for j in range(11)
                )
                for i in range(sections)
            )
        )


def read_running(home: Path, statement: str, *params: object) -> tuple[object, ...] | None:
    """One row read from the embedded server of `home` when it is up (None when it is not), never starting it."""
    url = running_url(home / "pg")
    if url is None:
        return None
    try:
        with Database(url, migrate=False) as db:
            return db.connection.execute(statement, params).fetchone()
    except StoreError:
        return None
