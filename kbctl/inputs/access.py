"""Who is reading: a caller's groups and claims, bounded and checked, and the rule that matches them to a document's
access (a manifest's `access`: groups, labels).

A document's access names the groups that may read it (any one of them suffices) and labels that the caller's
claims must all hold (`department: hr` needs a claim `department` whose value, or one of whose values, is `hr`).
A document without access is readable by every caller; a caller without groups or claims reads only those
(fail closed). The same rule runs in SQL where candidates are selected (kbctl.store.access); this module is its
Python form, used to check it and to describe it.

A caller comes from a bearer token's configuration, a verified JWT's claims, `--as-group` on the command line or
a Python caller; every route builds it here, so one bound holds: at most READER_GROUPS_MAX groups and
READER_CLAIMS_MAX claim values, each name at most GROUP_MAX_CHARS characters of printable text.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from kbctl.errors import UsageError

__all__ = [
    "ACCESS_GROUPS_MAX",
    "ACCESS_LABELS_MAX",
    "GROUP_MAX_CHARS",
    "READER_CLAIMS_MAX",
    "READER_GROUPS_MAX",
    "Reader",
    "check_group",
    "label_terms",
    "may_read",
]

GROUP_MAX_CHARS: Final = 256  # a group name (an identity provider's group, a GUID, a path such as /org/hr)
ACCESS_GROUPS_MAX: Final = 100  # groups one access rule names
ACCESS_LABELS_MAX: Final = 20  # labels one access rule requires
READER_GROUPS_MAX: Final = 1_000  # groups one caller holds (a JWT's groups claim included)
READER_CLAIMS_MAX: Final = 1_000  # claim values one caller holds, over every claim read


def check_group(value: str) -> str:
    """A group name: 1 - GROUP_MAX_CHARS characters, none of them a control character."""
    if not isinstance(value, str):
        raise UsageError(f"a group must be a string, got {type(value).__name__}")
    if not value or len(value) > GROUP_MAX_CHARS:
        raise UsageError(f"a group must be 1-{GROUP_MAX_CHARS} characters, got {len(value)}")
    if any(ord(c) < 32 or 127 <= ord(c) < 160 or 0xD800 <= ord(c) < 0xE000 for c in value):
        raise UsageError("a group must not hold control characters or lone surrogates")
    return value


def _check_claim(key: str, value: str) -> tuple[str, str]:
    if not isinstance(key, str) or not isinstance(value, str):
        raise UsageError("a claim's name and values must be strings")
    if "=" in key:
        raise UsageError(f"a claim name must not hold '=': {key[:64]!r}")
    return check_group(key), check_group(value)


def label_terms(labels: Mapping[str, str]) -> list[str]:
    """A label requirement (or a caller's claims) as the terms the SQL filter compares: `key=value`, sorted."""
    return sorted(f"{k}={v}" for k, v in labels.items())


@dataclass(frozen=True)
class Reader:
    """A caller of a query: the groups it is in and the claims it holds (claim name, value). `Reader()` is a caller
    with neither, who reads only documents without access rules.

    >>> Reader.of(["hr"], {"department": ["hr", "finance"]}).claim_terms()
    ['department=finance', 'department=hr']
    """

    groups: frozenset[str] = frozenset()
    claims: frozenset[tuple[str, str]] = field(default_factory=frozenset)

    @classmethod
    def of(cls, groups: Iterable[str] = (), claims: Mapping[str, str | Iterable[str]] | None = None) -> Reader:
        """A caller from groups and claims (a claim's value: a string or strings), each checked and bounded;
        UsageError for anything else (a number, a nested object, too many values)."""
        if isinstance(groups, str):
            raise UsageError("groups must be a list of strings, not one string")
        checked: set[str] = set()
        for group in groups:
            checked.add(check_group(group))
            if len(checked) > READER_GROUPS_MAX:
                raise UsageError(f"a caller may hold at most {READER_GROUPS_MAX:,} groups")
        pairs: set[tuple[str, str]] = set()
        for key, value in (claims or {}).items():
            values = [value] if isinstance(value, str) else value
            if not isinstance(values, Iterable) or isinstance(values, Mapping | bytes):
                raise UsageError(f"claim {str(key)[:64]!r} must be a string or a list of strings")
            for item in values:
                pairs.add(_check_claim(key, item))
                if len(pairs) > READER_CLAIMS_MAX:
                    raise UsageError(f"a caller may hold at most {READER_CLAIMS_MAX:,} claim values")
        return cls(frozenset(checked), frozenset(pairs))

    @property
    def anonymous(self) -> bool:
        """Whether the caller holds no group and no claim (it reads only unrestricted documents)."""
        return not self.groups and not self.claims

    def group_list(self) -> list[str]:
        """The groups, sorted (what the SQL filter receives)."""
        return sorted(self.groups)

    def claim_terms(self) -> list[str]:
        """The claims as `name=value` terms, sorted (what the SQL filter receives)."""
        return sorted(f"{k}={v}" for k, v in self.claims)

    def describe(self) -> str:
        """The caller in words, for logs and errors: its groups and claim names (never a token)."""
        if self.anonymous:
            return "no groups"
        parts = [f"groups {', '.join(self.group_list())}"] if self.groups else []
        parts += [f"claims {', '.join(sorted({k for k, _ in self.claims}))}"] if self.claims else []
        return "; ".join(parts)


def may_read(reader: Reader, groups: Iterable[str] | None, labels: Iterable[str] | None) -> bool:
    """Whether `reader` may read a document whose access names `groups` (None: no group rule) and requires the
    label terms `labels` (None: none): in one of the groups, and holding every label. The SQL filter's rule."""
    if groups is not None and not (set(groups) & reader.groups):
        return False
    return labels is None or set(labels) <= set(reader.claim_terms())
