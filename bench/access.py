"""Access benchmark: what document-level access costs a query, on one store, in one run.

    python bench/access.py [--chunks 100000] [--queries 200] [--keep DIR]

Generates bench/scale.py's corpus (about `--chunks` chunks of ~1,000 characters of inline Markdown, deterministic)
twice, as two knowledge bases of one store on the same model, embedded through scale.py's loopback stand-in
(pseudo-vectors): `open`, without any `access`, and `restricted`, the same sources with every second one behind
`access: {groups: [restricted]}` and the others without a rule. Each is applied by the real CLI (`kbctl apply -f
FILE --wait`, timed from outside); the second finds every vector stored by the first. Then, in this process, the
same questions in each mode (vector, keyword, hybrid; threshold -1, topK 10), after an untimed pass of as many
other questions, asked in turn (a, b, c; b, c, a; c, a, b; ...) so that the machine's noise, and the first
reading of the pages the three share, falls on all three callers alike:

    a. `open` without a caller (no filter: the version restricts nothing), the baseline;
    b. `restricted` as `Reader()`, a caller without groups: only the unrestricted half through the filter;
    c. `restricted` as `Reader.of(["restricted"])`: every chunk, through the filter.

Printed: the command line; the corpus; wall seconds and peak RSS of each apply; per mode and caller, query p50 and
p99 in ms and the p50's ratio to caller a's (the goal: at most 1.2x at 100,000 chunks with half restricted); then
the correctness figures: per mode and caller the share of queries answered with exactly topK hits (the readable half
holds thousands of matches, so it must be 1.0), the hits of restricted sources returned to caller b (must be 0), the
share of c's answers equal to a's (the same chunks seen through the filter; below 1 in keyword mode, where a
question of only common words scores an arbitrary 5,000 of the chunks holding its rarest word, those a scan of
kb_chunks meets first, and PostgreSQL starts a scan of a large table where the last one stopped), and the recall@10
of b's and a's vector search against an exact scan for the same caller. `--keep DIR` keeps the store (KBCTL_HOME) in
DIR; otherwise it is deleted at the end. Manifests over 8 MiB need KBCTL_MAX_MANIFEST_MIB: set to 512 here unless
already set.
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import cast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from embed_http import KEY, KEY_VAR, server_process, standin_config
from scale import KB, SECTIONS_PER_SOURCE, manifest, pct, questions, run_cli, source_text, vector_recall

from kbctl import KnowledgeBaseStore, Reader
from kbctl.config import Settings
from kbctl.query.options import QueryOptions
from kbctl.query.results import QueryResult
from kbctl.store.embedded import stop_server

OPEN, RESTRICTED, GROUP = "open", "restricted", "restricted"
MODES = ("vector", "keyword", "hybrid")
TOP_K = 10
SOURCE_START = "\n    - name: part-"  # how scale.manifest begins each source (its text is indented deeper)
# The callers, in the order asked: (label, knowledge base, reader).
CALLERS: tuple[tuple[str, str, Reader | None], ...] = (
    ("a open, no caller", OPEN, None),
    ("b Reader()", RESTRICTED, Reader()),
    (f"c Reader.of([{GROUP!r}])", RESTRICTED, Reader.of([GROUP])),
)


def restricted_source(index: int) -> bool:
    """Every second source is behind the access rule."""
    return index % 2 == 1


def named(text: str, name: str) -> str:
    """scale.manifest's knowledge base under another name."""
    before = f"metadata:\n  name: {KB}\n"
    if before not in text[:1000]:
        raise SystemExit("scale.manifest's header changed: update bench/access.py")
    return text.replace(before, f"metadata:\n  name: {name}\n", 1)


def with_access(text: str) -> str:
    """The manifest with `access: {groups: [GROUP]}` on every second source (after its name line)."""
    head, *sources = text.split(SOURCE_START)
    if not sources:
        raise SystemExit("scale.manifest's sources changed: update bench/access.py")
    rule = f"\n      access: {{groups: [{GROUP}]}}\n"
    return SOURCE_START.join(
        [head, *(s.replace("\n", rule, 1) if restricted_source(i) else s for i, s in enumerate(sources))]
    )


def apply(env: dict[str, str], label: str, path: Path) -> None:
    elapsed, rss, _ = run_cli(env, "apply", "-f", str(path), "--wait")
    print(f"apply {label:<12}{elapsed:>9.2f} s   peak RSS {rss:6.0f} MB")


def keys(result: QueryResult) -> list[tuple[str, int]]:
    return [(h.source, h.position) for h in result.hits]


def in_turn(i: int) -> tuple[tuple[str, str, Reader | None], ...]:
    """The callers in the order question i asks them: rotated, so that none is always the first to read the pages
    the three share (the HNSW graph, the full-text index, the chunk rows of both knowledge bases that it matches)."""
    k = i % len(CALLERS)
    return CALLERS[k:] + CALLERS[:k]


def measure(settings: Settings, n: int, sources: int) -> None:
    qs = questions(random.Random(11), n, sources)
    warm = questions(random.Random(12), n, sources)  # other questions: the timed ones' own pages are not pre-read
    times: dict[tuple[str, str], list[float]] = {}
    full: dict[tuple[str, str], int] = {}
    leaked: dict[str, int] = {}
    agreed: dict[str, int] = {}
    a, b, c = (label for label, _, _ in CALLERS)
    with KnowledgeBaseStore(settings=settings) as store:
        for _, name, reader in CALLERS:
            store.query(name, "warm up the connection", reader=reader)
        for mode in MODES:
            options = QueryOptions(mode=mode, threshold=-1.0, top_k=TOP_K, max_tokens=1_000_000)  # type: ignore[arg-type]
            for i, q in enumerate(warm):
                for _, name, reader in in_turn(i):
                    store.query(name, q, options=options, reader=reader)
            for i, q in enumerate(qs):
                answers: dict[str, list[tuple[str, int]]] = {}
                for label, name, reader in in_turn(i):
                    start = time.perf_counter()
                    result = store.query(name, q, options=options, reader=reader)
                    times.setdefault((mode, label), []).append((time.perf_counter() - start) * 1000)
                    full[mode, label] = full.get((mode, label), 0) + (len(result.hits) == TOP_K)
                    answers[label] = keys(result)
                hidden = sum(restricted_source(int(source.removeprefix("part-"))) for source, _ in answers[b])
                leaked[mode] = leaked.get(mode, 0) + hidden
                agreed[mode] = agreed.get(mode, 0) + (answers[a] == answers[c])
        print(f"\n{'mode':<9}{'caller':<30}{'p50 ms':>9}{'p99 ms':>9}{'p50 vs a':>10}")
        for mode in MODES:
            base = statistics.median(times[mode, a])
            for label, _, _ in CALLERS:
                t = times[mode, label]
                p50 = statistics.median(t)
                print(f"{mode:<9}{label:<30}{p50:>9.1f}{pct(t, 0.99):>9.1f}{p50 / base:>9.2f}x")
        print(f"\n({len(qs)} questions per mode, each asked by the three callers in turn, topK {TOP_K}, threshold -1)")
        print(
            f"{'mode':<9}{'exactly topK hits: a':>21}{'b':>7}{'c':>7}{'restricted hits to b':>22}{'c equal to a':>14}"
        )
        for mode in MODES:
            shares = "".join(f"{full[mode, label] / len(qs):>7.3f}" for label in (b, c))
            print(f"{mode:<9}{full[mode, a] / len(qs):>21.3f}{shares}{leaked[mode]:>22}{agreed[mode] / len(qs):>14.3f}")
        for label, name, reader in CALLERS[:2]:
            caller = cast(
                KnowledgeBaseStore, SimpleNamespace(query=functools.partial(store.query, reader=reader), db=store.db)
            )
            recall = vector_recall(caller, name, qs[:50], k=TOP_K)
            print(f"vector recall@{TOP_K} vs an exact scan for the same caller, {label}: {recall:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--keep", type=Path, default=None)
    args = parser.parse_args()
    print("$ python " + " ".join(sys.argv))

    sources = max(1, round(args.chunks / (SECTIONS_PER_SOURCE + 1)))
    home = args.keep or Path(tempfile.mkdtemp(prefix="kbctl-access-"))
    home.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="kbctl-access-work-"))
    with server_process("none", 0.0) as url:
        config = standin_config(work / "config.yaml", url)
        os.environ.update({"KBCTL_HOME": str(home), "KBCTL_CONFIG": str(config), KEY_VAR: KEY})
        os.environ.setdefault("KBCTL_MAX_MANIFEST_MIB", "512")
        os.environ.pop("KBCTL_DATABASE_URL", None)
        settings = Settings.from_env()
        try:
            rng = random.Random(42)
            text = manifest([source_text(rng, i) for i in range(sources)], "standin")
            paths = {OPEN: work / "open.yaml", RESTRICTED: work / "restricted.yaml"}
            paths[OPEN].write_text(named(text, OPEN))
            paths[RESTRICTED].write_text(with_access(named(text, RESTRICTED)))
            hidden = sum(map(restricted_source, range(sources)))
            print(
                f"corpus: {sources} sources, {paths[OPEN].stat().st_size / 1e6:.1f} MB manifest, twice;"
                f" {hidden} of the sources of {RESTRICTED!r} behind access groups [{GROUP}];"
                f" stand-in embedder; {os.cpu_count()} cores"
            )
            for name, path in paths.items():
                apply(dict(os.environ), name, path)
            with KnowledgeBaseStore(settings=settings) as store:
                for name in paths:
                    info = store.history(name)[0]
                    print(f"{name}: version {info.number}, {info.chunk_count} chunks, {info.embedded_count} embedded")
            measure(settings, args.queries, sources)
        finally:
            stop_server(settings.pgdata)
            shutil.rmtree(work, ignore_errors=True)
            if args.keep is None:
                shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
