"""The one exception hierarchy of kbctl; what each error means: docs/python.md#errors.

    KbctlError
     ├── InputError ── ManifestError, EvalSetError, BeirError
     ├── SourceError, EmbeddingError, RerankError, ChatError, JudgeError, StoreError
     ├── NotFoundError, LimitError, RollbackError, ManagedError, AuthError
     └── UsageError (also a ValueError)

"The world failed" and "you called it wrong" stay apart: a bad argument raises UsageError, which is both a
KbctlError and a ValueError; an argument of the wrong type is still a TypeError. No bare ValueError leaves
kbctl's API (tests/test_errors.py checks).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "AuthError",
    "BeirError",
    "ChatError",
    "EmbeddingError",
    "EvalSetError",
    "InputError",
    "JudgeError",
    "KbctlError",
    "LimitError",
    "ManagedError",
    "ManifestError",
    "ManifestProblem",
    "NotFoundError",
    "RerankError",
    "RollbackError",
    "SourceError",
    "StoreError",
    "UsageError",
]


class KbctlError(Exception):
    """Root of every error kbctl raises on purpose."""


@dataclass(frozen=True)
class ManifestProblem:
    """One problem in one manifest: where it is and what is wrong."""

    path: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class InputError(KbctlError):
    """One or more input files are invalid; `problems` lists each (file, line, field, message), in file order."""

    def __init__(self, problems: list[ManifestProblem]) -> None:
        if not problems:
            raise UsageError(f"{type(self).__name__} needs at least one problem")
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class ManifestError(InputError):
    """One or more KnowledgeBase manifests are invalid."""


class EvalSetError(InputError):
    """An eval set is invalid."""


class BeirError(InputError):
    """A BEIR-format dataset (corpus, queries, qrels) is invalid."""


class SourceError(KbctlError):
    """A source could not be read, fetched or turned into text."""


class EmbeddingError(KbctlError):
    """The embedding model could not be loaded, or embedding failed."""


class RerankError(KbctlError):
    """The reranker could not be loaded, or reranking failed."""


class ChatError(KbctlError):
    """The chat model is not configured, or a chat completion failed."""


class JudgeError(KbctlError):
    """The judge's reply could not be read as a judgement."""


class StoreError(KbctlError):
    """The PostgreSQL store could not be reached, migrated, read or written."""


class NotFoundError(KbctlError):
    """A named object (knowledge base, version) does not exist in the store."""


class LimitError(KbctlError):
    """An apply or refresh would exceed one of the knowledge base's spec.limits; nothing was sent or published."""


class RollbackError(KbctlError):
    """A rollback that cannot be done as asked (the version asked for already serves)."""


class ManagedError(KbctlError):
    """A change by hand (apply, rollout undo, delete) of a knowledge base a Sync manages, refused without force: the
    Sync would undo it on its next pass. Nothing was written."""


class AuthError(KbctlError):
    """A caller's credentials could not be accepted: a JWT whose signature, issuer, audience or expiry fails, whose
    keys cannot be read, or whose claims are not in a known format (refused, never read as "no groups")."""


class UsageError(KbctlError, ValueError):
    """The Python API was called wrong: an argument out of its bounds or unparsable (a ValueError too, so
    `except ValueError` still catches it, and pydantic validators may raise it as a field's problem)."""
