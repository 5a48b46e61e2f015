"""The local models: bge-small-en-v1.5 beside the default all-MiniLM-L6-v2, from their PyPI packages, offline."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.config import Settings
from kbctl.embedding.local import BGE_SMALL, LOCAL_MODELS, LocalEmbedder, _prepare_folder
from kbctl.errors import EmbeddingError
from kbctl.manifest import parse_manifests

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
    """The packaged file is checked against bge's sha256 before anything is loaded."""
    onnx, tokenizer = tmp_path / "model.onnx", tmp_path / "tokenizer.json"
    onnx.write_bytes(b"not a model")
    tokenizer.write_text("{}")
    with pytest.raises(EmbeddingError, match=r"sha256 does not match the expected bge-small-en-v1.5 int8 model"):
        _prepare_folder(onnx, tokenizer, tmp_path / "prepared", verify=True, model=BGE_SMALL)
    assert not (tmp_path / "prepared").exists()


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
    assert refused.similarity_threshold == pytest.approx(0.6) and refused.hits == []
    assert [h.source for h in store.query("with-bge", unrelated, threshold=0.35).hits] == ["terms"]
    assert [h.source for h in store.query("with-bge", QUESTION).hits] == ["terms"]
    minilm = store.query("with-minilm", unrelated)
    assert minilm.similarity_threshold == pytest.approx(0.35) and minilm.hits == []
    assert store.query("bge-set", unrelated).similarity_threshold == pytest.approx(0.3)
