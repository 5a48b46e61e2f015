"""kbctl's ONNX runner against fastembed's TextEmbedding on the same chunks and the same model files, alternating.

    python bench/runner_speed.py [BEIR_DIR] [--chunks 400] [--rounds 3]

kbctl runs its local models itself (kbctl.embedding.onnx_text) since 2026-12-06; fastembed ran them before. The
chunks of a BEIR-format corpus (bench/model_speed.py's, shortest first, in apply's batches) are embedded by each,
for each local model, `--rounds` times alternating: chunks/s, the ratio, and the largest difference between the two
vectors of a chunk.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
from model_speed import ROOT, chunks_of

from kbctl.config import Settings
from kbctl.defaults import LOCAL_BATCH_SIZE
from kbctl.embedding.local import LOCAL_MODELS, LocalEmbedder
from tests.support.fastembed_folder import lay_out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", nargs="?", type=Path, default=ROOT / "examples" / "beir" / "policies")
    parser.add_argument("--chunks", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from fastembed import TextEmbedding
    from fastembed.common.model_description import ModelSource, PoolingType

    texts = chunks_of(args.dataset, args.chunks)
    work = Path(tempfile.mkdtemp(prefix="kbctl-runner-"))
    print(
        f"{len(texts)} chunks of {args.dataset.name}, batches of {LOCAL_BATCH_SIZE}, {args.rounds} rounds alternating"
    )
    print(f"{'model':22} {'runner':10} {'chunks/s per round':>28} {'median':>8} {'vs fastembed':>13}")
    for name, model in LOCAL_MODELS.items():
        packaged = model.packaged()
        if packaged is None:
            print(f"{name}: not installed")
            continue
        ours = LocalEmbedder(name, Settings(home=work / "home"))
        ours.embed(texts[:8])  # loaded (and its optimized copy made) before timing
        custom = f"kbctl-bench/{name}"
        TextEmbedding.add_custom_model(
            custom,
            pooling=PoolingType[model.pooling],
            normalization=True,
            sources=ModelSource(hf=model.hub_name),
            dim=384,
            model_file="model.onnx",
        )
        folder = lay_out(work / name, packaged[1], max_tokens=model.max_tokens, onnx=packaged[0])
        theirs = TextEmbedding(custom, specific_model_path=str(folder))
        list(theirs.embed(texts[:8], batch_size=LOCAL_BATCH_SIZE))
        speed: dict[str, list[float]] = {"kbctl": [], "fastembed": []}
        differences: list[float] = []
        for _ in range(args.rounds):
            started = time.perf_counter()
            mine = ours.embed(texts)
            speed["kbctl"].append(len(texts) / (time.perf_counter() - started))
            started = time.perf_counter()
            expected = list(theirs.embed(texts, batch_size=LOCAL_BATCH_SIZE))
            speed["fastembed"].append(len(texts) / (time.perf_counter() - started))
            differences.append(max(float(np.max(np.abs(a - b))) for a, b in zip(mine, expected, strict=True)))
        base = statistics.median(speed["fastembed"])
        for runner in ("fastembed", "kbctl"):
            rounds = ", ".join(f"{v:.1f}" for v in speed[runner])
            median = statistics.median(speed[runner])
            print(f"{name:22} {runner:10} {rounds:>28} {median:8.1f} {median / base:12.2f}x")
        print(f"{name:22} largest difference between the two vectors of a chunk: {max(differences):.2e}")


if __name__ == "__main__":
    main()
