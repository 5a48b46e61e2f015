"""kbctl's own configuration file: embedding providers and profiles, and the network allowances of URL sources.

Endpoints, key variable names and limits live here (`~/.config/kbctl/config.yaml`, or the file named
by `KBCTL_CONFIG`), never in manifests, which a pull request can change. Keys themselves live in the
environment: the file names the variable (`apiKeyEnv`, refused unless it looks like a variable name, so a key
pasted there by mistake is never shown back). The file also holds rerank providers and local models, chat
providers and profiles, and `serve` (tokens, OIDC, the retrieval log).

`redact` is the one function that hides secrets (passwords, keys, tokens) in whatever kbctl shows or echoes:
`kbctl config view`, reprs and error messages.
An example of the whole file: docs/architecture.md ("kbctl's configuration file").
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import unquote

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from kbctl.defaults import (
    CHAT_HTTP_RETRIES,
    CHAT_HTTP_TIMEOUT,
    EMBEDDING_HTTP_RETRIES,
    EMBEDDING_HTTP_TIMEOUT,
    RERANK_HTTP_RETRIES,
    RERANK_HTTP_TIMEOUT,
    RETRIEVAL_LOG_DAYS,
    RETRIEVAL_LOG_MAX_ROW_BYTES,
    RETRIEVAL_LOG_MAX_ROWS,
)
from kbctl.errors import InputError, KbctlError, ManifestProblem, UsageError
from kbctl.inputs.access import Reader
from kbctl.inputs.redaction import REDACT_PATTERNS_MAX, compile_pattern

__all__ = [
    "ALLOW_NETWORKS_ENV",
    "ALLOW_PRIVATE_ENV",
    "BUILTIN_CHAT_PROVIDERS",
    "BUILTIN_PROVIDERS",
    "BUILTIN_RERANKERS",
    "REDACTED",
    "ChatProfile",
    "ChatProvider",
    "ConfigFile",
    "Profile",
    "Provider",
    "RerankProvider",
    "RetrievalLogConfig",
    "ServeConfig",
    "ServeToken",
    "config_path",
    "env_allows_private",
    "env_networks",
    "is_secret_name",
    "load_config",
    "network_entry",
    "redact",
    "with_env_overrides",
]

DEFAULT_CONFIG = Path("~/.config/kbctl/config.yaml")
ALLOW_PRIVATE_ENV = "KBCTL_ALLOW_PRIVATE_NETWORKS"
ALLOW_NETWORKS_ENV = "KBCTL_ALLOW_NETWORKS"

# ---- redaction ----

# A parameter or field whose name says it holds a secret: password, sslpassword, pwd, secret, client_secret,
# token, access_token, api-key, apikey, key, subscription-key, sig, X-Amz-Signature, auth, credential...
# Session ids (jsessionid, PHPSESSID, session_id) and one-time codes (OAuth's code, device_code; sid, ticket).
_SECRET_NAME = re.compile(
    r"pass|pwd|secret|token|key|sig|auth|cred|session|sessid|(?:^|[_.\-])(?:code|sid|ticket|otp)$", re.IGNORECASE
)
# scheme://user:password@ or scheme://user@: the user name may hold an unencoded '@'; the password may hold
# '@', '?', '#' or ':' too, and ends at the last '@' before a '/' (a '?' or '#' before any ':' ends the authority).
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^\s/?#:]*(?::[^\s/]*)?)@")
# name=value in a URL query or fragment (value ends at &, # or white space) ...
_QUERY_PARAM = re.compile(r"(?P<lead>[?&#])(?P<name>[^=&#?\s]+)=(?P<value>[^&#\s]*)")
# ... and in a path's matrix parameters (`/app;jsessionid=...`) ...
_MATRIX_PARAM = re.compile(r"(?P<lead>;)(?P<name>[^=;/?#&\s]+)=(?P<value>[^;/?#&\s]*)")
# A URL's fragment is client-side state (OAuth's implicit flow puts tokens there): every value in it is hidden.
_FRAGMENT = re.compile(r"(?P<url>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s#]*)#(?P<fragment>[^\s]+)")
# ... and in a libpq conninfo string (`host=db password='a b'`): a value is quoted, or runs to white space.
_CONNINFO_PARAM = re.compile(
    r"(?P<lead>^|\s)(?P<name>[A-Za-z_][A-Za-z0-9_\-]*)(?P<eq>\s*=\s*)(?P<value>'(?:\\.|[^'\\])*'?|(?:\\.|[^\s\\])+)"
)
_DB_SCHEMES = frozenset({"postgres://", "postgresql://"})
REDACTED = "***"


def is_secret_name(name: str) -> bool:
    """Whether a parameter or field named `name` (percent-encoding allowed) holds a secret by its name."""
    return _SECRET_NAME.search(unquote(name)) is not None


def _userinfo(match: re.Match[str]) -> str:
    scheme, userinfo = match.group("scheme"), match.group("userinfo")
    user, colon, _password = userinfo.partition(":")
    if colon:
        return f"{scheme}{user}:{REDACTED}@"
    # A user name alone is kept for a database (`postgresql://kb@db/kb`); elsewhere it is often a token.
    return match.group(0) if scheme.lower() in _DB_SCHEMES else f"{scheme}{REDACTED}@"


def redact(text: str) -> str:
    """`text` (a URL, a libpq conninfo string, or a message quoting them) with every secret replaced by ***.

    Hidden: the password of a URL's userinfo (`postgresql://kb:***@db/kb`; a user name alone is hidden too
    except in a database URL, as `https://TOKEN@host` is a common way to pass a key); every value of a URL's
    fragment (`#access_token=***&state=***`, or `#***` for a bare one); and the value of every URL query or
    matrix parameter and conninfo keyword whose name says it holds a secret (`password`, `sslpassword`,
    `api-key`, `key`, `token`, `access_token`, `secret`, `sig`, session ids such as `;jsessionid=` and
    `PHPSESSID`, one-time codes such as OAuth's `code`...). Other text is unchanged.
    """
    text = _USERINFO.sub(_userinfo, text)
    text = _FRAGMENT.sub(_fragment, text)

    def query(match: re.Match[str]) -> str:
        if not is_secret_name(match.group("name")):
            return match.group(0)
        return f"{match.group('lead')}{match.group('name')}={REDACTED}"

    def conninfo(match: re.Match[str]) -> str:
        if not is_secret_name(match.group("name")):
            return match.group(0)
        return f"{match.group('lead')}{match.group('name')}{match.group('eq')}{REDACTED}"

    return _CONNINFO_PARAM.sub(conninfo, _MATRIX_PARAM.sub(query, _QUERY_PARAM.sub(query, text)))


def _fragment(match: re.Match[str]) -> str:
    fragment = match.group("fragment")
    if "=" not in fragment:
        return f"{match.group('url')}#{REDACTED}"
    hidden = re.sub(r"(^|&)([^=&]+)=[^&]*", rf"\1\2={REDACTED}", fragment)
    return f"{match.group('url')}#{hidden}"


# ---- network allowances ----

_LABEL = r"(?!-)[a-z0-9_-]{1,63}(?<!-)"
_HOST_NAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*$")

NetworkEntry = ipaddress.IPv4Address | ipaddress.IPv6Address | ipaddress.IPv4Network | ipaddress.IPv6Network | str


def network_entry(text: str) -> NetworkEntry:
    """One entry of an allowance (`allowNetworks`, `KBCTL_ALLOW_NETWORKS`): an IP address (`192.168.1.5`,
    `[fd00::1]`; a /32 or /128 is an address), a network in CIDR form (`10.0.0.0/8`, host bits ignored), or a
    host name (`wiki.internal`, lower-cased, IDNA-encoded, without a trailing dot). UsageError otherwise."""
    entry = text.strip()
    raw = entry[1:-1] if entry.startswith("[") and entry.endswith("]") else entry
    problem = f"{entry!r} is not an IP address, a network (CIDR) or a host name"
    if "/" in raw:
        try:
            network = ipaddress.ip_network(raw, strict=False)
        except ValueError:
            raise UsageError(problem) from None
        return network.network_address if network.num_addresses == 1 else network
    try:
        return ipaddress.ip_address(raw.split("%", 1)[0])
    except ValueError:
        pass
    host = raw.rstrip(".").lower()
    try:
        host = host.encode("idna").decode("ascii")
    except UnicodeError:
        raise UsageError(problem) from None
    # A last label of digits only is an IPv4 spelling (`10.1`), which resolvers read as an address.
    if not _HOST_NAME.match(host) or host.rsplit(".", 1)[-1].isdigit():
        raise UsageError(problem)
    return host


def _split_networks(text: str) -> list[str]:
    return [part for part in re.split(r"[\s,]+", text) if part]


def _networks(entries: Iterable[str]) -> tuple[str, ...]:
    """Entries normalized (`10.0.0.1/8` → `10.0.0.0/8`, `Wiki.Internal.` → `wiki.internal`), without duplicates."""
    return tuple(dict.fromkeys(str(network_entry(e)) for e in entries))


def env_networks(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The allowance of `KBCTL_ALLOW_NETWORKS` (comma- or space-separated), normalized; KbctlError if invalid."""
    try:
        return _networks(_split_networks(environ.get(ALLOW_NETWORKS_ENV, "")))
    except ValueError as exc:
        raise KbctlError(f"{ALLOW_NETWORKS_ENV}: {exc}") from None


def env_allows_private(environ: Mapping[str, str]) -> bool:
    """Whether `KBCTL_ALLOW_PRIVATE_NETWORKS` is `1` or `true`."""
    return environ.get(ALLOW_PRIVATE_ENV, "").strip().lower() in ("1", "true")


# ---- the file ----

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _check_key_variable(value: str | None) -> str | None:
    """`apiKeyEnv` names an environment variable; anything else (a key pasted by mistake) is refused unshown."""
    if value is not None and not _ENV_NAME.match(value):
        raise PydanticCustomError(
            "api_key_env",
            "must be the NAME of the environment variable that holds the key (letters, digits and _, not "
            "starting with a digit), not the key itself; the value is not shown",
        )
    return value


class _Model(BaseModel):
    # hide_input_in_errors: a ValidationError's text never quotes a value (a key pasted in the wrong field).
    model_config = ConfigDict(
        extra="forbid", populate_by_name=True, alias_generator=to_camel, frozen=True, hide_input_in_errors=True
    )

    def __repr_args__(self) -> Iterable[tuple[str | None, Any]]:
        # A repr (in a log, a debugger, a traceback) shows no secret of a baseURL or of an extra request field.
        for name, value in super().__repr_args__():
            if isinstance(value, str):
                value = redact(value)
            elif isinstance(value, dict) and name in ("document_fields", "query_fields", "request_fields"):
                value = {k: REDACTED if is_secret_name(str(k)) else v for k, v in value.items()}
            yield name, value


class Provider(_Model):
    """An OpenAI-compatible /v1/embeddings endpoint and how to talk to it."""

    base_url: str = Field(alias="baseURL")
    api_key_env: str | None = None
    batch_size: int = Field(64, ge=1, le=2048)
    max_batch_tokens: int = Field(100_000, ge=1)
    max_concurrency: int = Field(4, ge=1, le=64)
    max_input_tokens: int = Field(8191, ge=1)
    document_fields: dict[str, Any] = Field(default_factory=dict)
    query_fields: dict[str, Any] = Field(default_factory=dict)
    timeout: float = Field(EMBEDDING_HTTP_TIMEOUT, gt=0)
    retries: int = Field(EMBEDDING_HTTP_RETRIES, ge=0, le=20)
    # base64: float32 vectors, a quarter of the bytes and no number parsing; a server that refuses it is asked
    # again in float, so only set float to skip that first refused request.
    encoding_format: Literal["base64", "float"] = "base64"

    @field_validator("api_key_env")
    @classmethod
    def _key_variable(cls, value: str | None) -> str | None:
        return _check_key_variable(value)


class Profile(_Model):
    """A named embedding setup a manifest can refer to (`spec.embedding.profile`)."""

    provider: str
    model: str
    dimensions: int | None = Field(None, ge=1)


class EmbeddingConfig(_Model):
    """Embedding providers and profiles."""

    providers: dict[str, Provider] = Field(default_factory=dict)
    profiles: dict[str, Profile] = Field(default_factory=dict)


class RerankProvider(_Model):
    """A rerank endpoint: `{baseURL}/rerank`, Cohere-compatible (Cohere, Jina, vLLM, LiteLLM) or TEI."""

    base_url: str = Field(alias="baseURL")
    api: Literal["cohere", "tei"] = "cohere"
    api_key_env: str | None = None
    timeout: float = Field(RERANK_HTTP_TIMEOUT, gt=0)
    retries: int = Field(RERANK_HTTP_RETRIES, ge=0, le=20)

    @field_validator("api_key_env")
    @classmethod
    def _key_variable(cls, value: str | None) -> str | None:
        return _check_key_variable(value)


class RerankConfig(_Model):
    """Rerank providers, and local cross-encoder model folders by name (`local/NAME` in a manifest)."""

    providers: dict[str, RerankProvider] = Field(default_factory=dict)
    local_models: dict[str, Path] = Field(default_factory=dict)


class ChatProvider(_Model):
    """An OpenAI-compatible `/v1/chat/completions` endpoint (OpenAI, a LiteLLM proxy, Ollama, vLLM, llama.cpp
    server) and how to talk to it."""

    base_url: str = Field(alias="baseURL")
    api_key_env: str | None = None
    timeout: float = Field(CHAT_HTTP_TIMEOUT, gt=0, le=600)  # seconds per read (a streamed answer: between two pieces)
    retries: int = Field(CHAT_HTTP_RETRIES, ge=0, le=20)
    # Extra fields merged into every request body (e.g. LiteLLM `metadata`, Ollama `options`); they never
    # replace the fields kbctl sets (model, messages, stream).
    request_fields: dict[str, Any] = Field(default_factory=dict)

    @field_validator("api_key_env")
    @classmethod
    def _key_variable(cls, value: str | None) -> str | None:
        return _check_key_variable(value)


class ChatProfile(_Model):
    """A named chat setup a manifest can refer to (`spec.answer.profile`)."""

    provider: str
    model: str
    temperature: float | None = Field(None, ge=0, le=2)
    max_tokens: int | None = Field(None, ge=1, le=32_768)


class ChatConfig(_Model):
    """Chat providers and profiles (`kbctl ask`, answer evaluation); the model of knowledge bases that name none
    (`defaultModel`) and the judge of `kbctl eval --answers` (`judgeModel`), each provider/name or profile:NAME."""

    providers: dict[str, ChatProvider] = Field(default_factory=dict)
    profiles: dict[str, ChatProfile] = Field(default_factory=dict)
    default_model: str | None = Field(default=None, min_length=3)
    judge_model: str | None = Field(default=None, min_length=3)


class ServeToken(_Model):
    """A bearer token of `kbctl serve` and `kbctl mcp` over HTTP: read-only, limited to its scope.

    The token itself lives in the environment variable `tokenEnv` names. The scope is the knowledge bases
    listed, plus those whose labels match `selector` (checked by `kbctl serve` at start); a token with neither
    sees nothing. Only a token with `metrics: true` reads `/metrics`.
    """

    token_env: str
    knowledge_bases: tuple[str, ...] = ()
    selector: str | None = None
    metrics: bool = False  # may read /metrics, whose labels name every knowledge base (a scraper's token)
    groups: tuple[str, ...] = ()  # the caller's groups: which restricted documents (`access`) it reads
    claims: dict[str, str | tuple[str, ...]] = Field(default_factory=dict)  # matched against `access.labels`

    @field_validator("token_env")
    @classmethod
    def _token_variable(cls, value: str) -> str:
        checked = _check_key_variable(value)
        assert checked is not None
        return checked

    @field_validator("groups", "claims")
    @classmethod
    def _reader(cls, value: Any, info: ValidationInfo) -> Any:
        Reader.of(value) if info.field_name == "groups" else Reader.of((), value)
        return value


class ServeOidc(_Model):
    """JWT bearers from an identity provider (OIDC), accepted beside the tokens: each is verified against the
    issuer's keys (a JWKS file, or a JWKS URL fetched over https), its issuer, audience and expiry checked, and its
    `groupsClaim` (a list of strings) read as the caller's groups; `labelClaims` name the claims matched against
    documents' `access.labels`. Every verified caller sees the knowledge bases of `knowledgeBases` and `selector`."""

    issuer: str = Field(min_length=1, max_length=2048)
    audience: str | None = Field(default=None, min_length=1, max_length=2048)
    jwks_file: str | None = None
    jwks_url: str | None = Field(default=None, alias="jwksURL")
    algorithms: tuple[
        Literal["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"], ...
    ] = (
        "RS256",
        "ES256",
    )
    groups_claim: str = Field(default="groups", min_length=1, max_length=256)
    label_claims: tuple[str, ...] = ()
    knowledge_bases: tuple[str, ...] = ()
    selector: str | None = None
    leeway: float = Field(default=60.0, ge=0, le=600)  # seconds of clock skew allowed on exp and nbf
    cache_seconds: float = Field(default=300.0, ge=0, le=86_400)  # how long fetched keys are used

    @field_validator("jwks_url")
    @classmethod
    def _https(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("https://"):
            raise ValueError("jwksURL must be an https:// URL")
        return value

    @model_validator(mode="after")
    def _one_key_source(self) -> ServeOidc:
        if (self.jwks_file is None) == (self.jwks_url is None):
            raise ValueError("set exactly one of jwksFile or jwksURL")
        return self


class RetrievalLogConfig(_Model):
    """`serve.retrievalLog`: whether `kbctl serve` records each query, context and ask it serves (off by default),
    for how many `days` and `maxRows` at most, each result cut to `maxRowBytes`; `redact` adds regular expressions
    to the default redactions of a question (kbctl.inputs.redaction)."""

    enabled: bool = False
    days: int = Field(default=RETRIEVAL_LOG_DAYS, ge=1, le=365)
    max_rows: int = Field(default=RETRIEVAL_LOG_MAX_ROWS, ge=1_000, le=10_000_000)
    max_row_bytes: int = Field(default=RETRIEVAL_LOG_MAX_ROW_BYTES, ge=1024, le=1 << 20)
    redact: tuple[str, ...] = Field(default=(), max_length=REDACT_PATTERNS_MAX)

    @field_validator("redact")
    @classmethod
    def _patterns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for number, pattern in enumerate(value):
            try:
                compile_pattern(pattern)
            except ValueError as exc:
                raise PydanticCustomError("redact", f"pattern {number + 1}: {exc}") from None
        return value


class ServeConfig(_Model):
    """`kbctl serve`: its bearer tokens by name (the name is what logs and metrics show, never the token),
    optionally JWTs of an identity provider (`oidc`), and its retrieval log (`retrievalLog`)."""

    tokens: dict[str, ServeToken] = Field(default_factory=dict)
    oidc: ServeOidc | None = None
    retrieval_log: RetrievalLogConfig = Field(default_factory=RetrievalLogConfig)


class ConfigFile(_Model):
    """The whole configuration file."""

    allow_private_networks: bool = False  # loopback and private ranges; never link-local or cloud metadata
    allow_networks: tuple[str, ...] = ()  # CIDRs, exact addresses and host names URL sources may reach
    embedding: EmbeddingConfig = Field(default_factory=EmbeddingConfig)
    rerank: RerankConfig = Field(default_factory=RerankConfig)
    chat: ChatConfig = Field(default_factory=ChatConfig)
    serve: ServeConfig = Field(default_factory=ServeConfig)

    @field_validator("allow_networks", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return _split_networks(value) if isinstance(value, str) else value

    @field_validator("allow_networks")
    @classmethod
    def _normalize(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        try:
            return _networks(value)
        except ValueError as exc:
            raise PydanticCustomError("allow_networks", str(exc)) from None

    def provider(self, name: str) -> Provider | None:
        """A provider from the file, else a built-in one (openai), else None."""
        return self.embedding.providers.get(name) or BUILTIN_PROVIDERS.get(name)

    def rerank_provider(self, name: str) -> RerankProvider | None:
        """A rerank provider from the file, else a built-in one (cohere, jina), else None."""
        return self.rerank.providers.get(name) or BUILTIN_RERANKERS.get(name)

    def chat_provider(self, name: str) -> ChatProvider | None:
        """A chat provider from the file, else a built-in one (openai), else None."""
        return self.chat.providers.get(name) or BUILTIN_CHAT_PROVIDERS.get(name)


BUILTIN_PROVIDERS: dict[str, Provider] = {
    "openai": Provider.model_validate({"baseURL": "https://api.openai.com/v1", "apiKeyEnv": "OPENAI_API_KEY"}),
}
BUILTIN_CHAT_PROVIDERS: dict[str, ChatProvider] = {
    "openai": ChatProvider.model_validate({"baseURL": "https://api.openai.com/v1", "apiKeyEnv": "OPENAI_API_KEY"}),
}
BUILTIN_RERANKERS: dict[str, RerankProvider] = {
    "cohere": RerankProvider.model_validate({"baseURL": "https://api.cohere.com/v2", "apiKeyEnv": "COHERE_API_KEY"}),
    "jina": RerankProvider.model_validate({"baseURL": "https://api.jina.ai/v1", "apiKeyEnv": "JINA_API_KEY"}),
}


def config_path(environ: dict[str, str] | None = None) -> Path:
    """The configuration file kbctl reads: $KBCTL_CONFIG, else ~/.config/kbctl/config.yaml."""
    env = os.environ if environ is None else environ
    return Path(env.get("KBCTL_CONFIG") or DEFAULT_CONFIG).expanduser()


_ENV_PROVIDER = re.compile(r"^KBCTL_(PROVIDER|RERANKER|CHAT_PROVIDER)_([A-Z0-9_]+)_(BASE_URL|API_KEY_ENV)$")

_P = TypeVar("_P", Provider, RerankProvider, ChatProvider)


def _override(
    kind: str, current: Mapping[str, _P], builtin: Mapping[str, _P], changes: dict[str, dict[str, str]], model: type[_P]
) -> dict[str, _P]:
    """`current` with the environment's fields merged over each named provider (file, else built-in)."""
    providers = dict(current)
    for name, fields in changes.items():
        base = providers.get(name) or builtin.get(name)
        merged = {**(base.model_dump(by_alias=True) if base else {}), **fields}
        try:
            providers[name] = model.model_validate(merged)
        except ValidationError as exc:
            variable = f"KBCTL_{kind}_{name.upper().replace('-', '_')}_*"
            raise KbctlError(f"{variable}: {exc.errors()[0]['msg']}") from exc
    return providers


def with_env_overrides(config: ConfigFile, environ: Mapping[str, str]) -> ConfigFile:
    """Apply `KBCTL_PROVIDER_<NAME>_BASE_URL` / `KBCTL_PROVIDER_<NAME>_API_KEY_ENV` (they define or override
    embedding provider `<name>`, lower-cased with '_' as '-'), the same `KBCTL_RERANKER_<NAME>_*` for rerank
    providers and `KBCTL_CHAT_PROVIDER_<NAME>_*` for chat providers, `KBCTL_ALLOW_PRIVATE_NETWORKS` (or-ed
    with the file's) and `KBCTL_ALLOW_NETWORKS` (added to the file's `allowNetworks`)."""
    changes: dict[str, dict[str, dict[str, str]]] = {"PROVIDER": {}, "RERANKER": {}, "CHAT_PROVIDER": {}}
    for key, value in environ.items():
        match = _ENV_PROVIDER.match(key)
        if match and value:
            name = match.group(2).lower().replace("_", "-")
            field = "baseURL" if match.group(3) == "BASE_URL" else "apiKeyEnv"
            changes[match.group(1)].setdefault(name, {})[field] = value
    providers = _override("PROVIDER", config.embedding.providers, BUILTIN_PROVIDERS, changes["PROVIDER"], Provider)
    rerankers = _override("RERANKER", config.rerank.providers, BUILTIN_RERANKERS, changes["RERANKER"], RerankProvider)
    chats = _override(
        "CHAT_PROVIDER", config.chat.providers, BUILTIN_CHAT_PROVIDERS, changes["CHAT_PROVIDER"], ChatProvider
    )
    allow = config.allow_private_networks or env_allows_private(environ)
    networks = tuple(dict.fromkeys((*config.allow_networks, *env_networks(environ))))
    embedding = config.embedding.model_copy(update={"providers": providers})
    rerank = config.rerank.model_copy(update={"providers": rerankers})
    chat = config.chat.model_copy(update={"providers": chats})
    return config.model_copy(
        update={
            "embedding": embedding,
            "rerank": rerank,
            "chat": chat,
            "allow_private_networks": allow,
            "allow_networks": networks,
        }
    )


MAX_CONFIG_BYTES = 1 << 20
"""Largest configuration file read (a real one is a few kilobytes)."""


def _problem(path: Path, line: int | None, field: str, message: str) -> ManifestProblem:
    return ManifestProblem(str(path), line, field, redact(message))


def load_config(path: Path) -> ConfigFile:
    """Read and validate the configuration file; a missing file is an empty configuration.

    Problems get the manifests' treatment (InputError): file:line, the field as written, a did-you-mean for a
    misspelt key, every problem at once; anything that could hold a secret is redacted."""
    if not path.is_file():
        if os.environ.get("KBCTL_CONFIG"):
            raise KbctlError(f"{path}: no such file (named by KBCTL_CONFIG)")
        return ConfigFile()
    # Only when there is a file to read: the YAML loader that keeps lines, and the manifests' error wording.
    from kbctl.inputs.bounds import UnreadableFile, read_bounded_text
    from kbctl.inputs.problems import problems_from
    from kbctl.inputs.yaml_lines import SyntaxProblem, load_documents

    try:
        text = read_bounded_text(path, MAX_CONFIG_BYTES, expected="a configuration file")
    except UnreadableFile as exc:
        raise InputError([_problem(path, None, "", f"cannot read the configuration: {exc}")]) from None
    documents = list(load_documents(text))
    if not documents:
        return ConfigFile()
    first = documents[0]
    if isinstance(first, SyntaxProblem):
        raise InputError([_problem(path, first.line, "", first.message)])
    if len(documents) > 1:
        raise InputError([_problem(path, documents[1].line, "", "a configuration file holds one YAML document")])
    try:
        return ConfigFile.model_validate(first.data)
    except ValidationError as exc:
        found = problems_from(exc, ConfigFile, first, str(path))
        raise InputError([_problem(path, p.line, p.field, p.message) for p in found]) from None
