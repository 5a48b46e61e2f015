"""The local model's files through fastembed alone, without kbctl: what bench/peer.py's "embedding alone" run and
bench/peer_langchain.py (in LangChain's own environment) both load, from the folder kbctl prepared."""

from __future__ import annotations

from fastembed import TextEmbedding
from fastembed.common.model_description import ModelSource, PoolingType

NAME = "bench/all-MiniLM-L6-v2-int8"


def load(folder: str) -> TextEmbedding:
    """all-MiniLM-L6-v2 int8 from `folder` (model.onnx, tokenizer.json and its facts): mean pooling, normalized."""
    if NAME not in {m["model"] for m in TextEmbedding.list_supported_models()}:
        TextEmbedding.add_custom_model(
            NAME,
            pooling=PoolingType.MEAN,
            normalization=True,
            sources=ModelSource(hf="sentence-transformers/all-MiniLM-L6-v2"),
            dim=384,
            model_file="model.onnx",
        )
    return TextEmbedding(NAME, specific_model_path=folder)
