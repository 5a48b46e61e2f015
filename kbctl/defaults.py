"""Every default and tuning constant of kbctl, with what it is and why it has its value: the one place to read or
change them.

The manifest model, the JSON Schema, `kbctl explain` and the stores' queries take their defaults from here; a
`spec.retrieval` field a manifest leaves unset is resolved here when a query is planned (plan_query). Modules
import a constant under its name, so `kbctl.query.stages.RRF_K` stays readable (and patchable in tests) where it
is used. Bounds are not defaults: they live with their checks (kbctl.manifest, kbctl.inputs, kbctl.sources.bounds).

The table "Defaults and tuning constants" of docs/manifest.md is generated from this module, each constant's
docstring being its row (`python -m kbctl.defaults --write docs/manifest.md`; a test fails when it is stale).
Nothing from kbctl but its errors is imported here, so every layer may read it at no cost.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from kbctl.errors import KbctlError

# ---------------------------------------------------------------- The manifest's defaults

CHUNK_MAX_CHARS: Final = 1200
"""spec.chunking.maxChars: the longest chunk, in characters. Chunks fitted to the default model's 254-token window
instead cost 0.001 - 0.007 document nDCG@10 on NFCorpus and embed 21% more chunks: a chunk's first 254 tokens carry
what it is about, and a smaller chunk loses the context around its sentences (docs/eval.md). Chunks past a model's
window are counted, and `apply` and `diff` warn of them."""

CHUNK_OVERLAP_CHARS: Final = 150
"""spec.chunking.overlapChars: characters shared by neighbouring chunks of one section, so the text around a cut
reaches both chunks with some of its context."""

TOP_K: Final = 10
"""spec.retrieval.topK: how many chunks a query returns at most. Measured on public BEIR sets (docs/eval.md): at 8,
NFCorpus, Climate-FEVER and ArguAna lost 0.015 - 0.017 document nDCG@10 at the defaults; the token budget still
caps long chunks."""

MAX_CONTEXT_TOKENS: Final = 3000
"""spec.retrieval.maxContextTokens: the token budget of a query's chunks. Measured on public BEIR sets
(docs/eval.md): 1500 held about 5 chunks of ~300 tokens and cut NFCorpus's document nDCG@10 by ~0.05 at the
default threshold; 3000 leaves topK the usual limit."""

MODE: Final = "hybrid"
"""spec.retrieval.mode: BM25 keyword and vector candidates fused, which beats either list alone on every public
set measured (docs/eval.md)."""

LANGUAGE: Final = "english"
"""spec.retrieval.language: the PostgreSQL text search configuration of keyword search (stemming, stop words)."""

RERANK_CANDIDATES: Final = 30
"""spec.retrieval.rerank.candidates: how many of the best candidates that pass the threshold a reranker scores
(the rest are cut): three times the default topK, for the reranker to choose the top 10 from."""

DEFAULT_MODEL: Final = "local/all-MiniLM-L6-v2"
"""spec.embedding.model: a small model that runs offline on the CPU from files installed from PyPI, so a knowledge
base works with no account or network."""

# ---------------------------------------------------------------- spec.retrieval fields left unset

DEFAULT_THRESHOLD: Final = 0.35
"""spec.retrieval.similarityThreshold, unset, for local/all-MiniLM-L6-v2 and any model without a measured value
of its own. examples/eval: every no-answer question comes back empty (their best chunk scores at most 0.339) at
recall@5 1.00 / 0.93 in hybrid mode (0.97 / 0.91 before the agreement rule); at 0.2 half of them got hits."""

BGE_SMALL_THRESHOLD: Final = 0.6
"""spec.retrieval.similarityThreshold, unset, for local/bge-small-en-v1.5, which scores unrelated text 0.3 - 0.5.
examples/eval at 0.6, hybrid: recall@5 1.00 / 0.98 and 7 of its 8 no-answer questions empty (one scores 0.651,
first in both lists); 0.76 empties all 8 at recall@5 0.60 / 0.62 (bench/thresholds.py)."""

BACKGROUND_QUANTILE: Final = 0.9
"""spec.retrieval.similarityThreshold, unset: the quantile of the background questions' best similarities in a
version that is stored with it as its background similarity, computed at publish (kbctl.embedding.background).
The 90th percentile leaves out the few background questions on the knowledge base's own topic (about 4 in 99)."""

BACKGROUND_MARGIN: Final = 0.05
"""spec.retrieval.similarityThreshold, unset: how far above its background similarity a version's line is (what one
candidate must reach for anything to be returned), never below the model's threshold. On public data with the
default model (bench/refusal.py, docs/eval.md), the 90th percentile plus 0.05 refused 0.95 - 0.99 of questions from
another domain where the model's 0.35 alone refused 0.28 - 0.70, answered 0.72 / 0.96 / 1.00 of in-domain questions,
and let no examples/eval no-answer question through."""

BACKGROUND_CEILING: Final = 0.25
"""spec.retrieval.similarityThreshold, unset: how far above the model's threshold a calibrated one may rise at most
(0.60 for the default model). A higher line means the knowledge base itself answers more than a tenth of the
background questions (an almanac of everyday facts: 0.86 uncapped, refusing paraphrases of its own facts that score
0.55 - 0.71), so they are no background for it; on public data the highest calibrated line was 0.53."""

ANSWER_FLOOR_MARGIN: Final = 0.2
"""spec.retrieval.similarityThreshold, unset: how far below the model's threshold the chunks of an answer may score
(0.15 for the default model, 0.4 for bge-small-en-v1.5) once the relevance gate has passed; a threshold set is both
the gate and the chunks' cut. On public data with the default model (bench/refusal.py, docs/eval.md) an answer's
chunks cut at 0.15 cost 0.001 document nDCG@10 on NFCorpus against none cut (at 0.35, as before: 0.043), and drop
the chunks that have nothing to do with the question (similarities near 0) from small knowledge bases' answers."""

KEYWORD_QUANTILE: Final = 0.95
"""spec.retrieval.similarityThreshold, unset: the quantile of the background questions' keyword shares in a version
(each question's best BM25 score over the sum of its words' idf: about the idf-weighted share of it that one chunk
holds), stored with it as its background keyword share at publish (kbctl.embedding.background). The second signal of
the relevance gate: a question whose rare words one chunk holds is on topic however its similarity reads."""

KEYWORD_MARGIN: Final = 0.2
"""spec.retrieval.similarityThreshold, unset: how far above its background keyword share a question's keyword share
must be to pass the relevance gate (when its similarity does not), never below KEYWORD_FLOOR. On public data with the
default model (bench/refusal.py, docs/eval.md) the similarity line, or the 95th percentile plus 0.2, answered 0.84 /
0.96 / 1.00 of in-domain questions (0.94 / 0.95 / 1.00 of those whose top 10 uncut holds a relevant document) where
the similarity line alone answered 0.68 / 0.96 / 1.00, refusing as many questions from another domain (0.95 / 0.95)
and every examples/eval no-answer question; any quantile 0.9 - 0.95 with margins 0.15 - 0.4 measured the same."""

KEYWORD_FLOOR: Final = 0.6
"""spec.retrieval.similarityThreshold, unset: the lowest keyword line a version may have, whatever its background
(a knowledge base of a few chunks, where background questions find almost no words): at least 0.6 of a question's
idf-weighted words held by one chunk. Any floor from 0 to 0.8 measured the same on public data (docs/eval.md)."""

CANDIDATES: Final = 100
"""spec.retrieval.candidates: how many of the best chunks each list (vector, keyword) gathers before fusion and
the threshold. On public BEIR sets 30 / 50 / 100 / 200 candidates differ by at most 0.005 nDCG@10; 100 gives most
of what depth gives, at a few milliseconds a query (docs/eval.md)."""

FUSION: Final = "rrf"
"""spec.retrieval.fusion: reciprocal rank fusion, the best mean nDCG@10 over three public BEIR sets and steadier
than convex fusion on examples/eval (docs/eval.md, bench/fusion.py)."""

KEYWORD_WEIGHT: Final = 1.0
"""spec.retrieval.keywordWeight: the keyword list's weight in hybrid fusion, the vector list's being 1. The two
lists weighing the same, with rrf, has the best mean of the settings tried on public BEIR sets (docs/eval.md)."""

EF_SEARCH: Final = 100
"""spec.retrieval.efSearch: the floor of hnsw.ef_search, HNSW candidates per layer of a vector search through the
index (pgvector's default is 40; it is raised to cover the candidates read). Higher finds the exact nearest chunks
more often and costs more time (bench/ef_search.py)."""

# ---------------------------------------------------------------- Ranking

RRF_K: Final = 10
"""Reciprocal rank fusion's k: a chunk scores weight / (k + rank) in each list. 10 ranked best on the BEIR sets
of docs/eval.md (60: -0.005 mean nDCG@10)."""

AGREEMENT_MARGIN: Final = 0.1
"""How far below the similarity threshold the chunk first in both lists (vector and keyword) may score in hybrid
mode: two rankings agreeing are evidence the similarity alone misses. On examples/eval it answers 2 or 3 of the 3
answerable questions the threshold left empty and lets no no-answer question through (docs/eval.md)."""

EXACT_TERMS_MARGIN: Final = 0.2
"""How far below the similarity threshold a chunk that holds an identifier of the question, or every word of it,
may score and still pass. Without a floor, a question from another domain passed on any chunk that shared a year or
an acronym with it (US, CO2, 2015): on public data the calibrated threshold refused 0.53 - 0.64 of such questions
where the similarity alone refused 0.95 - 0.96; with 0.2 and EXACT_TERMS_MAX_WORDS, 0.95 - 0.96 again, answering
0.72 of NFCorpus's own questions against 0.68 without the exceptions (docs/eval.md). 0.15 - 0.25 measured alike."""

EXACT_TERMS_MAX_WORDS: Final = 12
"""The longest question, in words, whose identifiers or full set of words let a chunk pass below the threshold: in a
short question they are what it asks about, in a long one (a claim, an argument, a pasted paragraph) some match by
chance. 8 - 15 measured alike on public data (docs/eval.md)."""

DUPLICATE_COSINE: Final = 0.99
"""A chunk at least this similar to one already kept is a near-duplicate (the same passage repeated in several
pages or sources) and is cut, leaving its place to a chunk that says something else."""

FIRST_READ: Final = 2
"""Vector mode reads FIRST_READ x topK candidates first, and the rest of the pool only when those leave the answer
short: the margin covers near-duplicates."""

FEDERATED_RRF_K: Final = 60
"""Reciprocal rank fusion's k across knowledge bases (`query_many`, `/v1/query`): ranks are fused, not scores,
since the knowledge bases' models (and so their score scales) may differ; the usual 60 lets no one knowledge base's
first hit dominate the fused list."""

# ---------------------------------------------------------------- Serving

STATEMENT_TIMEOUT_MS: Final = 10_000
"""No SQL statement of a pooled call (`kbctl serve`, `kbctl mcp`) runs longer, in milliseconds: a hybrid query at
~900,000 chunks has a p99 under 0.1 s (bench/README.md), so a statement this slow is stuck, and its connection goes
back to the pool instead of holding it."""

INDEX_LOOKUP_SECONDS: Final = 60.0
"""How long a search trusts the HNSW index it found for a model before looking it up in the catalog again: one
catalog query a minute instead of one per search; an index built meanwhile is used within this time."""

# ---------------------------------------------------------------- The retrieval log of kbctl serve

RETRIEVAL_LOG_DAYS: Final = 7
"""serve.retrievalLog.days: how many days a run of the retrieval log is kept (1 - 365): a week covers the questions
that lead to a change of a knowledge base, and no more of what people asked is kept than that needs."""

RETRIEVAL_LOG_MAX_ROWS: Final = 100_000
"""serve.retrievalLog.maxRows: runs of the retrieval log kept at most (the newest; 1,000 - 10,000,000): with the
default bytes per row, at most ~6.5 GB in the worst case, a few hundred MB with the results of a usual topK."""

RETRIEVAL_LOG_MAX_ROW_BYTES: Final = 65_536
"""serve.retrievalLog.maxRowBytes: the JSON of one run's result kept at most (1 KiB - 1 MiB): ten hits of 1,200
characters and a full trace fit; a larger result has its hit texts shortened, then its trace entries dropped."""

RETRIEVAL_LOG_QUEUE: Final = 10_000
"""Runs waiting for the retrieval log's writer thread at most: beyond, a run is dropped and counted rather than
making a request wait (a stalled database costs the log, never the answers)."""

RETRIEVAL_LOG_BATCH: Final = 200
"""Runs the retrieval log's writer inserts in one batch at most (one round trip, one pooled connection)."""

RETRIEVAL_LOG_PRUNE_SECONDS: Final = 300.0
"""How often the retrieval log's writer deletes the runs past serve.retrievalLog's days and rows (and once at
start): between two prunes the table outgrows maxRows by at most what five minutes serve."""

# ---------------------------------------------------------------- Keyword search (BM25)

BM25_K1: Final = 0.9
"""BM25's term frequency saturation: Anserini's default. Elasticsearch's 1.2 (with b 0.75) changed NFCorpus's
BM25 nDCG@10 by 0.002 (docs/eval.md)."""

BM25_B: Final = 0.4
"""BM25's length normalization: Anserini's default (see BM25_K1)."""

MATCH_POSTINGS: Final = 2_000
"""Chunks a keyword search scores at most (5-10 µs each, more for long questions): past it, the question's
commonest words stop selecting chunks. Against 5,000: NFCorpus ranks the same, ArguAna's keyword and hybrid
document nDCG@10 drop by 0.001 and 0.002, and its keyword stage takes 0.52x (kbctl.store.bm25, bench/README.md)."""

LAST_RESORT_RANKED: Final = 500
"""Chunks holding any word of the question that are scored too when the selected ones are fewer than asked for."""

# ---------------------------------------------------------------- Vector search

EXACT_SCAN_MAX: Final = 5_000
"""Versions of at most this many chunks are searched exactly, without the index: a few milliseconds, and exact."""

INDEX_MIN_VECTORS: Final = 5_000
"""Vectors a model has before its HNSW index is built, in one pass after the apply that crossed the line: one bulk
build costs a fraction of maintaining the graph row by row during a large first apply (docs/architecture.md)."""

MAX_OVERFETCH: Final = 4_000
"""Index candidates a vector search reads at most (doubling while too few belong to the version): past it, the
exact plan is cheaper."""

INDEX_BUILD_MEMORY: Final = "1GB"
"""maintenance_work_mem of an HNSW index build: the graph of 1M 384-dimensional vectors fits, no spill to disk."""

# ---------------------------------------------------------------- Embedding

LOCAL_BATCH_SIZE: Final = 8
"""Texts per ONNX run of a local model. Ingest hands the model texts sorted by length, so a batch pads little
whatever its size; on 2 cores small batches then run fastest (bench/apply.py, shortest first: 8 -> 29.4 s,
16 -> 33.1 s, 32 -> 40.1 s, 64 -> 39.4 s for the same 786 texts)."""

EMBED_BATCH: Final = 64
"""Texts per call to an embedder that names no batch size of its own (`texts_per_call`, which an HTTP embedder sets
from its provider's batch size and concurrency); ingest caches each call's vectors as they come."""

# ---------------------------------------------------------------- Apply and the controller

ANALYZE_AFTER_CHUNKS: Final = 5_000
"""New chunks after which a publish refreshes PostgreSQL's statistics of the chunks (the planner's estimates of
full-text matches), when they are also ANALYZE_CHUNK_SHARE of the chunks its statistics know: ANALYZE of 900,000
chunks (their tsvectors) took 66 s after a 1% change, which changes the estimates little."""

ANALYZE_CHUNK_SHARE: Final = 0.1
"""The share of the known chunks that new chunks must also be for ANALYZE_AFTER_CHUNKS to refresh the statistics:
autovacuum's own share."""

LEASE_SECONDS: Final = 600
"""How long a controller's claim of a knowledge base lasts unless released: a crashed controller's claim expires
with it (one that lost its connection releases its claims as soon as it reconnects)."""

LOCK_POLL_SECONDS: Final = 0.25
"""How often a command that waits for a knowledge base's lock (or garbage collection's) tries it again, at most:
a wait is a poll, never a statement blocked on the lock, which would hold a snapshot that the holder's CREATE INDEX
CONCURRENTLY waits for (a deadlock). The first tries come sooner (1/8 of it, doubling)."""

BUSY_RETRY_SECONDS: Final = 2
"""How long a controller leaves a pending knowledge base alone when another process (an `apply --wait` in
progress) holds its lock: that process finishes the generation; if it dies, its lock goes with its connection and
the controller takes the work up at the next try."""

RECONNECT_MAX_SECONDS: Final = 8.0
"""A controller that lost its database tries again after 1 s, doubling up to this: it takes up the work an interrupted
apply left within this long of the database's return (it was 30 s), and a database that stays away costs a try
every 8 s (a connection attempt; the embedded server is started again by the first)."""

HEARTBEAT_SECONDS: Final = 5
"""How often a controller that makes progress heartbeats."""

HEARTBEAT_TTL_SECONDS: Final = 15
"""A controller without a heartbeat for this long (three missed) is not alive: `apply --wait` then reconciles
in-process instead of waiting for it."""

RETRY_SECONDS: Final = 30
"""After a reconcile that the store or the model failed (not the sources), how long a controller waits before
trying again."""

STALL_SECONDS: Final = 120.0
"""A reconcile that reports nothing and runs no statement for this long is stuck: its controller stops
heartbeating, so `apply --wait` stops waiting for it."""

EVENTS_PER_KNOWLEDGE_BASE: Final = 50
"""Events kept per knowledge base (the newest by last time seen): `describe` shows the last few, `get events` all;
a repeated event counts up in one row instead of adding one, so 50 reach back past weeks of scheduled refreshes."""

EVENTS_MAX: Final = 10_000
"""Events kept in all (the newest by last time seen), those of deleted knowledge bases included: the table stays
small whatever comes and goes."""

DESCRIBE_EVENTS: Final = 10
"""The newest events `kbctl describe` shows (and `describe` in the Python API returns); `get events` lists all."""

EVENT_MESSAGE_CHARS: Final = 1_000
"""Characters of an event's message kept (the rest cut, marked with …): a message names a cause (a source's error,
a file and line), not a document's text."""

APPLY_WAIT_SECONDS: Final = 600.0
"""How long an apply that hands its work to a controller waits for it unless told (`apply --wait`'s --timeout,
10m): the reconcile fetches and embeds, which takes minutes."""

WAIT_SECONDS: Final = 300.0
"""How long the Python API's waits last unless told (`KnowledgeBaseStore.wait` for a condition or a deletion,
`rollout_status` for a rollout): five minutes, then they report what was not met."""

# ---------------------------------------------------------------- kbctl import beir

BEIR_SPLIT: Final = "test"
"""Which `qrels/<split>.tsv` of a BEIR dataset judges the queries: the split BEIR reports its figures on."""

RANKING_TOP_K: Final = 10
"""spec.retrieval.topK of an imported BEIR knowledge base: the top 10 that nDCG@10 and recall@10 read."""

RANKING_THRESHOLD: Final = -1.0
"""spec.retrieval.similarityThreshold of an imported BEIR knowledge base: every candidate passes, so `kbctl eval`
measures the ranking rather than the cut-off."""

RANKING_MAX_TOKENS: Final = 100_000
"""spec.retrieval.maxContextTokens of an imported BEIR knowledge base: the token budget never binds, so
recall@10 and nDCG@10 see the full top 10."""

# ---------------------------------------------------------------- Evaluation history and version diffs

EVAL_RUNS_PER_KNOWLEDGE_BASE: Final = 1_000
"""Recorded evaluation runs kept per knowledge base (`kbctl eval --record`, one per mode measured; the oldest
dropped first): years of a nightly CI run over two or three modes, and a history that plots in one read."""

DIFF_SOURCE_LINES: Final = 400
"""Lines of one source's text diff that `kbctl rollout diff` (and `version_diff`) shows; the rest is cut and the
source flagged `diffTruncated`: enough to read an edit, not a whole rewritten document."""

DIFF_SOURCE_BYTES: Final = 40_000
"""Bytes (UTF-8) of one source's text diff shown (a line longer than what is left is cut within it), flagged like
DIFF_SOURCE_LINES: long lines (a JSON or CSV record per line) reach this before the line bound."""

DIFF_TOTAL_LINES: Final = 4_000
"""Lines of text diff one version diff shows over all its changed sources; the sources past it are listed without
their diff and flagged, so a change of thousands of files stays one bounded answer."""

DIFF_TOTAL_BYTES: Final = 400_000
"""Bytes (UTF-8) of text diff one version diff shows over all its changed sources, flagged like
DIFF_TOTAL_LINES."""

DIFF_SOURCE_CHARS: Final = 200_000
"""Characters of a revision's text a version diff reads (from its chunks, in order) on each side of a changed
source: the diff of a longer document is of its beginning, flagged; it bounds the time difflib takes."""

DIFF_TOTAL_CHARS: Final = 2_000_000
"""Characters of revision text one version diff reads in all; the changed sources past it are listed without their
diff and flagged, so the diff's time and memory stay bounded however many sources changed."""

MRR_DEPTH: Final = 10
"""The depth of the mean reciprocal rank `kbctl eval` reports (MRR@10, as MS MARCO reports it): a first relevant
hit below rank 10 counts 0."""

NDCG_DEPTH: Final = 10
"""The depth of the nDCG `kbctl eval` reports and --min-ndcg gates on (nDCG@10), the figure BEIR publishes."""

EVAL_SET_NAME_CHARS: Final = 200
"""Characters of an eval set's `name:`, which `kbctl eval --record` keeps with each run (an eval set without one is
recorded under its file's name, which must fit too)."""


# ---------------------------------------------------------------- Exported query spans

TRACE_DOCUMENTS: Final = 10
"""Hits a query span describes at most (OpenInference's retrieval.documents, OpenTelemetry's
gen_ai.retrieval.documents), the first by rank: the default topK, so a span usually shows every hit a caller got,
and a query of topK 100 still exports a bounded span."""

TRACE_DOCUMENT_CHARS: Final = 1_200
"""Characters of one hit's text a query span carries when KBCTL_TRACE_CONTENT asks for content (the rest cut, the
document's metadata saying so): a chunk of the default maxChars whole."""

TRACE_CONTENT_CHARS: Final = 8_000
"""Characters of hit text one query span carries in all: the hits past it carry less or none, so a span stays well
under what OTLP receivers and tracing consoles accept, whatever topK and maxChars are."""

TRACE_QUESTION_CHARS: Final = 2_000
"""Characters of the (redacted) question a query span carries when KBCTL_TRACE_CONTENT asks for content: a
question, not a document (the server takes 4,000 at most)."""

TRACE_FIELD_CHARS: Final = 300
"""Characters of each title, heading and origin in a query span's document metadata (content only): a name, not a
text."""

# ---------------------------------------------------------------- HTTP clients: timeouts and retries

HTTP_BACKOFF_BASE: Final = 0.5
"""Seconds of the first wait between two attempts of every HTTP client (URL sources, embedding, rerank and chat
endpoints): jittered exponential backoff waits base, 2x base, 4x base... plus up to base at random, unless the
server's Retry-After says otherwise (kbctl._http.HttpPolicy)."""

EMBEDDING_HTTP_TIMEOUT: Final = 60.0
"""Seconds of each phase (connect, read, write, pool) of one request to an embedding endpoint; a provider's
`timeout` in the kbctl configuration sets it. A batch of 64 long inputs on a busy server can take tens of seconds."""

EMBEDDING_HTTP_RETRIES: Final = 4
"""Attempts after the first of one embedding request (429, 5xx, timeouts, connection errors); a provider's `retries`
sets it. An apply is not interactive: it rides out a rate limit rather than fail a sync."""

EMBEDDING_MAX_RETRY_AFTER: Final = 60.0
"""Seconds an embedding request waits at most between two attempts, the server's Retry-After included."""

RERANK_HTTP_TIMEOUT: Final = 30.0
"""Seconds of each phase of one request to a /rerank endpoint; a provider's `timeout` sets it."""

RERANK_HTTP_RETRIES: Final = 2
"""Attempts after the first of one rerank request; a provider's `retries` sets it. A query is interactive."""

RERANK_MAX_RETRY_AFTER: Final = 10.0
"""Seconds a rerank request waits at most between two attempts: a query is interactive, so a longer Retry-After
fails sooner instead of holding the caller."""

CHAT_HTTP_TIMEOUT: Final = 60.0
"""Seconds of each phase of one request to a chat endpoint (a streamed answer: between two pieces); a provider's
`timeout` sets it. A whole answer is bounded by kbctl.chat.http.MAX_SECONDS."""

CHAT_HTTP_RETRIES: Final = 2
"""Attempts after the first of one chat request, until the first piece of a streamed answer is passed on; a
provider's `retries` sets it."""

CHAT_MAX_RETRY_AFTER: Final = 30.0
"""Seconds a chat request waits at most between two attempts: a question is interactive."""

URL_CONNECT_TIMEOUT: Final = 10.0
"""Seconds to connect to a URL source's host (FetchPolicy.connect_timeout)."""

URL_READ_TIMEOUT: Final = 30.0
"""Seconds a URL source's server may stay silent while a request is sent or its answer read
(FetchPolicy.read_timeout)."""

URL_TOTAL_TIMEOUT: Final = 60.0
"""Seconds one URL may take in all, from its first request getting its slots, across redirects, retries and
backoff (FetchPolicy.total_timeout); a retry whose wait would end past it is not attempted."""

URL_RETRIES: Final = 3
"""Attempts after the first of one URL's request (429, 5xx, timeouts, connection errors; FetchPolicy.retries)."""

URL_MAX_RETRY_AFTER: Final = 30.0
"""Seconds a URL's request waits at most between two attempts, the server's Retry-After included
(FetchPolicy.max_retry_after)."""

# ---------------------------------------------------------------- the table of docs/manifest.md

BEGIN_TABLE: Final = "<!-- generated from kbctl/defaults.py by `python -m kbctl.defaults --write docs/manifest.md` -->"
END_TABLE: Final = "<!-- end of the generated table -->"


def _cell(value: object) -> str:
    """A value as a table shows it: numbers and text as Python writes them, without quotes."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _escaped(text: str) -> str:
    """`text` for a markdown table cell: its pipes escaped."""
    return text.replace("|", "\\|")


def documented() -> list[tuple[str, list[tuple[str, object, str]]]]:
    """The constants of this module as (section, [(name, value, docstring)]) in the order they are written."""
    import ast

    source = Path(__file__).read_text(encoding="utf-8")
    lines = source.splitlines()
    body = ast.parse(source).body
    sections: list[tuple[str, list[tuple[str, object, str]]]] = []
    for node, following in zip(body, [*body[1:], None], strict=True):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None):
            continue
        name = node.target.id
        if name in ("BEGIN_TABLE", "END_TABLE"):
            continue
        heading = next(
            line.split("-- ", 1)[1]
            for line in reversed(lines[: node.lineno - 1])
            if line.startswith("# ----") and "-- " in line
        )
        doc = ast.get_docstring(ast.Module(body=[following], type_ignores=[])) if following is not None else None
        if not doc:
            raise KbctlError(f"kbctl.defaults.{name} has no docstring")
        if not sections or sections[-1][0] != heading:
            sections.append((heading, []))
        sections[-1][1].append((name, globals()[name], " ".join(doc.split())))
    return sections


def markdown() -> str:
    """The "Defaults and tuning constants" table of docs/manifest.md, between its markers."""
    parts = [BEGIN_TABLE, ""]
    for heading, constants in documented():
        parts += [f"**{heading}**", "", "| constant | value | what it is, and why this value |", "|---|---|---|"]
        parts += [f"| `{name}` | `{_cell(value)}` | {_escaped(doc)} |" for name, value, doc in constants]
        parts.append("")
    return "\n".join([*parts, END_TABLE]) + "\n"


def with_table(text: str) -> str:
    """`text` (docs/manifest.md) with the generated table in place of the one between its markers."""
    start, end = text.index(BEGIN_TABLE), text.index(END_TABLE) + len(END_TABLE) + 1
    return text[:start] + markdown() + text[end:]


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--write"] and len(sys.argv) == 3:
        page = Path(sys.argv[2])
        page.write_text(with_table(page.read_text(encoding="utf-8")), encoding="utf-8")
    else:
        print(markdown(), end="")
