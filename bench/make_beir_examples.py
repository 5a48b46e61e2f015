"""Regenerate examples/beir/policies, a BEIR-format export of the project's own examples (never edit it by hand).

    python bench/make_beir_examples.py            # write examples/beir/policies/
    python bench/make_beir_examples.py --check    # exit 1 when the folder is not what this script writes

Corpus: every source of examples/kb/*.yaml, `_id` = the source name, `title` = its first heading (or the
source name), `text` = the rest. Queries and qrels/test.tsv: the questions of examples/eval/*.yaml that
name expectedSources (noAnswer questions and expectedText-only ones are left out), each judging its
expected sources relevant with score 1. The output is deterministic: files in name order, queries in file order.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kbctl.eval.evalset import load_evalset
from kbctl.manifest import load_manifests

ROOT = Path(__file__).resolve().parent.parent
OUT = Path("examples") / "beir" / "policies"
QRELS_HEADER = "query-id\tcorpus-id\tscore\n"


def _split_title(name: str, text: str) -> tuple[str, str]:
    """(title, text): the first line when it is a markdown heading, and the text after it; else the name."""
    first, _, rest = text.strip().partition("\n")
    if first.startswith("#"):
        return first.lstrip("#").strip(), rest.strip() + "\n"
    return name, text.strip() + "\n"


def _jsonl(rows: list[dict[str, object]]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def _corpus(root: Path) -> list[dict[str, object]]:
    documents: list[dict[str, object]] = []
    for loaded in load_manifests([str(root / "examples" / "kb")]):
        for source in loaded.kb.spec.sources:
            if source.text is None:
                continue  # only inline text travels into a corpus
            title, text = _split_title(source.name, source.text)
            metadata = {"knowledgeBase": loaded.kb.name}
            documents.append({"_id": source.name, "title": title, "text": text, "metadata": metadata})
    return documents


def _queries_and_qrels(root: Path, corpus_ids: set[str]) -> tuple[list[dict[str, object]], list[str]]:
    queries: list[dict[str, object]] = []
    qrels: list[str] = []
    for path in sorted((root / "examples" / "eval").glob("*.yaml")):
        for query in load_evalset(str(path)).queries:
            if query.no_answer or not query.expected_sources:
                continue
            if any(q["_id"] == query.id for q in queries):
                raise SystemExit(f"{path}: query id {query.id!r} is used by another eval set too")
            unknown = [s for s in query.expected_sources if s not in corpus_ids]
            if unknown:
                raise SystemExit(f"{path}: query {query.id!r} expects unknown sources {unknown}")
            queries.append({"_id": query.id, "text": query.question})
            qrels.extend(f"{query.id}\t{source}\t1\n" for source in query.expected_sources)
    return queries, qrels


def render(root: Path = ROOT) -> dict[str, str]:
    """The files of examples/beir/policies: path relative to it → content."""
    corpus = _corpus(root)
    queries, qrels = _queries_and_qrels(root, {str(d["_id"]) for d in corpus})
    return {
        "corpus.jsonl": _jsonl(corpus),
        "queries.jsonl": _jsonl(queries),
        "qrels/test.tsv": QRELS_HEADER + "".join(qrels),
    }


def stale_files(root: Path = ROOT) -> list[str]:
    """The files of the export that differ from what render() writes, or are missing, or are extra."""
    folder = root / OUT
    expected = render(root)
    present = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()} if folder.is_dir() else set()
    differ = [name for name, text in expected.items() if name not in present or (folder / name).read_text() != text]
    return sorted([*differ, *(present - set(expected))])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 when the export is stale; write nothing")
    args = parser.parse_args()
    if args.check:
        stale = stale_files()
        for name in stale:
            print(f"{OUT / name} is stale: run python bench/make_beir_examples.py", file=sys.stderr)
        raise SystemExit(1 if stale else 0)
    for name, text in render().items():
        path = ROOT / OUT / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {OUT / name}")


if __name__ == "__main__":
    main()
