"""Apply benchmark: first apply vs no-op re-apply vs re-apply with 5% of sources changed, in one run.

    python bench/apply.py [--sources 200] [--kbs 4] [--changed 0.05] [--batch-sizes 8,16,32,64]

Generates a corpus of inline markdown sources (deterministic), applies it to a fresh embedded store
(or KBCTL_DATABASE_URL) with the real local model, and prints wall time and embedding counts of each
apply and their ratios; then the same distinct texts embedded by fastembed alone (the same model object), in
document order and shortest first at each batch size: the floor a first apply is measured against, and the
measurement behind the local model's batch size.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from pathlib import Path

from kbctl.chunking import chunk_document
from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings
from kbctl.embedding.local import BATCH_SIZE as LOCAL_BATCH
from kbctl.embedding.local import LocalEmbedder
from kbctl.manifest import parse_manifests
from kbctl.store.embedded import stop_server

WORDS = [
    "client",
    "engagement",
    "invoice",
    "retention",
    "policy",
    "refund",
    "deposit",
    "contract",
    "notice",
    "breach",
    "access",
    "audit",
    "record",
    "consultant",
    "partner",
    "report",
    "schedule",
    "deadline",
    "review",
    "approval",
    "escalation",
    "complaint",
    "service",
    "level",
    "response",
    "confidential",
    "data",
    "backup",
    "encryption",
    "vendor",
    "payment",
    "term",
    "penalty",
    "renewal",
    "termination",
    "scope",
    "change",
    "request",
    "project",
    "milestone",
    "budget",
    "estimate",
    "timesheet",
    "expense",
    "travel",
    "training",
    "onboarding",
    "offboarding",
]


def sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(8, 20))]
    return " ".join(words).capitalize() + "."


def source_text(rng: random.Random, idx: int) -> str:
    parts = [f"# Policy {idx}"]
    for section in range(rng.randint(2, 3)):
        parts.append(f"## Section {section + 1}")
        for _ in range(rng.randint(2, 4)):
            parts.append(" ".join(sentence(rng) for _ in range(rng.randint(2, 5))))
    return "\n\n".join(parts) + "\n"


def manifests(texts: dict[tuple[int, int], str], kbs: int) -> str:
    docs = []
    for k in range(kbs):
        sources = []
        for (kb, s), text in sorted(texts.items()):
            if kb != k:
                continue
            body = "\n".join("        " + line for line in text.splitlines())
            sources.append(f"    - name: doc-{s:03d}\n      text: |\n{body}\n")
        docs.append(
            f"apiVersion: kbctl.dev/v1alpha1\nkind: KnowledgeBase\nmetadata:\n  name: bench-{k}\n"
            f"spec:\n  sources:\n{''.join(sources)}"
        )
    return "---\n".join(docs)


def distinct_texts(texts: dict[tuple[int, int], str]) -> list[str]:
    """Every distinct text a first apply of `texts` sends to the model (chunked as kbctl chunks inline Markdown)."""
    unique: dict[str, None] = {}
    for _, text in sorted(texts.items()):
        for chunk in chunk_document(text, max_chars=1200, overlap_chars=150, markdown=True):
            unique.setdefault(chunk.embed_text)
    return list(unique)


def embed_directly(
    store: KnowledgeBaseStore, texts: dict[tuple[int, int], str], batch_sizes: list[int]
) -> tuple[float, dict[int, float], int]:
    """(seconds in document order at kbctl's batch size, {batch size: seconds shortest first}, texts) of
    embedding, with fastembed alone, every distinct text the first apply embedded: what padding costs when
    batches mix lengths, and what the batch size costs on this machine, side by side."""
    embedder = store.embedder("local/all-MiniLM-L6-v2")
    assert isinstance(embedder, LocalEmbedder)
    unique = distinct_texts(texts)
    model = embedder._embedding_model()  # the fastembed TextEmbedding kbctl loaded

    def seconds(batch: list[str], size: int) -> float:
        start = time.perf_counter()
        for _ in model.embed(batch, batch_size=size):
            pass
        return time.perf_counter() - start

    in_order = seconds(list(unique), LOCAL_BATCH)
    shortest_first = sorted(unique, key=len)
    return in_order, {size: seconds(shortest_first, size) for size in batch_sizes}, len(unique)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sources", type=int, default=200)
    parser.add_argument("--kbs", type=int, default=4)
    parser.add_argument("--changed", type=float, default=0.05)
    parser.add_argument(
        "--batch-sizes", default="8,16,32,64", help="batch sizes of the direct, shortest-first embedding runs"
    )
    args = parser.parse_args()

    rng = random.Random(42)
    texts = {(i % args.kbs, i): source_text(rng, i) for i in range(args.sources)}
    first_texts = dict(texts)
    home = Path(tempfile.mkdtemp(prefix="kbctl-bench-"))
    settings = Settings.from_env(home=home)
    runs: list[tuple[str, float, int, int]] = []
    try:
        with KnowledgeBaseStore(settings=settings) as store:

            def run(label: str) -> None:
                docs = parse_manifests(manifests(texts, args.kbs), "bench.yaml")
                start = time.perf_counter()
                report = store.apply(docs)
                elapsed = time.perf_counter() - start
                chunks = sum(s.chunks for r in report.results for s in r.sources)
                runs.append((label, elapsed, report.embedded, chunks))

            run("first apply")
            run("no-op re-apply")
            changed = rng.sample(sorted(texts), max(1, round(args.sources * args.changed)))
            for key in changed:  # edit one paragraph's worth: append a sentence to the text
                texts[key] = texts[key] + "\n" + sentence(rng) + "\n"
            run(f"re-apply, {len(changed)} sources changed")
            total_chunks = store.db.counts()["chunks"]
            direct = embed_directly(store, first_texts, [int(n) for n in args.batch_sizes.split(",")])
    finally:
        if not settings.database_url:
            stop_server(settings.pgdata)

    print(
        f"corpus: {args.sources} inline markdown sources in {args.kbs} knowledge bases, "
        f"{total_chunks} stored chunks, model local/all-MiniLM-L6-v2, {os.cpu_count()} cores"
    )
    print(f"{'run':<34}{'wall s':>9}{'embedded':>10}{'chunks':>8}")
    for label, elapsed, embedded, chunks in runs:
        print(f"{label:<34}{elapsed:>9.2f}{embedded:>10}{chunks:>8}")
    first, noop, change = runs
    in_order, by_size, count = direct
    print(
        f"the same {count} texts embedded by fastembed directly (the same model object): "
        f"{in_order:.2f} s in document order in batches of {LOCAL_BATCH} (kbctl's); shortest first:"
    )
    for size, elapsed in by_size.items():
        mark = "  <- kbctl's batch size" if size == LOCAL_BATCH else ""
        print(f"  batches of {size:>3}: {elapsed:>7.2f} s ({elapsed / in_order:.3f}x of document order){mark}")
    if LOCAL_BATCH in by_size:
        floor = by_size[LOCAL_BATCH]
        print(
            f"first apply / direct embedding: {first[1] / in_order:.3f}x of document order, "
            f"{first[1] / floor:.3f}x of shortest first at kbctl's batch size"
        )
    print(f"no-op / first:   time {noop[1] / first[1]:.3f}x, embeddings {noop[2]}/{first[2]}")
    print(
        f"change / first:  time {change[1] / first[1]:.3f}x, embeddings {change[2]}/{first[2]} "
        f"= {change[2] / first[2]:.3f}x"
    )


if __name__ == "__main__":
    main()
