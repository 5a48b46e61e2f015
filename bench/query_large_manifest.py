"""Query latency on a knowledge base whose stored manifest is large (inline text): p50 / p99 of 100 queries.

    python bench/query_large_manifest.py [SOURCES]     (default 1000 sources, about 2 MB of manifest)

A query reads only its knowledge base's serving version and retrieval settings, never the whole manifest;
this measures what is left of the manifest's cost (run it on two commits to compare).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings
from kbctl.manifest import parse_manifests
from kbctl.store.embedded import stop_server


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    home = Path(tempfile.mkdtemp()) / "home"
    body = "keep the record and the invoice " * 60
    sources = "\n".join(f"    - name: s{i}\n      text: |\n        Rule {i}: {body}" for i in range(count))
    text = (
        f"apiVersion: kbctl.dev/v1alpha1\nkind: KnowledgeBase\nmetadata:\n  name: big\nspec:\n  sources:\n{sources}\n"
    )
    try:
        with KnowledgeBaseStore(settings=Settings(home=home)) as store:
            store.apply(parse_manifests(text, "kb.yaml"))
            store.query("big", "warm up")
            times = []
            for i in range(100):
                started = time.perf_counter()
                store.query("big", f"how long is record {i} kept?")
                times.append((time.perf_counter() - started) * 1000)
    finally:
        stop_server(home / "pg")
    times.sort()
    p50, p99 = statistics.median(times), times[98]
    print(f"manifest {len(text) / 1e6:.1f} MB, {count} sources: query p50 {p50:.1f} ms, p99 {p99:.1f} ms")


if __name__ == "__main__":
    main()
