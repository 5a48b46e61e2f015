"""The local models' embedding speed side by side: all-MiniLM-L6-v2 and bge-small-en-v1.5 on the same chunks.

    python bench/model_speed.py [BEIR_DIR] [--chunks 400] [--rounds 3]

Cuts the documents of a BEIR-format corpus (default examples/beir/policies) with kbctl's chunker, keeps the first
`--chunks` chunks, and embeds them with each local model in turn, `--rounds` times alternating (the machine's drift
falls on both), shortest first in batches as apply does. Prints chunks/s and tokens/s per round (each model's
tokens counted by its own tokenizer, up to its window) and the median ratio bge / MiniLM; then each model's memory:
the peak resident set of a fresh process that loads it and embeds the same chunks once, beside that of a process
that only imports kbctl's embedding code.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kbctl.chunking import chunk_document
from kbctl.config import Settings
from kbctl.embedding.local import LOCAL_MODELS, LocalEmbedder
from kbctl.eval.beir import read_beir

ROOT = Path(__file__).resolve().parent.parent


def chunks_of(folder: Path, limit: int) -> list[str]:
    """The first `limit` chunks of the corpus's documents, each document's text as `kbctl import beir` makes it."""
    texts: list[str] = []
    for document in read_beir(folder).documents:
        texts += [c.text for c in chunk_document(document.markdown)]
        if len(texts) >= limit:
            break
    return sorted(texts[:limit], key=len)


def peak_rss(dataset: Path, chunks: int, model: str) -> int:
    """The peak resident set (KiB) of a fresh process that embeds the chunks with `model` ("" embeds nothing)."""
    done = subprocess.run(
        [sys.executable, __file__, str(dataset), "--chunks", str(chunks), "--rss-of", model],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", nargs="?", type=Path, default=ROOT / "examples" / "beir" / "policies")
    parser.add_argument("--chunks", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rss-of", default=None, help=argparse.SUPPRESS)  # the child of peak_rss
    args = parser.parse_args()
    texts = chunks_of(args.dataset, args.chunks)
    if args.rss_of is not None:
        if args.rss_of:
            LocalEmbedder(args.rss_of, Settings(home=Path(tempfile.mkdtemp(prefix="kbctl-model-rss-")))).embed(texts)
        # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent through fork and exec.
        status = Path("/proc/self/status").read_text()
        print(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))
        return
    settings = Settings(home=Path(tempfile.mkdtemp(prefix="kbctl-model-speed-")))
    embedders = {name: LocalEmbedder(name, settings) for name in LOCAL_MODELS}
    tokens = {}
    for name, embedder in embedders.items():
        embedder.embed(texts[:8])  # load the model before anything is timed
        tokens[name] = sum(min(n, embedder.window_tokens) for n in embedder.count_tokens(texts))
    chars = sum(map(len, texts)) // len(texts)
    print(f"{len(texts)} chunks of {args.dataset.name} ({chars} characters on average), {args.rounds} rounds")
    print(f"{'round':>5}  {'model':<20}{'seconds':>9}{'chunks/s':>10}{'tokens/s':>10}")
    rates: dict[str, list[float]] = {name: [] for name in embedders}
    for round_ in range(1, args.rounds + 1):
        for name, embedder in embedders.items():
            started = time.perf_counter()
            embedder.embed(texts)
            seconds = time.perf_counter() - started
            rates[name].append(len(texts) / seconds)
            print(f"{round_:>5}  {name:<20}{seconds:>9.2f}{len(texts) / seconds:>10.1f}{tokens[name] / seconds:>10.0f}")
    mini, bge = (statistics.median(rates[name]) for name in LOCAL_MODELS)
    print(f"median chunks/s: all-MiniLM-L6-v2 {mini:.1f}, bge-small-en-v1.5 {bge:.1f} (bge / MiniLM {bge / mini:.2f}x)")
    base = peak_rss(args.dataset, args.chunks, "")
    print(f"peak RSS without a model: {base / 1024:.0f} MiB")
    for name in LOCAL_MODELS:
        rss = peak_rss(args.dataset, args.chunks, name)
        print(f"peak RSS embedding with {name}: {rss / 1024:.0f} MiB ({(rss - base) / 1024:+.0f} MiB for the model)")


if __name__ == "__main__":
    main()
