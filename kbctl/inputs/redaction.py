"""Redaction of what people type: the patterns that replace secrets and personal data in a question before it is
kept anywhere (the retrieval log of `kbctl serve`, the spans it exports).

A pattern is a regular expression; each match becomes `[redacted]`. The defaults catch what a question most often
carries by mistake: e-mail addresses, bearer tokens and JWTs, provider keys (`sk-...`), and runs of nine or more
digits (card, account and phone numbers). A configuration adds its own (serve.retrievalLog.redact). Patterns are
bounded in number and length, and a text longer than REDACT_MAX_CHARS is cut before matching, so one question can
never make redaction slow.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from kbctl.errors import UsageError

__all__ = [
    "DEFAULT_REDACTIONS",
    "REDACTED",
    "REDACT_MAX_CHARS",
    "REDACT_PATTERNS_MAX",
    "REDACT_PATTERN_MAX_CHARS",
    "Redactor",
    "compile_pattern",
]

REDACTED: Final = "[redacted]"
REDACT_PATTERNS_MAX: Final = 50  # patterns one configuration may add
REDACT_PATTERN_MAX_CHARS: Final = 500  # characters of one pattern
REDACT_MAX_CHARS: Final = 8_000  # characters of a text redacted: the rest is cut (questions are shorter)

DEFAULT_REDACTIONS: Final[tuple[str, ...]] = (
    r"[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9.-]{1,253}\.[A-Za-z]{2,24}",  # e-mail addresses
    r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}",  # an Authorization header's value
    r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*",  # JWTs
    r"\b(?:sk|pk|rk|ghp|gho|xox[abp])[-_][A-Za-z0-9_-]{12,}",  # provider keys and tokens
    r"\d(?:[ -]?\d){8,}",  # nine digits or more: card, account, phone numbers
)


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """One redaction pattern, compiled; ValueError naming what is wrong (too long, not a regular expression)."""
    if not pattern or len(pattern) > REDACT_PATTERN_MAX_CHARS:
        raise UsageError(f"a redaction pattern must be 1-{REDACT_PATTERN_MAX_CHARS} characters, got {len(pattern)}")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise UsageError(f"not a regular expression: {exc}") from None


@dataclass(frozen=True)
class Redactor:
    """Replaces every match of its patterns (the defaults, then those given) with `[redacted]`."""

    extra: Sequence[str] = ()
    defaults: bool = True
    _compiled: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.extra) > REDACT_PATTERNS_MAX:
            raise UsageError(f"at most {REDACT_PATTERNS_MAX} redaction patterns, got {len(self.extra)}")
        patterns = (*(DEFAULT_REDACTIONS if self.defaults else ()), *self.extra)
        object.__setattr__(self, "_compiled", tuple(compile_pattern(p) for p in patterns))

    def __call__(self, text: str) -> str:
        """`text` (cut at REDACT_MAX_CHARS) with every match replaced."""
        text = text[:REDACT_MAX_CHARS]
        for pattern in self._compiled:
            text = pattern.sub(REDACTED, text)
        return text
