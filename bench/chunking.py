"""What kbctl's chunking is worth on its own examples: each chunking variant of bench/variants.py, side by side.

    python bench/chunking.py [--variants headings,no-headings,merged]

For each variant, in a process of its own (a variant patches the chunker) and a fresh embedded store:
apply examples/kb with the real local model, then run both eval sets of examples/eval (`kbctl eval`'s
scoring: a hit is relevant by its source or by the text it must contain; noAnswer questions must come back
empty) in hybrid, vector and keyword modes, at the manifests' defaults (threshold, topK, token budget) and
with the threshold and budget out of the way. Prints chunks, tokens sent to the model, recall@5, nDCG@10
and the share of noAnswer questions answered with nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from variants import VARIANTS, apply_variant  # noqa: E402

MODES = ("hybrid", "vector", "keyword")
EVAL_SETS = ("client-service-policy", "data-handling-policy")


def measure(variant: str) -> dict[str, object]:
    """(run in a process of its own) apply the examples under `variant` and evaluate them."""
    from kbctl.client import KnowledgeBaseStore
    from kbctl.config import Settings
    from kbctl.eval.evalset import load_evalset
    from kbctl.eval.run import evaluate_store
    from kbctl.manifest import load_manifests
    from kbctl.query.options import QueryOptions
    from kbctl.store.embedded import stop_server

    settings = Settings.from_env(home=Path(tempfile.mkdtemp(prefix="kbctl-bench-chunking-")))
    apply_variant(variant, settings)
    rows: dict[str, object] = {}
    try:
        with KnowledgeBaseStore(settings=settings) as store:
            report = store.apply([d.kb for d in load_manifests([str(ROOT / "examples" / "kb")])])
            assert not any(r.action == "failed" for r in report.results), report
            tokens = store.db.connection.execute("SELECT coalesce(sum(token_count), 0) FROM kb_chunks").fetchone()
            rows["chunks"] = sum(s.chunks for r in report.results for s in r.sources)
            rows["text_tokens"] = int(tokens[0]) if tokens else 0
            embedder = store.embedder("local/all-MiniLM-L6-v2")
            from kbctl.chunking import Chunk

            texts = store.db.connection.execute("SELECT content, heading_path FROM kb_chunks").fetchall()
            rows["embedded_tokens"] = sum(
                embedder.count_tokens([Chunk(0, t, 0, len(t), tuple(h or ())).embed_text for t, h in texts])
            )
            for setting, options in (
                ("defaults", None),
                ("uncut", QueryOptions(threshold=-1.0, max_tokens=1_000_000)),
            ):
                for name in EVAL_SETS:
                    evalset = load_evalset(str(ROOT / "examples" / "eval" / f"{name}.yaml"))
                    found = evaluate_store(store, name, evalset, k=5, modes=MODES, options=options)
                    for m in found.modes:
                        rows[f"{setting}/{name}/{m.mode}"] = {
                            "recall": m.recall,
                            "ndcg": m.ndcg,
                            "no_answer": m.no_answer_accuracy,
                        }
    finally:
        stop_server(settings.pgdata)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--one", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one)))
        return
    results = {}
    for variant in args.variants.split(","):
        done = subprocess.run(
            [sys.executable, __file__, "--one", variant], capture_output=True, text=True, check=False, cwd=ROOT
        )
        if done.returncode != 0:
            raise SystemExit(f"variant {variant} failed: {done.stderr[-3000:]}")
        results[variant] = json.loads(done.stdout.strip().splitlines()[-1])
    print("examples/kb with examples/eval, model local/all-MiniLM-L6-v2; recall@5 / nDCG@10 / noAnswer empty")
    print(f"{'variant':<13}{'chunks':>7}{'text tok':>9}{'embed tok':>10}")
    for variant, rows in results.items():
        print(f"{variant:<13}{rows['chunks']:>7}{rows['text_tokens']:>9}{rows['embedded_tokens']:>10}")
    for setting in ("defaults", "uncut"):
        for name in EVAL_SETS:
            print(f"\n{name}, {'at the manifest defaults' if setting == 'defaults' else 'no threshold or budget'}")
            print(f"{'variant':<13}" + "".join(f"{mode:>22}" for mode in MODES))
            for variant, rows in results.items():
                cells = []
                for mode in MODES:
                    m = rows[f"{setting}/{name}/{mode}"]
                    assert isinstance(m, dict)
                    no_answer = "-" if m["no_answer"] is None else f"{m['no_answer']:.2f}"
                    cells.append(f"{m['recall']:.3f} / {m['ndcg']:.3f} / {no_answer}")
                print(f"{variant:<13}" + "".join(f"{c:>22}" for c in cells))


if __name__ == "__main__":
    main()
