"""Fusion sweep on BEIR datasets: which way of fusing the vector and BM25 lists, and how deep, ranks best.

    python bench/fusion.py HOME:NAME [HOME:NAME ...] [--depth 200]

Each HOME is a kbctl home holding a knowledge base NAME imported with `kbctl import beir` (its eval set beside it:
HOME/eval.jsonl, as bench/retrieval.py --keep leaves them). For every query the two candidate lists are read
once, `--depth` deep, exactly as a query reads them (the version's vector search and BM25 keyword search); every
fusion setting is then scored on those same lists, so the figures differ only by the fusion. The metric is
document-level nDCG@10 (a document ranks at its best chunk), BEIR's own: ignored sources (a query that is itself a
document) are left out, as `kbctl eval` does.

Printed per dataset: vector alone, BM25 alone, weighted reciprocal rank fusion (keyword weight w, k, pool depth),
and a convex combination of min-max normalized scores (alpha = vector's share) at each pool depth. Then the keyword
list weighed by the question's keyword share (kbctl.embedding.background.keyword_share: its best BM25 score over
the sum of its words' idf): weight min(1, share / s), so that a keyword list whose best chunk holds little of the
question counts less; each s with nDCG@10 and MRR@10, uncut and with the chunks below the answer floor cut (as the
defaults cut an answer's chunks).

`--examples` also applies examples/kb (the default model) into a temporary store and measures its knowledge bases
against examples/eval, where a list of a few dozen chunks makes the keyword list's order weak evidence.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from retrieval import examples_store  # bench/retrieval.py

from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings
from kbctl.defaults import ANSWER_FLOOR_MARGIN, DEFAULT_MODEL
from kbctl.embedding.background import answer_floor, keyword_share
from kbctl.eval.evalset import EvalQuery, EvalSet, load_evalset
from kbctl.eval.metrics import ndcg_at_k
from kbctl.eval.run import distinct_sources
from kbctl.manifest.models import Fusion
from kbctl.query.stages import RRF_K, fuse
from kbctl.store.rows import ChunkHit

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class _Hit:
    source: str
    text: str = ""


@dataclass
class Lists:
    query: EvalQuery
    vector: list[ChunkHit]
    keyword: list[ChunkHit]
    idf_total: float = 0.0  # the sum of the question's words' idf (what its keyword share is measured against)

    @property
    def share(self) -> float:
        """The question's keyword share."""
        return keyword_share(self.keyword[0].keyword_score if self.keyword else None, self.idf_total)


def gather(home: Path, name: str, depth: int, evalset: EvalSet | None = None) -> list[Lists]:
    """Both candidate lists of every eval query (HOME/eval.jsonl's, or `evalset`'s), `depth` deep."""
    store = KnowledgeBaseStore(settings=Settings(home=home))
    evalset = evalset or load_evalset(str(home / "eval.jsonl"))
    target = store.db.query_target(name)
    assert target is not None and target.version_id is not None and target.model and target.chunk_count
    embedder = store.embedder(target.model)
    out = []
    for q in evalset.queries:
        [vec] = embedder.embed([q.question], purpose="query")
        by_vector = store.db.search(
            target.version_id, vec, depth, model=target.model, version_chunks=target.chunk_count
        )
        ranking = store.db.keyword_ranking(target.version_id, "english", q.question, vec, depth)
        out.append(Lists(q, by_vector, ranking.hits, ranking.idf_total))
    store.close()
    return out


def fused(fusion: Fusion, weight: float, pool: int, k: int = RRF_K) -> Callable[[Lists], list[str]]:
    """The sources of kbctl's own fusion stage (kbctl.query.stages.fuse) of each list's first `pool`."""

    def run(lists: Lists) -> list[str]:
        ranked = fuse(lists.vector[:pool], lists.keyword[:pool], weight, fusion, rrf_k=k)
        return [hit.source_name for hit, _ in ranked]

    return run


def by_share(full: float | None, floor: float = -1.0) -> Callable[[Lists], list[str]]:
    """RRF (kbctl's k, the lists 100 deep) with the keyword list weighed min(1, share / `full`) (`full` None: 1), the
    chunks below `floor` cut after fusion."""

    def run(lists: Lists) -> list[str]:
        weight = 1.0 if full is None else min(1.0, lists.share / full)
        ranked = fuse(lists.vector[:100], lists.keyword[:100], weight)
        return [hit.source_name for hit, _ in ranked if hit.score >= floor]

    return run


def demoted(line: float, floor: float, full: float | None = None) -> Callable[[Lists], list[str]]:
    """The answer floor's chunks after the others: the fused order (`by_share(full)`, cut at `floor`) of the chunks
    scoring at least `line`, then that of those below it."""

    def run(lists: Lists) -> list[str]:
        weight = 1.0 if full is None else min(1.0, lists.share / full)
        ranked = [hit for hit, _ in fuse(lists.vector[:100], lists.keyword[:100], weight) if hit.score >= floor]
        return [h.source_name for h in ranked if h.score >= line] + [h.source_name for h in ranked if h.score < line]

    return run


def mrr(data: Sequence[Lists], rank: Callable[[Lists], list[str]]) -> float:
    """Document MRR@10: the reciprocal rank of the first relevant document among the first ten."""
    total = 0.0
    for lists in data:
        ranked = [_Hit(s) for s in rank(lists) if s not in lists.query.ignored_sources]
        sources = [h.source for h in distinct_sources(ranked)[:10]]
        total += next((1 / i for i, s in enumerate(sources, start=1) if s in lists.query.expected_sources), 0.0)
    return total / len(data)


def share_report(data: Sequence[Lists], floor: float) -> None:
    """The keyword list weighed by the question's keyword share, each `full` share against the fixed weight 1."""
    shares = sorted(lists.share for lists in data)
    print(
        f"keyword weight min(1, share / s): shares p10 / p50 / p90 {shares[len(shares) // 10]:.2f} /"
        f" {shares[len(shares) // 2]:.2f} / {shares[9 * len(shares) // 10]:.2f}"
    )
    print(f"  {'s':<6} nDCG@10 / MRR@10 uncut; at the answer floor {floor:g}")
    for full in (None, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0):
        label = "fixed" if full is None else f"{full:g}"
        uncut, cut = by_share(full), by_share(full, floor)
        figures = f"{ndcg(data, uncut):.4f} / {mrr(data, uncut):.4f}; {ndcg(data, cut):.4f} / {mrr(data, cut):.4f}"
        print(f"  {label:<6} {figures}")
    print(f"the chunks under the model's threshold ({floor + ANSWER_FLOOR_MARGIN:g}) after the others, at the floor:")
    for line in (floor + ANSWER_FLOOR_MARGIN / 2, floor + ANSWER_FLOOR_MARGIN):
        rule = demoted(line, floor)
        print(f"  under {line:g}: {ndcg(data, rule):.4f} / {mrr(data, rule):.4f}")


def examples(depth: int) -> Iterator[tuple[str, list[Lists]]]:
    """examples/kb applied with the default model into a temporary store, and each of its knowledge bases' lists
    for its examples/eval questions that name the sources of their answer."""
    with examples_store() as store:
        for path in sorted((ROOT / "examples" / "eval").glob("*.yaml")):
            evalset = load_evalset(str(path))
            answerable = evalset.model_copy(update={"queries": [q for q in evalset.queries if q.expected_sources]})
            name = evalset.knowledge_base or path.stem
            yield name, gather(store.settings.home, name, depth, answerable)


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
    parser.add_argument("datasets", nargs="*", metavar="HOME:NAME")
    parser.add_argument("--depth", type=int, default=200)
    parser.add_argument("--examples", action="store_true", help="also examples/kb against examples/eval")
    parser.add_argument("--floor", type=float, default=answer_floor(DEFAULT_MODEL), help="the answer floor cut")
    args = parser.parse_args()
    pools = [p for p in (30, 50, 100, 200) if p <= args.depth]
    homes = [(Path(home), name) for home, _, name in (spec.rpartition(":") for spec in args.datasets)]
    gathered = ((f"{home.name}/{name}", gather(home, name, args.depth)) for home, name in homes)
    for name, data in [*gathered, *(examples(args.depth) if args.examples else [])]:
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
        share_report(data, args.floor)


if __name__ == "__main__":
    main()
