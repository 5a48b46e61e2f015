"""Fusion sweep on BEIR datasets: which way of fusing the vector and BM25 lists, and how deep, ranks best.

    python bench/fusion.py HOME:NAME [HOME:NAME ...] [--depth 200]

Each HOME is a kbctl home holding a knowledge base NAME imported with `kbctl import beir` (its eval set beside it:
HOME/eval.jsonl, as bench/retrieval.py --keep leaves them). For every query the two candidate lists are read
once, `--depth` deep, exactly as a query reads them (the version's vector search and BM25 keyword search); every
fusion setting is then scored on those same lists, so the figures differ only by the fusion. The metric is
document-level nDCG@10 (a document ranks at its best chunk), BEIR's own: ignored sources (a query that is itself a
document) are left out, as `kbctl eval` does.

Printed per dataset: vector alone, BM25 alone, weighted reciprocal rank fusion (keyword weight w, k, pool depth),
and a convex combination of min-max normalized scores (alpha = vector's share) at each pool depth.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings
from kbctl.eval.evalset import EvalQuery, load_evalset
from kbctl.eval.metrics import ndcg_at_k
from kbctl.eval.run import distinct_sources
from kbctl.manifest.models import Fusion
from kbctl.query.stages import RRF_K, fuse
from kbctl.store.rows import ChunkHit


@dataclass(frozen=True)
class _Hit:
    source: str
    text: str = ""


@dataclass
class Lists:
    query: EvalQuery
    vector: list[ChunkHit]
    keyword: list[ChunkHit]


def gather(home: Path, name: str, depth: int) -> list[Lists]:
    """Both candidate lists of every eval query, `depth` deep."""
    store = KnowledgeBaseStore(settings=Settings(home=home))
    evalset = load_evalset(str(home / "eval.jsonl"))
    target = store.db.query_target(name)
    assert target is not None and target.version_id is not None and target.model and target.chunk_count
    embedder = store.embedder(target.model)
    out = []
    for q in evalset.queries:
        [vec] = embedder.embed([q.question], purpose="query")
        by_vector = store.db.search(
            target.version_id, vec, depth, model=target.model, version_chunks=target.chunk_count
        )
        by_keyword = store.db.keyword_ranking(target.version_id, "english", q.question, vec, depth).hits
        out.append(Lists(q, by_vector, by_keyword))
    store.close()
    return out


def fused(fusion: Fusion, weight: float, pool: int, k: int = RRF_K) -> Callable[[Lists], list[str]]:
    """The sources of kbctl's own fusion stage (kbctl.query.stages.fuse) of each list's first `pool`."""

    def run(lists: Lists) -> list[str]:
        ranked = fuse(lists.vector[:pool], lists.keyword[:pool], weight, fusion, rrf_k=k)
        return [hit.source_name for hit, _ in ranked]

    return run


def rrf(weight: float, k: int, pool: int) -> Callable[[Lists], list[str]]:
    return fused("rrf", weight, pool, k)


def convex(alpha: float, pool: int) -> Callable[[Lists], list[str]]:
    """Convex fusion with the vector list's share alpha (keywordWeight = (1 - alpha) / alpha)."""
    return fused("convex", (1 - alpha) / alpha, pool)


def ndcg(data: Sequence[Lists], rank: Callable[[Lists], list[str]]) -> float:
    total = 0.0
    for lists in data:
        hits = [_Hit(s) for s in rank(lists) if s not in lists.query.ignored_sources]
        total += ndcg_at_k(lists.query, distinct_sources(hits))
    return total / len(data)


def recall(data: Sequence[Lists], rank: Callable[[Lists], list[str]], k: int) -> float:
    total = 0.0
    for lists in data:
        ranked = [_Hit(s) for s in rank(lists) if s not in lists.query.ignored_sources]
        top = {h.source for h in distinct_sources(ranked)[:k]}
        total += sum(s in top for s in lists.query.expected_sources) / len(lists.query.expected_sources)
    return total / len(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("datasets", nargs="+", metavar="HOME:NAME")
    parser.add_argument("--depth", type=int, default=200)
    args = parser.parse_args()
    pools = [p for p in (30, 50, 100, 200) if p <= args.depth]
    for spec in args.datasets:
        home, _, name = spec.rpartition(":")
        data = gather(Path(home), name, args.depth)
        print(f"\n## {name}: {len(data)} queries, lists {args.depth} deep; document-level nDCG@10 / recall@100")
        print(
            f"vector alone            {ndcg(data, rrf(0.0, 60, args.depth)):.4f} / "
            f"{recall(data, rrf(0.0, 60, args.depth), 100):.4f}"
        )
        print(
            f"BM25 alone              {ndcg(data, lambda x: [h.source_name for h in x.keyword]):.4f} / "
            f"{recall(data, lambda x: [h.source_name for h in x.keyword], 100):.4f}"
        )
        print("RRF: rows keyword weight w, k; columns pool depth " + " ".join(f"{p:>7}" for p in pools))
        for w in (0.3, 0.5, 0.7, 1.0, 1.5):
            for k in (10, 30, 60):
                print(f"  w={w:<4} k={k:<3}" + " " * 27 + " ".join(f"{ndcg(data, rrf(w, k, p)):7.4f}" for p in pools))
        print("convex: rows alpha (vector share); columns pool depth " + " ".join(f"{p:>7}" for p in pools))
        for alpha in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8):
            print(f"  alpha={alpha:<4}" + " " * 30 + " ".join(f"{ndcg(data, convex(alpha, p)):7.4f}" for p in pools))
        best = max(
            (
                (ndcg(data, rrf(w, k, p)), f"rrf w={w} k={k} pool={p}")
                for w in (0.3, 0.5, 0.7, 1.0, 1.5)
                for k in (10, 30, 60)
                for p in pools
            ),
        )
        print(f"best RRF: {best[1]} {best[0]:.4f}")


if __name__ == "__main__":
    main()
