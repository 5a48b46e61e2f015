"""Refresh benchmark: 100 pages on a loopback server; first apply vs refresh with nothing changed vs one page changed.

    python bench/refresh.py [--pages 100]

Serves generated HTML pages (with nav and footer, ETags) from a real HTTP server on 127.0.0.1, applies
one knowledge base holding them to a fresh embedded store with the real local model, then refreshes
twice. Prints fetches (requests that reached the server, and how many were conditional), embeddings and wall time
of each run, and the ratios, measured in one run.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings
from kbctl.engine.results import ApplyReport
from kbctl.manifest import parse_manifests
from kbctl.sources.url import FetchPolicy
from kbctl.store.embedded import stop_server
from tests.support.httpserver import HTTPTestServer, serve

WORDS = (
    "warehouse route carrier freight pallet invoice customs tariff depot fleet driver schedule dock "
    "inventory forecast demand supplier contract audit safety training shipment tracking delivery"
).split()


def page(rng: random.Random, idx: int) -> str:
    sections = []
    for s in range(3):
        paras = "".join(
            "<p>"
            + " ".join(" ".join(rng.choice(WORDS) for _ in range(14)).capitalize() + "." for _ in range(4))
            + "</p>"
            for _ in range(2)
        )
        sections.append(f"<h2>Topic {idx}.{s}</h2>{paras}")
    return (
        f"<html><head><title>Page {idx}</title></head><body><nav><a href='/'>Home</a></nav>"
        f"<main><article><h1>Page {idx}</h1>{''.join(sections)}</article></main>"
        "<footer>Copyright 2026. Cookie settings.</footer></body></html>"
    )


def run(label: str, action, srv: HTTPTestServer, rows: list[tuple[str, float, int, int, int]]) -> None:  # type: ignore[no-untyped-def]
    srv.reset_counts()
    start = time.perf_counter()
    report: ApplyReport = action()
    elapsed = time.perf_counter() - start
    assert not report.failed, report
    conditional = sum(1 for r in srv.requests if "if-none-match" in r.headers)
    rows.append((label, elapsed, srv.total_hits, conditional, report.embedded))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=100)
    args = parser.parse_args()
    rng = random.Random(7)
    home = Path(tempfile.mkdtemp(prefix="kbctl-bench-"))
    settings = Settings.from_env(home=home)
    rows: list[tuple[str, float, int, int, int]] = []
    with serve() as srv:
        pages = {i: page(rng, i) for i in range(args.pages)}
        for i, html in pages.items():
            srv.route(f"/p/{i}", body=html, content_type="text/html; charset=utf-8", etag=True)
        sources = "".join(f"    - name: p{i}\n      url: {srv.url(f'/p/{i}')}\n" for i in pages)
        header = "apiVersion: kbctl.dev/v1alpha1\nkind: KnowledgeBase\nmetadata:\n  name: site\n"
        text = f"{header}spec:\n  sources:\n{sources}"
        policy = FetchPolicy(allowed_addresses=frozenset({("127.0.0.1", srv.port)}))
        try:
            with KnowledgeBaseStore(settings=settings, fetch_policy=policy) as store:
                run("first apply", lambda: store.apply(parse_manifests(text, "site.yaml")), srv, rows)
                run("refresh, nothing changed", lambda: store.refresh(["site"]), srv, rows)
                changed = pages[17].replace("<h2>Topic 17.1</h2>", "<h2>Topic 17.1</h2><p>A new paragraph.</p>")
                srv.route("/p/17", body=changed, content_type="text/html; charset=utf-8", etag=True)
                run("refresh, 1 page changed", lambda: store.refresh(["site"]), srv, rows)
                chunks = store.describe("site").chunks
        finally:
            if not settings.database_url:
                stop_server(settings.pgdata)
    print(f"{args.pages} HTML pages on a loopback server, {chunks} chunks, model local/all-MiniLM-L6-v2")
    print(f"{'run':<28}{'wall s':>9}{'requests':>10}{'conditional':>13}{'embedded':>10}")
    for label, elapsed, hits, conditional, embedded in rows:
        print(f"{label:<28}{elapsed:>9.2f}{hits:>10}{conditional:>13}{embedded:>10}")
    first, same, one = rows
    print(f"refresh unchanged / first apply: time {same[1] / first[1]:.3f}x, embeddings {same[4]}/{first[4]}")
    print(f"refresh 1 changed / first apply: time {one[1] / first[1]:.3f}x, embeddings {one[4]}/{first[4]}")


if __name__ == "__main__":
    main()
