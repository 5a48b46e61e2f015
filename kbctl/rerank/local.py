"""A local cross-encoder reranker run by fastembed (ONNX Runtime), from model files on this machine.

`local/NAME` in a manifest names a folder of the kbctl configuration (`rerank.localModels: {NAME: DIR}`)
holding an ONNX cross-encoder as exported for Hugging Face: `model.onnx` (or `onnx/model.onnx`) with a
single (batch, 1) logits output, `tokenizer.json` and `tokenizer_config.json` (with `model_max_length`),
and usually `special_tokens_map.json` and `config.json`. A NAME that is
not configured is tried as one of fastembed's own cross-encoders (e.g. Xenova/ms-marco-MiniLM-L-6-v2),
which fastembed downloads where a model hub is reachable.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kbctl.config import Settings
from kbctl.errors import RerankError

__all__ = ["LocalReranker"]

_REQUIRED = ("tokenizer.json", "tokenizer_config.json")


def _model_file(folder: Path) -> str:
    """The ONNX file of a model folder, relative to it; RerankError naming what is missing."""
    missing = [name for name in _REQUIRED if not (folder / name).is_file()]
    onnx = next((name for name in ("model.onnx", "onnx/model.onnx") if (folder / name).is_file()), None)
    if onnx is None:
        missing.insert(0, "model.onnx")
    if missing or onnx is None:
        raise RerankError(f"cross-encoder folder {folder} lacks {', '.join(missing)}")
    return onnx


class LocalReranker:
    """A cross-encoder through fastembed's TextCrossEncoder; scores are its logits (higher is more relevant).

    Loading is lazy: the model loads on the first rerank, so a knowledge base that names it costs nothing
    until a query reranks.
    """

    def __init__(self, name: str, settings: Settings) -> None:
        self.name = name
        self.model_id = f"local/{name}"
        self._settings = settings
        self._model: Any = None

    def _load(self) -> Any:
        from fastembed.common.model_description import ModelSource
        from fastembed.rerank.cross_encoder import TextCrossEncoder

        folder = self._settings.config.rerank.local_models.get(self.name)
        if folder is None:
            try:
                return TextCrossEncoder(self.name, cache_dir=str(self._settings.models_dir / "hub"))
            except Exception as exc:
                raise RerankError(
                    f"local cross-encoder '{self.name}' is not installed: name a folder with its model files "
                    f"under rerank.localModels in {self._settings.config_file}"
                ) from exc
        folder = folder.expanduser()
        model_file = _model_file(folder)
        custom = f"kbctl-local/{self.name}"
        if custom.lower() not in {m["model"].lower() for m in TextCrossEncoder.list_supported_models()}:
            TextCrossEncoder.add_custom_model(custom, sources=ModelSource(hf=custom), model_file=model_file)
        try:
            return TextCrossEncoder(
                custom, specific_model_path=str(folder), cache_dir=str(self._settings.models_dir / "hub")
            )
        except Exception as exc:
            raise RerankError(f"cannot load the cross-encoder from {folder}: {exc}") from exc

    def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        """One score per document, in input order."""
        items = list(documents)
        if not items:
            return []
        if self._model is None:
            self._model = self._load()
        try:
            scores = [float(s) for s in self._model.rerank(query, items)]
        except Exception as exc:
            raise RerankError(f"local rerank with {self.model_id} failed: {exc}") from exc
        if len(scores) != len(items) or not all(math.isfinite(s) for s in scores):
            raise RerankError(f"local rerank with {self.model_id} returned {len(scores)} scores for {len(items)}")
        return scores
