"""A chunk longer than the local model reads is counted and reported, not cut silently."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from kbctl.chunking import chunk_document
from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.engine.ingest import Chunked, TokenCounts
from kbctl.manifest import parse_manifests
from tests.support.manifests import knowledge_base, text_source

# One paragraph of ~1,100 characters that the tokenizer splits finely (codes, digits): well over 254 tokens.
DENSE = " ".join(f"K{n}x{n * 7 % 97}q" for n in range(100))
PLAIN = "Invoices are kept for ten years, then destroyed."


def test_apply_counts_chunks_over_the_model_window(store: KnowledgeBaseStore) -> None:
    kb = knowledge_base("codes", text_source("dense", DENSE), text_source("plain", PLAIN))
    [result] = store.apply(parse_manifests(kb, "kb.yaml")).results
    by_name = {s.name: s for s in result.sources}
    embedder = store.embedder("local/all-MiniLM-L6-v2")
    [size] = embedder.count_tokens([DENSE])
    assert size > 254 and len(DENSE) <= 1200
    assert by_name["dense"].truncated == 1 and by_name["plain"].truncated == 0


def test_apply_warns_of_truncated_chunks(cli: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "kb.yaml"
    path.write_text(knowledge_base("codes", text_source("dense", DENSE), text_source("plain", PLAIN)))
    out = cli.invoke(app, ["apply", "-f", str(path), "--wait"])
    assert out.exit_code == 0, out.output
    [dense] = [line for line in out.output.splitlines() if "source dense" in line]
    assert "warning: 1 chunk longer than the model reads, its end is not embedded" in dense
    [plain] = [line for line in out.output.splitlines() if "source plain" in line]
    assert "warning" not in plain


def test_diff_warns_of_truncated_chunks(cli: CliRunner, store: KnowledgeBaseStore, tmp_path: Path) -> None:
    """diff counts, before anything is embedded, the new chunks the model would cut."""
    path = tmp_path / "kb.yaml"
    path.write_text(knowledge_base("codes", text_source("dense", DENSE), text_source("plain", PLAIN)))
    out = cli.invoke(app, ["diff", "-f", str(path)])
    assert out.exit_code == 1, out.output  # differences: a knowledge base to create
    [dense] = [line for line in out.output.splitlines() if "source dense" in line]
    assert dense.endswith("warning: 1 chunk longer than the model reads"), dense
    [plain] = [line for line in out.output.splitlines() if "source plain" in line]
    assert "warning" not in plain
    [kb] = store.diff(parse_manifests(path.read_text(), str(path))).results
    assert {s.name: s.truncated for s in kb.sources} == {"dense": 1, "plain": 0}


def test_the_local_tokenizer_counts_a_chunk_as_its_heading_plus_its_text(store: KnowledgeBaseStore) -> None:
    """Ingest counts each text and heading path once and bills a chunk their sum: exact for the local model."""
    text = (
        "# Données & Retention (v2.1)\n\nInvoices are kept for ten years—then destroyed. Café receipts: 5 years.\n\n"
        "## Refunds / G-CSF-7\n\nA refund of 50% (max. €200) needs the client's approval, see §4.2.\n\n"
        "### Codes\n\n" + DENSE + "\n\n## 東京 office\n\nKeys are returned on the last day.\n"
    )
    chunks = chunk_document(text, max_chars=400, overlap_chars=50, markdown=True)
    assert sum(1 for c in chunks if c.heading_path) >= 3
    embedder = store.embedder("local/all-MiniLM-L6-v2")
    sizes = TokenCounts.of(embedder, [Chunked(tuple(chunks), tuple(b"" for _ in chunks))])
    assert [sizes.embedded(c) for c in chunks] == embedder.count_tokens([c.embed_text for c in chunks])
    assert [sizes.text(c) for c in chunks] == embedder.count_tokens([c.text for c in chunks])
