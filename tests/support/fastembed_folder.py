"""A folder fastembed loads as a custom model: model.onnx and tokenizer.json beside the small JSON facts of a BERT
tokenizer that fastembed reads (kbctl itself runs its models without fastembed: kbctl.embedding.onnx_text)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

__all__ = ["BERT_CONFIG", "lay_out"]

BERT_CONFIG: dict[str, Any] = {"model_type": "bert", "pad_token_id": 0, "max_position_embeddings": 512}
_TOKENIZER_CONFIG = {
    "do_lower_case": True,
    "pad_token": "[PAD]",
    "cls_token": "[CLS]",
    "sep_token": "[SEP]",
    "unk_token": "[UNK]",
    "mask_token": "[MASK]",
    "tokenizer_class": "BertTokenizer",
}
_SPECIAL_TOKENS = {
    "unk_token": "[UNK]",
    "sep_token": "[SEP]",
    "pad_token": "[PAD]",
    "cls_token": "[CLS]",
    "mask_token": "[MASK]",
}


def lay_out(
    folder: Path, tokenizer: Path, *, max_tokens: int, onnx: Path | None = None, config: dict[str, Any] = BERT_CONFIG
) -> Path:
    """Write tokenizer.json, the facts (the window: `max_tokens`) and, given `onnx`, model.onnx into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    if onnx is not None:
        shutil.copyfile(onnx, folder / "model.onnx")
    shutil.copyfile(tokenizer, folder / "tokenizer.json")
    for name, data in (
        ("config.json", config),
        ("tokenizer_config.json", {**_TOKENIZER_CONFIG, "model_max_length": max_tokens}),
        ("special_tokens_map.json", _SPECIAL_TOKENS),
    ):
        (folder / name).write_text(json.dumps(data, indent=2) + "\n")
    return folder
