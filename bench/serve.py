"""Serving benchmark: `kbctl serve` at 1, 8 and 32 concurrent clients, next to the Python API and the CLI.

    python bench/serve.py [--requests 400] [--chunks 10000] [--cli-calls 5]

A fresh store (a temporary KBCTL_HOME) gets the two example knowledge bases (the real local model) and one of
about `--chunks` generated chunks (bench/scale.py's corpus, embedded through the loopback stand-in of
bench/embed_http.py, so its queries embed through that stand-in too: ~1 ms, pseudo-vectors). Then a real
`kbctl serve` child process on 127.0.0.1 answers POST /v1/knowledgebases/NAME/query from asyncio httpx clients
with keep-alive, `--requests` per step, at each concurrency; for each: queries/s, p50 and p99 latency, and the
server's CPU (cores busy = its CPU seconds / wall seconds; the clients run on the same 2 cores). Side by side:
the in-process Python API (`KnowledgeBaseStore.query`, model loaded) and the CLI per call
(`kbctl query NAME Q -o json`, a new process each time).
"""

from __future__ import annotations

import argparse
import asyncio
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

from embed_http import KEY, KEY_VAR, server_process  # the stand-in embedder, shared with bench/scale.py
from scale import SECTIONS_PER_SOURCE, manifest, questions, source_text

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


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def load(url: str, name: str, qs: list[str], concurrency: int, total: int) -> tuple[float, list[float]]:
    """(wall seconds, latencies in ms) of `total` queries sent by `concurrency` clients at once."""
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

        await asyncio.gather(*(worker() for _ in range(min(concurrency, 4))))  # warm the connections
        latencies.clear()
        counter = iter(range(total))
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.perf_counter() - started, latencies


def in_process(settings: Settings, name: str, qs: list[str], total: int) -> list[float]:
    with KnowledgeBaseStore(settings=settings) as store:
        store.query(name, qs[0])
        times = []
        for i in range(total):
            start = time.perf_counter()
            store.query(name, qs[i % len(qs)])
            times.append((time.perf_counter() - start) * 1000)
    return times


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--cli-calls", type=int, default=5)
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="kbctl-bench-serve-"))
    work = Path(tempfile.mkdtemp(prefix="kbctl-bench-serve-work-"))
    sources = max(1, round(args.chunks / (SECTIONS_PER_SOURCE + 1)))
    with server_process("none", 0.0) as standin:
        config = work / "config.yaml"
        config.write_text(
            f"embedding:\n  providers:\n    standin:\n      baseURL: {standin}\n      apiKeyEnv: {KEY_VAR}\n"
            "      batchSize: 64\n      maxConcurrency: 4\n      timeout: 300\n"
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("KBCTL_")}
        env.update({"KBCTL_HOME": str(home), "KBCTL_CONFIG": str(config), KEY_VAR: KEY})
        os.environ.update({"KBCTL_HOME": str(home), "KBCTL_CONFIG": str(config), KEY_VAR: KEY})
        os.environ.pop("KBCTL_DATABASE_URL", None)
        settings = Settings.from_env()
        try:
            rng = random.Random(42)
            big = work / "scale.yaml"
            big.write_text(manifest([source_text(rng, i) for i in range(sources)], "standin"))
            for path in (REPO / "examples" / "kb", big):
                subprocess.run(
                    [sys.executable, "-m", "kbctl", "apply", "-f", str(path), "--wait"],
                    env=env,
                    check=True,
                    capture_output=True,
                )
            with KnowledgeBaseStore(settings=settings) as store:
                chunks = {kb.name: kb.chunks for kb in store.list()}
            targets = [
                ("client-service-policy", EXAMPLE_QUESTIONS),
                ("scale", questions(random.Random(11), 200, sources)),
            ]
            print(
                f"kbctl serve on 127.0.0.1, {os.cpu_count()} cores shared with the clients; "
                f"{args.requests} requests per step; default retrieval (hybrid)"
            )
            header = f"{'knowledge base':<24}{'chunks':>7}  {'how':<22}{'q/s':>8}{'p50 ms':>9}{'p99 ms':>9}"
            print(header + f"{'server cores':>14}{'q/s vs 1':>10}")
            with serving(env, work / "serve.log") as served:
                for name, qs in targets:
                    base = None
                    for concurrency in (1, 8, 32):
                        cpu0 = cpu_seconds(served.process.pid)
                        wall, lat = asyncio.run(load(served.url, name, qs, concurrency, args.requests))
                        busy = (cpu_seconds(served.process.pid) - cpu0) / wall
                        qps = len(lat) / wall
                        base = base or qps
                        print(
                            f"{name:<24}{chunks[name]:>7}  {f'HTTP, {concurrency} clients':<22}{qps:>8.1f}"
                            f"{statistics.median(lat):>9.1f}{pct(lat, 0.99):>9.1f}{busy:>14.2f}{qps / base:>9.2f}x"
                        )
            for name, qs in targets:
                lat = in_process(settings, name, qs, min(args.requests, 200))
                print(
                    f"{name:<24}{chunks[name]:>7}  {'Python API, 1 thread':<22}{1000 / statistics.mean(lat):>8.1f}"
                    f"{statistics.median(lat):>9.1f}{pct(lat, 0.99):>9.1f}"
                )
                lat = cli_calls(env, name, qs, args.cli_calls)
                print(
                    f"{name:<24}{chunks[name]:>7}  {'CLI, a process a call':<22}{1000 / statistics.mean(lat):>8.1f}"
                    f"{statistics.median(lat):>9.1f}{max(lat):>9.1f}"
                )
        finally:
            stop_server(settings.pgdata)


if __name__ == "__main__":
    main()
