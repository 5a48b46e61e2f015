"""The web console in a real headless Chromium against a real `kbctl serve` on the examples: every page renders
without a console error, the playground draws hits and a trace (and "nothing relevant" with the line), retrievals
made over HTTP and over MCP open to their traces, a version diff shows the changed text, and a token of one
knowledge base or one group sees nothing else. A screenshot of each page is saved (KBCTL_SCREENSHOTS names the
folder; docs/console.md shows them).

Skipped, saying why, where there is no Chromium: CI installs Debian's chromium and chromium-driver.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support.console import (
    ADMIN,
    NEW_SENTENCE,
    STAFF,
    SUPPORT,
    browser_missing,
    chromium,
    console_server,
    recorded,
)
from tests.support.serveproc import Served

MISSING = browser_missing()
if MISSING is not None and os.environ.get("KBCTL_REQUIRE_BROWSER"):  # CI: a missing browser is a failure
    raise RuntimeError(f"KBCTL_REQUIRE_BROWSER is set but the browser tests cannot run: {MISSING}")
pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")

IN_DOMAIN = "how long do we keep invoices?"
OFF_TOPIC = "what is the capital of Peru?"


@pytest.fixture(scope="module")
def server(kbctl_home: Path, database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with console_server(kbctl_home, database_url, tmp_path_factory.mktemp("console-browser")) as (served, _):
        yield served


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = Path(os.environ["KBCTL_SCREENSHOTS"]) if os.environ.get("KBCTL_SCREENSHOTS") else None
    folder = folder or tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class Page:
    """A signed-in browser on the console: open a path, check it, keep a screenshot."""

    def __init__(self, driver: Any, base: str, shots: Path) -> None:
        self.driver, self.base, self.shots = driver, base, shots

    def sign_in(self, token: str) -> None:
        from selenium.webdriver.common.by import By

        self.driver.get(self.base + "/login")
        field = self.driver.find_element(By.ID, "bearer")
        field.send_keys(token)
        field.submit()
        assert not self.driver.current_url.endswith("/login"), self.driver.page_source[:2000]

    def open(self, path: str) -> str:
        """The page's HTML, after checking the browser logged no error loading it."""
        self.driver.get(self.base + path)
        errors = [e for e in self.driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, f"{path}: {errors}"
        return str(self.driver.page_source)

    def text(self, css: str) -> list[str]:
        from selenium.webdriver.common.by import By

        return [e.text for e in self.driver.find_elements(By.CSS_SELECTOR, css)]

    def screenshot(self, name: str) -> None:
        """The whole page (the window grown to its height) as `name`.png."""
        width = self.driver.get_window_size()["width"]
        height = self.driver.execute_script("return document.documentElement.scrollHeight")
        self.driver.set_window_size(width, min(max(int(height) + 120, 600), 5000))
        self.driver.save_screenshot(str(self.shots / f"{name}.png"))
        self.driver.set_window_size(width, 900)


@pytest.fixture
def admin(server: Served, shots: Path) -> Iterator[Page]:
    with chromium() as driver:
        page = Page(driver, server.url, shots)
        page.sign_in(ADMIN)
        yield page


def test_every_page_renders_without_console_errors(admin: Page) -> None:
    pages = {
        "knowledge-bases": "/",
        "knowledge-base": "/knowledgebases/client-service-policy",
        "version-diff": "/knowledgebases/client-service-policy/diff?from=1&to=2",
        "playground": "/playground?kb=client-service-policy&q=" + IN_DOMAIN.replace(" ", "+"),
        "retrievals": "/retrievals",
    }
    for name, path in pages.items():
        html = admin.open(path)
        assert "<h1>" in html, name
        admin.screenshot(name)
    admin.open("/login")
    admin.screenshot("sign-in")


def test_the_playground_shows_hits_and_a_trace_then_nothing_relevant_with_the_line(admin: Page) -> None:
    admin.open("/playground?kb=client-service-policy&q=" + IN_DOMAIN.replace(" ", "+"))
    assert admin.text("#outcome")[0].endswith("hits")
    assert len(admin.text("ol.hits > li")) >= 1
    assert admin.driver.find_elements("css selector", "svg.trace rect.bar.kept")
    assert admin.driver.find_elements("css selector", "svg.trace line.threshold")
    admin.open("/playground?kb=client-service-policy&q=" + OFF_TOPIC.replace(" ", "+"))
    assert admin.text("#outcome") == ["Nothing relevant"]
    assert "relevance line" in admin.text("p.message")[0]
    assert admin.driver.find_elements("css selector", "svg.trace line.threshold")
    assert not admin.driver.find_elements("css selector", "svg.trace rect.bar.kept")
    admin.screenshot("playground-nothing-relevant")


def test_retrievals_over_http_and_mcp_appear_with_their_traces(server: Served, admin: Page) -> None:
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60) as api:
        assert api.post("/v1/knowledgebases/data-handling-policy/context", json={"question": "who is the DPO?"})

    async def over_mcp() -> None:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60) as http,
            Client(streamable_http_client(server.url + "/mcp", http_client=http)) as client,
        ):
            await client.call_tool("search", {"knowledge_base": "team-handbook", "question": "how do I book travel?"})

    anyio.run(over_mcp)
    with httpx.Client(base_url=server.url, timeout=60) as session:  # the log writes a moment after the answer
        session.cookies.update({c["name"]: c["value"] for c in admin.driver.get_cookies()})
        recorded(session, "how do I book travel?")
        recorded(session, "who is the DPO?")
    html = admin.open("/retrievals")
    assert "who is the DPO?" in html and "how do I book travel?" in html
    admin.screenshot("retrievals-log")
    for question, channel in (("who is the DPO?", "http"), ("how do I book travel?", "mcp")):
        admin.driver.find_element("link text", question).click()
        assert "Retrieval" in admin.text("h1")[0]
        facts = " ".join(admin.text("dl.facts dd"))
        assert channel in facts and "admin" in facts
        assert admin.driver.find_elements("css selector", "svg.trace rect.bar"), question
        admin.screenshot(f"retrieval-{channel}")
        admin.open("/retrievals")


def test_a_version_diff_shows_the_changed_text(admin: Page) -> None:
    admin.open("/knowledgebases/client-service-policy")
    admin.driver.find_element("link text", "diff with 1").click()
    added = " ".join(admin.text("pre.diff span.add"))
    assert NEW_SENTENCE in added


def test_a_token_of_one_knowledge_base_or_group_sees_nothing_else(server: Served, shots: Path) -> None:
    with chromium() as driver:
        page = Page(driver, server.url, shots)
        page.sign_in(SUPPORT)
        page.open("/")
        assert page.text("table.kbs tbody th a") == ["client-service-policy"]
        # The rows the page reloads (every 5 s) come from a fragment with the same scope.
        rows = driver.execute_async_script(
            "const done = arguments[0]; fetch('/fragments/knowledgebases').then(r => r.text()).then(done);"
        )
        assert re.findall(r'href="/knowledgebases/([a-z0-9-]+)"', rows) == ["client-service-policy"]
        driver.get(server.url + "/knowledgebases/team-handbook")
        assert page.text("h1") == ["Not found"]
    with chromium(width=420) as driver:  # and in a narrow window
        page = Page(driver, server.url, shots)
        page.sign_in(STAFF)
        page.open("/playground?kb=hr&q=what+does+salary+band+E4+pay%3F")
        sources = " ".join(page.text("ol.hits .origin") + page.text("table.candidates td"))
        assert "restricted/" not in sources
        page.screenshot("playground-narrow-staff")
