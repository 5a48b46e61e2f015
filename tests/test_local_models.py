"""The local models: bge-small-en-v1.5 beside the default all-MiniLM-L6-v2, from their PyPI packages, offline."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings
from kbctl.defaults import LOCAL_BATCH_SIZE as BATCH_SIZE
from kbctl.embedding import preload
from kbctl.embedding.local import BGE_SMALL, LOCAL_MODELS, MINILM, LocalEmbedder, _verify
from kbctl.embedding.onnx_text import OnnxTextModel
from kbctl.errors import EmbeddingError
from kbctl.manifest import parse_manifests
from tests.support.fastembed_folder import lay_out

BGE = "bge-small-en-v1.5"
QUESTION = "how do I cancel the contract?"
CLAUSE = "The client may terminate this agreement with 30 days written notice."
UNRELATED = "The office kitchen is cleaned every Friday afternoon by the facilities team."


@pytest.fixture(scope="module")
def bge(tmp_path_factory: pytest.TempPathFactory) -> LocalEmbedder:
    """bge-small-en-v1.5 loaded from the files of its package (the `bge-small` extra)."""
    return LocalEmbedder(BGE, Settings(home=tmp_path_factory.mktemp("home")))


def test_bge_ranks_the_clause_first_and_embeds_a_question_with_its_instruction(bge: LocalEmbedder) -> None:
    """A question gets bge's retrieval instruction (a document does not) and finds the clause that answers it."""
    [question] = bge.embed([QUESTION], "query")
    [as_document] = bge.embed([QUESTION])
    [with_instruction] = bge.embed([BGE_SMALL.query_prefix + QUESTION])
    clause, unrelated = bge.embed([CLAUSE, UNRELATED])
    assert bge.model_id == "local/bge-small-en-v1.5" and question.shape == (384,) and question.dtype == np.float32
    assert abs(float(np.linalg.norm(question)) - 1.0) < 1e-4
    assert float(question @ with_instruction) > 0.9999  # the same text reached the model
    assert float(question @ as_document) < 0.99  # the instruction changes the question's vector
    assert float(question @ clause) > float(question @ unrelated) + 0.15


def test_bge_reads_512_tokens_with_its_own_tokenizer(bge: LocalEmbedder) -> None:
    """bge's window is 512 tokens (510 of text); tokens are counted by its tokenizer, special tokens aside."""
    assert bge.window_tokens == 510
    assert LocalEmbedder("all-MiniLM-L6-v2", bge._settings).window_tokens == 254
    [short, long] = bge.count_tokens(["terminate the agreement", "word " * 600])
    assert short == 3 and long == 600  # counted whole: the cut is reported by ingest, not hidden here


def test_an_unknown_local_model_names_the_ones_there_are(tmp_path: Path) -> None:
    """A misspelt local model is one line listing the local models."""
    with pytest.raises(EmbeddingError) as raised:
        LocalEmbedder("bge-small", Settings(home=tmp_path))
    assert str(raised.value) == f"unknown local model 'bge-small': the local provider has {', '.join(LOCAL_MODELS)}"
    assert list(LOCAL_MODELS) == ["all-MiniLM-L6-v2", BGE]


def test_a_model_file_that_is_not_bge_is_refused(tmp_path: Path) -> None:
    """The packaged file is checked against bge's sha256 before anything is loaded, and no verdict is kept."""
    onnx = tmp_path / "model.onnx"
    onnx.write_bytes(b"not a model")
    with pytest.raises(EmbeddingError, match=r"sha256 does not match the expected bge-small-en-v1.5 int8 model"):
        _verify(onnx, BGE_SMALL, tmp_path / "stamps")
    assert not (tmp_path / "stamps").exists()


def test_a_verified_model_file_is_checked_again_when_it_changes(tmp_path: Path) -> None:
    """A verdict is kept for the file as it was (path, size, modification time): the same file is not hashed again
    (its stamp names it), and a file replaced at the same path is checked again and refused."""
    packaged = BGE_SMALL.packaged()
    assert packaged is not None
    onnx = tmp_path / "model.onnx"
    shutil.copyfile(packaged[0], onnx)
    stamps = tmp_path / "stamps"
    _verify(onnx, BGE_SMALL, stamps)
    stamp = stamps / "bge-small-en-v1.5.verified"
    assert str(onnx) in stamp.read_text() and BGE_SMALL.sha256 in stamp.read_text()
    _verify(onnx, BGE_SMALL, stamps)  # kept: passes again
    data = bytearray(onnx.read_bytes())
    data[-1] ^= 0xFF  # one byte changed, same size
    onnx.write_bytes(bytes(data))
    os.utime(onnx, ns=(1, 1))  # and another modification time
    with pytest.raises(EmbeddingError, match="sha256 does not match"):
        _verify(onnx, BGE_SMALL, stamps)


@pytest.mark.parametrize("name", list(LOCAL_MODELS))
def test_kbctls_onnx_runner_embeds_as_fastembed_does(name: str, tmp_path: Path) -> None:
    """kbctl runs its local models' ONNX files itself (no fastembed import on a query); the vectors are those
    fastembed's TextEmbedding gives for the same files: short and long texts (cut at the model's window), batches
    of mixed lengths (padding), accents and scripts, an empty text, documents and questions."""
    from fastembed import TextEmbedding
    from fastembed.common.model_description import ModelSource, PoolingType

    model = LOCAL_MODELS[name]
    texts = [
        "how long do we keep invoices",
        "word " * 700,
        CLAUSE,
        "",
        "Ünïcödé — 東京 naïve café, 30 días",
        UNRELATED + "\n\n" + CLAUSE,
    ] * 3
    ours = LocalEmbedder(name, Settings(home=tmp_path / "home"))
    custom = f"kbctl-test/{name}"
    if custom not in {m["model"] for m in TextEmbedding.list_supported_models()}:
        TextEmbedding.add_custom_model(
            custom,
            pooling=PoolingType[model.pooling],
            normalization=True,
            sources=ModelSource(hf=model.hub_name),
            dim=384,
            model_file="model.onnx",
        )
    packaged = model.packaged()
    assert packaged is not None
    folder = lay_out(tmp_path / "fastembed", packaged[1], max_tokens=model.max_tokens, onnx=packaged[0])
    theirs = TextEmbedding(custom, specific_model_path=str(folder))
    for purpose, prefix in (("document", ""), ("query", model.query_prefix)):
        mine = ours.embed(texts, purpose)  # type: ignore[arg-type]
        expected = list(theirs.embed([prefix + t for t in texts], batch_size=BATCH_SIZE))
        assert len(mine) == len(expected) == len(texts)
        for a, b in zip(mine, expected, strict=True):
            assert a.dtype == np.float32 and a.shape == (384,)
            assert float(np.max(np.abs(a - b))) < 1e-5
    assert isinstance(ours._model, OnnxTextModel)


def test_a_model_that_fails_to_load_in_the_background_fails_the_embedding(tmp_path: Path) -> None:
    """`preload` starts loading in a thread and reports nothing; the first embedding loads again and raises."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(b"not a model")
    packaged = LOCAL_MODELS["all-MiniLM-L6-v2"].packaged()
    assert packaged is not None
    shutil.copyfile(packaged[1], folder / "tokenizer.json")
    broken = LocalEmbedder("all-MiniLM-L6-v2", Settings(home=tmp_path / "home", model_dir=folder))
    preload(broken)
    with pytest.raises(EmbeddingError, match="cannot load the local model from"):
        broken.embed(["a question"], "query")
    assert not broken.loaded


def test_a_preloaded_model_is_the_one_the_embedding_uses(tmp_path: Path) -> None:
    """The model loaded by `preload` is the one the embedding then runs, loaded once."""
    embedder = LocalEmbedder("all-MiniLM-L6-v2", Settings(home=tmp_path))
    preload(embedder)
    [vector] = embedder.embed(["how long do we keep invoices"], "query")
    loaded = embedder._model
    assert embedder.loaded and vector.shape == (384,)
    preload(embedder)  # loaded: nothing started
    embedder.embed(["again"], "query")
    assert embedder._model is loaded


def test_import_beir_with_bge_embeds_and_queries_with_it(
    cli: CliRunner, store: KnowledgeBaseStore, tmp_path: Path
) -> None:
    """`kbctl import beir --model local/bge-small-en-v1.5` stores bge vectors, and questions are embedded by bge."""
    folder = tmp_path / "tiny"
    (folder / "qrels").mkdir(parents=True)
    corpus = [
        {"_id": "terms", "title": "Termination", "text": CLAUSE},
        {"_id": "kitchen", "title": "Kitchen", "text": UNRELATED},
    ]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in corpus))
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": QUESTION}) + "\n")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tterms\t1\n")
    args = ["import", "beir", str(folder), "-n", "tiny-bge", "--model", "local/bge-small-en-v1.5"]
    result = cli.invoke(app, [*args, "--eval-out", str(tmp_path / "eval.jsonl")])
    assert result.exit_code == 0, result.output
    assert "source terms ready: 1 chunk (local/bge-small-en-v1.5)" in result.stdout
    assert store.describe("tiny-bge").model == "local/bge-small-en-v1.5"
    hits = store.query("tiny-bge", QUESTION).hits
    assert [h.source for h in hits][:1] == ["terms"]


def test_an_unset_threshold_is_the_calibrated_one_of_the_model(store: KnowledgeBaseStore) -> None:
    """Unset, similarityThreshold is the calibrated value of the model a version was embedded with. bge scores an
    unrelated question 0.38 against the clause, which the default model's 0.35 would return: at bge's 0.6 the answer
    is empty, and the question the clause answers still finds it. Set in the spec, or asked for, a threshold wins."""
    sources = f'    - {{name: terms, text: "{CLAUSE}"}}\n    - {{name: kitchen, text: "{UNRELATED}"}}\n'

    def kb(name: str, spec: str) -> str:
        head = "apiVersion: kbctl.dev/v1alpha1\nkind: KnowledgeBase\n"
        return f"{head}metadata: {{name: {name}}}\nspec:\n{spec}  sources:\n"

    text = "\n---\n".join(
        [
            kb("with-bge", "  embedding: {model: local/bge-small-en-v1.5}\n") + sources,
            kb("with-minilm", "") + sources,
            kb("bge-set", "  embedding: {model: local/bge-small-en-v1.5}\n  retrieval: {similarityThreshold: 0.3}\n")
            + sources,
        ]
    )
    store.apply(parse_manifests(text, "kb.yaml"))
    unrelated = "How much does the Acme RoboVac 3000 cost?"
    refused = store.query("with-bge", unrelated)
    # Set nowhere: the version's gate, never below the model's threshold, decides; an answer's chunks are those at
    # the answer floor, 0.2 below the model's threshold.
    assert refused.relevance_threshold is not None and refused.relevance_threshold >= 0.6 - 1e-6
    assert refused.similarity_threshold == pytest.approx(0.4) and refused.hits == []
    assert [h.source for h in store.query("with-bge", unrelated, threshold=0.35).hits] == ["terms"]
    assert [h.source for h in store.query("with-bge", QUESTION).hits] == ["terms"]
    minilm = store.query("with-minilm", unrelated)
    assert minilm.relevance_threshold is not None and minilm.relevance_threshold >= 0.35 - 1e-6
    assert minilm.similarity_threshold == pytest.approx(0.15) and minilm.hits == []
    assert store.query("bge-set", unrelated).similarity_threshold == pytest.approx(0.3)


@pytest.mark.parametrize("name", list(LOCAL_MODELS))
def test_the_optimized_copy_gives_the_vectors_of_the_model_itself(name: str, tmp_path: Path) -> None:
    """The first load saves the optimized graph in the cache and opens it; later loads open it again; a copy cut
    short is made again; where no copy can be written the model file itself is opened. Every one embeds as the
    model file opened directly does."""
    model = LOCAL_MODELS[name]
    packaged = model.packaged()
    assert packaged is not None
    onnx, tok = packaged
    texts = ["how long do we keep invoices", CLAUSE, "word " * 700]

    def runner(cache: Path | None) -> OnnxTextModel:
        return OnnxTextModel(onnx, tok, max_tokens=model.max_tokens, pooling=model.pooling, threads=1, cache=cache)

    def same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
        return all(float(np.max(np.abs(x - y))) < 1e-6 for x, y in zip(a, b, strict=True))

    direct = runner(None)
    assert direct.source == onnx
    expected = direct.embed(texts, 8)
    cache = tmp_path / "cache"
    first = runner(cache)
    [folder] = list(cache.glob("optimized-*"))
    assert first.source == folder / "model.onnx" and (folder / "weights.bin").stat().st_size > 10_000_000
    assert same(first.embed(texts, 8), expected)
    again = runner(cache)
    assert again.source == first.source and same(again.embed(texts, 8), expected)
    with (folder / "weights.bin").open("r+b") as fh:
        fh.truncate(1000)  # cut short
    mended = runner(cache)
    assert mended.source == first.source and (folder / "weights.bin").stat().st_size > 1000
    assert same(mended.embed(texts, 8), expected)
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    unwritable = runner(blocked / "cache")
    assert unwritable.source == onnx and same(unwritable.embed(texts, 8), expected)
    assert not list(tmp_path.glob("cache/.optimized-*"))  # no work folder left behind


def test_a_model_file_that_changes_gets_a_new_copy_and_the_old_one_goes(tmp_path: Path) -> None:
    """The copy is keyed by the model file (path, size, modification time): another file gets its own, and the
    copy of the one before is removed."""
    packaged = MINILM.packaged()
    assert packaged is not None
    onnx = tmp_path / "model.onnx"
    shutil.copyfile(packaged[0], onnx)
    cache = tmp_path / "cache"
    OnnxTextModel(onnx, packaged[1], max_tokens=256, pooling="MEAN", threads=1, cache=cache)
    [before] = list(cache.glob("optimized-*"))
    os.utime(onnx, ns=(1, 1))
    OnnxTextModel(onnx, packaged[1], max_tokens=256, pooling="MEAN", threads=1, cache=cache)
    [after] = list(cache.glob("optimized-*"))
    assert after != before


_QUERY_WITHOUT_FASTEMBED = """
import sys
from kbctl.cli import main
sys.argv = ["kbctl", "query", sys.argv[1], "how long do we keep invoices", "-o", "json"]
try:
    main()
except SystemExit as exit:
    assert not exit.code, exit.code
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("fastembed", "huggingface_hub"))
print("LOADED", loaded, file=sys.stderr)
"""


def test_a_cli_query_imports_no_fastembed(store: KnowledgeBaseStore, database_url: str, tmp_path: Path) -> None:
    """A `kbctl query` process embeds its question with kbctl's runner: fastembed's import (0.35-0.5 s, with the
    model hub's client) is not paid, and the question finds its chunk."""
    manifest = "apiVersion: kbctl.dev/v1alpha1\nkind: KnowledgeBase\nmetadata: {name: invoices}\nspec:\n  sources:\n"
    manifest += "    - {name: retention, text: 'Invoices are kept for ten years after the end of the fiscal year.'}\n"
    store.apply(parse_manifests(manifest, "kb.yaml"))
    env = {**os.environ, "KBCTL_DATABASE_URL": database_url, "KBCTL_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [sys.executable, "-c", _QUERY_WITHOUT_FASTEMBED, "invoices"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert "LOADED []" in done.stderr
    assert [h["source"] for h in json.loads(done.stdout)["hits"]] == ["retention"]


def test_a_query_refused_while_its_model_loads_exits_cleanly(
    store: KnowledgeBaseStore, database_url: str, tmp_path: Path
) -> None:
    """A query that fails after its model began loading in the background (here: --rerank without a reranker) exits
    with its one-line error and code 1, every time: the process waits for the load instead of aborting mid-build."""
    manifest = "apiVersion: kbctl.dev/v1alpha1\nkind: KnowledgeBase\nmetadata: {name: invoices}\nspec:\n  sources:\n"
    manifest += "    - {name: retention, text: 'Invoices are kept for ten years.'}\n"
    store.apply(parse_manifests(manifest, "kb.yaml"))
    env = {**os.environ, "KBCTL_DATABASE_URL": database_url, "KBCTL_HOME": str(tmp_path / "home")}
    for _ in range(6):
        done = subprocess.run(
            [sys.executable, "-m", "kbctl", "query", "invoices", "how long", "--rerank"],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert (done.returncode, done.stderr.strip()) == (
            1,
            "Error: KnowledgeBase/invoices (version 1) has no spec.retrieval.rerank",
        )


def test_a_model_folder_inside_the_home_keeps_its_files(tmp_path: Path) -> None:
    """KBCTL_MODEL_DIR naming the folder kbctl keeps its optimized copy in (where earlier versions copied the model for
    fastembed): the leftovers of those copies are cleared elsewhere, never the user's own model files here."""
    packaged = MINILM.packaged()
    assert packaged is not None
    custom = tmp_path / "models" / "custom"
    custom.mkdir(parents=True)
    shutil.copyfile(packaged[0], custom / "model.onnx")
    shutil.copyfile(packaged[1], custom / "tokenizer.json")
    embedder = LocalEmbedder("all-MiniLM-L6-v2", Settings(home=tmp_path, model_dir=custom))
    assert embedder.embed(["a question"], "query")[0].shape == (384,)
    assert (custom / "model.onnx").is_file() and (custom / "tokenizer.json").is_file()
    assert [p.name for p in custom.glob("optimized-*")] != []
