"""HTTP embedding benchmark: client concurrency 1 / 4 / 8 x batch 16 / 64 against a loopback /v1/embeddings server."""

from __future__ import annotations

import argparse
import math
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import cast

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kbctl._http import EMBEDDING_POLICY
from kbctl.embedding.http import Encoding, HttpEmbedder, HttpEmbeddingConfig

REPO = Path(__file__).resolve().parent.parent

USAGE = """
    python bench/embed_http.py [--texts 2000] [--model-texts 384] [--latency 0.05]
                               [--server-model canned|none|local|both|all] [--encodings base64,float]

Sends deterministic chunk-sized texts (~1,000 characters) through HttpEmbedder to tests/support/embedserver.py, run as
its own process on 127.0.0.1 (so server and client do not share a GIL) and adding `--latency` seconds to every
request. Prints, for each (concurrency, batch) pair: requests and the most requests the server had in flight at
once (both counted by the server), wall time, texts/s and the ratio to (concurrency 1, batch 16), all measured in
one run, once per `--encodings` value (how the vectors travel: base64 float32, kbctl's default, or JSON numbers),
and the ideal (requests / concurrency, rounded up, x latency) with the wall time's ratio to it.

Server models (default: both = none and local; `--both` is the same; all = the three):
- canned: bench/canned_server.py, one asyncio process answering every input with one fixed vector from a
         response serialized once per batch size, so the server costs next to nothing and the figures are the
         client's own against per-request latency.
- none:  deterministic pseudo-vectors, no model runs, so the figures isolate the client's batching and
         concurrency against per-request latency (the server serializes every answer: ~20 ms of its CPU per
         request of 64); `--texts` texts per configuration.
- local: the real all-MiniLM-L6-v2 behind the server. It needs the CPU (~17 texts/s of this size on 2 cores),
         so the model, not the client, sets the pace; `--model-texts` texts per configuration keep the run short.
"""

CONCURRENCY = (1, 4, 8)
BATCHES = (16, 64)
KEY_VAR = "BENCH_EMBEDDING_KEY"
KEY = "bench-key"
MODEL = "all-MiniLM-L6-v2"

WORDS = (
    "client engagement invoice retention policy refund deposit contract notice breach access audit record "
    "consultant partner report schedule deadline review approval escalation complaint service level response "
    "confidential data backup encryption vendor payment term penalty renewal termination scope quarterly"
).split()


def chunk_texts(n: int, size: int = 1000, seed: int = 7) -> list[str]:
    """n distinct texts of `size` characters: numbered sentences of words from a fixed vocabulary."""
    rng = random.Random(seed)
    texts = []
    for i in range(n):
        sentences = [f"Section {i}."]
        length = len(sentences[0])
        while length < size:
            sentence = " ".join(rng.choices(WORDS, k=rng.randint(8, 16))).capitalize() + "."
            sentences.append(sentence)
            length += len(sentence) + 1
        texts.append(" ".join(sentences)[:size])
    return texts


@contextmanager
def server_process(mode: str, latency: float) -> Iterator[str]:
    """Run tests/support/embedserver.py (or, for `canned`, bench/canned_server.py) in a child process; yields its
    /v1 URL once its model is loaded."""
    if mode == "canned":
        command = [sys.executable, str(REPO / "bench" / "canned_server.py"), "--latency", str(latency)]
    else:
        command = [sys.executable, "-m", "tests.support.embedserver", "--model", mode, "--latency", str(latency)]
        command += ["--require-key", KEY]
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http://127.0.0.1:"):
            raise SystemExit(f"the embeddings server did not start (exit code {proc.poll()})")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def standin_config(path: Path, url: str) -> Path:
    """Write a kbctl config at `path` whose provider `standin` is the stand-in server at `url` (its key in KEY_VAR),
    as the scale benchmarks use it; returns `path`."""
    path.write_text(
        "embedding:\n  providers:\n    standin:\n"
        f"      baseURL: {url}\n      apiKeyEnv: {KEY_VAR}\n      batchSize: 64\n      maxConcurrency: 4\n"
        "      timeout: 300\n"
    )
    return path


def stats(url: str) -> dict[str, int]:
    """The server's request count and in-flight maximum since the last call (which clears both)."""
    response = httpx.get(url.removesuffix("/v1") + "/_stats?clear=1", timeout=10)
    response.raise_for_status()
    result: dict[str, int] = response.json()
    return result


def run(
    url: str, texts: list[str], concurrency: int, batch: int, encoding: Encoding = "base64"
) -> tuple[float, int, int]:
    """(wall seconds, requests, max in flight) of embedding `texts` once with this concurrency, batch size and
    encoding of the vectors."""
    config = HttpEmbeddingConfig(
        base_url=url,
        model=MODEL,
        model_id=f"bench/{MODEL}",
        api_key_env=KEY_VAR,
        batch_size=batch,
        max_concurrency=concurrency,
        http=EMBEDDING_POLICY.with_(timeout=300),
        encoding_format=encoding,
    )
    embedder = HttpEmbedder(config, environ={KEY_VAR: KEY})
    stats(url)
    started = time.perf_counter()
    vectors = embedder.embed(texts)
    elapsed = time.perf_counter() - started
    if len(vectors) != len(texts) or embedder.dimensions != 384:
        raise SystemExit(f"expected {len(texts)} vectors of 384 dimensions, got {len(vectors)}")
    seen = stats(url)
    return elapsed, seen["request_count"], seen["max_in_flight"]


def bench(mode: str, texts: list[str], latency: float, encodings: list[Encoding]) -> None:
    """Run every (concurrency, batch) pair against one server process and print the table."""
    label = {
        "canned": "canned (one vector, answers serialized once)",
        "none": "none (deterministic pseudo-vectors)",
        "local": f"local/{MODEL} (the real model)",
    }[mode]
    with server_process(mode, latency) as url:
        run(url, texts[:4], 1, 4)  # open the code paths once before anything is timed
        print(
            f"server model: {label}; {len(texts)} texts of {sum(map(len, texts)) // len(texts)} characters, "
            f"+{latency * 1000:.0f} ms per request, {os.cpu_count()} cores"
        )
        print(
            f"{'encoding':>8}{'concurrency':>12}{'batch':>7}{'requests':>10}{'in flight':>11}{'wall s':>9}"
            f"{'texts/s':>10}{'vs c1/b16':>11}{'ideal s':>9}{'x ideal':>9}"
        )
        for encoding in encodings:
            baseline = None
            for concurrency in CONCURRENCY:
                for batch in BATCHES:
                    elapsed, requests, in_flight = run(url, texts, concurrency, batch, encoding)
                    rate = len(texts) / elapsed
                    baseline = baseline or rate
                    ideal = math.ceil(math.ceil(len(texts) / batch) / concurrency) * latency
                    print(
                        f"{encoding:>8}{concurrency:>12}{batch:>7}{requests:>10}{in_flight:>11}{elapsed:>9.2f}"
                        f"{rate:>10.1f}{rate / baseline:>10.2f}x{ideal:>9.2f}{elapsed / ideal if ideal else 0:>8.2f}x"
                    )
    print()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, epilog=USAGE, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--texts", type=int, default=2000, help="texts per configuration with --server-model none")
    parser.add_argument("--model-texts", type=int, default=384, help="texts per configuration with the real model")
    parser.add_argument("--latency", type=float, default=0.05, help="seconds the server adds to every request")
    parser.add_argument("--server-model", choices=("canned", "none", "local", "both", "all"), default="both")
    parser.add_argument("--both", action="store_true", help="same as --server-model both (the default)")
    parser.add_argument(
        "--encodings", default="base64,float", help="encoding_format values asked for, each measured in turn"
    )
    args = parser.parse_args()
    modes: tuple[str, ...] = (args.server_model,)
    if args.both or args.server_model == "both":
        modes = ("none", "local")
    elif args.server_model == "all":
        modes = ("canned", "none", "local")
    started = time.perf_counter()
    for mode in modes:
        chosen = [cast(Encoding, e) for e in args.encodings.split(",")]
        bench(mode, chunk_texts(args.model_texts if mode == "local" else args.texts), args.latency, chosen)
    print(f"total {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
