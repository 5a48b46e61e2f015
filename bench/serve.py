"""Serving benchmark: `kbctl serve` at 1, 8 and 32 concurrent clients, next to the Python API and the CLI.

    python bench/serve.py [--requests 400] [--chunks 10000] [--cli-calls 5] [--home DIR]

A fresh store (a temporary KBCTL_HOME) gets the two example knowledge bases and one of about `--chunks`
generated chunks of ~350 characters (bench/scale.py's vocabulary and questions), all embedded with the real
local model, which also embeds every question. Then a real `kbctl serve` child process on 127.0.0.1 answers
POST /v1/knowledgebases/NAME/query from asyncio httpx clients with keep-alive, `--requests` per step, at each
concurrency; for each: queries/s, p50 and p99 latency, and the cores kept busy (CPU seconds / wall seconds) by
the server, by PostgreSQL and by the clients, which all share the machine's cores. Before them, at 1 client,
each HTTP request is followed by the same query through the in-process Python API (`KnowledgeBaseStore.query`,
model loaded), in turn, so the two latencies see the machine in the same state. The server runs twice: with
`--model-threads 1` and with every core per question (its default). Last, the CLI per call
(`kbctl query NAME Q -o json`, a new process each time). `--home DIR` reuses a store kept from an earlier
run (nothing applied).

    python bench/serve.py --retrieval-log [--requests 400] [--home DIR]

measures what the retrieval log (serve.retrievalLog) costs a query instead: two `kbctl serve` processes over the
same store, one with the log off and one with it on, each HTTP query sent to one then the other, in turn (so both
see the machine in the same state); p50 and p95 latency of each and the difference, then what `RetrievalLog.record`
itself costs a request (the rest, the row's JSON, its redaction and the insert, is the writer thread's).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale import SECTIONS_PER_SOURCE, questions, sentence

from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings
from kbctl.store.embedded import stop_server
from tests.support.serveproc import serving

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_QUESTIONS = [
    "how long do we keep invoices?",
    "what happens if a client disputes an invoice?",
    "how fast do we answer a complaint?",
    "can a client get a refund after the project started?",
    "what is the response time for a critical incident?",
    "who approves a credit note?",
]


def short_source(rng: random.Random, idx: int) -> str:
    """One source of SECTIONS_PER_SOURCE sections of ~350 characters each: one chunk per section."""
    parts = [f"# Handbook part {idx}"]
    for section in range(SECTIONS_PER_SOURCE):
        paragraph = [f"Reference code REF-{idx}-{section}."]
        while sum(map(len, paragraph)) < 320:
            paragraph.append(sentence(rng))
        parts += [f"## Topic {idx}.{section}", " ".join(paragraph)]
    return "\n\n".join(parts) + "\n"


def manifest(texts: list[str]) -> str:
    sources = [{"name": f"part-{i:06d}", "format": "markdown", "text": t} for i, t in enumerate(texts)]
    spec = {"sources": sources, "limits": {"maxTokensToEmbed": 1_000_000_000}}
    return json.dumps(
        {"apiVersion": "kbctl.dev/v1alpha1", "kind": "KnowledgeBase", "metadata": {"name": "scale"}, "spec": spec}
    )


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def postgres_cpu_seconds() -> float:
    """User + system CPU seconds so far of every PostgreSQL process on the machine (the store's server)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # gone meanwhile
            continue
        if text[text.index("(") + 1 : text.rindex(")")] == "postgres":
            fields = text.rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


async def load(
    url: str, pid: int, name: str, qs: list[str], concurrency: int, total: int
) -> tuple[float, list[float], tuple[float, float, float]]:
    """(wall seconds, latencies in ms, CPU seconds of the server, PostgreSQL and the clients) of `total` queries
    sent by `concurrency` clients at once, after a warm-up of the connections."""
    latencies: list[float] = []
    counter = iter(range(total))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:

        async def worker() -> None:
            for i in counter:
                start = time.perf_counter()
                response = await client.post(f"/v1/knowledgebases/{name}/query", json={"question": qs[i % len(qs)]})
                latencies.append((time.perf_counter() - start) * 1000)
                response.raise_for_status()

        counter = iter(range(min(concurrency, 4) * 2))
        await asyncio.gather(*(worker() for _ in range(min(concurrency, 4))))  # warm the connections
        latencies.clear()
        counter = iter(range(total))
        cpu = (cpu_seconds(pid), postgres_cpu_seconds(), time.process_time())
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - started
        after = (cpu_seconds(pid), postgres_cpu_seconds(), time.process_time())
        return wall, latencies, (after[0] - cpu[0], after[1] - cpu[1], after[2] - cpu[2])


def side_by_side(
    url: str, store: KnowledgeBaseStore, name: str, qs: list[str], total: int
) -> tuple[list[float], list[float]]:
    """Latencies in ms of one HTTP request, then the same query through the in-process Python API, in turn
    (so both see the machine in the same state): (HTTP, Python API)."""
    http_ms, api_ms = [], []
    with httpx.Client(base_url=url, timeout=60) as client:
        client.post(f"/v1/knowledgebases/{name}/query", json={"question": qs[0]}).raise_for_status()
        store.query(name, qs[0])
        for i in range(total):
            question = qs[i % len(qs)]
            start = time.perf_counter()
            client.post(f"/v1/knowledgebases/{name}/query", json={"question": question}).raise_for_status()
            middle = time.perf_counter()
            store.query(name, question)
            http_ms.append((middle - start) * 1000)
            api_ms.append((time.perf_counter() - middle) * 1000)
    return http_ms, api_ms


def cli_calls(env: dict[str, str], name: str, qs: list[str], calls: int) -> list[float]:
    times = []
    for i in range(calls):
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "kbctl", "query", name, qs[i % len(qs)], "-o", "json"],
            env=env,
            check=True,
            capture_output=True,
        )
        times.append((time.perf_counter() - start) * 1000)
    return times


def apply_corpus(env: dict[str, str], work: Path, sources: int) -> None:
    """Apply the examples and the generated knowledge base (none when `sources` is 0) through the real CLI."""
    big = work / "scale.yaml"
    big.write_text(manifest([short_source(random.Random(42 + i), i) for i in range(sources)]))
    for path in (REPO / "examples" / "kb", big)[: 2 if sources else 1]:
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "kbctl", "apply", "-f", str(path), "--wait"], env=env, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise SystemExit(f"kbctl apply -f {path} failed: {done.stderr[-2000:]}")
        print(f"applied {path.name} in {time.perf_counter() - started:.0f} s")


def measure_http(
    env: dict[str, str],
    work: Path,
    targets: list[tuple[str, list[str]]],
    chunks: dict[str, int],
    requests: int,
    model_threads: int,
) -> None:
    settings = Settings(home=Path(env["KBCTL_HOME"]))
    with (
        serving(env, work / f"serve-{model_threads}.log", "--model-threads", str(model_threads)) as served,
        KnowledgeBaseStore(settings=settings) as store,
    ):
        for name, qs in targets:
            http_ms, api_ms = side_by_side(served.url, store, name, qs, min(requests, 200))
            for how, lat in ((f"HTTP, 1 client, mt {model_threads}", http_ms), ("Python API, in turn", api_ms)):
                print(
                    f"{name:<24}{chunks[name]:>7}  {how:<28}{1000 / statistics.mean(lat):>8.1f}"
                    f"{statistics.median(lat):>9.1f}{pct(lat, 0.99):>9.1f}"
                )
            base = None
            for concurrency in (1, 8, 32):  # queries/s: clients sending back to back, each waiting for its answer
                wall, lat, cpu = asyncio.run(load(served.url, served.process.pid, name, qs, concurrency, requests))
                qps = len(lat) / wall
                base = base or qps
                how = f"HTTP, {concurrency} clients, mt {model_threads}"
                cores = "  ".join(f"{c / wall:.2f}" for c in cpu)
                print(
                    f"{name:<24}{chunks[name]:>7}  {how:<28}{qps:>8.1f}"
                    f"{statistics.median(lat):>9.1f}{pct(lat, 0.99):>9.1f}{qps / base:>9.2f}x  {cores:>16}"
                )


def log_overhead(env: dict[str, str], work: Path, name: str, qs: list[str], total: int) -> None:
    """p50 / p95 of HTTP queries with the retrieval log off and on (two servers, in turn), and of `record`."""
    from kbctl.serve.auth import ANONYMOUS
    from kbctl.serve.retrievals import RetrievalLog
    from kbctl.userconfig import RetrievalLogConfig

    servers = []
    for label, enabled in (("off", "false"), ("on", "true")):
        folder = work / f"log-{label}"
        folder.mkdir(exist_ok=True)
        (folder / "config.yaml").write_text(f"serve:\n  retrievalLog: {{enabled: {enabled}}}\n")
        servers.append(serving({**env, "KBCTL_CONFIG": str(folder / "config.yaml")}, folder / "serve.log"))
    off_ms: list[float] = []
    on_ms: list[float] = []
    with servers[0] as off, servers[1] as on:
        clients = [httpx.Client(base_url=s.url, timeout=60) for s in (off, on)]
        for client in clients:  # warm: the model, the pool, the connection
            for q in qs[:5]:
                client.post(f"/v1/knowledgebases/{name}/query", json={"question": q}).raise_for_status()
        for i in range(total):
            for client, into in zip(clients, (off_ms, on_ms), strict=True):
                start = time.perf_counter()
                client.post(f"/v1/knowledgebases/{name}/query", json={"question": qs[i % len(qs)]}).raise_for_status()
                into.append((time.perf_counter() - start) * 1000)
        for client in clients:
            client.close()
    print(f"retrieval log: {total} HTTP queries of {name} to each server, in turn (1 client)")
    print(f"{'log':<6}{'p50 ms':>9}{'p95 ms':>9}")
    for label, lat in (("off", off_ms), ("on", on_ms)):
        print(f"{label:<6}{statistics.median(lat):>9.2f}{pct(lat, 0.95):>9.2f}")
    p50 = statistics.median(on_ms) - statistics.median(off_ms)
    p95 = pct(on_ms, 0.95) - pct(off_ms, 0.95)
    print(f"{'on-off':<6}{p50:>+9.2f}{p95:>+9.2f}")
    with KnowledgeBaseStore(settings=Settings(home=Path(env["KBCTL_HOME"])), pool_size=2) as store:
        result = store.query(name, qs[0], explain=True)
        log = RetrievalLog(store, RetrievalLogConfig(enabled=True), queue_size=total * 10 + 10)
        spent = []
        try:
            for _ in range(total * 10):
                start = time.perf_counter()
                log.record("http", "query", ANONYMOUS, [name], qs[0], start, result=result)
                spent.append((time.perf_counter() - start) * 1000)
            log.flush(60)
        finally:
            log.close()
    micro = [ms * 1000 for ms in spent]
    print(f"RetrievalLog.record in the request: p50 {statistics.median(micro):.1f} µs, p95 {pct(micro, 0.95):.1f} µs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--cli-calls", type=int, default=5)
    parser.add_argument("--home", type=Path, default=None, help="a store kept from an earlier run (no apply)")
    parser.add_argument(
        "--retrieval-log", action="store_true", help="measure the retrieval log's cost (examples only), nothing else"
    )
    args = parser.parse_args()

    home = args.home or Path(tempfile.mkdtemp(prefix="kbctl-bench-serve-"))
    work = Path(tempfile.mkdtemp(prefix="kbctl-bench-serve-work-"))
    sources = max(1, round(args.chunks / SECTIONS_PER_SOURCE))
    env = {k: v for k, v in os.environ.items() if not k.startswith("KBCTL_")}
    env.update({"KBCTL_HOME": str(home), "KBCTL_MAX_MANIFEST_MIB": "256"})
    settings = Settings(home=home)
    try:
        if args.retrieval_log:
            if args.home is None:
                apply_corpus(env, work, 0)
            log_overhead(env, work, "client-service-policy", EXAMPLE_QUESTIONS, args.requests)
            return
        if args.home is None:
            apply_corpus(env, work, sources)
        with KnowledgeBaseStore(settings=settings) as store:
            chunks = {kb.name: kb.chunks for kb in store.list()}
        targets = [("client-service-policy", EXAMPLE_QUESTIONS), ("scale", questions(random.Random(11), 200, sources))]
        print(
            f"kbctl serve on 127.0.0.1, {os.cpu_count()} cores shared with the clients; "
            f"{args.requests} requests per step; default retrieval (hybrid), model local/all-MiniLM-L6-v2"
        )
        header = f"{'knowledge base':<24}{'chunks':>7}  {'how (mt: --model-threads)':<28}"
        print(header + f"{'q/s':>8}{'p50 ms':>9}{'p99 ms':>9}{'q/s vs 1':>10}  cores busy: server, postgres, clients")
        for model_threads in (1, os.cpu_count() or 2):
            measure_http(env, work, targets, chunks, args.requests, model_threads)
        for name, qs in targets:
            lat = cli_calls(env, name, qs, args.cli_calls)
            print(
                f"{name:<24}{chunks[name]:>7}  {'CLI, a process a call':<28}{1000 / statistics.mean(lat):>8.1f}"
                f"{statistics.median(lat):>9.1f}{max(lat):>9.1f}"
            )
    finally:
        stop_server(settings.pgdata)


if __name__ == "__main__":
    main()
