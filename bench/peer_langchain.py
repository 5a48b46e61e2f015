"""LangChain's indexing API on bench/peer.py's corpus: run by bench/peer.py with the peer's own interpreter.

    PEER_PYTHON bench/peer_langchain.py CORPUS.json DATABASE_URL MODEL_DIR

It imports only LangChain, fastembed and psycopg (never kbctl), and does what LangChain's documentation shows
for an incremental index into PostgreSQL: RecursiveCharacterTextSplitter (1,200 characters, 150 overlap, the
chunk sizes kbctl uses), `index(..., cleanup="incremental", source_id_key="source")` with an SQLRecordManager
and a PGVector store per knowledge base, and the same all-MiniLM-L6-v2 int8 files through fastembed, wrapped
as LangChain `Embeddings` the way langchain-community's FastEmbedEmbeddings does (batch size 256, its
default). It indexes the corpus twice (first run, then unchanged) and prints one JSON line of timings.
"""

from __future__ import annotations

import json
import sys
import time

START = time.perf_counter()

from fastembed_model import load  # noqa: E402  (bench/fastembed_model.py: the same loader as "embedding alone")
from langchain_classic.indexes import SQLRecordManager  # noqa: E402
from langchain_core.documents import Document  # noqa: E402
from langchain_core.embeddings import Embeddings  # noqa: E402
from langchain_core.indexing import index  # noqa: E402
from langchain_postgres import PGVector  # noqa: E402
from langchain_text_splitters import RecursiveCharacterTextSplitter  # noqa: E402

BATCH_SIZE = 256  # langchain-community FastEmbedEmbeddings' default


class FastEmbedModel(Embeddings):
    """The model files kbctl loads, through fastembed, as a LangChain embeddings object."""

    def __init__(self, folder: str) -> None:
        self.model = load(folder)
        self.texts = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.texts += len(texts)
        return [v.tolist() for v in self.model.embed(texts, batch_size=BATCH_SIZE)]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def main() -> None:
    corpus_file, url, folder = sys.argv[1:4]
    with open(corpus_file, encoding="utf-8") as fh:
        corpus: list[dict[str, str]] = json.load(fh)
    imported = time.perf_counter()
    embeddings = FastEmbedModel(folder)
    loaded = time.perf_counter()
    splitter = RecursiveCharacterTextSplitter(chunk_size=1200, chunk_overlap=150)
    kbs = sorted({d["kb"] for d in corpus})
    stores = {}
    for kb in kbs:
        store = PGVector(embeddings=embeddings, collection_name=kb, connection=url, use_jsonb=True)
        manager = SQLRecordManager(f"pgvector/{kb}", db_url=url)
        manager.create_schema()
        stores[kb] = (store, manager)
    runs = []
    chunks = 0
    for label in ("first", "unchanged"):
        begin = time.perf_counter()
        before = embeddings.texts
        added = skipped = 0
        for kb in kbs:
            docs = [Document(d["text"], metadata={"source": d["source"]}) for d in corpus if d["kb"] == kb]
            pieces = splitter.split_documents(docs)
            if label == "first":
                chunks += len(pieces)
            store, manager = stores[kb]
            result = index(pieces, manager, store, cleanup="incremental", source_id_key="source")
            added += result["num_added"]
            skipped += result["num_skipped"]
        runs.append(
            {
                "run": label,
                "seconds": time.perf_counter() - begin,
                "embedded": embeddings.texts - before,
                "added": added,
                "skipped": skipped,
            }
        )
    print(
        json.dumps(
            {
                "imports": imported - START,
                "model_load": loaded - imported,
                "chunks": chunks,
                "runs": runs,
            }
        )
    )


if __name__ == "__main__":
    main()
