"""path: sources at folder scale: a folder of Markdown and PDF files applied with the real CLI, in one run.

    python bench/sources.py [--files 1000] [--pdfs 50]

Generates a repository (deterministic text) with kb/docs.yaml reading ../docs/, then times the real CLI from
outside (process start, imports and model load included) in a fresh embedded store: the first apply; a
no-op re-apply (nothing to embed: the goal is under 2 s); a re-apply with one Markdown file changed; one with
a PDF deleted. Prints wall time, texts embedded and documents served for each, and their ratios to the first
apply. Separately, in-process, how long listing and reading the folder takes (what every apply pays).
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
from kbctl.sources.files import read_paths
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


def embedded_count(output: str) -> int:
    """Texts embedded, from `apply -o json`."""
    report = json.loads(output)
    return sum(s["embedded"] for r in report["results"] for s in r["sources"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000, help="Markdown files")
    parser.add_argument("--pdfs", type=int, default=50, help="PDF files of 3 pages")
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
        read = read_paths(loaded.kb)["docs"]
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


if __name__ == "__main__":
    main()
