"""JWT bearers of the organisation's identity provider (`serve.oidc`): verified, then read as a caller (`Reader`).

A JWT is accepted when it is signed by one of the issuer's keys with an allowed asymmetric algorithm, its issuer
and (if configured) audience match, and it has not expired (`exp` required, `leeway` of clock skew); its groups
claim and label claims must have their documented shapes, or the token is refused. Every refusal is an AuthError
with a short reason that never quotes the token. Keys come from a JWKS file, or a JWKS URL fetched over https and
kept `cacheSeconds`; an unknown key id fetches them again at most once per REFETCH_SECONDS, and stale keys are not
used while fetching fails (closed, not open). One lock guards the keys across the server's worker threads.

The rules in full: docs/access.md#an-identity-provider-oidc, docs/reliability.md.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import httpx
import jwt

from kbctl._version import __version__
from kbctl.errors import AuthError, KbctlError, UsageError
from kbctl.inputs.access import Reader
from kbctl.userconfig import ServeOidc

__all__ = [
    "FETCH_TIMEOUT",
    "MAX_JWKS_BYTES",
    "MAX_JWKS_KEYS",
    "MAX_TOKEN_CHARS",
    "REFETCH_SECONDS",
    "SUBJECT_MAX_CHARS",
    "OidcVerifier",
    "looks_like_jwt",
]

MAX_TOKEN_CHARS: Final = 16 * 1024  # a JWT with a thousand groups is ~40 characters a group: ample
SUBJECT_MAX_CHARS: Final = 256  # a JWT's subject as a caller is named (the retrieval log): an id, an e-mail
MAX_JWKS_BYTES: Final = 1024 * 1024  # one key set, file or response body (decompressed)
MAX_JWKS_KEYS: Final = 100  # keys in one set (identity providers publish a handful)
FETCH_TIMEOUT: Final = 5.0  # seconds for the whole fetch of a JWKS URL
REFETCH_SECONDS: Final = 30.0  # at least this long between two fetches for an unknown kid, or after a failure

_SEGMENT = r"[A-Za-z0-9_-]+"
_JWT = re.compile(rf"{_SEGMENT}\.{_SEGMENT}\.[A-Za-z0-9_-]*")  # the signature of an unsigned JWT is empty
_REASON_CHARS = 200
_TIME_CLAIMS: Final = ("exp", "nbf", "iat")  # the NumericDate claims pyjwt reads (checked when present)


def looks_like_jwt(value: str) -> bool:
    """Whether `value` has the shape of a JWT: three non-empty base64url segments joined by dots, the first a JSON
    object with an `alg`. Cheap, and verifies nothing: it tells a JWT from an opaque bearer token."""
    parts = value.split(".")
    if len(parts) != 3 or not all(re.fullmatch(_SEGMENT, part) for part in parts):
        return False
    header = _json_segment(parts[0])
    return isinstance(header, dict) and "alg" in header


def _json_segment(segment: str) -> Any:
    """A base64url segment decoded as JSON; None when it is neither (or too long, or nested too deep)."""
    if len(segment) > MAX_TOKEN_CHARS:
        return None
    try:
        return json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    except (binascii.Error, ValueError, RecursionError):
        return None


class _Unusable(Exception):
    """A key set that cannot be used; its message says why."""


@dataclass(frozen=True)
class _KeySet:
    """The usable public keys of a JWKS, each bound to one algorithm: (kid, key) per algorithm name."""

    by_algorithm: Mapping[str, Sequence[tuple[str | None, jwt.PyJWK]]]

    def pick(self, algorithm: str, kid: str | None) -> jwt.PyJWK | None:
        """The key with this `kid` for `algorithm`; without a kid, the only key for it (None when there are more)."""
        keys = self.by_algorithm.get(algorithm, ())
        if kid is None:
            return keys[0][1] if len(keys) == 1 else None
        return next((key for key_id, key in keys if key_id == kid), None)


def _key_set(body: bytes, algorithms: Sequence[str]) -> _KeySet:
    """The keys of a JWKS document usable with `algorithms`; _Unusable when it is no JWKS or holds none."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        raise _Unusable("not JSON") from None
    raw_keys = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(raw_keys, list):
        raise _Unusable('not a JSON Web Key Set (an object with a list of "keys")')
    if len(raw_keys) > MAX_JWKS_KEYS:
        raise _Unusable(f"{len(raw_keys)} keys, over the limit of {MAX_JWKS_KEYS}")
    by_algorithm = {alg: [(kid, key) for raw in raw_keys for kid, key in _usable(raw, alg)] for alg in algorithms}
    if not any(by_algorithm.values()):
        raise _Unusable(f"no public signing key usable with {', '.join(algorithms)}")
    return _KeySet(by_algorithm)


def _usable(raw: object, algorithm: str) -> Iterator[tuple[str | None, jwt.PyJWK]]:
    """The key of one JWK for `algorithm`, if it is a public signing key of that algorithm's type (and curve)."""
    if (
        not isinstance(raw, dict)
        or "d" in raw
        or raw.get("use", "sig") != "sig"
        or raw.get("alg", algorithm) != algorithm
    ):
        return  # not a JWK, a private key, an encryption key, or bound to another algorithm
    try:
        key = jwt.PyJWK(raw, algorithm=algorithm)  # refuses another key type
        key.Algorithm.prepare_key(key.key)  # refuses another curve (an ES256 key must be P-256)
    except (jwt.PyJWTError, TypeError, ValueError):
        return
    kid = raw.get("kid")
    yield (kid if isinstance(kid, str) else None), key


def _numeric_date(value: object) -> bool:
    """Whether a claim is a JSON number, as RFC 7519 requires of a NumericDate: pyjwt reads one with int(), which
    takes "1893456000" and True alike; neither is a number here."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value)


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _read_jwks_file(path: str) -> bytes:
    """The bytes of a regular file of at most MAX_JWKS_BYTES; OSError or _Unusable otherwise."""
    fd = os.open(os.path.expanduser(path), os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block the start
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _Unusable("not a regular file")
    with os.fdopen(fd, "rb") as file:
        body = file.read(MAX_JWKS_BYTES + 1)
    if len(body) > MAX_JWKS_BYTES:
        raise _Unusable(f"larger than the limit of {MAX_JWKS_BYTES // 1024 // 1024} MiB")
    return body


def _shown_url(url: str) -> str:
    """The URL without its user, query and fragment: what messages may show."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        return "the jwksURL"
    port = f":{parsed.port}" if parsed.port is not None else ""
    return f"{parsed.scheme}://{parsed.host}{port}{parsed.path}"


class OidcVerifier:
    """Verifies the JWTs of one identity provider (`serve.oidc`) and reads each as a `Reader`.

    `environ` is accepted like `Tokens`' (no setting of serve.oidc names an environment variable yet); `transport`
    replaces the network for the JWKS URL (tests); `clock` (monotonic seconds) times the key cache.
    """

    def __init__(
        self,
        config: ServeOidc,
        *,
        config_file: str = "the configuration",
        environ: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self._transport = transport
        self._clock = clock
        self._lock = threading.Lock()
        self._keys: _KeySet | None = None
        self._fetched_at = float("-inf")  # the last fetch that succeeded
        self._tried_at = float("-inf")  # the last fetch, whatever came of it
        self._failure: str | None = None  # why the last fetch failed (None: it succeeded)
        self._where = _shown_url(config.jwks_url) if config.jwks_url is not None else ""
        if config.jwks_file is not None:
            self._keys = self._load_file(config.jwks_file, f"{config_file}: serve.oidc.jwksFile")

    def _load_file(self, path: str, where: str) -> _KeySet:
        try:
            return _key_set(_read_jwks_file(path), self.config.algorithms)
        except OSError as exc:
            raise KbctlError(f"{where}: cannot read {path}: {exc.strerror or exc}") from None
        except _Unusable as exc:
            raise KbctlError(f"{where}: {path}: {exc}") from None

    # ---- verification ----

    def verify(self, token: str) -> Reader:
        """The caller a JWT stands for; AuthError (a short reason, never the token) when it is not accepted."""
        return self.identify(token)[0]

    def identify(self, token: str) -> tuple[Reader, str | None]:
        """The caller a JWT stands for and its subject (the `sub` claim, cut at SUBJECT_MAX_CHARS; None without
        one), as `verify` accepts it."""
        if len(token) > MAX_TOKEN_CHARS:
            raise AuthError(f"the token is longer than {MAX_TOKEN_CHARS // 1024} KiB")
        if not _JWT.fullmatch(token):
            raise AuthError("the token is not a JWT (three base64url parts joined by dots)")
        header = _json_segment(token.split(".", 1)[0])
        if not isinstance(header, dict):
            raise AuthError("the token's header is not a JSON object")
        algorithm, kid = header.get("alg"), header.get("kid")
        if algorithm not in self.config.algorithms:
            allowed = ", ".join(self.config.algorithms)
            raise AuthError(f"the token's algorithm {str(algorithm)[:32]!r} is not allowed (only {allowed})")
        if kid is not None and not isinstance(kid, str):
            raise AuthError("the token's key id (kid) is not a string")
        claims = self._decode(token, self._key(algorithm, kid))
        subject = claims.get("sub")
        if isinstance(subject, str) and subject and subject.isprintable():
            return self._reader(claims), subject[:SUBJECT_MAX_CHARS]
        return self._reader(claims), None

    def _decode(self, token: str, key: jwt.PyJWK) -> dict[str, Any]:
        config = self.config
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=list(config.algorithms),
                issuer=config.issuer,
                audience=config.audience,
                leeway=config.leeway,
                options={"require": ["exp", "iss"], "verify_aud": config.audience is not None},
            )
        except jwt.InvalidSignatureError:
            raise AuthError("the token's signature does not verify") from None
        except jwt.ExpiredSignatureError:
            raise AuthError("the token has expired") from None
        except jwt.ImmatureSignatureError:
            raise AuthError("the token is not valid yet") from None
        except jwt.InvalidIssuerError:
            raise AuthError(f"the token is not issued by {config.issuer}") from None
        except jwt.InvalidAudienceError:
            raise AuthError(f"the token is not meant for audience {config.audience}") from None
        except jwt.MissingRequiredClaimError as exc:
            raise AuthError(f"the token has no {exc.claim!r} claim") from None
        except jwt.PyJWTError as exc:
            raise AuthError(f"the token is not valid: {str(exc)[:_REASON_CHARS]}") from None
        for name in _TIME_CLAIMS:
            if name in claims and not _numeric_date(claims[name]):
                raise AuthError(f"the token's {name!r} claim must be a number (RFC 7519 NumericDate)")
        return claims

    def _reader(self, claims: Mapping[str, Any]) -> Reader:
        name = self.config.groups_claim
        groups = claims.get(name, [])
        if not _strings(groups):
            raise AuthError(f"unknown claim format: {name!r} must be a list of strings")
        labels: dict[str, str | list[str]] = {}
        for label in self.config.label_claims:
            if label not in claims:
                continue
            value = claims[label]
            if not (isinstance(value, str) or _strings(value)):
                raise AuthError(f"unknown claim format: {label!r} must be a string or a list of strings")
            labels[label] = value
        try:
            return Reader.of(groups, labels)
        except UsageError as exc:
            raise AuthError(f"the token's claims cannot be used: {exc}") from None

    # ---- keys ----

    def _key(self, algorithm: str, kid: str | None) -> jwt.PyJWK:
        """The key to verify with: from the file, else from the URL's cached keys (fetched again when stale, or
        once per REFETCH_SECONDS when they lack `kid`)."""
        url = self.config.jwks_url
        if url is None:
            key = self._keys.pick(algorithm, kid) if self._keys is not None else None
        else:
            with self._lock:
                now = self._clock()
                if self._keys is None or now - self._fetched_at >= self.config.cache_seconds:
                    self._refresh(now, url)
                key = self._keys.pick(algorithm, kid) if self._keys is not None else None
                if key is None and kid is not None and now - self._tried_at >= REFETCH_SECONDS:
                    self._refresh(now, url)
                    key = self._keys.pick(algorithm, kid) if self._keys is not None else None
        if key is not None:
            return key
        if kid is None:
            raise AuthError(f"the token names no key (kid) and the identity provider has no single {algorithm} key")
        raise AuthError(f"the identity provider has no {algorithm} key {kid[:64]!r}")

    def _refresh(self, now: float, url: str) -> None:
        """Fetch the keys (the caller holds the lock); after a failure, not again for REFETCH_SECONDS."""
        if self._failure is not None and now - self._tried_at < REFETCH_SECONDS:
            raise AuthError(self._failure)
        self._tried_at = now
        try:
            self._keys = self._fetch(url)
        except AuthError as exc:
            self._failure = str(exc)
            raise
        self._fetched_at, self._failure = now, None

    def _fetch(self, url: str) -> _KeySet:
        """The key set at the JWKS URL: https, no redirects, FETCH_TIMEOUT in all, at most MAX_JWKS_BYTES."""
        try:
            body = self._get(url)
            return _key_set(body, self.config.algorithms)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            reason = str(exc) or type(exc).__name__
        except _Unusable as exc:
            reason = str(exc)
        raise AuthError(f"the identity provider's keys could not be read: {self._where}: {reason[:_REASON_CHARS]}")

    def _get(self, url: str) -> bytes:
        deadline = time.monotonic() + FETCH_TIMEOUT
        headers = {"User-Agent": f"kbctl/{__version__}", "Accept": "application/jwk-set+json, application/json"}
        with (
            httpx.Client(
                transport=self._transport,
                timeout=httpx.Timeout(FETCH_TIMEOUT),
                follow_redirects=False,  # certifi's roots, or SSL_CERT_FILE / SSL_CERT_DIR (httpx's trust_env)
            ) as client,
            client.stream("GET", url, headers=headers) as response,
        ):
            if response.status_code != 200:
                moved = " (redirects are not followed)" if response.is_redirect else ""
                raise _Unusable(f"HTTP {response.status_code} {response.reason_phrase}".rstrip() + moved)
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_JWKS_BYTES:
                    raise _Unusable(f"the response is larger than {MAX_JWKS_BYTES // 1024 // 1024} MiB")
                if time.monotonic() > deadline:
                    raise _Unusable(f"the response took longer than {FETCH_TIMEOUT:g} s")
        return bytes(body)
