"""Who is asking: bearer tokens from kbctl's configuration, each read-only within a scope of knowledge bases.

A token is defined by the NAME of the environment variable that holds it (`serve.tokens.<name>.tokenEnv`), like
provider keys; only its name is ever shown. Without any token configured, every caller is `anonymous` and sees
every knowledge base, which `kbctl serve` allows on a loopback address only (see `kbctl.serve.run`).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from kbctl.errors import KbctlError
from kbctl.manifest.selectors import Selector, parse_selector
from kbctl.userconfig import ServeConfig

__all__ = ["ANONYMOUS", "MIN_TOKEN_CHARS", "Principal", "Tokens"]

MIN_TOKEN_CHARS = 16  # a shorter secret is refused at start: it could be guessed


@dataclass(frozen=True)
class Principal:
    """A caller and the knowledge bases it may see: `names`, those matching `selector`, or all of them."""

    name: str  # the token's name in the configuration (never the token)
    names: frozenset[str] = frozenset()
    selector: Selector | None = None
    everything: bool = False
    metrics: bool = False  # may read /metrics (its labels name knowledge bases of every scope)

    def may_see(self, name: str, labels: Mapping[str, str]) -> bool:
        """Whether the knowledge base `name` with these labels is in scope."""
        if self.everything or name in self.names:
            return True
        return self.selector is not None and self.selector.matches(labels)


ANONYMOUS = Principal(name="anonymous", everything=True, metrics=True)
"""The caller when no token is configured (loopback only), and the local user of `kbctl mcp` over stdio."""


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class Tokens:
    """The configured tokens, read from the environment once; `authenticate` maps a header to a Principal."""

    def __init__(self, config: ServeConfig, environ: Mapping[str, str], *, config_file: str = "the configuration"):
        self._by_digest: list[tuple[bytes, Principal]] = []
        for name, token in config.tokens.items():
            where = f"{config_file}: serve.tokens.{name}"
            value = environ.get(token.token_env, "")
            if not value:
                raise KbctlError(f"{where}: the environment variable {token.token_env} is not set or empty")
            if len(value) < MIN_TOKEN_CHARS:
                raise KbctlError(
                    f"{where}: the token in {token.token_env} is shorter than {MIN_TOKEN_CHARS} characters "
                    "(generate one with: python -c 'import secrets; print(secrets.token_urlsafe(32))')"
                )
            try:
                selector = parse_selector(token.selector) if token.selector is not None else None
            except ValueError as exc:
                raise KbctlError(f"{where}.selector: {exc}") from None
            principal = Principal(
                name=name, names=frozenset(token.knowledge_bases), selector=selector, metrics=token.metrics
            )
            self._by_digest.append((_digest(value), principal))

    @property
    def count(self) -> int:
        return len(self._by_digest)

    @property
    def configured(self) -> bool:
        """Whether any token is configured (then every request but the health checks needs one)."""
        return bool(self._by_digest)

    def authenticate(self, authorization: str | None) -> Principal | None:
        """The caller of an `Authorization` header: ANONYMOUS when no token is configured, None when the header
        is missing, malformed or carries no configured token."""
        if not self.configured:
            return ANONYMOUS
        scheme, _, value = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            return None
        digest = _digest(value.strip())
        found = None
        for known, principal in self._by_digest:  # every token compared, in constant time each
            if hmac.compare_digest(known, digest):
                found = principal
        return found
