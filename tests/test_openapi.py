"""`kbctl serve`'s OpenAPI document is valid, and true: a client built from it alone calls every operation of a real
server (its examples, without a token, an unknown knowledge base, bad bodies) and every answer fits the schema the
document declares for its status and content type."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from openapi_spec_validator import validate

from kbctl.serve.app import PUBLIC_PATHS
from tests.support.chatserver import serve_chat
from tests.support.serveproc import Served, seeded, serving_with_config

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "kb"
AGENT_TOKEN = "openapi-agent-token-0123456789abcdef"
SCRAPE_TOKEN = "openapi-scrape-token-0123456789abcdef"
IN_SCOPE = ["client-service-policy", "data-handling-policy"]  # the example knowledge bases with inline sources
OPERATIONS = {  # operationId -> (method, path): ids a generated client is built on, so they must not drift
    "checkHealth": ("get", "/healthz"),
    "checkReadiness": ("get", "/readyz"),
    "getMetrics": ("get", "/metrics"),
    "listKnowledgeBases": ("get", "/v1/knowledgebases"),
    "getKnowledgeBase": ("get", "/v1/knowledgebases/{name}"),
    "queryKnowledgeBase": ("post", "/v1/knowledgebases/{name}/query"),
    "getKnowledgeBaseContext": ("post", "/v1/knowledgebases/{name}/context"),
    "askKnowledgeBase": ("post", "/v1/knowledgebases/{name}/ask"),
    "queryAcrossKnowledgeBases": ("post", "/v1/query"),
}
JSON = {"content-type": "application/json"}


class Undeclared(AssertionError):
    """A response the document does not declare: its status, content type, body or a header."""


def strict(schema: Any) -> Any:
    """`schema` where an object with declared properties admits no others: a member the server sends that the
    document does not declare is caught (a generated client would not know it)."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    tightened = {key: strict(value) for key, value in schema.items()}
    if isinstance(schema.get("properties"), dict) and "additionalProperties" not in schema:
        tightened["additionalProperties"] = False
    return tightened


def media_type(content_type: str) -> str:
    return content_type.split(";")[0].strip().lower()


@dataclass(frozen=True)
class Operation:
    """One operation as the document describes it."""

    id: str
    method: str
    path: str
    spec: dict[str, Any]

    @property
    def secured(self) -> bool:
        return bool(self.spec.get("security"))

    def path_example(self, name: str) -> str:
        [parameter] = [p for p in self.spec.get("parameters", []) if p["in"] == "path" and p["name"] == name]
        value: str = next(iter(parameter["examples"].values()))["value"]
        return value

    def body_examples(self) -> dict[str, Any]:
        """The request body's examples by name (none when the operation takes no body)."""
        if "requestBody" not in self.spec:
            return {}
        media = self.spec["requestBody"]["content"]["application/json"]
        return {name: example["value"] for name, example in media["examples"].items()}


class DocumentClient:
    """A client built at run time from an OpenAPI document: each operationId's method, path, parameters and
    body come from the document, and every answer is checked against what it declares."""

    def __init__(self, document: dict[str, Any], base_url: str) -> None:
        self.document = document
        self.base_url = base_url
        self.operations = {
            spec["operationId"]: Operation(spec["operationId"], method, path, spec)
            for path, item in document["paths"].items()
            for method, spec in item.items()
        }

    def call(
        self,
        operation_id: str,
        *,
        token: str | None = None,
        path: dict[str, str] | None = None,
        body: Any = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        """Call an operation: path parameters from `path`, else their example; `body` as JSON (or raw `content`)."""
        operation = self.operations[operation_id]
        url = operation.path
        for parameter in operation.spec.get("parameters", []):
            if parameter["in"] == "path":
                value = (path or {}).get(parameter["name"]) or operation.path_example(parameter["name"])
                url = url.replace("{" + parameter["name"] + "}", value)
        sent = dict(headers or {})
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        if body is not None:
            content = json.dumps(body).encode()
            sent.setdefault("content-type", next(iter(operation.spec["requestBody"]["content"])))
        with httpx.Client(base_url=self.base_url, timeout=60) as http:
            return http.request(operation.method.upper(), url, content=content, headers=sent)

    def check(self, operation_id: str, response: httpx.Response) -> Any:
        """The response's body, once it fits what the document declares for its status and content type
        (Undeclared if it does not)."""
        operation = self.operations[operation_id]
        declared = operation.spec["responses"].get(str(response.status_code))
        if declared is None:
            raise Undeclared(f"{operation_id}: status {response.status_code} is not declared: {response.text[:300]}")
        got = media_type(response.headers.get("content-type", ""))
        by_type = {media_type(key): value for key, value in declared.get("content", {}).items()}
        if got not in by_type:
            raise Undeclared(f"{operation_id} {response.status_code}: {got} is not declared (only {list(by_type)})")
        body = response.json() if got.endswith("json") else response.text
        self.fits(body, by_type[got]["schema"], f"{operation_id} {response.status_code}")
        for header, spec in declared.get("headers", {}).items():
            if header not in response.headers:
                raise Undeclared(f"{operation_id} {response.status_code}: no {header} header")
            self.fits(response.headers[header], spec["schema"], f"{operation_id} {response.status_code} {header}")
        return body

    def fits(self, value: Any, schema: dict[str, Any], where: str) -> None:
        """`value` is valid against `schema` (its references resolved in the document's components, strictly)."""
        root = strict({"$schema": "https://json-schema.org/draft/2020-12/schema", **schema})
        root["components"] = strict(self.document["components"])
        errors = sorted(jsonschema.Draft202012Validator(root).iter_errors(value), key=lambda e: list(e.path))
        if errors:
            raise Undeclared(f"{where}: {errors[0].message} at {list(errors[0].absolute_path)}")


@pytest.fixture(scope="module")
def server(database_url: str, kbctl_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A real server over the example knowledge bases, with an agent's token, a scraper's and a chat model."""
    manifests = [(EXAMPLES / f"{name}.yaml").read_text() for name in IN_SCOPE]
    config = {
        "serve": {
            "tokens": {
                "agent": {"tokenEnv": "TEST_OPENAPI_AGENT", "knowledgeBases": IN_SCOPE},
                "scraper": {"tokenEnv": "TEST_OPENAPI_SCRAPE", "metrics": True},
            }
        },
    }
    with serve_chat() as chat, seeded(database_url, kbctl_home, *manifests):
        config["chat"] = {"providers": {"stand-in": {"baseURL": chat.url}}, "defaultModel": "stand-in/chat-test-v1"}
        folder = tmp_path_factory.mktemp("openapi")
        tokens = {"TEST_OPENAPI_AGENT": AGENT_TOKEN, "TEST_OPENAPI_SCRAPE": SCRAPE_TOKEN}
        with serving_with_config(kbctl_home, database_url, folder, json.dumps(config), **tokens) as served:
            yield served


@pytest.fixture(scope="module")
def document(server: Served) -> dict[str, Any]:
    """The document the server serves."""
    response = httpx.get(server.url + "/openapi.json", timeout=30)
    assert response.status_code == 200
    served: dict[str, Any] = response.json()
    return served


@pytest.fixture(scope="module")
def client(document: dict[str, Any], server: Served) -> DocumentClient:
    return DocumentClient(document, server.url)


def token_for(operation: Operation) -> str:
    """A token that may call the operation: the scraper's for /metrics, else the agent's."""
    return SCRAPE_TOKEN if operation.path == "/metrics" else AGENT_TOKEN


def names_a_knowledge_base(operation: Operation) -> bool:
    return any(p["name"] == "name" for p in operation.spec.get("parameters", []))


# ---------------------------------------------------------------- the document


def test_the_served_document_is_valid_openapi(document: dict[str, Any]) -> None:
    """The real validator accepts /openapi.json, an OpenAPI 3.1 document."""
    validate(document)
    assert document["openapi"].startswith("3.1")


def test_operation_ids_are_stable_camel_case_verbs(client: DocumentClient) -> None:
    """Every operation has its fixed camelCase id (none of FastAPI's generated ones), and /mcp is not one."""
    found = {op.id: (op.method, op.path) for op in client.operations.values()}
    assert found == OPERATIONS
    assert all(re.fullmatch(r"[a-z]+(?:[A-Z][a-z]+)+", op_id) for op_id in found)


def test_every_token_route_declares_the_bearer_scheme_and_no_public_one_does(document: dict[str, Any]) -> None:
    """The bearer scheme is in components and on every route but the public ones; the docs page and the document
    itself are not operations."""
    [(scheme, declared)] = document["components"]["securitySchemes"].items()
    assert scheme == "bearerAuth" and declared["type"] == "http" and declared["scheme"] == "bearer"
    assert "security" not in document  # no global default: each operation says
    for path, item in document["paths"].items():
        for method, spec in item.items():
            expected = [] if path in PUBLIC_PATHS else [{"bearerAuth": []}]
            assert spec.get("security", []) == expected, f"{method} {path}"
            assert ("401" in spec["responses"]) is (path not in PUBLIC_PATHS), f"{method} {path}"
    assert not {"/docs", "/openapi.json", "/mcp"} & document["paths"].keys()


def test_errors_are_declared_as_problems_only(document: dict[str, Any]) -> None:
    """Every error response is a Problem as application/problem+json (only /readyz's 503 is its Readiness), and
    FastAPI's validation-error schemas, which the server never sends, are gone."""
    schemas = document["components"]["schemas"]
    assert not {"HTTPValidationError", "ValidationError"} & schemas.keys()
    assert set(schemas["Problem"]["required"]) == {"type", "title", "status", "detail"}
    for path, item in document["paths"].items():
        for method, spec in item.items():
            assert "500" in spec["responses"]
            for status, response in spec["responses"].items():
                if int(status) < 400 or (path, status) == ("/readyz", "503"):
                    continue
                [(media, declared)] = response["content"].items()
                assert media == "application/problem+json", f"{method} {path} {status}"
                assert declared["schema"] == {"$ref": "#/components/schemas/Problem"}, f"{method} {path} {status}"
                assert declared["example"]["status"] == int(status), f"{method} {path} {status}"


def test_every_example_fits_its_schema(client: DocumentClient) -> None:
    """The examples of request bodies, parameters and responses are valid against their own schemas."""
    checked = 0
    for op in client.operations.values():
        body = op.spec.get("requestBody", {}).get("content", {}).get("application/json")
        for value in op.body_examples().values():
            client.fits(value, body["schema"], f"{op.id} request")
            checked += 1
        for parameter in op.spec.get("parameters", []):
            for example in parameter.get("examples", {}).values():
                client.fits(example["value"], parameter["schema"], f"{op.id} {parameter['name']}")
                checked += 1
        for status, response in op.spec["responses"].items():
            for media in response.get("content", {}).values():
                if "example" in media:
                    client.fits(media["example"], media["schema"], f"{op.id} {status}")
                    assert media["example"].get("status", int(status)) == int(status)
                    checked += 1
    assert checked >= 50


# ---------------------------------------------------------------- the server answers as declared


def test_every_operation_answers_its_examples_as_declared(client: DocumentClient) -> None:
    """Each operation, called with a token and each of its examples, answers 200 with a body that fits."""
    for op in client.operations.values():
        token = token_for(op) if op.secured else None
        for name, body in (op.body_examples() or {"": None}).items():
            response = client.call(op.id, token=token, body=body)
            assert response.status_code == 200, f"{op.id} {name}: {response.text[:300]}"
            answer = client.check(op.id, response)
            if op.id == "listKnowledgeBases":
                assert sorted(kb["name"] for kb in answer["items"]) == IN_SCOPE
            if op.id in ("queryKnowledgeBase", "getKnowledgeBaseContext"):
                assert answer["knowledgeBase"] == "client-service-policy"


def test_answers_carry_what_the_examples_ask_for(client: DocumentClient) -> None:
    """The examples are real questions of the example knowledge bases: they find their passages."""
    found = client.check(
        "queryKnowledgeBase",
        client.call(
            "queryKnowledgeBase",
            token=AGENT_TOKEN,
            body={"question": client.operations["queryKnowledgeBase"].body_examples()["options"]["question"]},
        ),
    )
    assert any("7 years" in hit["text"] for hit in found["hits"])
    scores = [hit["score"] for hit in found["hits"]]  # what ranks them; the cosine is their similarity
    assert scores == sorted(scores, reverse=True) and all("similarity" in hit for hit in found["hits"])
    asked = client.check(
        "askKnowledgeBase",
        client.call(
            "askKnowledgeBase",
            token=AGENT_TOKEN,
            body=client.operations["askKnowledgeBase"].body_examples()["question"],
        ),
    )
    assert asked["reason"] == "answered" and asked["citations"]


def test_without_a_token_every_secured_operation_is_a_declared_401(client: DocumentClient) -> None:
    """No token, or a wrong one, is a declared 401 problem with `WWW-Authenticate: Bearer`; public operations
    answer without one."""
    for op in client.operations.values():
        body = next(iter(op.body_examples().values()), None)
        if not op.secured:
            assert client.call(op.id, body=body).status_code == 200, op.id
            continue
        for token in (None, "not-a-configured-token-0123456789"):
            response = client.call(op.id, token=token, body=body)
            assert response.status_code == 401, op.id
            problem = client.check(op.id, response)
            assert problem["type"] == "/problems/unauthorized" and problem["status"] == 401
            assert response.headers["www-authenticate"] == "Bearer"


def test_unknown_knowledge_bases_are_a_declared_404(client: DocumentClient) -> None:
    """A knowledge base that does not exist is a declared 404 problem on every operation that names one."""
    named = [op for op in client.operations.values() if names_a_knowledge_base(op)]
    assert len(named) == 4
    for op in named:
        body = next(iter(op.body_examples().values()), None)
        response = client.call(op.id, token=AGENT_TOKEN, path={"name": "no-such-knowledge-base"}, body=body)
        assert response.status_code == 404, op.id
        assert client.check(op.id, response)["type"] == "/problems/not-found"
    response = client.call(
        "queryAcrossKnowledgeBases", token=AGENT_TOKEN, body={"question": "x", "knowledgeBases": ["no-such-kb"]}
    )
    assert response.status_code == 404
    client.check("queryAcrossKnowledgeBases", response)


def test_bad_requests_are_declared_problems(client: DocumentClient) -> None:
    """Invalid bodies and names (422), malformed JSON (400), a body that is not JSON (415) or too large (413),
    and /metrics with an agent's token (403) are each a problem the operation declares."""
    cases: list[tuple[str, dict[str, Any], int]] = []
    for op in client.operations.values():
        if "requestBody" in op.spec:
            cases += [
                (op.id, {"body": {"question": ""}}, 422),
                (op.id, {"body": {"question": "refunds?", "topK": "5"}}, 422),
                (op.id, {"body": {"question": "refunds?", "colour": "blue"}}, 422),
                (op.id, {"content": b'{"question": ', "headers": JSON}, 400),
                (op.id, {"content": b"question=refunds", "headers": {"content-type": "text/plain"}}, 415),
                (op.id, {"body": {"question": "a" * 70_000}}, 413),
            ]
        if names_a_knowledge_base(op):
            body = next(iter(op.body_examples().values()), None)
            cases.append((op.id, {"path": {"name": "Not_A_Name"}, "body": body}, 422))
    cases.append(("getMetrics", {}, 403))
    for op_id, request, status in cases:
        response = client.call(op_id, token=AGENT_TOKEN, **request)
        assert response.status_code == status, f"{op_id} {request}: {response.text[:300]}"
        assert client.check(op_id, response)["status"] == status
    assert len(cases) > 25


# ---------------------------------------------------------------- the checks can fail


def test_the_checks_catch_a_wrong_declaration(client: DocumentClient, document: dict[str, Any]) -> None:
    """What the checks above rely on rejects what does not fit: a problem without a required member, a member
    the document does not declare, a status or content type it does not declare, and a real answer checked
    against a declaration it does not meet."""
    response = client.call("getKnowledgeBase", token=AGENT_TOKEN, path={"name": "no-such-knowledge-base"})
    real = client.check("getKnowledgeBase", response)

    def forged(status: int, body: Any, content_type: str = "application/problem+json") -> httpx.Response:
        return httpx.Response(status, headers={"content-type": content_type}, content=json.dumps(body).encode())

    without_detail = {k: v for k, v in real.items() if k != "detail"}
    with pytest.raises(Undeclared, match="'detail' is a required property"):
        client.check("getKnowledgeBase", forged(404, without_detail))
    with pytest.raises(Undeclared, match="Additional properties"):
        client.check("getKnowledgeBase", forged(404, {**real, "instance": "/x"}))
    with pytest.raises(Undeclared, match="status 418 is not declared"):
        client.check("getKnowledgeBase", forged(418, real))
    with pytest.raises(Undeclared, match="application/json is not declared"):
        client.check("getKnowledgeBase", forged(404, real, "application/json"))
    with pytest.raises(Undeclared, match="not declared"):  # listing answers no 404
        client.check("listKnowledgeBases", forged(404, real))
    listed = client.check("listKnowledgeBases", client.call("listKnowledgeBases", token=AGENT_TOKEN))
    listed["items"][0]["chunks"] = "many"
    with pytest.raises(Undeclared, match="is not of type 'integer'"):
        client.check("listKnowledgeBases", forged(200, listed, "application/json"))

    wrong = copy.deepcopy(document)  # a Problem declared with a member the server does not send
    wrong["components"]["schemas"]["Problem"]["required"].append("instance")
    with pytest.raises(Undeclared, match="'instance' is a required property"):
        DocumentClient(wrong, client.base_url).check("getKnowledgeBase", response)
    unauthorized = client.call("listKnowledgeBases")
    wrong = copy.deepcopy(document)  # a 401 declared without its header's true value
    wrong["paths"]["/v1/knowledgebases"]["get"]["responses"]["401"]["headers"]["WWW-Authenticate"]["schema"] = {
        "const": "Basic"
    }
    with pytest.raises(Undeclared, match="WWW-Authenticate"):
        DocumentClient(wrong, client.base_url).check("listKnowledgeBases", unauthorized)
