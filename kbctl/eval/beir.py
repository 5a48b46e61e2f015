"""Import a BEIR-format dataset as a knowledge base and an eval set, to measure ranking with `kbctl eval`.

`read_beir` reads and checks a BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv; the first problem raises
BeirError naming file:line); `plan_beir` makes a KnowledgeBase of one inline markdown source per document and an
EvalSet of one query per question that has a relevant document (relevance is binary: every grade above 0);
`import_beir` writes the eval set (JSON Lines, what `kbctl eval -f` reads) and applies the knowledge base.
The format, and what each part becomes: docs/eval.md#importing-a-beir-dataset.

    with KnowledgeBaseStore() as store:
        result = import_beir(store, "nfcorpus", "nfcorpus", eval_out="nfcorpus-test-eval.jsonl")
        report = evaluate_store(store, "nfcorpus", load_evalset(result.eval_file), k=10, modes=["hybrid"])
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Final

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel
from ruamel.yaml import YAML
from ruamel.yaml.scalarstring import DoubleQuotedScalarString, LiteralScalarString

from kbctl.defaults import BEIR_SPLIT as DEFAULT_SPLIT
from kbctl.defaults import RANKING_MAX_TOKENS, RANKING_THRESHOLD, RANKING_TOP_K
from kbctl.engine.events import Reporter
from kbctl.engine.results import ApplyReport
from kbctl.errors import BeirError, KbctlError, ManifestProblem, UsageError
from kbctl.eval.evalset import EvalQuery, EvalSet
from kbctl.eval.stores import ImportStore
from kbctl.inputs.bounds import (
    MAX_DEPTH,
    MAX_FILE_BYTES,
    UnreadableFile,
    format_size,
    nesting_depth,
    open_regular,
    too_deep_message,
    too_large_message,
)
from kbctl.manifest import (
    API_VERSION,
    KIND,
    NAME_MAX,
    Embedding,
    KnowledgeBase,
    Metadata,
    Retrieval,
    Source,
    Spec,
    check_dns_label,
    check_text,
)

__all__ = [
    "CORPUS_FILE",
    "DEFAULT_SPLIT",
    "QUERIES_FILE",
    "RANKING_RETRIEVAL",
    "BeirDataset",
    "BeirDocument",
    "BeirImport",
    "BeirPlan",
    "default_eval_path",
    "import_beir",
    "manifest_yaml",
    "plan_beir",
    "read_beir",
    "source_names",
    "write_evalset",
    "write_manifest",
]

CORPUS_FILE: Final = "corpus.jsonl"
QUERIES_FILE: Final = "queries.jsonl"
QRELS_DIR: Final = "qrels"
QRELS_HEADER: Final = "query-id"
HASH_DIGITS: Final = 8
FALLBACK_NAME: Final = "doc"
MAX_LINE_BYTES: Final = MAX_FILE_BYTES
"""Longest line of a BEIR file: one document, which becomes one inline source (as large as a manifest may be)."""
MAX_BEIR_FILE_BYTES: Final = 4 << 30
"""Largest BEIR file read (every document is held in memory): the public datasets up to NQ and HotpotQA
fit; FEVER-sized corpora do not, and would not fit in memory here either."""

RANKING_RETRIEVAL: Final = Retrieval(
    top_k=RANKING_TOP_K, similarity_threshold=RANKING_THRESHOLD, max_context_tokens=RANKING_MAX_TOKENS
)
"""Retrieval settings that measure ranking rather than cut-offs (see kbctl.defaults)."""

# What YAML cannot carry raw in a scalar and read back the same: a character outside YAML 1.2's printable set (C0
# controls but tab and line feed, DEL, C1 controls, surrogates, U+FFFE and U+FFFF), a BOM, and what a reader takes
# for a line break (CR, NEL, LS, PS). A double-quoted scalar holds each as an escape.
_RAW_UNSAFE: Final = re.compile(
    "[^\t\n\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]"
)
_INVALID_CHARS: Final = re.compile(r"[^a-z0-9_.-]+")
_EDGE_CHARS: Final = "-_."
_SPLIT_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


# ---------------------------------------------------------------- reading the folder


@dataclass(frozen=True)
class BeirDocument:
    """One corpus document."""

    id: str
    title: str
    text: str

    @property
    def markdown(self) -> str:
        """The source text: `# title`, a blank line and the text (only the text when there is no title)."""
        title = " ".join(self.title.split())
        if not title:
            return self.text
        return f"# {title}\n\n{self.text}" if self.text.strip() else f"# {title}\n"


@dataclass(frozen=True)
class BeirDataset:
    """A BEIR dataset as read from its folder: documents and queries in file order, the qrels of one split."""

    folder: Path
    split: str
    documents: list[BeirDocument]
    queries: dict[str, str]  # query id → question
    qrels: dict[str, dict[str, int]]  # query id → corpus id → grade (the highest when judged twice)
    unknown_documents: int = 0  # qrels rows naming a document the corpus lacks, skipped


@dataclass(frozen=True)
class _Line:
    """Where a problem is: a file and a 1-based line number."""

    path: Path
    number: int | None = None

    def problem(self, message: str, field: str = "") -> BeirError:
        return BeirError([ManifestProblem(str(self.path), self.number, field, message)])


def _open(path: Path) -> BinaryIO:
    """A regular file (symlinks followed) of at most MAX_BEIR_FILE_BYTES, opened for reading."""
    try:
        return open_regular(path, MAX_BEIR_FILE_BYTES)
    except UnreadableFile as error:
        raise _Line(path).problem(str(error)) from None


def _lines(path: Path) -> Iterator[tuple[_Line, str]]:
    """Each non-blank line of a UTF-8 file (a leading BOM dropped), without its line break."""
    with _open(path) as handle:
        number, total = 0, 0
        while raw := handle.readline(MAX_LINE_BYTES + 1):
            number += 1
            where = _Line(path, number)
            total += len(raw)
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                raise where.problem(f"line too long: more than {format_size(MAX_LINE_BYTES)}")
            if total > MAX_BEIR_FILE_BYTES:  # it grew since it was opened
                raise where.problem(too_large_message(MAX_BEIR_FILE_BYTES))
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError:
                raise where.problem("not valid UTF-8") from None
            if line.strip():
                yield where, line.rstrip("\r\n")


def _json_objects(path: Path) -> Iterator[tuple[_Line, dict[str, Any]]]:
    """Each line of a JSON Lines file as a JSON object."""
    for where, line in _lines(path):
        try:
            data = json.loads(line)
        except ValueError as error:
            raise where.problem(f"invalid JSON: {getattr(error, 'msg', error)}") from None
        except RecursionError:
            raise where.problem(too_deep_message()) from None
        if nesting_depth(data) > MAX_DEPTH:
            raise where.problem(too_deep_message())
        if not isinstance(data, dict):
            raise where.problem("expected a JSON object")
        yield where, data


def _string(data: dict[str, Any], key: str, where: _Line, *, required: bool = True, blank: bool = False) -> str:
    """A string field (an integer _id is taken as its decimal string); a missing optional field is ""."""
    value = data.get(key)
    if value is None:
        if required:
            raise where.problem(f"missing field {key!r}")
        return ""
    if key == "_id" and isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise where.problem(f"expected a string, got {type(value).__name__}", key)
    if not blank and not value.strip():
        raise where.problem("must not be empty", key)
    try:
        return check_text(value)  # no NUL or lone surrogate: it becomes a source, a name or a question
    except ValueError as error:
        raise where.problem(str(error), key) from None


def _read_corpus(path: Path) -> list[BeirDocument]:
    documents: list[BeirDocument] = []
    first_line: dict[str, int | None] = {}
    for where, data in _json_objects(path):
        doc_id = _string(data, "_id", where)
        text = _string(data, "text", where, blank=True)
        title = _string(data, "title", where, required=False, blank=True)
        if not text.strip() and not title.strip():
            raise where.problem(f"document {doc_id!r} has neither a title nor a text")
        if doc_id in first_line:
            raise where.problem(f"duplicate _id {doc_id!r} (also line {first_line[doc_id]})", "_id")
        first_line[doc_id] = where.number
        documents.append(BeirDocument(id=doc_id, title=title, text=text))
    if not documents:
        raise _Line(path).problem("no documents (the file is empty)")
    return documents


def _read_queries(path: Path) -> dict[str, str]:
    queries: dict[str, str] = {}
    first_line: dict[str, int | None] = {}
    for where, data in _json_objects(path):
        query_id = _string(data, "_id", where)
        if query_id in first_line:
            raise where.problem(f"duplicate _id {query_id!r} (also line {first_line[query_id]})", "_id")
        first_line[query_id] = where.number
        queries[query_id] = _string(data, "text", where)
    return queries


def _read_qrels(path: Path, corpus_ids: set[str], queries: dict[str, str]) -> tuple[dict[str, dict[str, int]], int]:
    """The judgements, and how many rows named a document the corpus lacks (skipped: official releases have a
    few, e.g. ArguAna's 5)."""
    qrels: dict[str, dict[str, int]] = {}
    unknown = 0
    first = True
    for where, line in _lines(path):
        columns = [c.strip() for c in line.split("\t")]
        if first and columns[0].lower() == QRELS_HEADER:
            first = False
            continue
        first = False
        if len(columns) != 3:
            raise where.problem(f"expected 3 tab-separated columns (query-id, corpus-id, score), got {len(columns)}")
        query_id, corpus_id, grade = columns
        try:
            score = int(grade)
        except ValueError:
            raise where.problem(f"score must be an integer, got {grade!r}") from None
        if query_id not in queries:
            raise where.problem(f"query-id {query_id!r} is not in {QUERIES_FILE}")
        if corpus_id not in corpus_ids:
            unknown += 1
            continue
        judged = qrels.setdefault(query_id, {})
        judged[corpus_id] = max(score, judged.get(corpus_id, score))
    if not qrels:
        why = f"every row names a document that is not in {CORPUS_FILE}" if unknown else "the file is empty"
        raise _Line(path).problem(f"no judgements ({why})")
    return qrels, unknown


def _qrels_path(folder: Path, split: str) -> Path:
    """qrels/<split>.tsv, which must exist (the splits the folder has are named when it does not)."""
    if not _SPLIT_NAME.fullmatch(split):
        raise KbctlError(f"invalid split {split!r}: letters, digits, '-', '_' and '.', e.g. test or dev")
    path = folder / QRELS_DIR / f"{split}.tsv"
    if not path.exists():
        available = sorted(p.stem for p in (folder / QRELS_DIR).glob("*.tsv"))
        hint = f" (splits here: {', '.join(available)})" if available else ""
        raise _Line(path).problem(f"no such file or directory{hint}")
    _open(path).close()  # a directory, a device or a FIFO fails now, not after a large corpus is read
    return path


def read_beir(folder: str | Path, *, split: str = DEFAULT_SPLIT) -> BeirDataset:
    """Read and check a BEIR dataset folder: its corpus, its queries and the qrels of `split`.

    Raises BeirError on the first problem, with one line naming the file, the line and what is
    wrong (a missing file, a line that is not a JSON object, a missing field, a duplicate id, a qrels
    row naming a query the dataset does not have). Qrels rows naming a document the corpus lacks are skipped
    and counted (`unknown_documents`).
    """
    root = Path(folder)
    if not root.is_dir():
        raise _Line(root).problem("no such directory" if not root.exists() else "not a directory")
    corpus_path, queries_path = root / CORPUS_FILE, root / QUERIES_FILE
    for path in (corpus_path, queries_path):  # a missing file fails now, not after a large corpus is read
        _open(path).close()
    qrels_path = _qrels_path(root, split)
    documents = _read_corpus(corpus_path)
    queries = _read_queries(queries_path)
    qrels, unknown = _read_qrels(qrels_path, {d.id for d in documents}, queries)
    return BeirDataset(
        folder=root, split=split, documents=documents, queries=queries, qrels=qrels, unknown_documents=unknown
    )


# ---------------------------------------------------------------- source names


def _sanitized(doc_id: str) -> str:
    """The id without accents, lowercased, every run of characters a source name cannot hold replaced by '-'."""
    ascii_id = unicodedata.normalize("NFKD", doc_id).encode("ascii", "ignore").decode("ascii")
    return _INVALID_CHARS.sub("-", ascii_id.lower()).strip(_EDGE_CHARS) or FALLBACK_NAME


def _hashed(base: str, doc_id: str, digits: int) -> str:
    suffix = hashlib.sha256(doc_id.encode("utf-8")).hexdigest()[:digits]
    head = base[: NAME_MAX - digits - 1].rstrip(_EDGE_CHARS)
    return f"{head}-{suffix}"


def source_names(ids: Sequence[str]) -> dict[str, str]:
    """A valid, unique source name for each document id, deterministic and independent of the ids' order.

    An id that is already a valid source name keeps it (`4983`, `doc-1`). Otherwise it is lowercased,
    with each run of other characters replaced by '-' (`MED-10` → `med-10`); when that clashes with
    another id's name, or is longer than 63 characters, a short hash of the original id is appended
    (`Doc 1` and `doc/1` → `doc-1-<hash>`, two different hashes).
    """
    by_base: dict[str, list[str]] = {}
    for doc_id in dict.fromkeys(ids):
        by_base.setdefault(_sanitized(doc_id), []).append(doc_id)
    names: dict[str, str] = {}
    hashed: list[tuple[str, str]] = []
    for base, group in by_base.items():
        for doc_id in group:
            keeps_base = len(base) <= NAME_MAX and (doc_id == base or len(group) == 1)
            if keeps_base:
                names[doc_id] = base
            else:
                hashed.append((doc_id, base))
    taken = set(names.values())
    for doc_id, base in sorted(hashed):
        digits = HASH_DIGITS
        name = _hashed(base, doc_id, digits)
        while name in taken:  # vanishingly rare: lengthen the hash until it is unique
            digits += 4
            name = _hashed(base, doc_id, digits)
        names[doc_id] = name
        taken.add(name)
    return {doc_id: names[doc_id] for doc_id in dict.fromkeys(ids)}


# ---------------------------------------------------------------- dataset → knowledge base + eval set


@dataclass(frozen=True)
class BeirPlan:
    """What a BEIR dataset becomes: the knowledge base, its eval set and how ids map to source names."""

    knowledge_base: KnowledgeBase
    evalset: EvalSet
    source_names: dict[str, str]  # BEIR corpus _id → source name, for the whole corpus
    judgements: int  # relevant (query, document) pairs in the eval set
    skipped_queries: int  # judged queries of the split without any relevant document


def _check_limit(value: int | None, option: str) -> None:
    if value is not None and value < 0:
        raise UsageError(f"{option} must be 0 or more, got {value}")


def _relevant(qrels: dict[str, dict[str, int]]) -> dict[str, list[str]]:
    """Query id → the corpus ids it judges relevant (grade > 0), in qrels order."""
    return {q: [d for d, grade in judged.items() if grade > 0] for q, judged in qrels.items()}


def _kept_documents(documents: Sequence[BeirDocument], relevant: set[str], limit: int | None) -> list[BeirDocument]:
    """Every document when limit is None; else the relevant ones plus the first `limit` others, in corpus order."""
    if limit is None:
        return list(documents)
    kept: list[BeirDocument] = []
    others = 0
    for document in documents:
        if document.id in relevant:
            kept.append(document)
        elif others < limit:
            kept.append(document)
            others += 1
    return kept


def _description(dataset: BeirDataset) -> str:
    return f"BEIR dataset {dataset.folder.resolve().name}, {dataset.split} split, imported by kbctl import beir."


def plan_beir(
    dataset: BeirDataset,
    name: str,
    *,
    limit_docs: int | None = None,
    limit_queries: int | None = None,
    retrieval: Retrieval = RANKING_RETRIEVAL,
    embedding: Embedding | None = None,
) -> BeirPlan:
    """The knowledge base `name` (one inline markdown source per kept document) and its eval set.

    Queries are kept in queries.jsonl order when they judge at least one document relevant (the
    others are counted as skipped); `limit_queries` keeps the first N of them. `limit_docs` keeps every
    document relevant to a kept query plus the first N others in corpus order (None: the whole corpus).
    `embedding` is the knowledge base's model (None: the default).
    """
    _check_limit(limit_docs, "limit_docs")
    _check_limit(limit_queries, "limit_queries")
    names = source_names([d.id for d in dataset.documents])
    relevant = _relevant(dataset.qrels)
    answerable = [q for q in dataset.queries if relevant.get(q)]
    kept = answerable if limit_queries is None else answerable[:limit_queries]
    if not kept:
        why = "limit_queries is 0" if answerable else "no query judges a document relevant (score > 0)"
        raise _Line(dataset.folder / QRELS_DIR / f"{dataset.split}.tsv").problem(f"no query to evaluate: {why}")
    needed = {d for q in kept for d in relevant[q]}
    documents = _kept_documents(dataset.documents, needed, limit_docs)
    sources = [Source(name=names[d.id], text=d.markdown, format="markdown") for d in documents]
    kept_ids = {d.id for d in documents}
    spec = Spec(
        description=_description(dataset), sources=sources, retrieval=retrieval, embedding=embedding or Embedding()
    )
    kb = KnowledgeBase(api_version=API_VERSION, kind=KIND, metadata=Metadata(name=name), spec=spec)
    queries = [
        EvalQuery(
            id=q,
            question=dataset.queries[q],
            expected_sources=[names[d] for d in relevant[q]],
            # As BEIR's evaluation does: a query that is also a document (ArguAna) does not count as finding itself.
            ignored_sources=[names[q]] if q in kept_ids and q not in relevant[q] else [],
        )
        for q in kept
    ]
    return BeirPlan(
        knowledge_base=kb,
        evalset=EvalSet(queries=queries),
        source_names=names,
        judgements=sum(len(relevant[q]) for q in kept),
        skipped_queries=sum(1 for docs in relevant.values() if not docs),
    )


# ---------------------------------------------------------------- files


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as error:
        raise KbctlError(f"cannot write {path}: {error.strerror or error}") from None


def write_evalset(evalset: EvalSet, path: str | Path) -> None:
    """Write an eval set as JSON Lines (one query per line), the format `kbctl eval -f` reads."""
    lines = [
        json.dumps(q.model_dump(by_alias=True, exclude_defaults=True), ensure_ascii=False) + "\n"
        for q in evalset.queries
    ]
    _write(Path(path), "".join(lines))


def _styled(value: Any, *, block: bool = False) -> Any:
    """`value` with each string styled to read back identical: a string holding a character YAML cannot carry raw
    (`_RAW_UNSAFE`) double-quoted, where the emitter escapes it (`\\x96`, `\\N`, `\\L`); else, with `block`, a
    multi-line string as a literal block scalar."""
    if isinstance(value, dict):
        return {key: _styled(item, block=block or key == "text") for key, item in value.items()}
    if isinstance(value, list):
        return [_styled(item, block=block) for item in value]
    if isinstance(value, str) and _RAW_UNSAFE.search(value):
        return DoubleQuotedScalarString(value)
    if isinstance(value, str) and block and "\n" in value:
        return LiteralScalarString(value)
    return value


def _escaped_comment(text: str) -> str:
    """`text` for a YAML comment line: each character YAML cannot carry raw as a Python-style escape."""
    return _RAW_UNSAFE.sub(lambda match: match.group().encode("unicode_escape").decode("ascii"), text)


def manifest_yaml(kb: KnowledgeBase, *, comment: str = "") -> str:
    """The manifest as YAML for a git repository: only what differs from the defaults, texts as block
    scalars (double-quoted with escapes when a character cannot be written raw), `comment` (one or more lines)
    on top."""
    data = _styled(kb.model_dump(by_alias=True, mode="json", exclude_defaults=True))
    yaml = YAML()
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    buffer = io.StringIO()
    yaml.dump(data, buffer)
    lines = comment.split("\n") if comment else []  # not splitlines(): NEL and LS stay in their line, escaped
    return "".join(f"# {_escaped_comment(line)}".rstrip() + "\n" for line in lines) + buffer.getvalue()


def write_manifest(kb: KnowledgeBase, path: str | Path, *, comment: str = "") -> None:
    """Write `manifest_yaml(kb)` to path, so `kbctl apply -f path` recreates the knowledge base."""
    _write(Path(path), manifest_yaml(kb, comment=comment))


def default_eval_path(name: str, split: str = DEFAULT_SPLIT) -> Path:
    """Where the eval set goes unless told: `<name>-<split>-eval.jsonl` in the current directory."""
    return Path(f"{name}-{split}-eval.jsonl")


# ---------------------------------------------------------------- import


class BeirImport(BaseModel):
    """What `import_beir` did."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    name: str
    folder: str
    split: str
    documents: int  # sources of the knowledge base
    corpus_documents: int  # documents in corpus.jsonl
    queries: int  # queries in the eval set
    judgements: int  # relevant (query, document) pairs in the eval set
    skipped_queries: int  # judged queries without a relevant document, left out of the eval set
    unknown_documents: int  # qrels rows naming a document the corpus lacks, skipped
    eval_file: str
    manifest_file: str | None
    report: ApplyReport


def _check_kb_name(name: str) -> None:
    try:
        check_dns_label(name)
    except ValueError as error:
        raise KbctlError(f"invalid knowledge base name {name!r}: {error}") from None


def import_beir(
    store: ImportStore,
    folder: str | Path,
    name: str,
    *,
    split: str = DEFAULT_SPLIT,
    eval_out: str | Path | None = None,
    manifest_out: str | Path | None = None,
    limit_docs: int | None = None,
    limit_queries: int | None = None,
    retrieval: Retrieval = RANKING_RETRIEVAL,
    embedding: Embedding | None = None,
    reporter: Reporter | None = None,
) -> BeirImport:
    """Import the BEIR dataset in `folder` as knowledge base `name` and write its eval set.

    Everything is read and checked first (nothing is written if anything is invalid); then the eval
    set (default `default_eval_path(name, split)`) and, when asked, the manifest are written, so an
    unwritable path fails before any embedding; then the knowledge base is applied like `kbctl apply
    --wait`. Importing the same folder again with the same options changes nothing and embeds nothing.
    """
    _check_kb_name(name)
    dataset = read_beir(folder, split=split)
    plan = plan_beir(
        dataset, name, limit_docs=limit_docs, limit_queries=limit_queries, retrieval=retrieval, embedding=embedding
    )
    eval_path = Path(eval_out) if eval_out is not None else default_eval_path(name, split)
    write_evalset(plan.evalset, eval_path)
    if manifest_out is not None:
        comment = f"Generated by `kbctl import beir` from BEIR dataset {dataset.folder.resolve().name} ({split} split)."
        write_manifest(plan.knowledge_base, manifest_out, comment=comment)
    report = store.apply([plan.knowledge_base], reporter=reporter)
    return BeirImport(
        name=name,
        folder=str(folder),
        split=split,
        documents=len(plan.knowledge_base.spec.sources),
        corpus_documents=len(dataset.documents),
        queries=len(plan.evalset.queries),
        judgements=plan.judgements,
        skipped_queries=plan.skipped_queries,
        unknown_documents=dataset.unknown_documents,
        eval_file=str(eval_path),
        manifest_file=None if manifest_out is None else str(manifest_out),
        report=report,
    )
