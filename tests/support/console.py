"""A real `kbctl serve` over the examples, with tokens of three scopes and the retrieval log on, for the console's
tests (tests/test_console.py over HTTP, tests/test_console_browser.py in Chromium); and the headless Chromium they
drive, when the machine has one."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings
from kbctl.manifest import load_manifests, parse_manifests
from tests.conftest import TABLES
from tests.support.serveproc import Served, kbctl_env, serving_with_config

__all__ = [
    "ADMIN",
    "CONFIG",
    "EXAMPLES",
    "NEW_SENTENCE",
    "STAFF",
    "SUPPORT",
    "TOKENS",
    "browser_missing",
    "changed_policy",
    "chromium",
    "console_server",
    "recorded",
    "signed_in",
]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ADMIN = "console-admin-token-0123456789abcdef"  # every knowledge base, both groups of the HR example
SUPPORT = "console-support-token-0123456789abcdef"  # client-service-policy only
STAFF = "console-staff-token-0123456789abcdef"  # hr only, as an employee (not the restricted folder)
TOKENS = {"TEST_CONSOLE_ADMIN": ADMIN, "TEST_CONSOLE_SUPPORT": SUPPORT, "TEST_CONSOLE_STAFF": STAFF}
CONFIG = """
serve:
  retrievalLog: {enabled: true, redact: ['project-[a-z]+']}
  tokens:
    admin: {tokenEnv: TEST_CONSOLE_ADMIN, selector: team, groups: [employees, hr-managers]}
    support: {tokenEnv: TEST_CONSOLE_SUPPORT, knowledgeBases: [client-service-policy]}
    staff: {tokenEnv: TEST_CONSOLE_STAFF, knowledgeBases: [hr], groups: [employees]}
"""
NEW_SENTENCE = "Refunds above 5,000 GBP also need the Finance Director's written approval."


def changed_policy() -> str:
    """examples/kb's client-service-policy with one sentence added to its refunds source (a second version)."""
    text = (EXAMPLES / "kb" / "client-service-policy.yaml").read_text()
    changed, count = re.subn(r"(\n(\s+)# Refunds\n)", rf"\1\2{NEW_SENTENCE}\n", text, count=1)
    assert count == 1, "the example's refunds source has changed: update changed_policy"
    return changed


@contextmanager
def console_server(home: Path, database_url: str, folder: Path) -> Iterator[tuple[Served, KnowledgeBaseStore]]:
    """The store emptied, examples/kb and examples/access applied, client-service-policy changed once (version 2),
    and `kbctl serve` with CONFIG's tokens and retrieval log."""
    store = KnowledgeBaseStore(settings=Settings(home=home, database_url=database_url))
    try:
        store.db.connection.execute(f"TRUNCATE {TABLES} RESTART IDENTITY CASCADE")
        store.apply(load_manifests([str(EXAMPLES / "kb"), str(EXAMPLES / "access")]))
        record_eval(home, database_url)
        store.apply(parse_manifests(changed_policy(), "client-service-policy.yaml"))
        record_eval(home, database_url)
        with serving_with_config(home, database_url, folder, CONFIG, **TOKENS) as served:
            yield served, store
    finally:
        store.close()


def record_eval(home: Path, database_url: str) -> None:
    """`kbctl eval --record` of client-service-policy with its example eval set: a point of quality per version."""
    evalset = EXAMPLES / "eval" / "client-service-policy.yaml"
    done = subprocess.run(
        [sys.executable, "-m", "kbctl", "eval", "client-service-policy", "-f", str(evalset), "--record"],
        env=kbctl_env(home, database_url),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@contextmanager
def signed_in(served: Served, token: str) -> Iterator[httpx.Client]:
    """An HTTP client with a console session opened by `token` (its cookie), as a browser would hold it."""
    with httpx.Client(base_url=served.url, timeout=60, follow_redirects=False) as client:
        response = client.post("/login", data={"bearer": token, "next": "/"})
        assert response.status_code == 303, response.text
        yield client


def recorded(client: httpx.Client, question: str, **params: str) -> str:
    """The retrievals page (as `client`'s session) once it lists a run of `question`: the log writes in the
    background, a moment after the answer."""
    deadline = time.monotonic() + 30
    while True:
        page = client.get("/retrievals", params=params).text
        if question in page or time.monotonic() > deadline:
            return page
        time.sleep(0.2)


def browser_missing() -> str | None:
    """Why the browser tests cannot run here, or None: Chromium and its driver (Debian: chromium, chromium-driver)
    and selenium."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    if chromium_binary() is None or shutil.which("chromedriver") is None:
        return "no Chromium here: install chromium and chromium-driver (Debian) to run the console's browser tests"
    return None


def chromium_binary() -> str | None:
    return next((p for n in ("chromium", "chromium-browser", "google-chrome") if (p := shutil.which(n))), None)


@contextmanager
def chromium(width: int = 1280, height: int = 900) -> Iterator[Any]:
    """A headless Chromium under Selenium that keeps the page's console messages (`driver.get_log("browser")`)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium_binary() or "chromium"
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={width},{height}",
        "--lang=en-GB",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
