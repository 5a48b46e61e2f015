"""`kbctl import beir`: reading and checking BEIR folders, source names, import via CLI and library, and eval."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.errors import BeirError
from kbctl.eval.beir import import_beir, plan_beir, read_beir, source_names, write_manifest
from kbctl.eval.evalset import load_evalset
from kbctl.manifest import load_manifests
from kbctl.manifest._field_checks import SOURCE_NAME

ROOT = Path(__file__).resolve().parent.parent

CORPUS: list[dict[str, Any]] = [
    {
        "_id": "MED-10",
        "title": "Vitamin D and bone density",
        "text": "Vitamin D supplements raise bone mineral density in older adults and lower the rate of hip fractures.",
        "metadata": {"year": 2019},
    },
    {
        "_id": "doc/1",
        "title": "Volcanic eruptions",
        "text": "Magma erupts as lava, ash and volcanic gases; basalt volcanoes erupt gently, others explode.",
    },
    {
        "_id": "Doc 1",
        "title": "Sourdough bread",
        "text": "A starter of wild yeast and lactobacilli leavens the dough; bakers feed it flour and water every day.",
    },
    {
        "_id": "doc-1",
        "title": "Tidal power",
        "text": "Tidal barrages turn the rise and fall of the sea into electricity with turbines in an estuary dam.",
    },
    {
        "_id": "4983",
        "title": "",
        "text": "Honeybees tell their hive mates where flowers are with a waggle dance whose angle points to the food.",
    },
    {
        "_id": "chess",
        "text": "The Sicilian Defence answers 1.e4 with 1...c5 and is the most popular reply of strong chess players.",
    },
]
QUERIES = [
    {"_id": "q-vitamin", "text": "Does vitamin D make bones stronger in elderly people?"},
    {"_id": "q-bread", "text": "How is sourdough bread leavened?"},
    {"_id": "q-bees", "text": "How do honeybees communicate where food is?"},
    {"_id": "q-nothing", "text": "Which volcano erupted last year?"},
    {"_id": "q-train-only", "text": "What is tidal power?"},
]
QRELS_HEADER = "query-id\tcorpus-id\tscore\n"
QRELS = [
    ("q-vitamin", "MED-10", 2),
    ("q-bread", "Doc 1", 1),
    ("q-bread", "doc/1", 0),
    ("q-bees", "4983", 1),
    ("q-nothing", "doc/1", 0),
]


def write_dataset(folder: Path, corpus: list[str] | None = None) -> Path:
    """A small BEIR folder: odd ids (two clash once lowercased), a title-less doc, graded qrels with zeros."""
    (folder / "qrels").mkdir(parents=True)
    lines = corpus if corpus is not None else [json.dumps(d) for d in CORPUS]
    (folder / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUERIES))
    rows = "".join(f"{q}\t{d}\t{s}\n" for q, d, s in QRELS)
    (folder / "qrels" / "test.tsv").write_text(QRELS_HEADER + rows)
    (folder / "qrels" / "train.tsv").write_text(QRELS_HEADER + "q-train-only\tdoc-1\t1\n")
    return folder


AWKWARD = [  # characters a YAML 1.2 reader refuses raw (C0 and C1 controls), or reads as line breaks (NEL, LS, PS)
    {"_id": "c1", "title": "En\u0096dash", "text": "A Windows-1252 en dash read as Latin-1: 1990\u00962000."},
    {"_id": "c1-lines", "title": "Two lines", "text": "First line.\nSecond\u0096line, \u0085next, \u2028sep."},
    {"_id": "nel", "text": "Next\u0085line and \u2029paragraph separators in one line."},
    {"_id": "controls", "text": "Bell\x07, escape\x1b[0m, delete\x7f, a \x01 and a \x1f unit separator.\nEnd."},
    {"_id": "cr", "text": "Old Mac\rline ends\r\nand Windows ones.\n"},
    {"_id": "bom", "text": "\ufeffA byte order mark, then  two spaces and a tab\t.\n\n"},
]


def test_an_exported_manifest_with_awkward_characters_reads_back(tmp_path: Path) -> None:
    """`import beir --manifest` writes what `kbctl validate` and the loader accept, every text identical: a
    character YAML cannot hold raw is written as an escape of a double-quoted string."""
    folder = write_dataset(tmp_path / "awkward", corpus=[json.dumps(d) for d in [*CORPUS, *AWKWARD]])
    plan = plan_beir(read_beir(folder), "awkward")
    path = tmp_path / "awkward.yaml"
    write_manifest(plan.knowledge_base, path, comment="exported from awkward\u0096folder\u2028(a name)")
    checked = CliRunner().invoke(app, ["validate", "-f", str(path)])
    assert checked.exit_code == 0, checked.output
    [loaded] = load_manifests([str(path)])
    texts = {s.name: s.text for s in loaded.kb.spec.sources}
    assert texts == {s.name: s.text for s in plan.knowledge_base.spec.sources}
    assert texts["c1"] == "# En\u0096dash\n\nA Windows-1252 en dash read as Latin-1: 1990\u00962000."
    assert loaded.kb == plan.knowledge_base
    assert "\u0096" not in path.read_text() and "\\x96" in path.read_text()


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    return write_dataset(tmp_path / "tiny-beir")


# ---------------------------------------------------------------- source names and reading (no store)


def test_source_names_are_valid_unique_and_stable() -> None:
    ids = [d["_id"] for d in CORPUS] + ["Übersicht", "x" * 80, "???"]
    names = source_names(ids)
    assert (names["MED-10"], names["doc-1"], names["4983"], names["Übersicht"]) == (
        "med-10",
        "doc-1",
        "4983",
        "ubersicht",
    )
    assert re.fullmatch(r"doc-1-[0-9a-f]{8}", names["doc/1"]) and re.fullmatch(r"doc-1-[0-9a-f]{8}", names["Doc 1"])
    assert len(set(names.values())) == len(ids)
    assert all(re.fullmatch(SOURCE_NAME, n) and len(n) <= 63 for n in names.values())
    assert source_names(list(reversed(ids))) == names  # independent of the corpus order
    assert source_names(["doc/1", "Doc 1"]) == {k: names[k] for k in ("doc/1", "Doc 1")}


def test_plan_maps_qrels_to_source_names(dataset: Path) -> None:
    """Relevant = score > 0; a query with only zeros is skipped; a query of another split is not counted."""
    plan = plan_beir(read_beir(dataset), "tiny")
    names = plan.source_names
    assert [(q.id, q.expected_sources) for q in plan.evalset.queries] == [
        ("q-vitamin", ["med-10"]),
        ("q-bread", [names["Doc 1"]]),
        ("q-bees", ["4983"]),
    ]
    assert (plan.judgements, plan.skipped_queries) == (3, 1)
    sources = {s.name: s.text for s in plan.knowledge_base.spec.sources}
    assert sources["med-10"] == f"# Vitamin D and bone density\n\n{CORPUS[0]['text']}"
    assert sources["4983"] == CORPUS[4]["text"] and sources["chess"] == CORPUS[5]["text"]  # no title, no heading
    retrieval = plan.knowledge_base.spec.retrieval
    assert (retrieval.similarity_threshold, retrieval.max_context_tokens) == (-1.0, 100_000)
    train = plan_beir(read_beir(dataset, split="train"), "tiny")
    assert [(q.id, q.expected_sources) for q in train.evalset.queries] == [("q-train-only", ["doc-1"])]


def test_a_query_that_is_a_document_ignores_itself(tmp_path: Path) -> None:
    """As BEIR evaluates ArguAna: a query whose id is a corpus document's does not count that document."""
    folder = write_dataset(tmp_path / "args")
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "chess", "text": "Is the Sicilian popular?"}) + "\n")
    (folder / "qrels" / "test.tsv").write_text(QRELS_HEADER + "chess\t4983\t1\n")
    [query] = plan_beir(read_beir(folder), "args").evalset.queries
    assert (query.expected_sources, query.ignored_sources) == (["4983"], ["chess"])
    [plain] = plan_beir(read_beir(write_dataset(tmp_path / "plain")), "plain").evalset.queries[:1]
    assert plain.ignored_sources == []


def test_limits_keep_the_relevant_documents(dataset: Path) -> None:
    """limit_docs keeps every document relevant to a kept query plus the first N others, in corpus order."""
    plan = plan_beir(read_beir(dataset), "tiny", limit_docs=1, limit_queries=2)
    names = plan.source_names
    assert [q.id for q in plan.evalset.queries] == ["q-vitamin", "q-bread"]
    assert [s.name for s in plan.knowledge_base.spec.sources] == ["med-10", names["doc/1"], names["Doc 1"]]
    only_relevant = plan_beir(read_beir(dataset), "tiny", limit_docs=0)
    assert [s.name for s in only_relevant.knowledge_base.spec.sources] == ["med-10", names["Doc 1"], "4983"]


def bad(folder: Path, name: str, text: str) -> Path:
    (folder / name).write_text(text)
    return folder / name


BAD_INPUT = [
    ("corpus.jsonl", '{"_id": "a", "text": "x"}\n{"_id": "b", "text": \n', 2, "invalid JSON: Expecting value"),
    ("corpus.jsonl", '{"_id": "a", "text": "x"}\n\n{"_id": "b", "title": "t"}\n', 3, "missing field 'text'"),
    ("corpus.jsonl", '{"_id": 7, "text": "x"}\n{"_id": "7", "text": "y"}\n', 2, "_id: duplicate _id '7' (also line 1)"),
    ("corpus.jsonl", '{"_id": "a", "title": "", "text": " "}\n', 1, "document 'a' has neither a title nor a text"),
    ("corpus.jsonl", '["_id", "a"]\n', 1, "expected a JSON object"),
    ("queries.jsonl", '{"_id": "q", "text": ["?"]}\n', 1, "text: expected a string, got list"),
    ("qrels/test.tsv", QRELS_HEADER + "q-bees\t4983\t1\nq-x\t4983\t1\n", 3, "query-id 'q-x' is not in queries.jsonl"),
    ("qrels/test.tsv", "q-bees\t4983\thigh\n", 1, "score must be an integer, got 'high'"),
    ("qrels/test.tsv", "q-bees 4983 1\n", 1, "expected 3 tab-separated columns (query-id, corpus-id, score), got 1"),
]


@pytest.mark.parametrize(("file", "text", "line", "message"), BAD_INPUT)
def test_bad_input_is_one_line_naming_file_and_line(
    dataset: Path, file: str, text: str, line: int, message: str
) -> None:
    path = bad(dataset, file, text)
    with pytest.raises(BeirError) as caught:
        read_beir(dataset)
    assert str(caught.value) == f"{path}:{line}: {message}"


def test_judgements_of_unknown_documents_are_skipped_and_counted(dataset: Path) -> None:
    """Official releases judge a few documents their corpus lacks (ArguAna: 5): those rows are skipped, counted."""
    path = bad(dataset, "qrels/test.tsv", QRELS_HEADER + "q-bees\tnope\t1\nq-bees\t4983\t1\n")
    read = read_beir(dataset)
    assert (read.qrels, read.unknown_documents) == ({"q-bees": {"4983": 1}}, 1)
    bad(dataset, "qrels/test.tsv", QRELS_HEADER + "q-bees\tnope\t1\n")
    with pytest.raises(BeirError) as caught:
        read_beir(dataset)
    assert str(caught.value) == f"{path}: no judgements (every row names a document that is not in corpus.jsonl)"


def test_missing_files_and_splits(dataset: Path, tmp_path: Path) -> None:
    with pytest.raises(BeirError, match=r"qrels/dev\.tsv: no such file or directory \(splits here: test, train\)$"):
        read_beir(dataset, split="dev")
    (dataset / "queries.jsonl").unlink()
    with pytest.raises(BeirError, match=r"queries\.jsonl: no such file or directory$"):
        read_beir(dataset)
    with pytest.raises(BeirError, match=r"nowhere: no such directory$"):
        read_beir(tmp_path / "nowhere")


# ---------------------------------------------------------------- the real store and model


def test_cli_import_then_eval(cli: CliRunner, store: KnowledgeBaseStore, dataset: Path, tmp_path: Path) -> None:
    """Import through the CLI, evaluate the eval set it wrote, re-apply its manifest: all consistent."""
    evalfile, manifest = tmp_path / "tiny-eval.jsonl", tmp_path / "tiny.yaml"
    args = ["import", "beir", str(dataset), "-n", "tiny", "--eval-out", str(evalfile), "--manifest", str(manifest)]
    result = cli.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "KnowledgeBase/tiny created (version 1); waiting for the ingestion of 6 sources" in result.stdout
    assert f"BEIR dataset {dataset} (test): 6 of 6 documents in KnowledgeBase/tiny version 1" in result.stdout
    assert (
        f"eval set {evalfile}: 3 queries, 3 relevant judgements; 1 without a relevant document skipped" in result.stdout
    )
    assert json.loads(evalfile.read_text().splitlines()[0]) == {
        "id": "q-vitamin",
        "question": QUERIES[0]["text"],
        "expectedSources": ["med-10"],
    }

    evaluated = cli.invoke(app, ["eval", "tiny", "-f", str(evalfile), "-k", "10", "-m", "hybrid", "-o", "json"])
    assert evaluated.exit_code == 0, evaluated.output
    [mode] = json.loads(evaluated.stdout)["modes"]
    ranks = {r["id"]: r["relevantRanks"][:1] for r in mode["results"]}
    assert ranks == {"q-vitamin": [1], "q-bread": [1], "q-bees": [1]}
    assert (mode["queries"], mode["recall"], mode["mrr"]) == (3, 1.0, 1.0)

    [loaded] = load_manifests([str(manifest)])  # the manifest is the knowledge base: applying it changes nothing
    applied = cli.invoke(app, ["apply", "--wait", "-f", str(manifest)])
    assert (applied.exit_code, applied.stdout.splitlines()[0]) == (0, "KnowledgeBase/tiny unchanged (version 1)")
    assert [s.name for s in loaded.kb.spec.sources] == [s.name for s in store.describe("tiny").source_status]


def test_library_import_is_idempotent(store: KnowledgeBaseStore, dataset: Path, tmp_path: Path) -> None:
    """import_beir applies through the store; importing the same folder again embeds nothing."""
    evalfile = tmp_path / "lib.jsonl"
    first = import_beir(store, dataset, "tiny-lib", eval_out=evalfile)
    [kb] = first.report.results
    assert (kb.action, kb.version, first.documents, first.queries, first.judgements) == ("created", 1, 6, 3, 3)
    assert first.report.embedded > 0
    hits = store.query("tiny-lib", "waggle dance of bees", top_k=3).hits
    assert hits[0].source == "4983"
    assert [q.id for q in load_evalset(str(evalfile)).queries] == ["q-vitamin", "q-bread", "q-bees"]

    again = import_beir(store, dataset, "tiny-lib", eval_out=evalfile)
    [kb] = again.report.results
    assert (kb.action, kb.version, again.report.embedded) == ("unchanged", 1, 0)


def test_cli_limits_keep_relevant_documents(cli: CliRunner, store: KnowledgeBaseStore, dataset: Path) -> None:
    evalfile = dataset.parent / "limited.jsonl"
    args = ["import", "beir", str(dataset), "-n", "tiny", "--limit-docs", "0", "--limit-queries", "1"]
    result = cli.invoke(app, [*args, "--eval-out", str(evalfile), "-o", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["documents"], report["corpusDocuments"], report["queries"]) == (1, 6, 1)
    assert [s.name for s in store.describe("tiny").source_status] == ["med-10"]


def test_bad_input_writes_nothing(cli: CliRunner, store: KnowledgeBaseStore, tmp_path: Path) -> None:
    """A bad corpus line: one line on stderr naming file:line, exit 1, no knowledge base and no eval file."""
    lines = [json.dumps(d) for d in CORPUS]
    lines[2] = '{"_id": "Doc 1", "title": "Sourdough"'
    folder = write_dataset(tmp_path / "broken", lines)
    evalfile = tmp_path / "never.jsonl"
    result = cli.invoke(app, ["import", "beir", str(folder), "-n", "broken", "--eval-out", str(evalfile)])
    corpus = folder / "corpus.jsonl"
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == f"{corpus}:3: invalid JSON: Expecting ',' delimiter\n"
    assert not evalfile.exists()
    listed = cli.invoke(app, ["get", "kb"])
    assert (listed.stdout, listed.stderr) == ("", "No knowledge bases found.\n")

    named = cli.invoke(app, ["import", "beir", str(folder), "-n", "Not_A_Name"])
    assert named.exit_code == 1 and named.stderr.startswith("Error: invalid knowledge base name 'Not_A_Name'")


# ---------------------------------------------------------------- the committed example export


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_beir_examples", ROOT / "bench" / "make_beir_examples.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_export_is_current() -> None:
    """examples/beir/policies is exactly what bench/make_beir_examples.py writes (run it after editing examples)."""
    assert _generator().stale_files() == []
    plan = plan_beir(read_beir(ROOT / "examples" / "beir" / "policies"), "policies")
    assert len(plan.knowledge_base.spec.sources) == 8 and len(plan.evalset.queries) >= 50
    assert plan.skipped_queries == 0
