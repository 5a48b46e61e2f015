"""The test cross-encoder (tests/crossencoder.py) loads and runs through fastembed's real TextCrossEncoder."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from fastembed.common.model_description import ModelSource
from fastembed.rerank.cross_encoder import TextCrossEncoder

from tests.support.crossencoder import build_cross_encoder

NAME = "kbctl-test/fixture-cross-encoder"
QUERY = "How do I store vectors in PostgreSQL?"
DOCUMENTS = [
    "The recipe needs two eggs, flour and a pinch of salt.",
    "pgvector adds a vector column type and similarity search to PostgreSQL.",
    "Football is played by two teams of eleven players.",
]


def test_built_folder_loads_and_reranks_deterministically(tmp_path: Path) -> None:
    import onnxruntime

    folder = build_cross_encoder(tmp_path / "cross-encoder")
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json",
        "model.onnx",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    session = onnxruntime.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    assert {i.name for i in session.get_inputs()} == {"input_ids", "attention_mask", "token_type_ids"}
    assert [(o.name, o.shape) for o in session.get_outputs()] == [("logits", ["batch", 1])]

    if NAME not in {m["model"] for m in TextCrossEncoder.list_supported_models()}:
        TextCrossEncoder.add_custom_model(NAME, sources=ModelSource(hf=NAME), model_file="model.onnx")
    encoder = TextCrossEncoder(NAME, specific_model_path=str(folder), cache_dir=str(tmp_path / "cache"))

    first = list(encoder.rerank(QUERY, DOCUMENTS))
    second = list(encoder.rerank(QUERY, DOCUMENTS, batch_size=1))
    assert len(first) == 3
    assert all(isinstance(s, float) and math.isfinite(s) for s in first)
    # A document's score does not depend on its batch. Padding in a batch changes float32 summation order, so
    # the last bits may differ between batch sizes and between CPUs (seen: 8.0676756 vs 8.0676765); a real
    # batch dependence (a mask ignored, a pad token scored) moves scores by far more than 1e-5.
    assert first == pytest.approx(second, rel=1e-5, abs=1e-5)
    assert len(set(first)) == 3
    # The default head scores query/document similarity, so the pgvector sentence wins here.
    assert max(range(3), key=first.__getitem__) == 1
    assert list(encoder.rerank_pairs([(QUERY, DOCUMENTS[1])])) == pytest.approx([first[1]], rel=1e-5, abs=1e-5)
    assert not list((tmp_path / "cache").iterdir())  # nothing was downloaded
