"""Scale benchmark: one knowledge base of N generated chunks, embedded through a loopback stand-in, in one run.

    python bench/scale.py [--chunks 10000] [--queries 200] [--latency 0] [--changed 0.01] [--keep DIR]
                          [--layout inline|files]

Generates one knowledge base of inline Markdown (deterministic) holding about `--chunks` chunks of ~1,000
characters, embedded through an OpenAI-compatible stand-in on 127.0.0.1 (tests/support/embedserver.py with
pseudo-vectors, in its own process, `--latency` seconds added per request), so the figures are the client's and
the store's, not a model's. Each apply runs the real CLI (`kbctl apply -f FILE --wait`) as a child process, timed
from outside, with its peak RSS. Then, in this process, queries in each mode (vector, keyword, hybrid) with p50
and p99 latency, each mode timed after an untimed pass of as many other questions (so the first mode timed does
not alone pay for reading the store from disk), and the recall@10 of the vector search against an exact scan of
the same version.

Steps and what is printed for each: first apply, no-op re-apply (a file applied before byte for byte is not
parsed again), the same no-op from a copy of the file at another path (parsed, validated and planned in full;
inline layout), re-apply with `--changed` of the sources edited (one sentence appended): wall seconds, chunks,
texts embedded, chunks/s, peak RSS in MB; database size.
`--layout files` writes each source as a Markdown file instead, in folders of at most 10,000 files (the limit of
one `path:` source), with one path source per folder: the shape of a knowledge base too large for one manifest
file (1M chunks inline is ~900 MB of YAML, past the limit of YAML nodes one file may hold).
`--keep DIR` keeps the store (KBCTL_HOME) in DIR for a later run of the queries alone with `--queries-only`.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from embed_http import KEY, KEY_VAR, server_process, standin_config  # the stand-in server, shared

from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings
from kbctl.query.options import QueryOptions
from kbctl.store.embedded import stop_server

REPO = Path(__file__).resolve().parent.parent
KB = "scale"
WORDS = (
    "client engagement invoice retention policy refund deposit contract notice breach access audit record "
    "consultant partner report schedule deadline review approval escalation complaint service level response "
    "confidential data backup encryption vendor payment term penalty renewal termination scope quarterly "
    "onboarding offboarding timesheet expense travel training milestone budget estimate request project change "
    "subcontractor warranty liability indemnity insurance jurisdiction arbitration governance steering committee"
).split()
SECTIONS_PER_SOURCE = 10
FILES_PER_FOLDER = 10_000  # the most files one path source lists


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choices(WORDS, k=rng.randint(8, 18))).capitalize() + "."


def source_text(rng: random.Random, idx: int) -> str:
    """One source of SECTIONS_PER_SOURCE sections, each a paragraph of ~900 characters: one chunk per section."""
    parts = [f"# Handbook part {idx}"]
    for section in range(SECTIONS_PER_SOURCE):
        parts.append(f"## Topic {idx}.{section}")
        paragraph: list[str] = [f"Reference code REF-{idx}-{section}."]
        while sum(map(len, paragraph)) < 850:
            paragraph.append(sentence(rng))
        parts.append(" ".join(paragraph))
    return "\n\n".join(parts) + "\n"


def header(provider: str) -> list[str]:
    return [
        "apiVersion: kbctl.dev/v1alpha1",
        "kind: KnowledgeBase",
        f"metadata:\n  name: {KB}",
        "spec:",
        f"  embedding: {{model: {provider}/all-MiniLM-L6-v2}}",
        "  limits: {maxTokensToEmbed: 1000000000}",
        "  sources:",
    ]


def manifest(texts: list[str], provider: str) -> str:
    lines = header(provider)
    for i, text in enumerate(texts):
        lines.append(f"    - name: part-{i:06d}\n      format: markdown\n      text: |")
        lines.extend("        " + line if line else "" for line in text.splitlines())
    return "\n".join(lines) + "\n"


def write_files(folder: Path, texts: list[str], provider: str, only: Sequence[int] | None = None) -> Path:
    """The files layout: source i as folder/docs/NN/part-i.md, one path source per folder of FILES_PER_FOLDER
    files; only: rewrite just these sources (and the manifest). Returns the manifest's path."""
    for i in range(len(texts)) if only is None else only:
        path = folder / "docs" / f"{i // FILES_PER_FOLDER:02d}" / f"part-{i:06d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(texts[i])
    lines = header(provider)
    for n in range((len(texts) + FILES_PER_FOLDER - 1) // FILES_PER_FOLDER):
        lines.append(f"    - {{name: docs-{n:02d}, path: docs/{n:02d}}}")
    manifest_path = folder / "kb.yaml"
    manifest_path.write_text("\n".join(lines) + "\n")
    return manifest_path


def run_cli(env: dict[str, str], *args: str) -> tuple[float, float, str]:
    """Run the real CLI: (wall seconds, peak RSS MB, output); its peak RSS through wait4. Exits on failure."""
    with tempfile.NamedTemporaryFile(prefix="kbctl-scale-", suffix=".out") as log:
        start = time.perf_counter()
        pid = os.posix_spawn(
            sys.executable,
            [sys.executable, "-m", "kbctl", *args],
            env,
            file_actions=[(os.POSIX_SPAWN_OPEN, 1, log.name, os.O_WRONLY | os.O_TRUNC, 0o600)],
        )
        _, status, usage = os.wait4(pid, 0)
        elapsed = time.perf_counter() - start
        out = Path(log.name).read_text()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"kbctl {' '.join(args)} failed: {out[-2000:]}")
    return elapsed, usage.ru_maxrss / 1024, out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def questions(rng: random.Random, n: int, sources: int) -> list[str]:
    out = []
    for i in range(n):
        words = rng.choices(WORDS, k=rng.randint(3, 7))
        if i % 4 == 0:  # an exact reference code, like a ticket or clause number
            words.append(f"REF-{rng.randrange(sources)}-{rng.randrange(SECTIONS_PER_SOURCE)}")
        out.append("what does " + " ".join(words) + " say?")
    return out


def measure_queries(settings: Settings, n: int, sources: int) -> None:
    rng = random.Random(11)
    qs = questions(rng, n, sources)
    warm = questions(random.Random(12), n, sources)  # other questions: the timed ones' own pages are not pre-read
    with KnowledgeBaseStore(settings=settings) as store:
        store.query(KB, "warm up the model and the connection")
        for mode in ("vector", "keyword", "hybrid"):
            times = []
            options = QueryOptions(mode=mode, threshold=-1.0, top_k=10, max_tokens=1_000_000)  # type: ignore[arg-type]
            for q in warm:  # steady state: the index's upper layers and the hot rows in memory, as under traffic
                store.query(KB, q, options=options)
            for q in qs:
                start = time.perf_counter()
                store.query(KB, q, options=options)
                times.append((time.perf_counter() - start) * 1000)
            print(
                f"query {mode:<8} p50 {statistics.median(times):8.1f} ms   p99 {pct(times, 0.99):8.1f} ms"
                f"   ({len(qs)} queries)"
            )
        print(f"vector recall@10 of the index vs an exact scan: {vector_recall(store, KB, qs[:50]):.3f}")


def vector_recall(store: KnowledgeBaseStore, name: str, qs: Sequence[str], k: int = 10) -> float:
    """Share of the exact top-k (every chunk of the serving version compared) that the vector search returns."""
    options = QueryOptions(mode="vector", threshold=-1.0, top_k=k, max_tokens=1_000_000)
    found = total = 0
    for q in qs:
        approx = {(h.source, h.position) for h in store.query(name, q, options=options).hits}
        with store.db.exact_searches():
            exact = {(h.source, h.position) for h in store.query(name, q, options=options).hits}
        found, total = found + len(approx & exact), total + len(exact)
    return found / max(1, total)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--changed", type=float, default=0.01)
    parser.add_argument("--keep", type=Path, default=None)
    parser.add_argument("--queries-only", action="store_true")
    parser.add_argument("--layout", choices=("inline", "files"), default="inline")
    args = parser.parse_args()

    sources = max(1, round(args.chunks / (SECTIONS_PER_SOURCE + 1)))
    home = args.keep or Path(tempfile.mkdtemp(prefix="kbctl-scale-"))
    home.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="kbctl-scale-work-"))
    with server_process("none", args.latency) as url:
        config = standin_config(work / "config.yaml", url)
        env = {**os.environ, "KBCTL_HOME": str(home), "KBCTL_CONFIG": str(config), KEY_VAR: KEY}
        env.pop("KBCTL_DATABASE_URL", None)
        os.environ.update({"KBCTL_HOME": str(home), "KBCTL_CONFIG": str(config), KEY_VAR: KEY})
        os.environ.pop("KBCTL_DATABASE_URL", None)
        settings = Settings.from_env()
        try:
            if not args.queries_only:
                rng = random.Random(42)
                started = time.perf_counter()
                texts = [source_text(rng, i) for i in range(sources)]
                if args.layout == "files":
                    path = write_files(work, texts, "standin")
                    size = sum(len(t.encode()) for t in texts) / 1e6
                    where = f"{sources} files, {size:.1f} MB"
                else:
                    path = work / "kb.yaml"
                    path.write_text(manifest(texts, "standin"))
                    where = f"manifest {path.stat().st_size / 1e6:.1f} MB"
                print(
                    f"corpus: {sources} sources, {where} (generated in "
                    f"{time.perf_counter() - started:.1f} s); stand-in embedder +{args.latency * 1000:.0f} ms/request;"
                    f" {os.cpu_count()} cores"
                )
                print(f"{'step':<28}{'wall s':>9}{'chunks':>9}{'embedded':>10}{'chunks/s':>10}{'peak MB':>9}")

                seen: set[int] = set()

                def step(label: str, target: Path | None = None) -> None:
                    elapsed, rss, out = run_cli(env, "apply", "-f", str(target or path), "--wait")
                    with KnowledgeBaseStore(settings=settings) as store:
                        info = store.history(KB)[0]
                    embedded = 0 if info.number in seen else info.embedded_count  # no new version: nothing embedded
                    seen.add(info.number)
                    print(
                        f"{label:<28}{elapsed:>9.2f}{info.chunk_count:>9}{embedded:>10}"
                        f"{info.chunk_count / elapsed:>10.0f}{rss:>9.0f}"
                    )
                    for line in out.splitlines():
                        if "vector index" in line:
                            print("  " + line)

                step("first apply")
                step("no-op re-apply")
                if args.layout == "inline":  # the same text at another path: parsed, planned, found unchanged
                    copy = work / "copy" / "kb.yaml"
                    copy.parent.mkdir()
                    copy.write_text(path.read_text())
                    step("no-op, file parsed", copy)
                changed = rng.sample(range(sources), max(1, round(sources * args.changed)))
                for i in changed:
                    texts[i] = texts[i] + "\n" + sentence(rng) + "\n"
                if args.layout == "files":
                    write_files(work, texts, "standin", only=changed)
                else:
                    path.write_text(manifest(texts, "standin"))
                step(f"{len(changed)} sources changed")
                with KnowledgeBaseStore(settings=settings) as store:
                    size_row = store.db.connection.execute("SELECT pg_database_size(current_database())").fetchone()
                    assert size_row is not None
                    print(f"database size: {size_row[0] / 1e6:.0f} MB")
            measure_queries(settings, args.queries, sources)
        finally:
            stop_server(settings.pgdata)


if __name__ == "__main__":
    main()
