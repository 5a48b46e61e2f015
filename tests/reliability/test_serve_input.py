"""`kbctl serve` under hostile input: malformed selectors, names and types are refused as bad requests before
the store, an out-of-scope MCP read is refused without an error-level traceback, and slow clients are cut off."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from kbctl.client import KnowledgeBaseStore
from tests.support.manifests import knowledge_base, text_source
from tests.support.serveproc import Served, kbctl_env, seeded, serving

pytestmark = pytest.mark.reliability

TOKEN = "input-test-token-0123456789abcdef"
CONFIG = (
    "serve:\n  tokens:\n"
    "    agent: {tokenEnv: TEST_INPUT_TOKEN, knowledgeBases: [handbook], selector: team=finance, metrics: true}\n"
)
HANDBOOK = knowledge_base(
    "handbook",
    text_source("refunds", "# Refunds\n\nClients may ask for a refund within 30 days of the invoice date."),
    labels={"team": "support"},
    description="How the support team handles refunds.",
)
PAYROLL = knowledge_base(
    "payroll",
    text_source("pay-dates", "# Pay dates\n\nSalaries are paid on the 25th of each month."),
    labels={"team": "finance"},
    description="Payroll: pay dates.",
)
PLANS = knowledge_base(
    "board-plans",
    text_source("merger", "# Merger\n\nThe board plans to merge with Contoso in the third quarter."),
    labels={"team": "exec"},
    description="Board-only plans.",
)
SLOW_LIMIT = 20.0  # a generous bound: the server is configured to cut slow clients after 1 s
BODY_ROUTES = (
    "/v1/knowledgebases/payroll/query",
    "/v1/knowledgebases/payroll/context",
    "/v1/knowledgebases/payroll/ask",
    "/v1/query",
)


@pytest.fixture(scope="module")
def data(database_url: str, kbctl_home: Path) -> Iterator[KnowledgeBaseStore]:
    """Three knowledge bases of three teams; the token sees two of them."""
    with seeded(database_url, kbctl_home, HANDBOOK, PAYROLL, PLANS) as store:
        yield store


@pytest.fixture(scope="module")
def server(
    data: KnowledgeBaseStore, database_url: str, kbctl_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """A server with one scoped token (that may also read /metrics) and 1 s header and body timeouts."""
    folder = tmp_path_factory.mktemp("input")
    (folder / "config.yaml").write_text(CONFIG)
    env = kbctl_env(kbctl_home, database_url, KBCTL_CONFIG=str(folder / "config.yaml"), TEST_INPUT_TOKEN=TOKEN)
    with serving(env, folder / "serve.log", "--header-timeout", "1s", "--body-timeout", "1s") as served:
        yield served


def is_bad_input(response: httpx.Response) -> dict[str, Any]:
    """The response is a 400 or 422 invalid-request problem, without a traceback."""
    assert response.status_code in (400, 422), response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["type"] == "/problems/invalid-request" and body["status"] == response.status_code
    assert "Traceback" not in response.text
    return body


def errors_by_kind(client: httpx.Client) -> dict[str, float]:
    """`kbctl_errors_total` per kind, from /metrics."""
    counts: dict[str, float] = {}
    for line in client.get("/metrics").text.splitlines():
        if line.startswith('kbctl_errors_total{kind="'):
            kind = line.split('"')[1]
            counts[kind] = float(line.rsplit(" ", 1)[1])
    return counts


def no_store_or_internal_errors(before: dict[str, float], after: dict[str, float]) -> None:
    """Nothing of the requests between the two scrapes was counted as a store error or a bug."""
    for kind in ("store-unavailable", "internal"):
        assert after.get(kind, 0.0) == before.get(kind, 0.0), kind


# ---------------------------------------------------------------- selectors, names and types


@pytest.mark.parametrize("selector", ["!", "team in ()", "((", "", "  ", "team=a,", "a b", "team notin (x", "=x"])
def test_a_malformed_selector_is_bad_input(server: Served, selector: str) -> None:
    """Each malformed label selector of /v1/query is a 422 naming the selector field, never a 500."""
    with server.client(TOKEN) as c:
        before = errors_by_kind(c)
        body = is_bad_input(c.post("/v1/query", json={"question": "when are salaries paid?", "selector": selector}))
        after = errors_by_kind(c)
    assert str(body["detail"]).startswith("selector")
    no_store_or_internal_errors(before, after)


def test_a_valid_selector_still_selects(server: Served) -> None:
    """A well-formed selector (set-based too) reads the knowledge bases in scope that match it."""
    with server.client(TOKEN) as c:
        result = c.post("/v1/query", json={"question": "when are salaries paid?", "selector": "team in (finance)"})
    assert result.status_code == 200, result.text
    assert result.json()["knowledgeBases"] == ["payroll"]


@pytest.mark.parametrize("selector", ["!", "team in ()", "((", "", "  ", "team=a,", "a b", "team notin (x", "=x"])
def test_a_malformed_selector_of_the_list_is_bad_input(server: Served, selector: str) -> None:
    """GET /v1/knowledgebases?selector=... refuses a malformed selector as /v1/query does (a 422 naming the
    field), rather than ignoring it and listing everything in scope."""
    with server.client(TOKEN) as c:
        before = errors_by_kind(c)
        body = is_bad_input(c.get("/v1/knowledgebases", params={"selector": selector}))
        after = errors_by_kind(c)
        queried = is_bad_input(c.post("/v1/query", json={"question": "when are salaries paid?", "selector": selector}))
    assert body["status"] == 422 and str(body["detail"]).startswith("selector: not a label selector")
    assert body["detail"] == queried["detail"]  # worded as /v1/query's, never quoting the input
    no_store_or_internal_errors(before, after)


def test_the_list_selects_by_label_within_the_scope(server: Served) -> None:
    """A well-formed selector narrows the list to the knowledge bases in scope that match it; none: all in scope."""
    with server.client(TOKEN) as c:
        listed = {
            selector: [kb["name"] for kb in c.get("/v1/knowledgebases", params=params).json()["items"]]
            for selector, params in [
                ("", {}),
                ("finance", {"selector": "team in (finance)"}),
                ("exec", {"selector": "team=exec"}),
            ]
        }
    assert listed == {"": ["handbook", "payroll"], "finance": ["payroll"], "exec": []}


@pytest.mark.parametrize(
    "name", ["kbb%00", "kbb%0a", "kbb%1b", "Payroll", "-payroll", "pay_roll", "pay.roll", "kb%20b", "a" * 64]
)
def test_a_name_that_cannot_be_a_knowledge_base_is_refused_before_the_store(server: Served, name: str) -> None:
    """A name that is not a DNS-1123 label (NUL, control characters, upper case, too long...) is a 422 on every
    route that takes one, and is never counted as a store error."""
    question = {"question": "when are salaries paid?"}
    with server.client(TOKEN) as c:
        before = errors_by_kind(c)
        responses = [
            c.get(f"/v1/knowledgebases/{name}"),
            c.post(f"/v1/knowledgebases/{name}/query", json=question),
            c.post(f"/v1/knowledgebases/{name}/context", json=question),
            c.post(f"/v1/knowledgebases/{name}/ask", json=question),
        ]
        after = errors_by_kind(c)
    for response in responses:
        assert str(is_bad_input(response)["detail"]).startswith("name:")
    no_store_or_internal_errors(before, after)
    assert after.get("invalid-request", 0.0) == before.get("invalid-request", 0.0) + len(responses)


@pytest.mark.parametrize("name", ["kbb\x00", "kbb\n", "Payroll", "a" * 64, ""])
def test_a_malformed_name_in_a_cross_query_is_bad_input(server: Served, name: str) -> None:
    """`knowledgeBases` of /v1/query holds knowledge-base names only: anything else is a 422 naming the field."""
    with server.client(TOKEN) as c:
        before = errors_by_kind(c)
        body = is_bad_input(c.post("/v1/query", json={"question": "salaries", "knowledgeBases": ["payroll", name]}))
        after = errors_by_kind(c)
    assert str(body["detail"]).startswith("knowledgeBases.1")
    no_store_or_internal_errors(before, after)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("threshold", "-1"),
        ("threshold", True),
        ("topK", True),
        ("topK", "5"),
        ("topK", 5.0),
        ("maxTokens", "100"),
        ("maxTokens", False),
        ("explain", "yes"),
        ("explain", 1),
        ("rerank", 0),
        ("mode", 1),
    ],
)
def test_no_value_is_coerced_to_another_type(server: Served, field: str, value: object) -> None:
    """A string or boolean where a number belongs (and a number or string where a boolean belongs) is a 422
    naming the field, on every route with a body."""
    with server.client(TOKEN) as c:
        before = errors_by_kind(c)
        for route in BODY_ROUTES:
            body = is_bad_input(c.post(route, json={"question": "when are salaries paid?", field: value}))
            assert str(body["detail"]).startswith(field), (route, body)
        after = errors_by_kind(c)
    no_store_or_internal_errors(before, after)


def test_numbers_of_the_right_type_are_still_accepted(server: Served) -> None:
    """An integer threshold (JSON has one number type) and integer topK and maxTokens are served."""
    with server.client(TOKEN) as c:
        response = c.post(
            "/v1/knowledgebases/payroll/query",
            json={"question": "when are salaries paid?", "threshold": 0, "topK": 2, "maxTokens": 500},
        )
    assert response.status_code == 200, response.text
    assert response.json()["topK"] == 2


# ---------------------------------------------------------------- MCP


def error_lines(log: str) -> list[dict[str, Any]]:
    """The server's JSON log lines at error level, or carrying an exception's traceback."""
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("level") in ("error", "critical") or "exception" in line]


def test_mcp_refuses_bad_names_types_and_out_of_scope_reads_without_a_traceback(server: Served) -> None:
    """MCP: a malformed name or argument type is a tool error, an out-of-scope resource read is refused, and
    none of them logs at error level or with a traceback."""

    async def run() -> dict[str, Any]:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as http,
            Client(streamable_http_client(server.url + "/mcp", http_client=http)) as client,
        ):
            seen: dict[str, Any] = {}
            calls: dict[str, dict[str, Any]] = {
                "nul": {"knowledge_base": "kbb\x00", "question": "salaries"},
                "upper": {"knowledge_base": "Payroll", "question": "salaries"},
                "bool": {"knowledge_base": "payroll", "question": "salaries", "top_k": True},
                "string": {"knowledge_base": "payroll", "question": "salaries", "threshold": "-1"},
                "hidden": {"knowledge_base": "board-plans", "question": "merger"},
            }
            for key, arguments in calls.items():
                result = await client.call_tool("search", arguments)
                seen[key] = (result.is_error, "\n".join(getattr(b, "text", "") for b in result.content))
            for key, uri in {
                "out_of_scope": "kbctl://knowledgebases/board-plans",
                "absent": "kbctl://knowledgebases/no-such-kb",
                "malformed": "kbctl://knowledgebases/Board%00Plans",
            }.items():
                try:
                    await client.read_resource(uri)
                    seen[key] = "read"
                except MCPError as exc:
                    seen[key] = str(exc)
            resource = await client.read_resource("kbctl://knowledgebases/payroll")
            seen["in_scope"] = json.loads(resource.contents[0].text)  # type: ignore[union-attr]
            return seen

    seen = anyio.run(run)
    for key in ("nul", "upper", "bool", "string", "hidden"):
        assert seen[key][0] is True, (key, seen[key])
    assert "knowledge_base" in seen["nul"][1] and "knowledge_base" in seen["upper"][1]
    assert "top_k" in seen["bool"][1] and "threshold" in seen["string"][1]
    assert seen["hidden"][1].endswith('knowledgebase "board-plans" not found')
    assert 'knowledgebase "board-plans" not found' in seen["out_of_scope"]
    assert seen["absent"] != "read" and seen["malformed"] != "read"
    assert seen["in_scope"]["name"] == "payroll"
    time.sleep(0.5)  # the log lines of the last requests
    assert error_lines(server.log()) == []


# ---------------------------------------------------------------- slow clients


def connect(server: Served) -> socket.socket:
    host, port = server.url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=SLOW_LIMIT)


def until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection; fails if it is still open after SLOW_LIMIT."""
    received = b""
    sock.settimeout(SLOW_LIMIT)
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except TimeoutError:
        pytest.fail(f"the server kept a slow connection open for {SLOW_LIMIT:g} s; it sent {received!r}")
    except ConnectionResetError:
        pass
    return received


def trickle(sock: socket.socket, data: bytes, pause: float = 0.25) -> None:
    """Send `data` a byte at a time, `pause` s apart, until the server closes the connection."""
    try:
        for byte in data:
            sock.sendall(bytes([byte]))
            time.sleep(pause)
    except OSError:  # the server closed the connection: what the test waits for
        pass


HALF_HEADERS = b"POST /v1/knowledgebases/payroll/query HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: appl"


def test_a_client_that_stalls_halfway_through_its_headers_is_cut_off(server: Served) -> None:
    """Half a request's headers, then nothing: the server answers 408 and closes the connection."""
    with connect(server) as sock:
        sock.sendall(HALF_HEADERS)
        received = until_closed(sock)
    assert received.startswith(b"HTTP/1.1 408"), received


def test_a_client_that_sends_its_headers_byte_by_byte_is_cut_off(server: Served) -> None:
    """Headers trickled a byte at a time (each byte within any idle timeout) are still cut off: the deadline is
    for the whole header block."""
    headers = HALF_HEADERS + b"ication/json\r\n" + b"X-Padding: " + b"a" * 400 + b"\r\n\r\n"
    with connect(server) as sock:
        trickle(sock, headers)
        received = until_closed(sock)
    assert received.startswith(b"HTTP/1.1 408"), received


def test_a_connection_that_never_sends_a_request_is_closed(server: Served) -> None:
    """A connection opened and left silent is closed by the server."""
    with connect(server) as sock:
        assert until_closed(sock) == b""


def test_a_client_that_sends_its_body_slowly_gets_408_and_is_cut_off(server: Served) -> None:
    """Complete headers, then a body trickled too slowly: a 408 problem, and the connection closed."""
    body = json.dumps({"question": "when are salaries paid?" + " " * 200}).encode()
    head = (
        b"POST /v1/knowledgebases/payroll/query HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + f"Authorization: Bearer {TOKEN}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    )
    with connect(server) as sock:
        sock.sendall(head)
        trickle(sock, body)
        received = until_closed(sock)
    status, _, rest = received.partition(b"\r\n")
    assert status.startswith(b"HTTP/1.1 408"), received
    assert b"application/problem+json" in rest and b"/problems/request-timeout" in rest


def test_a_second_request_on_a_kept_alive_connection_is_bounded_too(server: Served) -> None:
    """After a prompt request on a keep-alive connection, the next one stalling in its headers is cut off."""
    with connect(server) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        first = b""
        while b'{"status":"ok"}' not in first:
            chunk = sock.recv(65536)
            assert chunk, first
            first += chunk
        assert first.startswith(b"HTTP/1.1 200")
        sock.sendall(HALF_HEADERS)
        assert until_closed(sock).startswith(b"HTTP/1.1 408")


def test_prompt_clients_are_served_while_slow_ones_are_cut_off(server: Served) -> None:
    """Slow connections held open do not stop a prompt client from being served."""
    slow = [connect(server) for _ in range(20)]
    try:
        for sock in slow:
            sock.sendall(HALF_HEADERS)
        with server.client(TOKEN) as c:
            response = c.post("/v1/knowledgebases/payroll/query", json={"question": "when are salaries paid?"})
        assert response.status_code == 200, response.text
        for sock in slow:
            assert until_closed(sock).startswith(b"HTTP/1.1 408")
    finally:
        for sock in slow:
            sock.close()
