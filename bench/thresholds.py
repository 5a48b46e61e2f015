"""What the similarity threshold costs and buys, per local model, in one run.

    python bench/thresholds.py [--thresholds 0.3,0.35,...] [--models local/all-MiniLM-L6-v2,local/bge-small-en-v1.5]
                               [--beir HOME ...] [--limit-queries N] [--no-examples]

1. The example knowledge bases (examples/kb), applied once per model into a fresh embedded store, scored by both eval
   sets of examples/eval in hybrid mode at each threshold: recall@5 and nDCG@10 of the answerable questions, and the
   share of no-answer questions that come back empty (what an honest "nothing relevant" needs).
2. With `--beir HOME` (a store kept by `bench/retrieval.py DIR --keep HOME`, any model), hybrid at the manifest's
   topK and token budget at each threshold: document nDCG@10 and how many answerable questions come back empty,
   beside the same uncut (threshold -1, no budget).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from retrieval import DEEP, NAME, figures, outcomes  # bench/retrieval.py

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings
from kbctl.eval.evalset import EvalSet, load_evalset
from kbctl.eval.run import evaluate_store
from kbctl.manifest import Embedding, Retrieval, load_manifests
from kbctl.query.options import QueryOptions
from kbctl.store.embedded import stop_server

ROOT = Path(__file__).resolve().parent.parent
THRESHOLDS = "0.2,0.3,0.35,0.4,0.45,0.5,0.55,0.6"
MODELS = "local/all-MiniLM-L6-v2,local/bge-small-en-v1.5"


def examples(models: list[str], thresholds: list[float]) -> None:
    """Part 1: examples/kb per model, each eval set of examples/eval at each threshold."""
    loaded = load_manifests([str(ROOT / "examples" / "kb")])
    evalsets = {p.stem: load_evalset(str(p)) for p in sorted((ROOT / "examples" / "eval").glob("*.yaml"))}
    print("examples/eval, hybrid: recall@5 / nDCG@10 of the answerable questions, no-answer questions left empty")
    print(f"| model | threshold | {' | '.join(evalsets)} |")
    print("|---|---:|" + "---|" * len(evalsets))
    for model in models:
        home = Path(tempfile.mkdtemp(prefix="kbctl-thresholds-"))
        settings = Settings(home=home)
        try:
            with KnowledgeBaseStore(settings=settings) as store:
                kbs = []
                for m in loaded:
                    spec = m.kb.spec.model_copy(update={"embedding": Embedding(model=model)})
                    kbs.append(m.kb.model_copy(update={"spec": spec}))
                report = store.apply(kbs)
                if report.failed:
                    raise SystemExit(f"apply failed: {report.model_dump_json()}")
                for threshold in thresholds:
                    cells = []
                    for name, evalset in evalsets.items():
                        options = QueryOptions(threshold=threshold)
                        [mode] = evaluate_store(store, name, evalset, k=5, modes=["hybrid"], options=options).modes
                        left = round((mode.no_answer_accuracy or 0) * mode.no_answer_queries)
                        empty = f"{left}/{mode.no_answer_queries}"
                        cells.append(f"{mode.recall or 0:.2f} / {mode.ndcg or 0:.3f}, empty {empty}")
                    print(f"| {model} | {threshold} | {' | '.join(cells)} |")
        finally:
            stop_server(settings.pgdata)
            shutil.rmtree(home, ignore_errors=True)


def beir(home: Path, thresholds: list[float], limit: int | None = None) -> None:
    """Part 2: a kept BEIR store, hybrid at the manifest's topK and budget at each threshold (the first `limit`
    questions, or all)."""
    settings = Settings.from_env(home=home)
    evalset: EvalSet = load_evalset(str(home / "eval.jsonl"))
    evalset = EvalSet(queries=evalset.queries[:limit])
    queries = {q.id: q for q in evalset.queries}
    spec = Retrieval()
    try:
        with KnowledgeBaseStore(settings=settings) as store:
            model = store.describe(NAME).model
            print(
                f"\n{home.name}: {model}, hybrid, topK {spec.top_k}, {spec.max_context_tokens} tokens, "
                f"{len(evalset.queries)} questions"
            )
            print("| threshold | doc nDCG@10 | doc recall@10 | answerable questions left empty |")
            print("|---:|---:|---:|---:|")
            rows = [(None, QueryOptions(top_k=DEEP, threshold=-1.0, max_tokens=1_000_000))]
            rows += [
                (t, QueryOptions(top_k=spec.top_k, threshold=t, max_tokens=spec.max_context_tokens)) for t in thresholds
            ]
            for threshold, limits in rows:
                results = outcomes(store, evalset, "hybrid", limits)
                row = figures("hybrid", results, queries)
                empty = sum(1 for o in results if not o.retrieved)
                label = "uncut" if threshold is None else f"{threshold}"
                print(f"| {label} | {row.doc_ndcg:.3f} | {row.doc_recall:.3f} | {empty} of {len(results)} |")
    finally:
        if not settings.database_url:
            stop_server(settings.pgdata)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--thresholds", default=THRESHOLDS)
    parser.add_argument("--models", default=MODELS)
    parser.add_argument("--beir", type=Path, action="append", default=[], metavar="HOME")
    parser.add_argument("--no-examples", action="store_true", help="skip part 1")
    parser.add_argument("--limit-queries", type=int, default=None, metavar="N", help="part 2: the first N questions")
    args = parser.parse_args()
    thresholds = [float(t) for t in args.thresholds.split(",")]
    if not args.no_examples:
        examples(args.models.split(","), thresholds)
    for home in args.beir:
        beir(home, thresholds, args.limit_queries)


if __name__ == "__main__":
    main()
