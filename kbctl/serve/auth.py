"""Who is asking: bearer tokens from kbctl's configuration, each read-only within a scope of knowledge bases, or
JWTs of the organisation's identity provider (`serve.oidc`, verified by kbctl.serve.oidc).

A token is defined by the NAME of the environment variable that holds it (`serve.tokens.<name>.tokenEnv`), like
provider keys; only its name is ever shown. Each token (and each verified JWT) also carries the caller's groups and
claims, a `Reader`: the documents behind an `access` rule it does not meet are never retrieved for it. Without any
token or identity provider configured, every caller is `anonymous` and sees every knowledge base, which `kbctl
serve` allows on a loopback address only (see `kbctl.serve.run`), with the groups given by `--as-group` (none by
default: only documents without an access rule).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from kbctl.errors import AuthError, KbctlError
from kbctl.inputs.access import Reader
from kbctl.manifest.selectors import Selector, parse_selector
from kbctl.serve.oidc import OidcVerifier, looks_like_jwt
from kbctl.userconfig import ServeConfig

__all__ = ["ANONYMOUS", "MIN_TOKEN_CHARS", "Principal", "Tokens"]

_log = logging.getLogger("kbctl.serve")

MIN_TOKEN_CHARS = 16  # a shorter secret is refused at start: it could be guessed


@dataclass(frozen=True)
class Principal:
    """A caller and the knowledge bases it may see: `names`, those matching `selector`, or all of them."""

    name: str  # the token's name in the configuration (never the token)
    names: frozenset[str] = frozenset()
    selector: Selector | None = None
    everything: bool = False
    metrics: bool = False  # may read /metrics (its labels name knowledge bases of every scope)
    reader: Reader = field(default_factory=Reader)  # its groups and claims: which restricted documents it reads
    subject: str | None = None  # a verified JWT's subject (`sub`), None for a configured token

    @property
    def caller(self) -> str:
        """Who it is, as the retrieval log records it: the token's name, or `oidc:` and the JWT's subject."""
        return f"oidc:{self.subject}" if self.subject is not None else self.name

    def may_see(self, name: str, labels: Mapping[str, str]) -> bool:
        """Whether the knowledge base `name` with these labels is in scope."""
        if self.everything or name in self.names:
            return True
        return self.selector is not None and self.selector.matches(labels)


ANONYMOUS = Principal(name="anonymous", everything=True, metrics=True)
"""The caller when no token is configured (loopback only), and the local user of `kbctl mcp` over stdio."""


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def _selector(text: str | None, where: str) -> Selector | None:
    try:
        return parse_selector(text) if text is not None else None
    except ValueError as exc:
        raise KbctlError(f"{where}.selector: {exc}") from None


class Tokens:
    """The configured tokens, read from the environment once, and the identity provider's JWTs when configured;
    `authenticate` maps a header to a Principal. `anonymous` is the caller when neither is configured."""

    def __init__(
        self,
        config: ServeConfig,
        environ: Mapping[str, str],
        *,
        config_file: str = "the configuration",
        anonymous: Principal = ANONYMOUS,
    ):
        self._by_digest: list[tuple[bytes, Principal]] = []
        self._anonymous = anonymous
        self._oidc: tuple[OidcVerifier, Principal] | None = None
        if config.oidc is not None:
            where = f"{config_file}: serve.oidc"
            verifier = OidcVerifier(config.oidc, config_file=config_file, environ=environ)
            scope = Principal(
                name="oidc",
                names=frozenset(config.oidc.knowledge_bases),
                selector=_selector(config.oidc.selector, where),
            )
            self._oidc = (verifier, scope)
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
            principal = Principal(
                name=name,
                names=frozenset(token.knowledge_bases),
                selector=_selector(token.selector, where),
                metrics=token.metrics,
                reader=Reader.of(token.groups, token.claims),
            )
            self._by_digest.append((_digest(value), principal))

    @property
    def count(self) -> int:
        return len(self._by_digest)

    @property
    def oidc(self) -> bool:
        """Whether JWTs of an identity provider are accepted (serve.oidc)."""
        return self._oidc is not None

    @property
    def configured(self) -> bool:
        """Whether any token or identity provider is configured (then every request but the health checks needs a
        bearer)."""
        return bool(self._by_digest) or self._oidc is not None

    def authenticate(self, authorization: str | None) -> Principal | None:
        """The caller of an `Authorization` header: the anonymous caller when nothing is configured, None when the
        header is missing, malformed, carries no configured token, or a JWT that fails verification (a JWT whose
        claims are in no known format included: refused, never read as a caller without groups)."""
        if not self.configured:
            return self._anonymous
        scheme, _, value = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            return None
        if self._oidc is not None and looks_like_jwt(value.strip()):
            verifier, scope = self._oidc
            try:
                reader, subject = verifier.identify(value.strip())
                return replace(scope, reader=reader, subject=subject)
            except AuthError as exc:
                _log.info("bearer JWT refused: %s", exc)
                return None
        digest = _digest(value.strip())
        found = None
        for known, principal in self._by_digest:  # every token compared, in constant time each
            if hmac.compare_digest(known, digest):
                found = principal
        return found
