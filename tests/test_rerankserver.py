"""The loopback rerank server itself (tests/rerankserver.py): both wire formats, its knobs, real scores."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from kbctl.config import Settings
from kbctl.embedding import Embedder, get_embedder
from tests.support.rerankserver import RerankServer, keyword_scores, serve_rerank

QUERY = "How do I store vectors in PostgreSQL?"
DOCUMENTS = [
    "The recipe needs two eggs, flour and a pinch of salt.",
    "pgvector adds a vector column type and similarity search to PostgreSQL.",
    "Football is played by two teams of eleven players.",
    "PostgreSQL is a relational database; extensions add new data types.",
]
KEY = "rk-test-2b7d1e"


@pytest.fixture(scope="module")
def embedder(kbctl_home: Path) -> Embedder:
    """The real local model, shared by every server of the module (it loads once)."""
    return get_embedder("local/all-MiniLM-L6-v2", Settings(home=kbctl_home))


@pytest.fixture(scope="module")
def cohere_server(embedder: Embedder) -> Iterator[RerankServer]:
    with serve_rerank(api="cohere", embedder=embedder) as server:
        yield server


@pytest.fixture(scope="module")
def tei_server(embedder: Embedder) -> Iterator[RerankServer]:
    with serve_rerank(api="tei", embedder=embedder) as server:
        yield server


@pytest.fixture
def cohere(cohere_server: RerankServer) -> RerankServer:
    cohere_server.reset()
    return cohere_server


@pytest.fixture
def tei(tei_server: RerankServer) -> RerankServer:
    tei_server.reset()
    return tei_server


def rerank(server: RerankServer, **body: Any) -> httpx.Response:
    fields: dict[str, Any] = {"model": server.model_name, "query": QUERY, "documents": DOCUMENTS}
    if server.api == "tei":
        fields = {"query": QUERY, "texts": DOCUMENTS}
    fields.update(body)
    return httpx.post(f"{server.url}/rerank", json=fields, timeout=30)


def test_cohere_ranks_by_real_cosine_best_first(cohere: RerankServer, embedder: Embedder) -> None:
    response = rerank(cohere)
    assert response.status_code == 200, response.text
    payload = response.json()
    assert set(payload) == {"id", "results", "meta"}
    results = payload["results"]
    assert sorted(r["index"] for r in results) == [0, 1, 2, 3]
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True)
    assert results[0]["index"] == 1  # the pgvector sentence, by the model's own judgement
    assert {results[-1]["index"], results[-2]["index"]} == {0, 2}
    # The scores are the cosines of the model's vectors, not made up.
    q = embedder.embed([QUERY], purpose="query")[0]
    d = embedder.embed([DOCUMENTS[1]])[0]
    assert results[0]["relevance_score"] == pytest.approx(float(q @ d), abs=1e-5)
    assert "document" not in results[0]
    request = cohere.rerank_requests[-1]
    assert request.path == "/v1/rerank" and request.body["documents"] == DOCUMENTS
    assert request.headers["content-type"] == "application/json"


def test_cohere_top_n_and_return_documents(cohere: RerankServer) -> None:
    full = rerank(cohere).json()["results"]
    cut = rerank(cohere, top_n=2, return_documents=True).json()["results"]
    assert [r["index"] for r in cut] == [r["index"] for r in full[:2]]
    assert cut[0]["document"] == {"text": DOCUMENTS[cut[0]["index"]]}
    assert len(rerank(cohere, top_n=10).json()["results"]) == 4
    assert rerank(cohere, top_n=0).status_code == 400


def test_cohere_validation_and_unknown_model(cohere: RerankServer) -> None:
    missing = rerank(cohere, model="rerank-english-v3.0")
    assert missing.status_code == 404
    assert missing.json() == {"message": "model 'rerank-english-v3.0' not found"}
    assert rerank(cohere, documents=[]).status_code == 400
    assert rerank(cohere, documents=["ok", 3]).status_code == 400
    assert rerank(cohere, query=None).status_code == 400
    assert "message" in rerank(cohere, query=None).json()


def test_score_fn_overrides_vector_order(cohere: RerankServer) -> None:
    cohere.score_fn = keyword_scores("football")
    results = rerank(cohere).json()["results"]
    assert results[0] == {"index": 2, "relevance_score": 1.0}
    assert cohere.expected_order(QUERY, DOCUMENTS) == [r["index"] for r in results]
    cohere.reset()
    assert rerank(cohere).json()["results"][0]["index"] == 1


def test_tei_shape_sigmoid_and_raw_scores(tei: RerankServer) -> None:
    assert tei.url == tei.origin  # TEI serves at the root
    response = rerank(tei)
    assert response.status_code == 200, response.text
    results = response.json()
    assert isinstance(results, list) and set(results[0]) == {"index", "score"}
    assert results[0]["index"] == 1
    raw = {r["index"]: r["score"] for r in rerank(tei, raw_scores=True, return_text=True).json()}
    expected = tei.expected_scores(QUERY, DOCUMENTS)
    for entry in results:
        assert 0 < entry["score"] < 1
        assert entry["score"] == pytest.approx(1 / (1 + math.exp(-expected[entry["index"]])), abs=1e-6)
        assert raw[entry["index"]] == pytest.approx(expected[entry["index"]], abs=1e-6)
    assert rerank(tei, return_text=True).json()[0]["text"] == DOCUMENTS[1]
    empty = rerank(tei, texts=[])
    assert empty.status_code == 422 and empty.json()["error_type"] == "Validation"
    tei.max_documents = 3
    too_many = rerank(tei)
    assert too_many.status_code == 413 and "batch size 4" in too_many.json()["error"]
    assert httpx.get(f"{tei.url}/info").json()["max_client_batch_size"] == 3
    plain = httpx.post(f"{tei.url}/rerank", content=b'{"query": "q", "texts": ["a"]}')
    assert plain.status_code == 415


def test_auth_401_for_both_formats(embedder: Embedder) -> None:
    with serve_rerank(api="cohere", embedder=embedder, api_key=KEY) as server:
        denied = rerank(server)
        assert denied.status_code == 401 and denied.json() == {"message": "invalid api token"}
        wrong = httpx.post(
            f"{server.url}/rerank",
            json={"model": server.model_name, "query": QUERY, "documents": DOCUMENTS},
            headers={"Authorization": "Bearer nope"},
        )
        assert wrong.status_code == 401
        ok = httpx.post(
            f"{server.url}/rerank",
            json={"model": server.model_name, "query": QUERY, "documents": DOCUMENTS},
            headers={"Authorization": f"Bearer {KEY}"},
        )
        assert ok.status_code == 200
        assert server.rerank_requests[-1].headers["authorization"] == f"Bearer {KEY}"
    with serve_rerank(api="tei", embedder=embedder, api_key=KEY) as server:
        denied = rerank(server)
        assert denied.status_code == 401 and denied.content == b""


def test_429_then_success_and_other_one_shot_knobs(cohere: RerankServer) -> None:
    cohere.fail_next(429, headers={"Retry-After": "0"})
    first = rerank(cohere)
    assert first.status_code == 429 and first.headers["retry-after"] == "0"
    assert first.json() == {"message": "Too Many Requests"}
    assert rerank(cohere).status_code == 200
    assert cohere.request_count == 2

    cohere.bad_json_next()
    with pytest.raises(ValueError):
        rerank(cohere).json()

    def nan_score(payload: dict[str, Any]) -> None:
        payload["results"][0]["relevance_score"] = "NaN"
        payload["results"].append({"index": 99, "relevance_score": 0.5})

    cohere.mangle_next(nan_score)
    mangled = rerank(cohere).json()["results"]
    assert mangled[0]["relevance_score"] == "NaN" and mangled[-1]["index"] == 99
    assert len(rerank(cohere).json()["results"]) == 4  # one-shot

    cohere.disconnect_next()
    with pytest.raises(httpx.TransportError):
        rerank(cohere)
    assert rerank(cohere).status_code == 200


def test_latency_and_shutdown_do_not_hang(embedder: Embedder) -> None:
    with serve_rerank(embedder=embedder) as server:
        server.latency = 0.2
        started = time.monotonic()
        assert rerank(server).status_code == 200
        assert time.monotonic() - started >= 0.2
        server.latency = 30.0
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{server.url}/rerank", json={}, timeout=0.2)
        closing = time.monotonic()
    assert time.monotonic() - closing < 5
