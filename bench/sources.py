"""Many-document sources at scale, in one run: a folder of Markdown and PDF files through the real CLI, and a
crawl of a loopback site.

    python bench/sources.py [--files 1000] [--pdfs 50] [--pages 200]

Generates a repository (deterministic text) with kb/docs.yaml reading ../docs/, then times the real CLI from
outside (process start, imports and model load included) in a fresh embedded store: the first apply; a
no-op re-apply (nothing to embed: the goal is under 2 s); a re-apply with one Markdown file changed; one with
a PDF deleted. Prints wall time, texts embedded and documents served for each, and their ratios to the first
apply. Separately, in-process, how long listing and reading the folder takes (what every apply pays).

Then a site of `--pages` HTML pages on 127.0.0.1 (each linking to two others, a binary tree, ETags on), crawled
in-process: the first apply, a refresh with nothing changed (every page answers 304), and a refresh with 2
pages changed and 1 removed (404).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from apply import sentence, source_text
from scale import run_cli

from kbctl.manifest import load_manifests
from kbctl.sources.files import read_path
from kbctl.store.embedded import stop_server
from tests.support.documents import make_pdf

MANIFEST = """apiVersion: kbctl.dev/v1alpha1
kind: KnowledgeBase
metadata: {name: docs}
spec:
  sources:
    - name: docs
      path: ../docs/
"""


def build(root: Path, files: int, pdfs: int) -> None:
    rng = random.Random(7)
    docs = root / "docs"
    for i in range(files):
        folder = docs / f"area-{i % 20:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"policy-{i:04d}.md").write_text(source_text(rng, i))
    (docs / "pdf").mkdir(parents=True, exist_ok=True)
    for i in range(pdfs):
        pages = ["\n".join(sentence(rng) for _ in range(6)) for _ in range(3)]
        (docs / "pdf" / f"report-{i:03d}.pdf").write_bytes(make_pdf(pages, title=f"Report {i}"))
    (root / "kb").mkdir()
    (root / "kb" / "docs.yaml").write_text(MANIFEST)
    (root / ".git").mkdir()


def crawl_bench(pages: int) -> None:
    """The crawl half: apply, refresh unchanged, refresh with 2 changed and 1 removed; wall time and embeddings."""
    from kbctl.client import KnowledgeBaseStore
    from kbctl.config import Settings
    from kbctl.manifest import parse_manifests
    from tests.support.httpserver import fetch_policy_for, serve

    rng = random.Random(11)
    home = Path(tempfile.mkdtemp(prefix="kbctl-bench-crawl-"))
    texts = [" ".join(sentence(rng) for _ in range(8)) for _ in range(pages)]

    def body(i: int) -> str:
        links = "".join(f'<a href="/p/{j}">page {j}</a> ' for j in (2 * i + 1, 2 * i + 2) if j < pages)
        head = f"<html><head><title>Page {i}</title></head>"
        return f"{head}<body><article><h1>Page {i}</h1><p>{texts[i]}</p>{links}</article></body></html>"

    rows = []
    try:
        with serve() as site, KnowledgeBaseStore(settings=Settings.from_env(home=home)) as store:
            for i in range(pages):
                site.route("/" if i == 0 else f"/p/{i}", body=body(i), etag=True)
            store.fetch_policy = fetch_policy_for(site, per_host=8, concurrency=8)
            manifest = (
                "apiVersion: kbctl.dev/v1alpha1\nkind: KnowledgeBase\nmetadata: {name: site}\nspec:\n  sources:\n"
                f'    - name: site\n      crawl: {{url: "{site.url("/")}", maxPages: {pages + 10}, maxDepth: 12,'
                " sitemap: false}\n"
            )
            for label, run in (
                ("first apply", lambda: store.apply(parse_manifests(manifest, "site.yaml"))),
                ("refresh, nothing changed", lambda: store.refresh(["site"])),
            ):
                start = time.perf_counter()
                report = run()
                rows.append((label, time.perf_counter() - start, report, site.total_hits))
                site.reset_counts()
            for i in (5, 17):
                texts[i] = texts[i] + " A changed closing sentence about refunds."
                site.route(f"/p/{i}", body=body(i), etag=True)
            site.remove(f"/p/{pages - 1}")
            start = time.perf_counter()
            report = store.refresh(["site"])
            rows.append(("refresh, 2 changed, 1 removed", time.perf_counter() - start, report, site.total_hits))
            served = len(store.describe("site").source_status)
    finally:
        stop_server(home / "pg")
    print(f"\na loopback site of {pages} pages (binary tree of links, ETags), crawled in-process")
    print(f"{'run':<32}{'wall s':>8}{'requests':>10}{'texts embedded':>16}{'vs first':>10}")
    first = rows[0][1]
    for label, wall, report, hits in rows:
        embedded = sum(s.embedded for r in report.results for s in r.sources)
        print(f"{label:<32}{wall:>8.2f}{hits:>10}{embedded:>16}{wall / first:>9.3f}x")
    print(f"pages served after the last refresh: {served}")


def embedded_count(output: str) -> int:
    """Texts embedded, from `apply -o json`."""
    report = json.loads(output)
    return sum(s["embedded"] for r in report["results"] for s in r["sources"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000, help="Markdown files")
    parser.add_argument("--pdfs", type=int, default=50, help="PDF files of 3 pages")
    parser.add_argument("--pages", type=int, default=200, help="pages of the crawled site")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="kbctl-bench-sources-"))
    home = root / "home"
    build(root, args.files, args.pdfs)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KBCTL_")} | {"KBCTL_HOME": str(home)}
    manifest = str(root / "kb" / "docs.yaml")
    rows = []
    try:
        [loaded] = load_manifests([manifest])
        start = time.perf_counter()
        assert loaded.kb.base_dir is not None
        read = read_path(next(s for s in loaded.kb.spec.sources if s.name == "docs"), loaded.kb.base_dir)
        read_s = time.perf_counter() - start
        assert isinstance(read, list)
        wall, rss, out = run_cli(env, "apply", "-f", manifest, "--wait", "-o", "json")
        rows.append(("first apply", wall, rss, out))
        wall, rss, out = run_cli(env, "apply", "-f", manifest, "--wait", "-o", "json")
        rows.append(("no-op re-apply", wall, rss, out))
        changed = root / "docs" / "area-03" / "policy-0003.md"
        changed.write_text(changed.read_text() + "\nA new closing paragraph about notice periods.\n")
        wall, rss, out = run_cli(env, "apply", "-f", manifest, "--wait", "-o", "json")
        rows.append(("1 Markdown file changed", wall, rss, out))
        (root / "docs" / "pdf" / "report-000.pdf").unlink()
        wall, rss, out = run_cli(env, "apply", "-f", manifest, "--wait", "-o", "json")
        rows.append(("1 PDF deleted", wall, rss, out))
        _, _, described = run_cli(env, "get", "kb", "docs")
    finally:
        stop_server(home / "pg")
    print(f"{args.files} Markdown + {args.pdfs} PDF files (3 pages each), the real CLI, model local/all-MiniLM-L6-v2")
    print(f"listing and reading the folder in-process: {read_s:.2f} s for {len(read)} documents")
    print(f"{'run':<26}{'wall s':>8}{'peak MB':>9}{'texts embedded':>16}{'vs first':>10}")
    first = rows[0][1]
    for label, wall, rss, out in rows:
        print(f"{label:<26}{wall:>8.2f}{rss:>9.0f}{embedded_count(out):>16}{wall / first:>9.3f}x")
    print(described.strip().splitlines()[-1])
    crawl_bench(args.pages)


if __name__ == "__main__":
    main()
