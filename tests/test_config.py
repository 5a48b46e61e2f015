"""kbctl's configuration file: providers, profiles, redaction, and how a manifest's embedding resolves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings, redact
from kbctl.embedding import get_embedder
from kbctl.errors import EmbeddingError, InputError, KbctlError
from kbctl.manifest import parse_manifests
from kbctl.sources.url import FetchPolicy

CONFIG = """allowPrivateNetworks: true
embedding:
  providers:
    gateway:
      baseURL: http://127.0.0.1:9/v1
      apiKeyEnv: GATEWAY_KEY
      batchSize: 16
      documentFields: {input_type: document}
      queryFields: {input_type: query}
  profiles:
    corp: {provider: gateway, model: text-embedding-3-small, dimensions: 256}
rerank:
  providers:
    tei: {baseURL: http://127.0.0.1:9, api: tei}
  localModels:
    ms-marco: /opt/models/ms-marco
"""


@pytest.fixture
def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A configuration file named by KBCTL_CONFIG."""
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    monkeypatch.setenv("KBCTL_CONFIG", str(path))
    return path


def test_profiles_and_model_ids_resolve_to_http_embedders(config_file: Path, tmp_path: Path) -> None:
    """A profile and a provider-qualified model id resolve to the provider's endpoint, limits and fields."""
    settings = Settings.from_env(home=tmp_path / "home")
    by_profile = get_embedder("profile:corp", settings)
    assert by_profile.model_id == "gateway/text-embedding-3-small@256"
    config = by_profile.config  # type: ignore[attr-defined]
    assert (config.base_url, config.api_key_env, config.batch_size, config.dimensions) == (
        "http://127.0.0.1:9/v1",
        "GATEWAY_KEY",
        16,
        256,
    )
    assert dict(config.query_fields) == {"input_type": "query"}
    assert get_embedder("gateway/other-model", settings).model_id == "gateway/other-model"
    assert get_embedder("openai/text-embedding-3-small", settings).config.base_url == "https://api.openai.com/v1"  # type: ignore[attr-defined]
    with pytest.raises(EmbeddingError, match=r"unknown embedding profile 'nope': define it under embedding\.profiles"):
        get_embedder("profile:nope", settings)
    with pytest.raises(EmbeddingError, match="unknown embedding provider 'acme'"):
        get_embedder("acme/model", settings)


def test_invalid_config_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bad configuration names the file, the line and the field; a KBCTL_CONFIG that does not exist is an error."""
    path = tmp_path / "config.yaml"
    path.write_text("embedding:\n  providers:\n    x: {baseURL: http://h/v1, batchSize: lots}\n")
    monkeypatch.setenv("KBCTL_CONFIG", str(path))
    with pytest.raises(InputError) as raised:
        Settings.from_env(home=tmp_path)
    assert [str(p) for p in raised.value.problems] == [
        f'{path}:3: embedding.providers["x"].batchSize: must be an integer'
    ]
    monkeypatch.setenv("KBCTL_CONFIG", str(tmp_path / "missing.yaml"))
    with pytest.raises(KbctlError, match=r"missing\.yaml: no such file"):
        Settings.from_env(home=tmp_path)


def test_config_view_redacts_secrets(config_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`kbctl config view` names key variables and whether they are set, never their values or passwords."""
    monkeypatch.setenv("GATEWAY_KEY", "sk-very-secret-value")
    result = CliRunner().invoke(
        app, ["--database-url", "postgresql://kb:hunter2@db.internal/kb", "config", "view", "-o", "json"]
    )
    assert result.exit_code == 0, result.output
    assert "sk-very-secret-value" not in result.stdout and "hunter2" not in result.stdout
    data = json.loads(result.stdout)
    assert data["database"] == "postgresql://kb:***@db.internal/kb"
    assert data["embedding"]["providers"]["gateway"]["apiKeyEnv"] == "GATEWAY_KEY (set)"
    assert data["embedding"]["profiles"]["corp"] == {
        "provider": "gateway",
        "model": "text-embedding-3-small",
        "dimensions": 256,
    }
    assert data["allowPrivateNetworks"] is True
    rerank = data["rerank"]
    assert rerank["providers"]["cohere"]["apiKeyEnv"] == "COHERE_API_KEY (not set)"
    assert rerank["providers"]["tei"]["api"] == "tei" and rerank["providers"]["tei"]["apiKeyEnv"] is None
    assert rerank["localModels"] == {"ms-marco": "/opt/models/ms-marco"}


def test_environment_defines_rerank_providers(monkeypatch: pytest.MonkeyPatch) -> None:
    """KBCTL_RERANKER_<NAME>_BASE_URL / _API_KEY_ENV define a rerank provider or override a built-in one."""
    monkeypatch.setenv("KBCTL_CONFIG", "")
    monkeypatch.setenv("KBCTL_RERANKER_MY_TEI_BASE_URL", "http://tei.internal:8080")
    monkeypatch.setenv("KBCTL_RERANKER_COHERE_API_KEY_ENV", "CO_KEY")
    config = Settings.from_env().config
    assert config.rerank_provider("my-tei") is not None
    assert config.rerank_provider("my-tei").base_url == "http://tei.internal:8080"  # type: ignore[union-attr]
    cohere = config.rerank_provider("cohere")
    assert cohere is not None and (cohere.base_url, cohere.api_key_env) == ("https://api.cohere.com/v2", "CO_KEY")
    assert config.rerank_provider("nope") is None


def test_unknown_profile_fails_the_knowledge_base_clearly(store: KnowledgeBaseStore) -> None:
    """A manifest naming a profile the configuration lacks fails that KB with the reason; nothing is written."""
    text = """apiVersion: kbctl.dev/v1alpha1
kind: KnowledgeBase
metadata: {name: a}
spec:
  sources: [{name: s, text: Some text.}]
  embedding: {profile: missing}
"""
    report = store.apply(parse_manifests(text, "kb.yaml"))
    [kb] = report.results
    assert kb.action == "failed" and "unknown embedding profile 'missing'" in (kb.message or "")
    assert store.db.counts()["knowledge_bases"] == 0


def test_allow_private_networks_from_config(config_file: Path, store: KnowledgeBaseStore) -> None:
    """allowPrivateNetworks in the configuration lifts the SSRF guard for the store's fetches."""
    other = KnowledgeBaseStore(
        settings=Settings.from_env(home=store.settings.home, database_url=store.settings.database_url)
    )
    try:
        assert other.fetch_policy.allow_private is True
    finally:
        other.close()
    assert store.fetch_policy.allow_private is False


def test_environment_defines_providers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """KBCTL_PROVIDER_<NAME>_BASE_URL / _API_KEY_ENV define a provider (or point openai at a proxy)."""
    monkeypatch.setenv("KBCTL_CONFIG", "")
    monkeypatch.setenv("KBCTL_PROVIDER_OPENAI_BASE_URL", "http://litellm.internal:4000/v1")
    monkeypatch.setenv("KBCTL_PROVIDER_MY_TEI_BASE_URL", "http://tei.internal/v1")
    monkeypatch.setenv("KBCTL_PROVIDER_MY_TEI_API_KEY_ENV", "TEI_TOKEN")
    settings = Settings.from_env(home=tmp_path)
    openai = settings.config.provider("openai")
    tei = settings.config.provider("my-tei")
    assert openai is not None and (openai.base_url, openai.api_key_env) == (
        "http://litellm.internal:4000/v1",
        "OPENAI_API_KEY",
    )
    assert tei is not None and (tei.base_url, tei.api_key_env) == ("http://tei.internal/v1", "TEI_TOKEN")


# ---------------------------------------------------------------------------------------------------------
# Redaction: no password, key or token is ever shown by `config view`, a repr or an error
# ---------------------------------------------------------------------------------------------------------

SECRETS = ("hunter2", "s3cr3tpass", "AKEY123", "K2SECRET", "TOK999", "ATOK777", "FIELDSECRET", "RRPASS", "RRKEY")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://kb:hunter2@db.internal/kb", "postgresql://kb:***@db.internal/kb"),
        ("postgres://kb:hun%40ter2@db.internal:5433/kb", "postgres://kb:***@db.internal:5433/kb"),
        ("postgresql://kb:p#hunter2@db.internal/kb", "postgresql://kb:***@db.internal/kb"),
        (
            "postgresql://kb@db.internal/kb?sslmode=require&password=hunter2&connect_timeout=5",
            "postgresql://kb@db.internal/kb?sslmode=require&password=***&connect_timeout=5",
        ),
        ("postgresql:///kb?host=/run/pg&password=hunter2", "postgresql:///kb?host=/run/pg&password=***"),
        ("host=db.internal password=hunter2 dbname=kb", "host=db.internal password=*** dbname=kb"),
        ("host=db.internal password = 'hunter2 x\\'y' dbname=kb", "host=db.internal password = *** dbname=kb"),
        ("password=hunter2 host=db.internal", "password=*** host=db.internal"),
        (
            "host=db.internal sslpassword=hunter2 sslmode=verify-full",
            "host=db.internal sslpassword=*** sslmode=verify-full",
        ),
        ("host=db.internal dbname=kb", "host=db.internal dbname=kb"),
    ],
)
def test_config_view_redacts_every_database_password_form(
    url: str, shown: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A password given as URL userinfo, as ?password=, or as conninfo password= is never printed."""
    monkeypatch.setenv("KBCTL_CONFIG", "")
    for output in ("json", "yaml"):
        result = CliRunner().invoke(app, ["--database-url", url, "config", "view", "-o", output])
        assert result.exit_code == 0, result.output
        assert "hunter2" not in result.output
    result = CliRunner(env={"KBCTL_DATABASE_URL": url}).invoke(app, ["config", "view", "-o", "json"])
    assert "hunter2" not in result.output
    assert json.loads(result.stdout)["database"] == shown
    settings = Settings.from_env(database_url=url)
    assert "hunter2" not in repr(settings) and "hunter2" not in str(settings)


SECRET_CONFIG = """embedding:
  providers:
    gateway:
      baseURL: https://kbuser:s3cr3tpass@gw.internal/v1?api-key=AKEY123&api-version=2024-02-01&key=K2SECRET
      apiKeyEnv: GATEWAY_KEY
      documentFields: {input_type: document, api_key: FIELDSECRET}
    tokenized:
      baseURL: https://gw.internal/v1?token=TOK999&access_token=ATOK777
rerank:
  providers:
    remote: {baseURL: "https://rruser:RRPASS@rr.internal/v2?key=RRKEY"}
"""


def test_config_view_redacts_provider_credentials_and_key_parameters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Credentials and ?api-key= / ?key= / ?token= / ?access_token= in a baseURL, and secret-named extra request
    fields, are shown as ***; the rest of the URL (host, path, api-version) stays readable."""
    path = tmp_path / "config.yaml"
    path.write_text(SECRET_CONFIG)
    monkeypatch.setenv("KBCTL_CONFIG", str(path))
    monkeypatch.setenv("KBCTL_PROVIDER_FROMENV_BASE_URL", "https://envuser:hunter2@env.internal/v1?apikey=hunter2")
    for output in ("json", "yaml"):
        result = CliRunner().invoke(app, ["config", "view", "-o", output])
        assert result.exit_code == 0, result.output
        assert not [s for s in SECRETS if s in result.output]
    data = json.loads(CliRunner().invoke(app, ["config", "view", "-o", "json"]).stdout)
    providers = data["embedding"]["providers"]
    assert providers["gateway"]["baseURL"] == (
        "https://kbuser:***@gw.internal/v1?api-key=***&api-version=2024-02-01&key=***"
    )
    assert providers["gateway"]["documentFields"] == {"input_type": "document", "api_key": "***"}
    assert providers["tokenized"]["baseURL"] == "https://gw.internal/v1?token=***&access_token=***"
    assert providers["fromenv"]["baseURL"] == "https://envuser:***@env.internal/v1?apikey=***"
    assert data["rerank"]["providers"]["remote"]["baseURL"] == "https://rruser:***@rr.internal/v2?key=***"
    config = Settings.from_env().config
    shown = repr(config) + repr(config.provider("gateway")) + repr(config.rerank_provider("remote"))
    assert not [s for s in SECRETS if s in shown]


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("https://TOKEN999@api.example.com/v1", "https://***@api.example.com/v1"),
        ("https://api.example.com/v1#access_token=TOKEN999&x=1", "https://api.example.com/v1#access_token=***&x=***"),
        ("https://api.example.com/cb#TOKEN999", "https://api.example.com/cb#***"),
        ("https://h.example.com/app;jsessionid=TOKEN999?page=2", "https://h.example.com/app;jsessionid=***?page=2"),
        ("https://h.example.com/p?PHPSESSID=TOKEN999&lang=en", "https://h.example.com/p?PHPSESSID=***&lang=en"),
        ("https://h.example.com/cb?code=TOKEN999&state=s", "https://h.example.com/cb?code=***&state=s"),
        ("https://h.example.com/d?device_code=TOKEN999&unicode=1", "https://h.example.com/d?device_code=***&unicode=1"),
        (
            "https://api.example.com/v1?X-Amz-Signature=TOKEN999&X-Amz-Date=1",
            "https://api.example.com/v1?X-Amz-Signature=***&X-Amz-Date=1",
        ),
        ("https://api.example.com/v1?Api%2DKey=TOKEN999", "https://api.example.com/v1?Api%2DKey=***"),
        (
            "embedding request to https://u:TOKEN999@h.internal/v1/embeddings failed",
            "embedding request to https://u:***@h.internal/v1/embeddings failed",
        ),
        ("https://api.example.com/v1?api-version=2024-02-01", "https://api.example.com/v1?api-version=2024-02-01"),
        ("no secrets here: a=b", "no secrets here: a=b"),
    ],
)
def test_redact(text: str, redacted: str) -> None:
    """The one redaction helper, on URLs and on messages that quote them."""
    assert redact(text) == redacted


def test_config_problems_are_located_with_a_hint_all_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Like a manifest: every problem of the file, each with its line, the field as written and a did-you-mean."""
    path = tmp_path / "config.yaml"
    path.write_text("embedding:\n  profiels:\n    a: {provider: x, model: m}\nchat:\n  defaultModle: openai/gpt\n")
    monkeypatch.setenv("KBCTL_CONFIG", str(path))
    result = CliRunner().invoke(app, ["config", "view"])
    assert (result.exit_code, result.stderr.splitlines()) == (
        1,
        [
            f"{path}:2: embedding.profiels: unknown field 'profiels' (did you mean 'profiles'?)",
            f"{path}:5: chat.defaultModle: unknown field 'defaultModle' (did you mean 'defaultModel'?)",
        ],
    )
    path.write_text("embedding: [\n")
    broken = CliRunner().invoke(app, ["config", "view"])
    assert (broken.exit_code, broken.stderr) == (
        1,
        f"{path}:2: invalid YAML: expected the node content, but found '<stream end>'\n",
    )
    path.write_text("a: 1\n---\nb: 2\n")
    two = CliRunner().invoke(app, ["config", "view"])
    assert two.stderr == f"{path}:3: a configuration file holds one YAML document\n"


@pytest.mark.parametrize("section", ["embedding", "rerank"])
def test_a_key_pasted_into_api_key_env_is_refused_unshown(
    section: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """apiKeyEnv must look like a variable name; a key pasted there fails with a clear line that omits it."""
    key = "sk-abc123def456ghi789"
    path = tmp_path / "config.yaml"
    path.write_text(
        f"{section}:\n  providers:\n    gateway:\n      baseURL: https://gw.internal/v1\n      apiKeyEnv: {key}\n"
    )
    monkeypatch.setenv("KBCTL_CONFIG", str(path))
    result = CliRunner().invoke(app, ["config", "view"])
    assert result.exit_code == 1
    assert key not in result.output and "Traceback" not in result.output
    assert result.stderr == (
        f'{path}:5: {section}.providers["gateway"].apiKeyEnv: must be the NAME of the environment variable that '
        "holds the key (letters, digits and _, not starting with a digit), not the key itself; the value is not shown\n"
    )
    with pytest.raises(KbctlError) as raised:
        Settings.from_env()
    assert key not in str(raised.value) and key not in repr(raised.value.__cause__)


@pytest.mark.parametrize("kind", ["PROVIDER", "RERANKER"])
def test_a_key_in_the_api_key_env_variable_is_refused_unshown(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """KBCTL_PROVIDER_<NAME>_API_KEY_ENV / KBCTL_RERANKER_<NAME>_API_KEY_ENV holding a key: refused, not shown."""
    key = "sk-proj-Zx9 with spaces"
    monkeypatch.setenv("KBCTL_CONFIG", "")
    monkeypatch.setenv(f"KBCTL_{kind}_GW_BASE_URL", "https://gw.internal/v1")
    monkeypatch.setenv(f"KBCTL_{kind}_GW_API_KEY_ENV", key)
    result = CliRunner().invoke(app, ["config", "view"])
    assert result.exit_code == 1 and key not in result.output
    assert result.stderr.startswith(f"Error: KBCTL_{kind}_GW_*: must be the NAME of the environment variable")
    assert len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "_KEY", "key2", "a"])
def test_variable_names_are_accepted(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Any environment variable name is a valid apiKeyEnv."""
    path = tmp_path / "config.yaml"
    path.write_text(f"embedding:\n  providers:\n    gw: {{baseURL: 'https://gw.internal/v1', apiKeyEnv: {name}}}\n")
    monkeypatch.setenv("KBCTL_CONFIG", str(path))
    provider = Settings.from_env().config.provider("gw")
    assert provider is not None and provider.api_key_env == name


# ---------------------------------------------------------------------------------------------------------
# Network allowances in the configuration file
# ---------------------------------------------------------------------------------------------------------


def test_allow_networks_from_config_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """allowNetworks (a list, or one string like the variable) and KBCTL_ALLOW_NETWORKS add up, normalized;
    `config view` shows them; FetchPolicy.from_config carries them into the fetcher's guard."""
    path = tmp_path / "config.yaml"
    path.write_text("allowNetworks: [10.0.0.0/8, 192.168.1.5, Wiki.Internal.]\n")
    monkeypatch.setenv("KBCTL_CONFIG", str(path))
    monkeypatch.setenv("KBCTL_ALLOW_NETWORKS", "172.16.0.0/12 10.0.0.0/8")
    monkeypatch.delenv("KBCTL_ALLOW_PRIVATE_NETWORKS", raising=False)
    config = Settings.from_env().config
    expected = ("10.0.0.0/8", "192.168.1.5", "wiki.internal", "172.16.0.0/12")
    assert config.allow_networks == expected and config.allow_private_networks is False
    policy = FetchPolicy.from_config(config)
    assert policy.allowed_networks == expected and policy.allow_private is False
    assert FetchPolicy.from_config(config, allowed_networks=()).allowed_networks == ()
    data = json.loads(CliRunner().invoke(app, ["config", "view", "-o", "json"]).stdout)
    assert data["allowNetworks"] == list(expected) and data["allowPrivateNetworks"] is False
    path.write_text("allowPrivateNetworks: true\nallowNetworks: '169.254.169.254, fd00:ec2::254'\n")
    monkeypatch.delenv("KBCTL_ALLOW_NETWORKS")
    config = Settings.from_env().config
    assert config.allow_networks == ("169.254.169.254", "fd00:ec2::254")
    policy = FetchPolicy.from_config(config)
    assert policy.allow_private is True and policy.allowed_networks == ("169.254.169.254", "fd00:ec2::254")


def test_invalid_allow_networks_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bad allowNetworks entry names the file, the field and the entry; a bad variable names the variable."""
    path = tmp_path / "config.yaml"
    path.write_text("allowNetworks: [10.0.0.0/8, 10.0.0.0/33]\n")
    monkeypatch.setenv("KBCTL_CONFIG", str(path))
    result = CliRunner().invoke(app, ["config", "view"])
    assert result.exit_code == 1
    assert result.stderr == (
        f"{path}:1: allowNetworks: '10.0.0.0/33' is not an IP address, a network (CIDR) or a host name\n"
    )
    monkeypatch.setenv("KBCTL_CONFIG", "")
    monkeypatch.setenv("KBCTL_ALLOW_NETWORKS", "wiki.internal,http://wiki.internal/")
    result = CliRunner().invoke(app, ["config", "view"])
    assert result.exit_code == 1
    assert result.stderr == (
        "Error: KBCTL_ALLOW_NETWORKS: 'http://wiki.internal/' is not an IP address, a network (CIDR) or a host name\n"
    )


def test_allow_networks_from_config_reach_the_store(
    tmp_path: Path, store: KnowledgeBaseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """allowNetworks in the configuration file is in the fetch policy of a store built from that configuration."""
    path = tmp_path / "config.yaml"
    path.write_text("allowNetworks: [10.0.0.0/8, wiki.internal]\n")
    monkeypatch.setenv("KBCTL_CONFIG", str(path))
    monkeypatch.delenv("KBCTL_ALLOW_NETWORKS", raising=False)
    other = KnowledgeBaseStore(
        settings=Settings.from_env(home=store.settings.home, database_url=store.settings.database_url)
    )
    try:
        assert other.fetch_policy.allowed_networks == ("10.0.0.0/8", "wiki.internal")
    finally:
        other.close()
    assert store.fetch_policy.allowed_networks == ()


def test_a_malformed_database_url_is_one_clear_line_without_its_password(monkeypatch: pytest.MonkeyPatch) -> None:
    """A conninfo string libpq cannot parse gives `Error: invalid database URL`, exit 1, the password redacted."""
    result = CliRunner().invoke(app, ["--database-url", "host=db password=s3cret-pw dbname", "get", "kb"])
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: invalid database URL (host=db password=*** dbname): ")
    assert "s3cret-pw" not in result.output


@pytest.mark.parametrize("value", ["0", "two", "-1", "999"])
def test_model_threads_must_be_a_small_number(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KBCTL_MODEL_THREADS", value)
    with pytest.raises(KbctlError, match="KBCTL_MODEL_THREADS must be a number of threads from 1 to 256"):
        Settings.from_env()


def test_model_threads_reach_the_local_model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """One thread per call: the ONNX Runtime session of the local model is built with it."""
    from kbctl.embedding.local import LocalEmbedder

    monkeypatch.setenv("KBCTL_MODEL_THREADS", "1")
    settings = Settings.from_env(home=tmp_path)
    assert settings.model_threads == 1
    embedder = LocalEmbedder("all-MiniLM-L6-v2", settings)
    assert len(embedder.embed(["one thread"])[0]) == 384
    session = embedder._model.session  # the ONNX Runtime session of kbctl's runner
    assert session.get_session_options().intra_op_num_threads == 1
