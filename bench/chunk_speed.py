"""How fast the chunker cuts text, against the chunker of another revision, side by side in one run.

    python bench/chunk_speed.py [--sources 2727] [--rounds 5] [--against REV]

Cuts the corpus of bench/scale.py (`--sources` generated Markdown sources of 10 sections, ~900 characters
each) with `chunk_document` at the defaults (1,200 characters, 150 overlap), the working tree's chunker and
the one at git revision `--against` (default HEAD, loaded from `git show`) alternating for `--rounds` rounds.
Checks that both cut the corpus into the same chunks, then prints each round's seconds, chunks/s and MB/s,
and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from scale import source_text  # noqa: E402

from kbctl import chunking  # noqa: E402


def chunker_at(rev: str) -> ModuleType:
    """kbctl/chunking.py as it was at `rev`, imported as a module of its own."""
    code = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:kbctl/chunking.py"], check=True, capture_output=True, text=True
    ).stdout
    with tempfile.TemporaryDirectory(prefix="kbctl-chunker-") as folder:
        path = Path(folder) / "chunking_at_rev.py"
        path.write_text(code)
        spec = importlib.util.spec_from_file_location("chunking_at_rev", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
        spec.loader.exec_module(module)
    return module


def cut(module: ModuleType, texts: list[str]) -> list[list[tuple[int, int, str]]]:
    cut_one: Callable[..., list] = module.chunk_document
    return [[(c.start, c.end, c.heading) for c in cut_one(t, max_chars=1200, overlap_chars=150)] for t in texts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sources", type=int, default=2727)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--against", default="HEAD")
    args = parser.parse_args()

    rng = random.Random(42)
    texts = [source_text(rng, i) for i in range(args.sources)]
    megabytes = sum(len(t.encode()) for t in texts) / 1e6
    other = chunker_at(args.against)
    ours = cut(chunking, texts)
    if cut(other, texts) != ours:
        raise SystemExit(f"the chunker at {args.against} cuts this corpus differently: compare quality, not speed")
    chunks = sum(len(c) for c in ours)
    print(f"corpus: {args.sources} sources, {megabytes:.1f} MB, {chunks} chunks; {args.rounds} rounds alternating")
    times: dict[str, list[float]] = {args.against: [], "working tree": []}
    for _ in range(args.rounds):
        for label, module in ((args.against, other), ("working tree", chunking)):
            start = time.perf_counter()
            cut(module, texts)
            times[label].append(time.perf_counter() - start)
    for label, values in times.items():
        rounds = ", ".join(f"{v:.2f}" for v in values)
        median = statistics.median(values)
        rate = f"{chunks / median:,.0f} chunks/s, {megabytes / median:.1f} MB/s"
        print(f"{label:<14} s: {rounds}   median {median:.2f} s = {rate}")
    ratio = statistics.median(times[args.against]) / statistics.median(times["working tree"])
    print(f"working tree is {ratio:.1f}x the speed of {args.against}")


if __name__ == "__main__":
    main()
