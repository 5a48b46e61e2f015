"""A BEIR-format folder of ~86,000 real sentences, to measure the vector index on real vectors at scale.

    python bench/make_sentences.py OUT BEIR_DIR [BEIR_DIR ...] [--queries 300] [--seed 7]

Splits the text of every document of the given BEIR folders (NFCorpus, ArguAna and the Climate-FEVER evidence of
bench/README.md give 86,221 distinct sentences of 30-400 characters) into sentences, shuffles them with `--seed`,
and writes OUT/corpus.jsonl (each sentence a document), OUT/queries.jsonl (the first `--queries` sentences, held
out of the corpus) and OUT/qrels/test.tsv (each query judged against one random document: the folder measures the
index against an exact scan, not relevance). Import it with
`KBCTL_HOME=HOME kbctl import beir OUT --name sentences`, then `python bench/ef_search.py HOME sentences`.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path

SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


def sentences(folders: list[Path]) -> list[str]:
    """The distinct sentences of 30-400 characters of every document, in the folders' order."""
    seen: dict[str, None] = {}
    for folder in folders:
        with (folder / "corpus.jsonl").open(encoding="utf-8") as corpus:
            for line in corpus:
                for sentence in SENTENCE_END.split(json.loads(line).get("text", "")):
                    text = " ".join(sentence.split())
                    if 30 <= len(text) <= 400:
                        seen.setdefault(text)
    return list(seen)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("folders", type=Path, nargs="+", metavar="BEIR_DIR")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    found = sentences(args.folders)
    rng = random.Random(args.seed)
    rng.shuffle(found)
    queries, corpus = found[: args.queries], found[args.queries :]
    (args.out / "qrels").mkdir(parents=True, exist_ok=True)
    with (args.out / "corpus.jsonl").open("w", encoding="utf-8") as out:
        out.writelines(json.dumps({"_id": f"s{i}", "title": "", "text": s}) + "\n" for i, s in enumerate(corpus))
    with (args.out / "queries.jsonl").open("w", encoding="utf-8") as out:
        out.writelines(json.dumps({"_id": f"q{i}", "text": s}) + "\n" for i, s in enumerate(queries))
    with (args.out / "qrels" / "test.tsv").open("w", encoding="utf-8") as out:
        out.write("query-id\tcorpus-id\tscore\n")
        out.writelines(f"q{i}\ts{rng.randrange(len(corpus))}\t1\n" for i in range(len(queries)))
    print(f"{len(corpus)} sentences, {len(queries)} queries: {args.out}")


if __name__ == "__main__":
    main()
