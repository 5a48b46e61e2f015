"""kbctl's configuration file: providers, profiles, redaction, and how a manifest's embedding resolves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings
from kbctl.embedding import get_embedder
from kbctl.errors import EmbeddingError, KbctlError
from kbctl.manifest import parse_manifests

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
    """A bad configuration names the file and the field; a KBCTL_CONFIG that does not exist is an error."""
    path = tmp_path / "config.yaml"
    path.write_text("embedding:\n  providers:\n    x: {baseURL: http://h/v1, batchSize: lots}\n")
    monkeypatch.setenv("KBCTL_CONFIG", str(path))
    with pytest.raises(
        KbctlError, match=r"config.yaml: embedding.providers.x.batchSize: Input should be a valid integer"
    ):
        Settings.from_env(home=tmp_path)
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
