"""Export Climate-FEVER's evidence sentences to a BEIR-format folder, for bench/retrieval.py and bench/fusion.py.

    python bench/make_climate_fever.py CLAIMS_JSONL OUT_DIR

CLAIMS_JSONL is the Climate-FEVER release's claims file (one claim per line with its five evidence sentences:
`queries.jsonl` of the public repository memekhant/climate-fever-data). Every distinct evidence sentence becomes
a document (`_id` its evidence id, `title` its Wikipedia article, `text` the sentence), every claim a query, and
each of a claim's evidence sentences is relevant to it (score 1), whatever its label. bench/README.md gives the
checksums of the input and of the folder written.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("claims", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    documents: dict[str, dict[str, str]] = {}
    queries: list[dict[str, str]] = []
    qrels: list[tuple[str, str]] = []
    with args.claims.open(encoding="utf-8") as lines:
        for line in lines:
            claim = json.loads(line)
            queries.append({"_id": str(claim["_id"]), "text": claim["text"]})
            for evidence in claim["metadata"]["evidences"]:
                doc_id = evidence["evidence_id"]
                document = {"_id": doc_id, "title": evidence["article"], "text": evidence["evidence"]}
                documents.setdefault(doc_id, document)
                qrels.append((str(claim["_id"]), doc_id))
    (args.out / "qrels").mkdir(parents=True, exist_ok=True)
    with (args.out / "corpus.jsonl").open("w", encoding="utf-8") as out:
        out.writelines(json.dumps(d) + "\n" for d in documents.values())
    with (args.out / "queries.jsonl").open("w", encoding="utf-8") as out:
        out.writelines(json.dumps(q) + "\n" for q in queries)
    with (args.out / "qrels" / "test.tsv").open("w", encoding="utf-8") as out:
        out.write("query-id\tcorpus-id\tscore\n")
        out.writelines(f"{q}\t{d}\t1\n" for q, d in qrels)
    print(f"{len(documents)} documents, {len(queries)} queries, {len(qrels)} judgements in {args.out}")


if __name__ == "__main__":
    main()
