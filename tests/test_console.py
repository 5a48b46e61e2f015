"""The web console over HTTP, against a real `kbctl serve` on the examples: sign-in, scopes and groups on every
page and fragment, the version diff, the playground's trace, the retrieval log's view, and the headers that keep
a page to itself. (tests/test_console_browser.py drives the same pages in Chromium.)"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from kbctl.client import KnowledgeBaseStore
from tests.support.console import ADMIN, NEW_SENTENCE, STAFF, SUPPORT, console_server, recorded, signed_in
from tests.support.serveproc import Served

SALARY = "what does salary band E4 pay?"
PAGES = ("/", "/fragments/knowledgebases", "/playground", "/retrievals", "/knowledgebases/client-service-policy")


@pytest.fixture(scope="module")
def served(
    kbctl_home: Path, database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Served, KnowledgeBaseStore]]:
    with console_server(kbctl_home, database_url, tmp_path_factory.mktemp("console")) as running:
        yield running


@pytest.fixture(scope="module")
def server(served: tuple[Served, KnowledgeBaseStore]) -> Served:
    return served[0]


def candidates(html: str) -> int:
    """The candidates a trace view counts."""
    found = re.search(r"<dt>Candidates</dt><dd>(\d+):", html)
    assert found, html
    return int(found.group(1))


def rows(html: str) -> list[str]:
    """The knowledge bases a table of them lists."""
    return re.findall(r'<a href="/knowledgebases/([a-z0-9-]+)">', html)


def test_a_page_without_a_session_sends_to_sign_in_and_a_fragment_answers_401(server: Served) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as anonymous:
        page = anonymous.get("/knowledgebases/hr?x=1")
        assert page.status_code == 303
        assert page.headers["location"] == "/login?next=%2Fknowledgebases%2Fhr%3Fx%3D1"
        assert anonymous.get("/fragments/knowledgebases").status_code == 401
        assert anonymous.get("/static/console.css").status_code == 200
        assert anonymous.get("/login").status_code == 200
        # The API is unchanged: a bearer, never the console's cookie.
        assert anonymous.get("/v1/knowledgebases").status_code == 401


def test_sign_in_keeps_only_a_session_id_and_refuses_what_is_not_a_bearer(server: Served) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as browser:
        refused = browser.post("/login", data={"bearer": "not-a-token-of-this-server", "next": "/"})
        assert refused.status_code == 401 and "not valid here" in refused.text
        assert "not-a-token-of-this-server" not in refused.text and not browser.cookies
        # A `next` of another site is not followed (no open redirect).
        opened = browser.post("/login", data={"bearer": SUPPORT, "next": "//evil.example/"})
        assert opened.status_code == 303 and opened.headers["location"] == "/"
        cookie = opened.headers["set-cookie"]
        assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
        assert SUPPORT not in cookie
        assert browser.get("/").status_code == 200
        assert browser.post("/logout").status_code == 303
        assert browser.get("/").status_code == 303  # the session has ended


def test_a_token_of_one_knowledge_base_sees_nothing_else_in_pages_or_fragments(server: Served) -> None:
    with signed_in(server, SUPPORT) as support:
        assert rows(support.get("/").text) == ["client-service-policy"]
        assert rows(support.get("/fragments/knowledgebases").text) == ["client-service-policy"]
        assert rows(support.get("/", params={"selector": "team"}).text) == ["client-service-policy"]
        malformed = support.get("/fragments/knowledgebases", params={"selector": "team in (("})
        assert malformed.status_code == 400 and not rows(malformed.text)
        for path in ("/knowledgebases/hr", "/knowledgebases/data-handling-policy/diff?from=1&to=1"):
            page = support.get(path)
            assert page.status_code == 404 and "not found" in page.text, path
        playground = support.get("/playground", params={"kb": "hr", "q": SALARY})
        assert playground.status_code == 404
        assert 'value="hr"' not in support.get("/playground").text  # not offered either
        for path in PAGES:
            assert SUPPORT not in support.get(path).text


def test_groups_bound_the_playground_and_can_only_narrow(server: Served) -> None:
    with signed_in(server, STAFF) as staff, signed_in(server, ADMIN) as admin:
        as_staff = staff.get("/playground", params={"kb": "hr", "q": SALARY}).text
        as_admin = admin.get("/playground", params={"kb": "hr", "q": SALARY}).text
        assert "restricted/" in as_admin
        assert "restricted/" not in as_staff
        # Naming a group it does not hold gives the staff token nothing more.
        widened = staff.get("/playground", params={"kb": "hr", "q": SALARY, "group": "hr-managers"}).text
        assert "restricted/" not in widened
        # The admin, narrowed to employees, reads as the staff token does.
        narrowed = admin.get("/playground", params={"kb": "hr", "q": SALARY, "group": "employees"}).text
        assert "restricted/" not in narrowed


def test_the_playground_draws_the_trace_and_says_why_nothing_is_relevant(server: Served) -> None:
    with signed_in(server, SUPPORT) as support:
        found = support.get("/playground", params={"kb": "client-service-policy", "q": "how long do we keep invoices?"})
        assert found.status_code == 200
        assert 'class="bar kept"' in found.text and 'class="threshold"' in found.text
        assert "kept as 1" in found.text
        nothing = support.get(
            "/playground", params={"kb": "client-service-policy", "q": "what is the capital of Peru?"}
        ).text
        assert "Nothing relevant" in nothing and "below the" in nothing
        assert 'class="threshold"' in nothing and 'class="bar kept"' not in nothing
        bad = support.get("/playground", params={"kb": "client-service-policy", "q": "refunds", "topK": "many"})
        assert bad.status_code == 400 and "topK must be a number" in bad.text


def test_quality_is_plotted_per_version(server: Served) -> None:
    with signed_in(server, SUPPORT) as support:
        page = support.get("/knowledgebases/client-service-policy").text
        assert 'class="chart quality"' in page
        points = re.findall(r'<circle class="dot s0"[^>]*><title>(v\d+): recall@k ([0-9.]+)</title>', page)
        assert [v for v, _ in points] == ["v1", "v2"]
        assert all(0.0 <= float(r) <= 1.0 for _, r in points)


def test_a_version_diff_shows_the_changed_text(server: Served) -> None:
    with signed_in(server, SUPPORT) as support:
        page = support.get("/knowledgebases/client-service-policy")
        assert "/knowledgebases/client-service-policy/diff?from=1&amp;to=2" in page.text
        diff = support.get("/knowledgebases/client-service-policy/diff", params={"from": 1, "to": 2})
        assert diff.status_code == 200
        assert re.search(r'<span class="add">\+[^<]*' + re.escape(NEW_SENTENCE.replace("'", "&#39;")), diff.text)
        assert support.get("/knowledgebases/client-service-policy/diff", params={"from": 1}).status_code == 400


def test_the_retrieval_log_shows_runs_in_scope_with_only_readable_hits(server: Served) -> None:
    api = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60)
    with api, signed_in(server, STAFF) as staff, signed_in(server, SUPPORT) as support:
        asked = api.post("/v1/knowledgebases/hr/query", json={"question": f"{SALARY} (project-apollo)"})
        assert asked.status_code == 200 and any("restricted/" in h["source"] for h in asked.json()["hits"])
        listed = recorded(staff, f"{SALARY} ([redacted])", kb="hr")
        runs = re.findall(r'href="/retrievals/(\d+)"', listed)
        assert runs, listed
        assert "project-apollo" not in listed and "[redacted]" in listed
        run = staff.get(f"/retrievals/{runs[0]}")
        assert run.status_code == 200
        assert "restricted/" not in run.text and "of documents you may not read" in run.text
        # Its counts are of the candidates the viewer may read: fewer than the run's own.
        with signed_in(server, ADMIN) as admin:
            whole = admin.get(f"/retrievals/{runs[0]}").text
        assert candidates(run.text) < candidates(whole)
        assert not re.findall(r'href="/retrievals/\d+"', support.get("/retrievals", params={"kb": "hr"}).text)
        assert support.get(f"/retrievals/{runs[0]}").status_code == 404


def test_a_fused_retrieval_shows_its_hits_and_each_member(server: Served) -> None:
    question = "how long do we keep client records and invoices?"
    names = ["client-service-policy", "data-handling-policy"]
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60) as api:
        assert api.post("/v1/query", json={"question": question, "knowledgeBases": names}).status_code == 200
    with signed_in(server, ADMIN) as admin:
        listed = recorded(admin, question)
        run = re.search(r'href="/retrievals/(\d+)">' + re.escape(question), listed)
        assert run, listed
        page = admin.get(f"/retrievals/{run.group(1)}").text
        assert "fused from 2 knowledge bases" in page
        assert page.count('<svg class="chart trace"') == 2


def test_every_console_response_keeps_the_page_to_itself(server: Served) -> None:
    with signed_in(server, ADMIN) as admin:
        for path in PAGES:
            response = admin.get(path)
            assert response.status_code == 200, path
            policy = response.headers["content-security-policy"]
            assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
            assert response.headers["x-content-type-options"] == "nosniff"
            assert "<script>" not in response.text  # no inline script: the policy would refuse it
