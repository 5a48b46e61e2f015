"""Every default and tuning constant lives in kbctl/defaults.py: documented there, used from there, and the table of
docs/manifest.md is generated from it."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from kbctl import defaults
from kbctl.manifest import Chunking, Embedding, Rerank, Retrieval

DOC = Path(__file__).resolve().parent.parent / "docs" / "manifest.md"


def test_docs_table_is_generated_from_the_module() -> None:
    """docs/manifest.md's "Defaults and tuning constants" table is what kbctl.defaults generates (regenerate:
    python -m kbctl.defaults --write docs/manifest.md)."""
    text = DOC.read_text()
    start = text.index(defaults.BEGIN_TABLE)
    end = text.index(defaults.END_TABLE) + len(defaults.END_TABLE) + 1
    assert text[start:end] == defaults.markdown()


def test_every_constant_is_documented() -> None:
    """Each UPPER_CASE name of kbctl.defaults is annotated Final and has a docstring, so it is a row of the table."""
    names = {n for n in vars(defaults) if n.isupper() and n not in ("BEGIN_TABLE", "END_TABLE")}
    rows = [name for _, constants in defaults.documented() for name, _, doc in constants if doc]
    assert sorted(rows) == sorted(names)


def test_the_manifest_model_takes_its_defaults_from_the_module() -> None:
    retrieval, chunking = Retrieval(), Chunking()
    assert (retrieval.top_k, retrieval.max_context_tokens, retrieval.mode, retrieval.language) == (
        defaults.TOP_K,
        defaults.MAX_CONTEXT_TOKENS,
        defaults.MODE,
        defaults.LANGUAGE,
    )
    assert (chunking.max_chars, chunking.overlap_chars) == (defaults.CHUNK_MAX_CHARS, defaults.CHUNK_OVERLAP_CHARS)
    assert Rerank(model="local/x").candidates == defaults.RERANK_CANDIDATES
    assert Embedding().model == defaults.DEFAULT_MODEL


# Where each constant is used, under the name it is read by there (tests and bench/ patch or import these).
USED_AS = {
    "kbctl.query.plan": {n: n for n in ("CANDIDATES", "FUSION", "KEYWORD_WEIGHT", "EF_SEARCH")},
    "kbctl.query.stages": {n: n for n in ("FUSION", "RRF_K", "AGREEMENT_MARGIN", "DUPLICATE_COSINE", "FIRST_READ")},
    "kbctl.store.search": {n: n for n in ("EF_SEARCH", "EXACT_SCAN_MAX", "INDEX_MIN_VECTORS", "MAX_OVERFETCH")},
    "kbctl.store.bm25": {"K1": "BM25_K1", "B": "BM25_B", "MATCH_POSTINGS": "MATCH_POSTINGS"},
    "kbctl.embedding.local": {"DEFAULT_THRESHOLD": "DEFAULT_THRESHOLD", "BATCH_SIZE": "LOCAL_BATCH_SIZE"},
    "kbctl.engine.ingest": {"EMBED_BATCH": "EMBED_BATCH"},
    "kbctl.engine.apply": {n: n for n in ("ANALYZE_AFTER_CHUNKS", "ANALYZE_CHUNK_SHARE")},
    "kbctl.engine.controller": {n: n for n in ("LEASE_SECONDS", "STALL_SECONDS")},
    "kbctl.engine.wait": {"HEARTBEAT_TTL_SECONDS": "HEARTBEAT_TTL_SECONDS"},
    "kbctl.eval.beir": {"DEFAULT_SPLIT": "BEIR_SPLIT", "RANKING_TOP_K": "RANKING_TOP_K"},
}


def test_the_modules_that_use_a_constant_read_it_from_the_module() -> None:
    for module, names in USED_AS.items():
        loaded = importlib.import_module(module)
        for name, constant in names.items():
            assert getattr(loaded, name) is getattr(defaults, constant), f"{module}.{name}"
    from kbctl.embedding.local import LOCAL_MODELS, calibrated_threshold

    assert LOCAL_MODELS["bge-small-en-v1.5"].threshold == defaults.BGE_SMALL_THRESHOLD
    assert calibrated_threshold("openai/text-embedding-3-small") == defaults.DEFAULT_THRESHOLD


def _written(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def test_the_field_tables_of_the_manifest_reference_state_the_defaults() -> None:
    """A constant documented as the default of a manifest field ("spec.retrieval.topK: ...") is the default its row
    in docs/manifest.md shows (for a field left unset, the value its row names)."""
    text = DOC.read_text()
    checked = 0
    for _, constants in defaults.documented():
        for name, value, doc in constants:
            field = re.match(r"(spec(?:\.\w+)+)([:,])", doc)
            if field is None:
                continue
            section, _, key = field[1].rpartition(".")
            table = re.search(rf"^#+ {re.escape(section)}\n(.*?)(?=^#)", text, re.MULTILINE | re.DOTALL)
            assert table is not None, f"{name}: no section {section} in docs/manifest.md"
            row = next(line for line in table[1].splitlines() if line.startswith(f"| `{key}` |"))
            if field[2] == ",":  # "spec.retrieval.similarityThreshold, unset, for ...": the row names the value
                assert re.search(rf"(?<![\d.]){re.escape(_written(value))}(?![\d])", row), (name, row)
            else:
                assert f"`{_written(value)}`" in re.split(r"(?<!\\)\|", row)[3], (name, row)  # the default column
            checked += 1
    assert checked >= 12
