"""kbctl's first apply side by side with LangChain's indexing API and with embedding alone, in one run.

    python bench/peer.py [--sources 200] [--kbs 4] [--rounds 2] [--venv DIR]

The corpus is bench/apply.py's (generated inline Markdown, deterministic). Each round, interleaved and each on
a fresh database of one embedded PostgreSQL server, times from process start to exit:

- kbctl: `kbctl apply -f corpus.yaml --wait` through the installed script, then the same apply unchanged;
- LangChain: bench/peer_langchain.py in a separate virtual environment (created under `--venv` on first use
  with the pinned versions below, and the same fastembed, onnxruntime, tokenizers, numpy and psycopg versions
  as this environment): RecursiveCharacterTextSplitter + `index()` with SQLRecordManager and PGVector, the
  same model files through fastembed; first run, then unchanged;
- embedding alone: a process that loads the same model files through fastembed and embeds the distinct texts
  kbctl's first apply embeds, shortest first in batches of kbctl's size: the floor kbctl's first apply is
  measured against.

Goals (issue 19): kbctl first apply <= 0.8x LangChain's and <= 1.1x embedding alone.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import venv
from importlib.metadata import version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import psycopg  # noqa: E402
from apply import distinct_texts, manifests, source_text  # noqa: E402

from kbctl.client import KnowledgeBaseStore  # noqa: E402
from kbctl.config import Settings  # noqa: E402
from kbctl.embedding.local import BATCH_SIZE, MODEL_NAME, LocalEmbedder  # noqa: E402
from kbctl.store.embedded import running_url, stop_server  # noqa: E402

PEER = {
    "langchain-core": "1.8.1",
    "langchain-classic": "1.0.8",
    "langchain-postgres": "0.0.19",
    "langchain-text-splitters": "1.1.3",
}
SHARED = ("fastembed", "onnxruntime", "tokenizers", "numpy", "psycopg", "psycopg-binary")


def peer_python(folder: Path) -> Path:
    """The interpreter of the peer's virtual environment, created and installed on first use."""
    python = folder / "bin" / "python"
    marker = folder / "kbctl-bench-peer.json"
    wanted = {**PEER, **{name: version(name) for name in SHARED}}
    if python.exists() and marker.exists() and json.loads(marker.read_text()) == wanted:
        return python
    print(f"creating the peer environment in {folder} ...", file=sys.stderr, flush=True)
    venv.EnvBuilder(with_pip=True, clear=True).create(folder)
    pins = [f"{name}=={v}" for name, v in wanted.items()]
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", *pins], check=True)
    marker.write_text(json.dumps(wanted))
    return python


def embed_alone(texts_file: str, folder: str) -> None:
    """(run as a process of its own) fastembed alone on the texts, shortest first: one JSON line of timings."""
    from fastembed_model import load

    begin = time.perf_counter()
    with open(texts_file, encoding="utf-8") as fh:
        texts = sorted(json.load(fh), key=len)
    model = load(folder)
    loaded = time.perf_counter()
    count = sum(1 for _ in model.embed(texts, batch_size=BATCH_SIZE))
    print(json.dumps({"model_load": loaded - begin, "embed": time.perf_counter() - loaded, "texts": count}))


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-3000:]}")
    return elapsed, done.stdout


def fresh_database(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sources", type=int, default=200)
    parser.add_argument("--kbs", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--venv", type=Path, default=Path(tempfile.gettempdir()) / "kbctl-bench-langchain")
    parser.add_argument("--embed-alone", nargs=2, metavar=("TEXTS", "MODEL_DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.embed_alone:
        embed_alone(*args.embed_alone)
        return

    peer = peer_python(args.venv)
    kbctl = str(Path(sys.executable).with_name("kbctl"))
    rng = random.Random(42)
    texts = {(i % args.kbs, i): source_text(rng, i) for i in range(args.sources)}
    work = Path(tempfile.mkdtemp(prefix="kbctl-bench-peer-"))
    manifest_file = work / "corpus.yaml"
    manifest_file.write_text(manifests(texts, args.kbs))
    corpus_file = work / "corpus.json"
    corpus_file.write_text(
        json.dumps([{"kb": f"bench-{k}", "source": f"doc-{s:03d}", "text": t} for (k, s), t in sorted(texts.items())])
    )
    texts_file = work / "texts.json"
    texts_file.write_text(json.dumps(distinct_texts(texts)))
    home = work / "home"
    settings = Settings.from_env(home=home)
    env = {**os.environ, "KBCTL_HOME": str(home), "PYTHONPATH": ""}
    results: dict[str, list[float]] = {}
    detail: dict[str, Any] = {}
    try:
        with KnowledgeBaseStore(settings=settings) as store:
            store.db.counts()  # starts the embedded server
            embedder = store.embedder(f"local/{MODEL_NAME}")
            assert isinstance(embedder, LocalEmbedder)
            embedder._embedding_model()  # lays out the model folder once, outside every timing
        admin = running_url(settings.pgdata)
        assert admin is not None
        socket_dir = admin.split("host=", 1)[1]
        model_dir = str(settings.models_dir / MODEL_NAME)
        for n in range(1, args.rounds + 1):
            db = f"bench_kbctl_{n}"
            fresh_database(admin, db)
            kb_env = {**env, "KBCTL_DATABASE_URL": f"postgresql://postgres:@/{db}?host={socket_dir}"}
            apply = [kbctl, "apply", "-f", str(manifest_file), "--wait", "-q"]
            for label in ("kbctl first apply", "kbctl unchanged apply"):
                seconds, _ = timed(apply, kb_env)
                results.setdefault(label, []).append(seconds)
            print(f"round {n}: kbctl done", file=sys.stderr, flush=True)

            db = f"bench_langchain_{n}"
            fresh_database(admin, db)
            url = f"postgresql+psycopg://postgres@/{db}?host={socket_dir}"
            script = str(ROOT / "bench" / "peer_langchain.py")
            seconds, out = timed([str(peer), script, str(corpus_file), url, model_dir], env)
            report = json.loads(out.strip().splitlines()[-1])
            first, unchanged = report["runs"]
            results.setdefault("LangChain first index()", []).append(seconds)
            results.setdefault("LangChain first index(), in-process", []).append(first["seconds"])
            results.setdefault("LangChain unchanged index(), in-process", []).append(unchanged["seconds"])
            detail["langchain"] = report
            print(f"round {n}: LangChain done", file=sys.stderr, flush=True)

            seconds, out = timed([sys.executable, __file__, "--embed-alone", str(texts_file), model_dir], env)
            alone = json.loads(out.strip().splitlines()[-1])
            results.setdefault("embedding alone", []).append(seconds)
            results.setdefault("embedding alone, model loaded", []).append(alone["embed"])
            detail["alone"] = alone
            print(f"round {n}: embedding alone done", file=sys.stderr, flush=True)
            with psycopg.connect(kb_env["KBCTL_DATABASE_URL"]) as conn:
                row = conn.execute("SELECT count(*) FROM kb_chunks").fetchone()
                detail["kbctl_chunks"] = row[0] if row else 0
    finally:
        stop_server(settings.pgdata)

    lc = detail["langchain"]
    versions = ", ".join(f"{name} {v}" for name, v in PEER.items())
    print(
        f"corpus: {args.sources} inline Markdown sources in {args.kbs} knowledge bases; model all-MiniLM-L6-v2 int8; "
        f"{os.cpu_count()} cores; {args.rounds} rounds, interleaved, each on a fresh database"
    )
    print(
        f"kbctl {version('kbctl')}: {detail['kbctl_chunks']} chunks, {detail['alone']['texts']} distinct texts "
        f"embedded; LangChain ({versions}): {lc['chunks']} chunks, {lc['runs'][0]['embedded']} texts embedded; "
        f"fastembed {version('fastembed')}, onnxruntime {version('onnxruntime')} on both sides"
    )
    print(f"{'run (process start to exit unless in-process)':<48}{'median s':>10}{'min s':>9}")
    for label, values in results.items():
        print(f"{label:<48}{statistics.median(values):>10.2f}{min(values):>9.2f}")
    kb_first = statistics.median(results["kbctl first apply"])
    peer_first = statistics.median(results["LangChain first index()"])
    print(f"kbctl first apply / LangChain first index(): {kb_first / peer_first:.3f}x (goal <= 0.8x)")
    print(
        f"kbctl first apply / embedding alone: {kb_first / statistics.median(results['embedding alone']):.3f}x "
        "(goal <= 1.1x)"
    )
    print(f"LangChain unchanged run embedded {lc['runs'][1]['embedded']} texts; skipped {lc['runs'][1]['skipped']}")


if __name__ == "__main__":
    main()
