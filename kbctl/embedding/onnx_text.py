"""A local text-embedding model run directly by ONNX Runtime from its model.onnx and tokenizer.json.

This is what fastembed's TextEmbedding does for a BERT-type model, step for step (truncation to the model's window,
padding to a batch's longest text, mean or [CLS] pooling, L2 normalization, the same session options), so the
vectors are the same; kbctl runs it itself for the model files it has on disk because importing fastembed costs
a third of a `kbctl query`. Given a cache folder, the first load saves the graph optimized to ONNX Runtime's
portable level (EXTENDED) with its weights beside it, keyed by the model file and ONNX Runtime's version, and
every load opens that copy (the same vectors to the bit: tests/test_local_models.py); one that fails to load is
rebuilt. fastembed still downloads a model where a model hub is reachable (kbctl.embedding.local).

Why, and the figures: docs/architecture.md#embedding, bench/README.md (bench/startup.py).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any, Literal

import numpy as np

from kbctl.errors import EmbeddingError

__all__ = ["OnnxTextModel"]

_OPTIMIZED = "model.onnx"  # the optimized graph, in its cache folder
_WEIGHTS = "weights.bin"  # its initializers, beside it


class OnnxTextModel:
    """One ONNX Runtime session and its tokenizer; `embed` returns one L2-normalized float32 vector per text."""

    def __init__(
        self,
        onnx: Path,
        tokenizer: Path,
        *,
        max_tokens: int,
        pooling: Literal["MEAN", "CLS"],
        threads: int | None,
        cache: Path | None = None,
        pad_token: str = "[PAD]",
    ) -> None:
        from tokenizers import Tokenizer

        self.pooling = pooling
        tok = Tokenizer.from_file(str(tokenizer))
        tok.enable_truncation(max_length=max_tokens, direction="right")
        pad_id = tok.token_to_id(pad_token)
        if pad_id is None:
            raise EmbeddingError(f"{tokenizer}: no id for the pad token {pad_token!r}")
        tok.enable_padding(pad_id=pad_id, pad_token=pad_token, direction="right")
        self.tokenizer = tok
        self.session: Any
        self.session, self.source = _session(onnx, threads, cache)  # source: the file the session was opened from
        self._inputs = {node.name for node in self.session.get_inputs()}

    def embed(self, texts: Sequence[str], batch_size: int) -> list[np.ndarray]:
        """Embed `texts` in batches of `batch_size`, in order."""
        vectors: list[np.ndarray] = []
        for start in range(0, len(texts), batch_size):
            vectors.extend(self._batch(list(texts[start : start + batch_size])))
        return vectors

    def _batch(self, texts: list[str]) -> np.ndarray:
        encoded = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encoded], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
        feed: dict[str, np.ndarray] = {"input_ids": ids}
        if "attention_mask" in self._inputs:
            feed["attention_mask"] = mask
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        output: np.ndarray = self.session.run(None, feed)[0]
        pooled: np.ndarray
        if self.pooling == "CLS":
            pooled = output[:, 0]
        else:
            summed = np.sum(output, axis=1, where=mask[:, :, np.newaxis].astype(bool), dtype=np.float64)
            pooled = summed / np.maximum(np.sum(mask, axis=1, keepdims=True), 1e-9)
        norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        vectors: np.ndarray = (pooled / norms).astype(np.float32, copy=False)
        return vectors


def _options(threads: int | None) -> Any:
    """fastembed's session options: every graph optimization, the configured threads."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads is not None:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = threads
    return options


def _open(path: Path, threads: int | None) -> Any:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), sess_options=_options(threads), providers=["CPUExecutionProvider"])


def _session(onnx: Path, threads: int | None, cache: Path | None) -> tuple[Any, Path]:
    """A session of `onnx`, opened from its optimized copy in `cache` (made first if missing or unreadable); from
    `onnx` itself without a cache, or when the copy cannot be written (a read-only home)."""
    if cache is None:
        return _open(onnx, threads), onnx
    import onnxruntime as ort

    stat = onnx.stat()
    key = hashlib.sha256(
        f"{onnx.resolve()}\t{stat.st_size}\t{stat.st_mtime_ns}\t{ort.__version__}".encode()
    ).hexdigest()
    folder = cache / f"optimized-{key[:16]}"
    if (folder / _OPTIMIZED).is_file():
        try:
            return _open(folder / _OPTIMIZED, threads), folder / _OPTIMIZED
        except Exception:  # a copy cut short or damaged: made again below
            shutil.rmtree(folder, ignore_errors=True)
    try:
        _save_optimized(onnx, cache, folder)
        return _open(folder / _OPTIMIZED, threads), folder / _OPTIMIZED
    except Exception:  # no copy (a read-only home, a full disk): the model as it is
        return _open(onnx, threads), onnx


def _save_optimized(onnx: Path, cache: Path, folder: Path) -> None:
    """Write the optimized copy of `onnx` into a private folder and move it into place whole; copies made for another
    model file or ONNX Runtime version are removed."""
    import onnxruntime as ort

    cache.mkdir(parents=True, exist_ok=True)
    work = cache / f".{folder.name}.{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        options.optimized_model_filepath = str(work / _OPTIMIZED)
        options.add_session_config_entry("session.optimized_model_external_initializers_file_name", _WEIGHTS)
        options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
        ort.InferenceSession(str(onnx), sess_options=options, providers=["CPUExecutionProvider"])
        try:
            work.rename(folder)
        except OSError:  # another process put its copy there first: the same bytes
            if not (folder / _OPTIMIZED).is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for old in cache.glob("optimized-*"):
        if old != folder:
            with suppress(OSError):
                shutil.rmtree(old)
