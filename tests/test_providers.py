"""A knowledge base embedded through an OpenAI-compatible endpoint (a real loopback server running the real model)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kbctl.client import KnowledgeBaseStore
from kbctl.embedding import get_embedder
from kbctl.manifest import parse_manifests
from tests.support.embedserver import EmbeddingServer, serve_embeddings
from tests.support.loopback_store import configured_store

KEY = "sk-test-7f3a9c0e51d2b8"

POLICY = """# Retention
Invoices and accounting records are kept for ten years, then destroyed.

# Breach response
A personal data breach is reported to the regulator within 72 hours of discovery.
"""


def manifest(embedding: str) -> str:
    """A two-section inline KnowledgeBase with the given spec.embedding."""
    body = "\n".join("        " + line for line in POLICY.splitlines())
    return f"""apiVersion: kbctl.dev/v1alpha1
kind: KnowledgeBase
metadata: {{name: policy}}
spec:
  sources:
    - name: policy
      text: |
{body}
  embedding: {embedding}
"""


@pytest.fixture
def server(store: KnowledgeBaseStore) -> Iterator[EmbeddingServer]:
    """A loopback /v1/embeddings server sharing the test session's loaded local model, key required."""
    local = get_embedder("local/all-MiniLM-L6-v2", store.settings)
    with serve_embeddings(embedder=local) as srv:
        srv.require_key = KEY
        yield srv


@pytest.fixture
def http_store(
    store: KnowledgeBaseStore, server: EmbeddingServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[KnowledgeBaseStore]:
    """A store whose configuration has a `loopback` provider and a `small` profile pointing at the server."""
    config = (
        f"embedding:\n  providers:\n    loopback: {{baseURL: '{server.url}', apiKeyEnv: LOOP_KEY, batchSize: 2}}\n"
        "  profiles:\n    small: {provider: loopback, model: all-MiniLM-L6-v2, dimensions: 128}\n"
    )
    with configured_store(store, config, tmp_path, monkeypatch, {"LOOP_KEY": KEY}) as s:
        yield s


def apply(store: KnowledgeBaseStore, embedding: str):  # type: ignore[no-untyped-def]
    """Apply the policy manifest with this embedding setting."""
    return store.apply(parse_manifests(manifest(embedding), "kb.yaml"))


def test_switching_to_the_http_model_and_back(http_store: KnowledgeBaseStore, server: EmbeddingServer) -> None:
    """Local → HTTP re-embeds through the endpoint (batched); re-apply calls it 0 times; back to local is free."""
    first = apply(http_store, "{model: local/all-MiniLM-L6-v2}")
    assert first.embedded == 2 and server.content_request_count == 0

    to_http = apply(http_store, "{model: loopback/all-MiniLM-L6-v2}")
    [kb] = to_http.results
    assert (kb.action, kb.version, to_http.embedded) == ("configured", 2, 2)
    assert server.content_request_count == 1  # two chunks, batchSize 2: one request
    assert server.request_count > 1  # and the background questions, once for the model (kbctl.embedding.background)
    assert server.embedding_requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert http_store.describe("policy").model == "loopback/all-MiniLM-L6-v2"
    hit = http_store.query("policy", "how fast must a breach be reported?").hits[0]
    assert "72 hours" in hit.text and server.content_request_count == 2  # the question went through the endpoint too

    again = apply(http_store, "{model: loopback/all-MiniLM-L6-v2}")
    assert again.results[0].action == "unchanged" and server.content_request_count == 2

    back = apply(http_store, "{model: local/all-MiniLM-L6-v2}")
    assert (back.results[0].version, back.embedded) == (3, 0)  # the local vectors are still cached
    assert "ten years" in http_store.query("policy", "how long are invoices kept?").hits[0].text
    assert server.content_request_count == 2


def test_profile_with_dimensions_is_its_own_vector_space(
    http_store: KnowledgeBaseStore, server: EmbeddingServer
) -> None:
    """A profile's model id carries its dimensions; its vectors are 128-dimensional and queries use them."""
    report = apply(http_store, "{profile: small}")
    assert report.embedded == 2
    assert http_store.describe("policy").model == "loopback/all-MiniLM-L6-v2@128"
    assert server.embedding_requests[0].body["dimensions"] == 128
    dims = http_store.db.connection.execute("SELECT DISTINCT vector_dims(embedding) FROM kb_embeddings").fetchall()
    assert dims == [(128,)]
    assert "72 hours" in http_store.query("policy", "breach notification deadline").hits[0].text


def test_endpoint_failure_keeps_the_previous_version_and_hides_the_key(
    http_store: KnowledgeBaseStore, server: EmbeddingServer
) -> None:
    """A provider that rejects the key fails the KB with the variable's name; v1 keeps serving; no key anywhere."""
    apply(http_store, "{model: local/all-MiniLM-L6-v2}")
    server.require_key = "another-key"
    report = apply(http_store, "{model: loopback/all-MiniLM-L6-v2}")
    [kb] = report.results
    assert kb.action == "failed" and "LOOP_KEY" in (kb.message or "") and KEY not in (kb.message or "")
    assert http_store.describe("policy").version == 1
    assert "ten years" in http_store.query("policy", "how long are invoices kept?").hits[0].text
    tables = [
        "kb_knowledge_bases",
        "kb_versions",
        "kb_version_sources",
        "kb_source_revisions",
        "kb_chunks",
        "kb_source_status",
    ]
    for table in tables:
        rows = http_store.db.connection.execute(f"SELECT to_jsonb(t)::text FROM {table} t").fetchall()
        assert not any(KEY in r[0] for r in rows), table
