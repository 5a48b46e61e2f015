"""`kbctl serve` as a real subprocess on loopback, called with httpx: routes, auth and scopes, bad input, a
publish while serving, metrics, readiness with the database stopped, and the bind rule."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from kbctl.client import KnowledgeBaseStore
from kbctl.manifest import parse_manifests
from tests.support.manifests import knowledge_base, text_source
from tests.support.serveproc import Served, kbctl_env, seeded, serving, serving_with_config

SUPPORT_TOKEN = "support-token-0123456789abcdef"
FINANCE_TOKEN = "finance-token-0123456789abcdef"
SCRAPE_TOKEN = "scrape-token-0123456789abcdef"
CONFIG = """
serve:
  tokens:
    support: {tokenEnv: TEST_SUPPORT_TOKEN, knowledgeBases: [handbook]}
    finance: {tokenEnv: TEST_FINANCE_TOKEN, selector: team=finance}
    scraper: {tokenEnv: TEST_SCRAPE_TOKEN, metrics: true}
"""
HANDBOOK = knowledge_base(
    "handbook",
    text_source(
        "refunds",
        "# Refunds\n\nClients may ask for a refund within 30 days of the invoice date. Refunds are paid back to the "
        "card or account that paid the invoice, within ten working days of approval.",
    ),
    labels={"team": "support"},
    description="How the support team handles refunds and complaints.",
)
PAYROLL = knowledge_base(
    "payroll",
    text_source(
        "pay-dates",
        "# Pay dates\n\nSalaries are paid on the 25th of each month. When the 25th falls on a weekend, salaries are "
        "paid on the last working day before it.",
    ),
    labels={"team": "finance"},
    description="Payroll: pay dates, payslips and expenses.",
)
PLANS = knowledge_base(
    "board-plans",
    text_source("merger", "# Merger\n\nThe board plans to merge with Contoso in the third quarter."),
    labels={"team": "exec"},
    description="Board-only plans.",
)
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def data(database_url: str, kbctl_home: Path) -> Iterator[KnowledgeBaseStore]:
    """Three knowledge bases of three teams in the session's store."""
    with seeded(database_url, kbctl_home, HANDBOOK, PAYROLL, PLANS) as store:
        yield store


@pytest.fixture(scope="module")
def open_server(
    data: KnowledgeBaseStore, database_url: str, kbctl_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """A server without tokens (loopback, everything visible): no configuration file at all."""
    env = kbctl_env(kbctl_home, database_url, HOME=str(tmp_path_factory.mktemp("home")))
    with serving(env, tmp_path_factory.mktemp("log") / "open.log") as served:
        yield served


@pytest.fixture(scope="module")
def token_server(
    data: KnowledgeBaseStore, database_url: str, kbctl_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """A server with two scoped tokens."""
    folder = tmp_path_factory.mktemp("tokens")
    variables = {
        "TEST_SUPPORT_TOKEN": SUPPORT_TOKEN,
        "TEST_FINANCE_TOKEN": FINANCE_TOKEN,
        "TEST_SCRAPE_TOKEN": SCRAPE_TOKEN,
    }
    with serving_with_config(kbctl_home, database_url, folder, CONFIG, **variables) as served:
        yield served


def is_problem(response: httpx.Response, status: int) -> dict[str, object]:
    """The response is a JSON problem body with this status and no traceback."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, object] = response.json()
    assert {"type", "title", "detail"} <= body.keys()
    assert "Traceback" not in response.text
    return body


# ---------------------------------------------------------------- routes


def test_lists_knowledge_bases_with_descriptions(open_server: Served) -> None:
    with open_server.client() as c:
        items = c.get("/v1/knowledgebases").json()["items"]
        detail = c.get("/v1/knowledgebases/payroll").json()
    by_name = {kb["name"]: kb for kb in items}
    assert set(by_name) == {"handbook", "payroll", "board-plans"}
    assert by_name["payroll"]["description"] == "Payroll: pay dates, payslips and expenses."
    assert by_name["payroll"]["labels"] == {"team": "finance"}
    assert by_name["payroll"]["ready"] is True and by_name["payroll"]["chunks"] >= 1
    assert detail["name"] == "payroll" and detail["version"] == 1 and "sourceStatus" in detail


def test_query_and_context_answer_like_the_python_api(open_server: Served, data: KnowledgeBaseStore) -> None:
    question = "when are salaries paid?"
    with open_server.client() as c:
        served = c.post("/v1/knowledgebases/payroll/query", json={"question": question, "topK": 3}).json()
        context = c.post("/v1/knowledgebases/payroll/context", json={"question": question}).json()
        explained = c.post("/v1/knowledgebases/payroll/query", json={"question": question, "explain": True}).json()
    local = data.query("payroll", question, top_k=3)
    assert served["knowledgeBase"] == "payroll" and served["topK"] == 3
    assert [h["text"] for h in served["hits"]] == [h.text for h in local.hits]
    assert "25th" in served["hits"][0]["text"] and "headingPath" in served["hits"][0]
    assert context["found"] is True and "<reference_data" in context["block"] and "25th" in context["block"]
    assert [s["stage"] for s in explained["trace"]][:2] == ["embed question", "vector"]


def test_nothing_relevant_is_said_plainly(open_server: Served) -> None:
    with open_server.client() as c:
        result = c.post(
            "/v1/knowledgebases/payroll/context", json={"question": "what colour is the office cat?"}
        ).json()
    assert result["found"] is False and result["passages"] == []
    assert "No relevant context was found" in result["block"]


def test_cross_knowledge_base_query_names_the_source_of_each_hit(open_server: Served) -> None:
    with open_server.client() as c:
        fused = c.post(
            "/v1/query", json={"question": "refund of an invoice", "knowledgeBases": ["handbook", "payroll"]}
        ).json()
        by_label = c.post("/v1/query", json={"question": "when are salaries paid?", "selector": "team=finance"}).json()
        both = c.post("/v1/query", json={"question": "x", "selector": "team=finance", "knowledgeBases": ["payroll"]})
    assert fused["knowledgeBases"] == ["handbook", "payroll"]
    assert fused["hits"][0]["knowledgeBase"] == "handbook" and "refund" in fused["hits"][0]["text"].lower()
    assert [h["rank"] for h in fused["hits"]] == list(range(1, len(fused["hits"]) + 1))
    assert {r["knowledgeBase"] for r in fused["results"]} == {"handbook", "payroll"}
    assert by_label["knowledgeBases"] == ["payroll"] and by_label["hits"][0]["knowledgeBase"] == "payroll"
    is_problem(both, 400)


def test_openapi_describes_the_api(open_server: Served) -> None:
    with open_server.client() as c:
        spec = c.get("/openapi.json").json()
        docs = c.get("/docs")
    assert "/v1/knowledgebases/{name}/query" in spec["paths"] and "/v1/query" in spec["paths"]
    assert "topK" in spec["components"]["schemas"]["QueryRequest"]["properties"]
    assert docs.status_code == 200 and "swagger" in docs.text.lower()


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"question": ""}, 422, "question"),
        ({"question": "   "}, 422, "question"),
        ({"question": "x" * 4001}, 422, "question"),
        ({"question": "x", "bogus": 1}, 422, "bogus"),
        ({"question": "x", "topK": 0}, 422, "topK"),
        ({"question": "x", "topK": 101}, 422, "topK"),
        ({"question": "x", "threshold": 2}, 422, "threshold"),
        ({"question": "x", "mode": "fuzzy"}, 422, "mode"),
        ({"question": "x", "rerank": True}, 400, "rerank"),
        ({}, 422, "question"),
    ],
)
def test_bad_bodies_get_a_problem_naming_the_field(
    open_server: Served, body: dict[str, object], status: int, field: str
) -> None:
    with open_server.client() as c:
        problem = is_problem(c.post("/v1/knowledgebases/payroll/query", json=body), status)
    assert field in str(problem["detail"])


def test_malformed_oversized_and_non_json_bodies(open_server: Served) -> None:
    url = "/v1/knowledgebases/payroll/query"
    with open_server.client() as c:
        assert "not valid JSON" in str(is_problem(c.post(url, content=b"{bad", headers=JSON), 400)["detail"])
        is_problem(c.post(url, content=b'{"question": "' + b"a" * 70_000 + b'"}', headers=JSON), 413)

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
            for _ in range(100):
                yield b" " * 1024

        is_problem(c.post(url, content=chunks(), headers=JSON), 413)
        is_problem(c.post(url, content=b"question=x", headers={"content-type": "text/plain"}), 415)
        is_problem(c.get("/v1/nothing-here"), 404)
        is_problem(c.delete("/v1/knowledgebases/payroll"), 405)
        is_problem(c.post("/v1/knowledgebases/missing/query", json={"question": "x"}), 404)


# ---------------------------------------------------------------- auth


def test_requests_need_a_valid_token(token_server: Served) -> None:
    with token_server.client() as c:
        missing = c.get("/v1/knowledgebases")
        wrong = c.get("/v1/knowledgebases", headers={"Authorization": "Bearer not-a-configured-token-at-all"})
        basic = c.get("/v1/knowledgebases", headers={"Authorization": f"Basic {SUPPORT_TOKEN}"})
        health = c.get("/healthz")
    for response in (missing, wrong, basic):
        is_problem(response, 401)
        assert response.headers["www-authenticate"] == "Bearer"
    assert health.status_code == 200


def test_a_token_sees_only_its_scope(token_server: Served) -> None:
    with token_server.client(SUPPORT_TOKEN) as support, token_server.client(FINANCE_TOKEN) as finance:
        assert [kb["name"] for kb in support.get("/v1/knowledgebases").json()["items"]] == ["handbook"]
        assert [kb["name"] for kb in finance.get("/v1/knowledgebases").json()["items"]] == ["payroll"]
        ok = support.post("/v1/knowledgebases/handbook/query", json={"question": "refund"})
        hidden = support.post("/v1/knowledgebases/payroll/query", json={"question": "refund"})
        absent = support.post("/v1/knowledgebases/no-such-kb/query", json={"question": "refund"})
        hidden_get = finance.get("/v1/knowledgebases/board-plans")
        fused = finance.post("/v1/query", json={"question": "merger plans"}).json()
        named = finance.post("/v1/query", json={"question": "merger", "knowledgeBases": ["board-plans"]})
    assert ok.status_code == 200 and ok.json()["hits"]
    # Out of scope is indistinguishable from absent: same status, same words but the name.
    hidden_body, absent_body = is_problem(hidden, 404), is_problem(absent, 404)
    assert str(hidden_body["detail"]).replace("payroll", "X") == str(absent_body["detail"]).replace("no-such-kb", "X")
    is_problem(hidden_get, 404)
    assert fused["knowledgeBases"] == ["payroll"] and all(h["knowledgeBase"] == "payroll" for h in fused["hits"])
    is_problem(named, 404)


def test_token_values_never_reach_logs_metrics_or_config_view(
    token_server: Served, kbctl_home: Path, database_url: str, tmp_path: Path
) -> None:
    with token_server.client(SUPPORT_TOKEN) as c:
        c.post("/v1/knowledgebases/handbook/query", json={"question": "refund"})
        c.get("/v1/knowledgebases", headers={"Authorization": f"Bearer {FINANCE_TOKEN}x"})
        metrics = c.get("/metrics", headers={"Authorization": f"Bearer {SCRAPE_TOKEN}"}).text
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    env = kbctl_env(kbctl_home, database_url, KBCTL_CONFIG=str(config), TEST_SUPPORT_TOKEN=SUPPORT_TOKEN)
    view = subprocess.run(
        [sys.executable, "-m", "kbctl", "config", "view"], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert "TEST_SUPPORT_TOKEN (set)" in view and "TEST_FINANCE_TOKEN (not set)" in view
    assert 'kbctl_requests_total{route="/v1/knowledgebases/{name}/query",status="200"}' in metrics
    for text in (token_server.log(), metrics, view):
        assert SUPPORT_TOKEN not in text and FINANCE_TOKEN not in text and SCRAPE_TOKEN not in text
    assert '"token": "support"' in token_server.log()


def test_metrics_need_a_metrics_token_when_tokens_are_configured(token_server: Served) -> None:
    """/metrics names knowledge bases of every scope in its labels: only a token with metrics: true reads it."""
    with token_server.client() as c:
        is_problem(c.get("/metrics"), 401)
        is_problem(c.get("/metrics", headers={"Authorization": f"Bearer {SUPPORT_TOKEN}"}), 403)
        scraped = c.get("/metrics", headers={"Authorization": f"Bearer {SCRAPE_TOKEN}"})
        scoped = c.get("/v1/knowledgebases", headers={"Authorization": f"Bearer {SCRAPE_TOKEN}"})
        assert c.get("/readyz").status_code == 200
    assert scraped.status_code == 200 and "kbctl_requests_total" in scraped.text
    assert scoped.json()["items"] == []  # a scraper's token sees no knowledge base


# ---------------------------------------------------------------- logs and metrics


def test_one_json_log_line_per_request(open_server: Served) -> None:
    with open_server.client() as c:
        c.post(
            "/v1/knowledgebases/payroll/query",
            json={"question": "when are salaries paid?"},
            headers={"x-request-id": "req-42"},
        )
    lines = [json.loads(line) for line in open_server.log().splitlines() if line.startswith("{")]
    mine = [line for line in lines if line.get("requestId") == "req-42"]
    assert len(mine) == 1
    entry = mine[0]
    assert entry["route"] == "/v1/knowledgebases/{name}/query" and entry["status"] == 200
    assert entry["knowledgeBase"] == "payroll" and entry["version"] == 1 and entry["hits"] >= 1
    assert entry["bestScore"] > 0 and entry["ms"] > 0


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample of a Prometheus text exposition (0 when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(f"{name}{{{want}}} ") or (not labels and line.startswith(f"{name} ")):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_metrics_counters_move(open_server: Served) -> None:
    with open_server.client() as c:
        before = c.get("/metrics").text
        c.post("/v1/knowledgebases/payroll/query", json={"question": "when are salaries paid?"})
        c.post("/v1/knowledgebases/payroll/query", json={"question": "what colour is the office cat?"})
        c.post("/v1/knowledgebases/payroll/query", json={"question": ""})
        after = c.get("/metrics").text
    route = "/v1/knowledgebases/{name}/query"
    assert metric(after, "kbctl_requests_total", route=route, status="200") == pytest.approx(
        metric(before, "kbctl_requests_total", route=route, status="200") + 2
    )
    assert metric(after, "kbctl_query_hits_total", knowledge_base="payroll") > metric(
        before, "kbctl_query_hits_total", knowledge_base="payroll"
    )
    assert metric(after, "kbctl_query_empty_results_total", knowledge_base="payroll") == pytest.approx(
        metric(before, "kbctl_query_empty_results_total", knowledge_base="payroll") + 1
    )
    assert metric(after, "kbctl_errors_total", kind="invalid-request") >= 1
    assert metric(after, "kbctl_request_duration_seconds_count", route=route, knowledge_base="payroll") >= 2


# ---------------------------------------------------------------- publishing while serving


def test_a_version_published_while_serving_is_served_by_the_next_request(
    open_server: Served, data: KnowledgeBaseStore
) -> None:
    question = "when are salaries paid?"
    with open_server.client() as c:
        first = c.post("/v1/knowledgebases/payroll/query", json={"question": question}).json()
        changed = PAYROLL.replace("the 25th of each month", "the 28th of each month")
        data.apply(parse_manifests(changed, "kb.yaml"))
        second = c.post("/v1/knowledgebases/payroll/query", json={"question": question}).json()
        data.apply(parse_manifests(PAYROLL, "kb.yaml"))
    assert second["version"] == first["version"] + 1
    assert "28th" in second["hits"][0]["text"] and "25th" in first["hits"][0]["text"]


# ---------------------------------------------------------------- start-up rules and readiness


def run_kbctl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kbctl", *args], env=env, capture_output=True, text=True, timeout=120)


def test_an_open_bind_without_tokens_is_refused(kbctl_home: Path, database_url: str, tmp_path: Path) -> None:
    env = kbctl_env(kbctl_home, database_url, HOME=str(tmp_path))
    refused = run_kbctl(env, "serve", "--host", "0.0.0.0", "--port", "1")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "refusing to serve 0.0.0.0 without tokens" in refused.stderr and "--insecure" in refused.stderr


def test_a_token_variable_that_is_unset_or_weak_is_refused(kbctl_home: Path, database_url: str, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    env = kbctl_env(kbctl_home, database_url, KBCTL_CONFIG=str(config))
    unset = run_kbctl(env, "serve")
    weak = run_kbctl({**env, "TEST_SUPPORT_TOKEN": "Weak7Value", "TEST_FINANCE_TOKEN": FINANCE_TOKEN}, "serve")
    assert unset.returncode == 1 and "serve.tokens.support: the environment variable TEST_SUPPORT_TOKEN" in unset.stderr
    assert weak.returncode == 1 and "shorter than 16 characters" in weak.stderr
    assert "Weak7Value" not in weak.stderr and FINANCE_TOKEN not in weak.stderr
    assert "Traceback" not in unset.stderr + weak.stderr


@pytest.mark.slow
def test_readyz_reports_a_stopped_database(tmp_path: Path, server_home: Path) -> None:
    """A server on its own embedded PostgreSQL: ready, then not ready (503) once the database stops, while
    /healthz still answers; queries get a 503 problem, not a traceback."""
    env = kbctl_env(server_home, None, HOME=str(tmp_path))
    with serving(env, tmp_path / "serve.log") as served, served.client() as c:
        assert c.get("/readyz").json() == {"ready": True, "database": "ok", "migrations": "ok", "model": "ok"}
        stopped = run_kbctl(env, "server", "stop")
        assert stopped.returncode == 0, stopped.stderr
        ready = c.get("/readyz")
        query = c.post("/v1/knowledgebases/anything/query", json={"question": "x"})
        health = c.get("/healthz")
    assert ready.status_code == 503 and ready.json()["ready"] is False
    assert ready.json()["database"].startswith("unreachable")
    is_problem(query, 503)
    assert health.status_code == 200
