"""Reranking: a real loopback /rerank server (Cohere- and TEI-shaped, scoring with the real local model or a
keyword rule) and a real ONNX cross-encoder run by fastembed, both reordering the fused candidates."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings
from kbctl.embedding import Embedder, get_embedder
from kbctl.errors import KbctlError, ManifestError, RerankError
from kbctl.eval.evalset import EvalQuery, EvalSet
from kbctl.eval.run import evaluate_store
from kbctl.manifest import parse_manifests
from kbctl.rerank.http import HttpRerankConfig, HttpReranker
from tests.support.crossencoder import build_cross_encoder
from tests.support.rerankserver import RerankServer, keyword_scores, serve_rerank

KEY = "rk-test-5be1d07a93"

SOURCES = {
    "retention": "# Retention\nInvoices and accounting records are kept for ten years, then destroyed.",
    "breach": "# Breach response\nA personal data breach is reported to the regulator within 72 hours.",
    "travel": "# Travel\nTrain travel is booked in second class; flights need approval by a manager.",
    "penguins": "# Office pets\nThe penguin named Pingu may visit the office on Fridays, accompanied by a keeper.",
}


def manifest(rerank: str | None, name: str = "policy") -> str:
    """A KnowledgeBase with the four sources, threshold -1 (ranking alone decides) and this rerank block."""
    sources = "\n".join(
        f"    - name: {n}\n      text: |\n" + "\n".join("        " + line for line in text.splitlines())
        for n, text in SOURCES.items()
    )
    block = f"\n    rerank: {rerank}" if rerank else ""
    return f"""apiVersion: kbctl.dev/v1alpha1
kind: KnowledgeBase
metadata: {{name: {name}}}
spec:
  sources:
{sources}
  retrieval:
    topK: 3
    similarityThreshold: -1.0{block}
"""


@pytest.fixture(scope="module")
def local_model(kbctl_home: Path) -> Embedder:
    return get_embedder("local/all-MiniLM-L6-v2", Settings(home=kbctl_home))


@pytest.fixture
def cohere(local_model: Embedder) -> Iterator[RerankServer]:
    """A Cohere-shaped /rerank server that ranks documents mentioning 'penguin' first, key required."""
    with serve_rerank(api="cohere", embedder=local_model, score_fn=keyword_scores("penguin"), api_key=KEY) as srv:
        yield srv


def configured_store(
    store: KnowledgeBaseStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: str
) -> KnowledgeBaseStore:
    """A store reading this kbctl configuration file (and the rerank key from LOOP_RERANK_KEY)."""
    path = tmp_path / "config.yaml"
    path.write_text(config)
    monkeypatch.setenv("KBCTL_CONFIG", str(path))
    monkeypatch.setenv("LOOP_RERANK_KEY", KEY)
    return KnowledgeBaseStore(
        settings=Settings.from_env(home=store.settings.home, database_url=store.settings.database_url)
    )


@pytest.fixture
def rerank_store(
    store: KnowledgeBaseStore, cohere: RerankServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[KnowledgeBaseStore]:
    config = f"rerank:\n  providers:\n    loop: {{baseURL: '{cohere.url}', apiKeyEnv: LOOP_RERANK_KEY, retries: 1}}\n"
    s = configured_store(store, tmp_path, monkeypatch, config)
    s.apply(parse_manifests(manifest(f"{{model: loop/{cohere.model_name}, candidates: 10}}"), "kb.yaml"))
    try:
        yield s
    finally:
        s.close()


QUESTION = "How long are invoices kept?"


def test_the_reranker_reorders_the_fused_candidates(rerank_store: KnowledgeBaseStore, cohere: RerankServer) -> None:
    plain = rerank_store.query("policy", QUESTION, rerank=False)
    assert plain.rerank is None and plain.hits[0].source == "retention"
    assert all(h.rerank_score is None for h in plain.hits)
    reranked = rerank_store.query("policy", QUESTION)  # the spec's reranker by default
    assert reranked.rerank is not None and reranked.rerank.applied and reranked.rerank.error is None
    assert reranked.rerank.candidates == 4  # every candidate that passed the threshold, up to 10
    assert reranked.hits[0].source == "penguins"  # the keyword rule wins over vector similarity
    scores = [h.rerank_score for h in reranked.hits]
    assert scores == sorted(scores, reverse=True)  # type: ignore[type-var]
    [request] = cohere.rerank_requests
    body = request.body
    assert body["model"] == cohere.model_name and body["query"] == QUESTION and body["top_n"] == 4
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert any(d.startswith("Office pets\n\n") for d in body["documents"])  # heading path, then text


def test_a_reranked_hits_score_is_the_rerank_score_and_follows_its_rank(
    rerank_store: KnowledgeBaseStore, cohere: RerankServer
) -> None:
    """When the reranker orders the hits, their score is its score (never rising with rank); their similarity is
    still the cosine; when it fails, the fused order's score (hybrid: the fused score) follows the rank."""
    reranked = rerank_store.query("policy", QUESTION)
    assert [h.score for h in reranked.hits] == [h.rerank_score for h in reranked.hits]
    assert [h.score for h in reranked.hits] == sorted((h.score for h in reranked.hits), reverse=True)
    plain = {h.source: h.similarity for h in rerank_store.query("policy", QUESTION, rerank=False).hits}
    assert reranked.hits[0].source == "penguins" and reranked.hits[0].similarity < plain["retention"]
    assert {h.source: h.similarity for h in reranked.hits} == {h.source: plain[h.source] for h in reranked.hits}
    for _ in range(2):  # retries: 1, so two 503s exhaust it
        cohere.fail_next(503, headers={"Retry-After": "0"})
    fused = rerank_store.query("policy", QUESTION)
    assert fused.rerank is not None and not fused.rerank.applied
    assert [h.score for h in fused.hits] == [h.fused_score for h in fused.hits]
    assert [h.score for h in fused.hits] == sorted((h.score for h in fused.hits), reverse=True)


def test_rerank_scores_follow_the_server_and_explain_shows_the_stage(
    rerank_store: KnowledgeBaseStore, cohere: RerankServer
) -> None:
    cohere.score_fn = None  # real scores: cosine of the local model's embeddings
    result = rerank_store.query("policy", "penguin visits", explain=True)
    assert result.trace is not None
    stages = [s.stage for s in result.trace]
    assert stages == ["embed question", "vector", "keyword", "fuse", "threshold", "rerank", "select"]
    rerank_stage = result.trace[stages.index("rerank")]
    assert rerank_stage.entries[0].source == "penguins" and rerank_stage.entries[0].detail.startswith("fused rank")
    assert result.hits[0].rerank_score == pytest.approx(rerank_stage.entries[0].score, abs=1e-3)


def test_min_score_cuts_and_says_so(
    store: KnowledgeBaseStore, cohere: RerankServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = f"rerank:\n  providers:\n    loop: {{baseURL: '{cohere.url}', apiKeyEnv: LOOP_RERANK_KEY}}\n"
    with configured_store(store, tmp_path, monkeypatch, config) as s:
        s.apply(parse_manifests(manifest(f"{{model: loop/{cohere.model_name}, minScore: 0.5}}"), "kb.yaml"))
        some = s.query("policy", "Is the penguin allowed in?")
        assert [h.source for h in some.hits] == ["penguins"]  # keyword_scores gives 1.0 / 0.0
        assert some.rerank is not None and some.rerank.below_min_score == 3
        cohere.score_fn = lambda query, docs: [0.1 for _ in docs]
        none = s.query("policy", "Is the penguin allowed in?")
        assert none.hits == []
        assert none.message == (
            "nothing relevant found in KnowledgeBase/policy: the best rerank score is 0.10, "
            "below the rerank minScore 0.50"
        )


def test_a_failing_reranker_answers_in_fused_order_with_a_warning(
    rerank_store: KnowledgeBaseStore, cohere: RerankServer, cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    for _ in range(2):  # retries: 1, so two 503s exhaust it
        cohere.fail_next(503, headers={"Retry-After": "0"})
    result = rerank_store.query("policy", QUESTION)
    assert result.rerank is not None and not result.rerank.applied
    assert result.rerank.error == (
        f"rerank request to {cohere.url}/rerank failed: HTTP 503 Service Unavailable (after 2 attempts)"
    )
    assert [h.source for h in result.hits] == [
        h.source for h in rerank_store.query("policy", QUESTION, rerank=False).hits
    ]
    cohere.fail_next(401)
    monkeypatch.setenv("KBCTL_CONFIG", str(rerank_store.settings.config_file))
    out = cli.invoke(app, ["query", "policy", QUESTION])
    assert out.exit_code == 0, out.output
    assert out.stderr.strip() == (
        f"warning: rerank skipped, results are in fused order: rerank endpoint {cohere.url}/rerank "
        "rejected the API key in $LOOP_RERANK_KEY (HTTP 401 Unauthorized)"
    )
    assert KEY not in out.output
    assert "1. retention" in out.stdout
    out = cli.invoke(app, ["query", "policy", QUESTION, "--no-rerank", "-o", "json"])
    assert out.exit_code == 0 and json.loads(out.stdout)["rerank"] is None and len(cohere.rerank_requests) == 3
    cohere.fail_next(400, body={"message": "query too long"})
    out = cli.invoke(app, ["context", "policy", QUESTION])
    assert out.exit_code == 0 and out.stdout.startswith("<reference_data")
    assert out.stderr == (
        f"warning: rerank skipped, results are in fused order: HTTP 400 Bad Request from {cohere.url}/rerank: "
        "query too long\n"
    )


def test_rerank_true_needs_a_reranker_in_the_spec(store: KnowledgeBaseStore) -> None:
    store.apply(parse_manifests(manifest(None), "kb.yaml"))
    with pytest.raises(ValueError, match=r"KnowledgeBase/policy \(version 1\) has no spec.retrieval.rerank"):
        store.query("policy", QUESTION, rerank=True)


def test_eval_measures_with_and_without_the_reranker(rerank_store: KnowledgeBaseStore) -> None:
    evalset = EvalSet(
        queries=[
            EvalQuery(id="keep", question=QUESTION, expected_sources=["retention"]),
            EvalQuery(id="pet", question="Can the penguin come to the office?", expected_sources=["penguins"]),
        ]
    )
    report = evaluate_store(rerank_store, "policy", evalset, k=1, modes=["hybrid", "hybrid+rerank", None])
    plain, reranked, default = report.modes
    assert plain.recall == pytest.approx(1.0)  # both found by hybrid alone
    assert reranked.recall == pytest.approx(0.5)  # the keyword rule puts penguins first for the invoice question too
    assert default.resolved_mode == "hybrid+rerank" and default.recall == pytest.approx(0.5)


def test_tei_shaped_endpoint(
    store: KnowledgeBaseStore, local_model: Embedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with serve_rerank(api="tei", embedder=local_model) as tei:
        config = f"rerank:\n  providers:\n    tei: {{baseURL: '{tei.url}', api: tei}}\n"
        with configured_store(store, tmp_path, monkeypatch, config) as s:
            s.apply(parse_manifests(manifest("{model: tei/bge-reranker-base}"), "kb.yaml"))
            result = s.query("policy", "When must a data breach be reported?")
    assert result.rerank is not None and result.rerank.applied
    assert result.hits[0].source == "breach"
    assert 0.0 < (result.hits[0].rerank_score or 0.0) < 1.0  # TEI's sigmoid scores
    [request] = tei.rerank_requests
    assert set(request.body) == {"query", "texts"} and "authorization" not in request.headers


def test_a_local_cross_encoder_from_configured_model_files(
    store: KnowledgeBaseStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = build_cross_encoder(tmp_path / "ce")
    config = f"rerank:\n  localModels:\n    test-ce: '{folder}'\n"
    with configured_store(store, tmp_path, monkeypatch, config) as s:
        s.apply(parse_manifests(manifest("{model: local/test-ce, candidates: 3}"), "kb.yaml"))
        result = s.query("policy", "Which class do we book for train travel?", explain=True)
    assert result.rerank is not None and result.rerank.applied and result.rerank.model == "local/test-ce"
    assert result.rerank.candidates == 3
    scores = [h.rerank_score for h in result.hits]
    assert all(isinstance(x, float) for x in scores) and scores == sorted(scores, reverse=True)  # type: ignore[type-var]
    assert result.hits[0].source == "travel"
    assert result.trace is not None
    rerank_stage = next(s for s in result.trace if s.stage == "rerank")
    assert rerank_stage.entries[-1].detail == "cut: beyond the 3 rerank candidates"


def test_a_missing_local_model_is_a_clear_rerank_error(
    store: KnowledgeBaseStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "empty").mkdir()
    config = f"rerank:\n  localModels:\n    broken: '{tmp_path / 'empty'}'\n"
    with configured_store(store, tmp_path, monkeypatch, config) as s:
        s.apply(parse_manifests(manifest("{model: local/broken}"), "kb.yaml"))
        result = s.query("policy", QUESTION)
    assert result.rerank is not None and result.rerank.error == (
        f"cross-encoder folder {tmp_path / 'empty'} lacks model.onnx, tokenizer.json, tokenizer_config.json"
    )
    assert result.hits[0].source == "retention"


def test_unknown_rerank_provider_fails_the_query(store: KnowledgeBaseStore) -> None:
    store.apply(parse_manifests(manifest("{model: nowhere/some-model}"), "kb.yaml"))
    with pytest.raises(RerankError, match="unknown rerank provider 'nowhere' \\(in 'nowhere/some-model'\\)"):
        store.query("policy", QUESTION)


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ("{model: cohere}", "spec.retrieval.rerank.model: must be of the form provider/name, got 'cohere'"),
        ("{model: cohere/x, candidates: 500}", "spec.retrieval.rerank.candidates: must be at most 200"),
        ("{model: cohere/x, topN: 3}", "spec.retrieval.rerank.topN"),
        ("{candidates: 5}", "spec.retrieval.rerank.model"),
    ],
)
def test_rerank_block_validation(block: str, message: str) -> None:
    with pytest.raises(ManifestError) as caught:
        parse_manifests(manifest(block), "kb.yaml")
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda body: body["results"].pop() and None, "1 document of 3 not scored"),
        (lambda body: body["results"].append(dict(body["results"][0])), "scored twice"),
        (lambda body: body["results"][0].update(index=7), "result index 7 out of range"),
        (lambda body: body["results"][0].update(relevance_score="NaN"), "relevance_score 'NaN' is not a finite number"),
        (lambda body: body.pop("results") and None, "expected an object with a 'results' list"),
    ],
)
def test_malformed_rerank_responses_are_refused(local_model: Embedder, mangle, message: str) -> None:  # type: ignore[no-untyped-def]
    with serve_rerank(api="cohere", embedder=local_model) as srv:
        reranker = HttpReranker(HttpRerankConfig(base_url=srv.url, model=srv.model_name, model_id="loop/x"))
        assert len(reranker.rerank("q", ["a", "b", "c"])) == 3
        srv.mangle_next(mangle)
        with pytest.raises(RerankError, match=message):
            reranker.rerank("q", ["a", "b", "c"])


def test_describe_shows_the_reranker(rerank_store: KnowledgeBaseStore, cohere: RerankServer, cli: CliRunner) -> None:
    out = cli.invoke(app, ["describe", "kb", "policy"])
    assert out.exit_code == 0, out.output
    [line] = [x for x in out.stdout.splitlines() if x.startswith("Retrieval:")]
    assert f"rerank.model=loop/{cohere.model_name} rerank.candidates=10" in line and "minScore" not in line


def test_eval_refuses_to_measure_a_failing_reranker(rerank_store: KnowledgeBaseStore, cohere: RerankServer) -> None:
    """A reranker that fails would silently measure the fused order: eval stops with the reason instead."""
    evalset = EvalSet(queries=[EvalQuery(id="keep", question=QUESTION, expected_sources=["retention"])])
    cohere.fail_next(404)
    with pytest.raises(KbctlError, match=r"^mode hybrid\+rerank: model 'rerank-test-v1' not found at "):
        evaluate_store(rerank_store, "policy", evalset, modes=["hybrid+rerank"])
