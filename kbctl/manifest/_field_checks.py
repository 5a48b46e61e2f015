"""Check the values of manifest fields (names, labels, URLs), raising UsageError (a ValueError, so a pydantic
validator reports it as the field's problem) with the user's message.

check_url and check_relative_path serve only the manifest's validators and raise plain ValueError."""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import urlsplit

from kbctl.errors import UsageError

__all__ = [
    "CONTEXT_TOKENS_MAX",
    "DNS_LABEL",
    "GIT_URL_FORMS",
    "NAME_MAX",
    "SOURCE_NAME",
    "TOP_K_MAX",
    "check_dns_label",
    "check_git_ref",
    "check_git_url",
    "check_label_key",
    "check_label_value",
    "check_name",
    "check_text",
    "check_url",
    "git_url_host",
]

DNS_LABEL: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
SOURCE_NAME: Final = r"^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$"
_LABEL_NAME = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
NAME_MAX: Final = 63
TOP_K_MAX: Final = 200  # spec.retrieval.topK and every query's top_k (CLI, Python API)
CONTEXT_TOKENS_MAX: Final = 1_000_000  # spec.retrieval.maxContextTokens and every query's max_tokens
_NUL = re.compile("\x00")
_SURROGATE = re.compile("[\ud800-\udfff]")
_LABEL_CHARS = "letters, digits, '-', '_' and '.', starting and ending with a letter or digit"


def check_text(value: str) -> str:
    """Refuse what no manifest string may hold: NUL (PostgreSQL text cannot store it) and lone surrogates
    (half a UTF-16 pair, from an escape such as "\\ud800": not Unicode text, cannot be encoded as UTF-8)."""
    if "\x00" not in value and value.isascii():  # the common case, in one fast pass each (no surrogate is ASCII)
        return value
    nul = _NUL.search(value)
    if nul is not None:
        raise UsageError(f"must not contain a NUL character (\\0), found at character {nul.start() + 1}")
    surrogate = _SURROGATE.search(value)
    if surrogate is not None:
        code = f"U+{ord(surrogate.group()):04X}"
        raise UsageError(
            f"must not contain a lone surrogate ({code}, not valid Unicode), found at character {surrogate.start() + 1}"
        )
    return value


def check_name(value: str, pattern: str, charset: str) -> str:
    """Validate a name against pattern and the 63-character limit, with a message naming charset."""
    if not value:
        raise UsageError("must not be empty")
    if len(value) > NAME_MAX:
        raise UsageError(f"must be at most {NAME_MAX} characters")
    if not re.fullmatch(pattern, value):
        raise UsageError(f"must consist of {charset}, and start and end with a letter or digit")
    return value


def check_dns_label(value: str) -> str:
    """Validate a knowledge base's (or an apply set's) name: a DNS-1123 label of at most 63 characters."""
    return check_name(value, DNS_LABEL, "lowercase letters, digits and '-'")


def check_label_key(key: str) -> str:
    """Validate a Kubernetes-style label key: an optional DNS-subdomain prefix and '/', then a name."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not re.fullmatch(_DNS_SUBDOMAIN, prefix)):
        raise UsageError(
            "invalid label key: the prefix before '/' must be a DNS subdomain "
            "(lowercase letters, digits, '-' and '.', at most 253 characters)"
        )
    if not name or len(name) > NAME_MAX or not re.fullmatch(_LABEL_NAME, name):
        raise UsageError(f"invalid label key: the name must be 1-{NAME_MAX} characters of {_LABEL_CHARS}")
    return key


def check_label_value(value: str) -> str:
    """Validate a Kubernetes-style label value: empty, or a name of at most 63 characters."""
    if value and (len(value) > NAME_MAX or not re.fullmatch(_LABEL_NAME, value)):
        raise UsageError(f"invalid label value: must be empty or 1-{NAME_MAX} characters of {_LABEL_CHARS}")
    return value


def check_url(url: str) -> str:
    """Validate a source URL: absolute http(s), with a host, without credentials."""
    if not url.strip():
        raise ValueError("must not be empty")
    if any(ch.isspace() or ord(ch) < 0x20 for ch in url):
        raise ValueError("URL must not contain whitespace or control characters")
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises ValueError for a bad port
    except ValueError as error:
        raise ValueError(f"URL is malformed: {error}") from None
    if not parts.scheme:
        raise ValueError("URL must start with http:// or https://")
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"URL scheme must be http or https, got {parts.scheme!r}")
    if "@" in parts.netloc:
        raise ValueError("URL must not contain credentials")
    if not parts.hostname:
        raise ValueError("URL must have a host")
    return url


def check_relative_path(value: str) -> str:
    """Validate a `path:` source: a relative path or glob (POSIX separators); whether it stays inside the
    manifest's repository is checked where the files are read."""
    if not value.strip():
        raise ValueError("must not be empty")
    if len(value) > 1024:
        raise ValueError("must be at most 1024 characters")
    if value.startswith(("/", "~")) or (len(value) > 1 and value[1] == ":") or "\\" in value:
        raise ValueError("must be a path relative to the manifest's folder, with / as separator")
    return value


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration_seconds(text: str) -> float:
    """Seconds of a duration as kubectl writes them: 90s, 10m, 1h30m, 250ms, 2d, or a plain number of seconds.

    UsageError for anything else (negative, empty, spaces inside, unknown units)."""
    value = text.strip()
    try:
        seconds = float(value)
    except ValueError:
        parts = _DURATION_PART.findall(value)
        if not parts or "".join(n + u for n, u in parts) != value:
            raise UsageError(f"invalid duration {text!r}; use e.g. 90s, 10m, 1h30m or a number of seconds") from None
        return sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
    if seconds < 0 or seconds != seconds or seconds == float("inf"):
        raise UsageError(f"invalid duration {text!r}; use e.g. 90s, 10m, 1h30m or a number of seconds")
    return seconds


# A host name or address as git is handed it: letters, digits, '.', '-' (never first), or a bracketed IPv6.
_GIT_HOST = r"(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})|\[[0-9A-Fa-f:.]{2,45}\])"
_GIT_USER = r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}"
_GIT_NETWORK_URL = re.compile(
    rf"^(?P<scheme>https|ssh)://(?:{_GIT_USER}@)?(?P<host>{_GIT_HOST})(?::(?P<port>[0-9]{{1,5}}))?(?P<path>/.*)?$"
)
_GIT_SCP_URL = re.compile(rf"^(?:{_GIT_USER}@)?(?P<host>{_GIT_HOST}):(?!//)(?P<path>.+)$")
_GIT_REF = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._/-]{0,199}$")
GIT_URL_FORMS: Final = "https://host/org/repo, ssh://user@host/org/repo or user@host:org/repo"


def check_git_url(value: str) -> str:
    """Validate a `git:` source's URL for the git program: https, ssh, scp-like `user@host:path`, or an absolute
    local folder / `file:///` URL (whether local repositories may be read is decided where they are fetched).

    No part may start with '-' (git would read it as an option: `--upload-pack=...`, `ssh://-oProxyCommand=...`),
    and no `transport::address` form (`ext::`, `fd::`) nor control character or space passes."""
    if not value or len(value) > 2048:
        raise UsageError("must be a repository URL of at most 2048 characters")
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise UsageError("must be a repository URL without spaces or control characters")
    if value.startswith("-"):
        raise UsageError(f"must not start with '-' (git would read it as an option); use {GIT_URL_FORMS}")
    if re.search(r"(?:://|@)-", value):
        raise UsageError("must not name a host or user starting with '-' (git or ssh would read it as an option)")
    if "::" in value.split("/", 1)[0] or re.match(r"^[A-Za-z][A-Za-z0-9+.-]*::", value):
        raise UsageError(f"must not name a git transport ('<transport>::<address>'); use {GIT_URL_FORMS}")
    if re.match(r"^https?://[^/@]*:[^/@]*@", value) or re.match(r"^ssh://[^/@]*:[^/@]*@", value):
        raise UsageError("must not hold a password: git takes credentials from the environment")
    if value.startswith("http://"):
        raise UsageError("must be https, ssh or git@host:path (http is not fetched)")
    if value.startswith("file://"):
        if not value.startswith("file:///") or "/-" in value:
            raise UsageError("must be a file:/// URL of an absolute path with no part starting with '-'")
        return value
    if value.startswith("/"):
        if "/-" in value:
            raise UsageError("must be an absolute path with no part starting with '-'")
        return value
    form = _GIT_NETWORK_URL.match(value) if "://" in value else _GIT_SCP_URL.match(value)
    if form is None:
        if "://" in value and value.split("://", 1)[0] not in ("https", "ssh"):
            raise UsageError(f"unsupported scheme '{value.split('://', 1)[0]}': use {GIT_URL_FORMS}")
        raise UsageError(f"must be {GIT_URL_FORMS} (or, for local mirrors, an absolute path)")
    path = form.group("path") or ""
    if path.startswith("-") or "/-" in path:
        raise UsageError("must not hold a path part starting with '-' (git would read it as an option)")
    return value


def git_url_host(value: str) -> tuple[str, int] | None:
    """(host, port) that a URL `check_git_url` accepted reaches, None for a local folder or file:/// URL."""
    if value.startswith(("/", "file://")):
        return None
    form = _GIT_NETWORK_URL.match(value) if "://" in value else _GIT_SCP_URL.match(value)
    if form is None:
        raise UsageError(f"must be {GIT_URL_FORMS} (or, for local mirrors, an absolute path)")
    parts = form.groupdict()
    default = 443 if parts.get("scheme") == "https" else 22
    return form.group("host").strip("[]"), int(parts.get("port") or default)


def check_git_ref(value: str) -> str:
    """Validate a `git:` source's ref: a branch or tag name that git cannot read as an option."""
    if not _GIT_REF.match(value) or ".." in value or value.endswith((".lock", "/", ".")) or "//" in value:
        raise UsageError(
            "must be a branch or tag name (letters, digits, '.', '_', '/', '-'; not starting with '-' or '.')"
        )
    return value
