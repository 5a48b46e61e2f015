"""A large ingest goes in slices (kbctl.engine.ingest.SLICE_CHARS): each slice but the last is chunked, embedded and
written as revisions no version serves yet, so memory holds one slice; the version publishes them all at once. These
tests shrink the slice so a handful of sources makes several."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kbctl.client import KnowledgeBaseStore
from kbctl.embedding import get_embedder
from kbctl.engine import ingest
from kbctl.engine.events import Event, WorkProgress
from kbctl.manifest import parse_manifests
from tests.support.embedserver import EmbeddingServer, serve_embeddings
from tests.support.loopback_store import configured_store
from tests.support.manifests import knowledge_base, text_source

TOPICS = [
    "Invoices are kept for ten years after the end of the financial year.",
    "Visitors sign in at the front desk and wear a badge at all times.",
    "Laptops are encrypted and locked when left unattended.",
    "Expenses are claimed within thirty days with the receipts attached.",
    "Client data never leaves the European Union without a signed agreement.",
    "A P1 incident is answered within fifteen minutes, day and night.",
]
SLICE = 200  # two sources a slice, for texts of 67-100 characters (two fit, three do not)


def sized(texts: list[str]) -> list[str]:
    assert all(67 <= len(t) <= 100 for t in texts), [len(t) for t in texts]
    return texts


def manifest(name: str, texts: list[str], **spec: object) -> str:
    return knowledge_base(name, *(text_source(f"part-{i}", t) for i, t in enumerate(texts)), **spec)


class Events:
    def __init__(self) -> None:
        self.seen: list[Event] = []

    def report(self, event: Event) -> None:
        self.seen.append(event)


def orphans(store: KnowledgeBaseStore) -> int:
    row = store.db.connection.execute(
        "SELECT count(*) FROM kb_source_revisions r WHERE NOT EXISTS"
        " (SELECT 1 FROM kb_version_sources vs WHERE vs.revision_id = r.id)"
    ).fetchone()
    assert row is not None
    return int(row[0])


def served(store: KnowledgeBaseStore, name: str) -> dict[str, list[str]]:
    """Each source's chunk texts in the current version."""
    rows = store.db.connection.execute(
        "SELECT vs.source_name, c.content FROM kb_knowledge_bases k"
        " JOIN kb_versions v ON v.kb_id = k.id AND v.number = k.current_version"
        " JOIN kb_version_sources vs ON vs.version_id = v.id JOIN kb_chunks c ON c.revision_id = vs.revision_id"
        " WHERE k.name = %s ORDER BY vs.source_name, c.ordinal",
        (name,),
    ).fetchall()
    found: dict[str, list[str]] = {}
    for source, content in rows:
        found.setdefault(source, []).append(content)
    return found


def test_an_apply_in_slices_publishes_what_one_slice_would(
    store: KnowledgeBaseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three slices and one: the same chunks served, the same counts, one version, nothing left unserved; the
    progress of the embedding counts every text once, across slices, up to the total."""
    [whole] = store.apply(parse_manifests(manifest("whole", TOPICS[:3] + TOPICS[3:]), "kb.yaml")).results
    monkeypatch.setattr(ingest, "SLICE_CHARS", SLICE)
    events = Events()
    texts = sized([t.replace(".", ", as the handbook says.") for t in TOPICS])  # new texts: embedded in this apply
    [sliced] = store.apply(parse_manifests(manifest("sliced", texts), "kb.yaml"), reporter=events).results
    assert (sliced.action, sliced.version) == ("created", 1)
    assert [(s.name, s.chunks, s.embedded, s.reused) for s in sliced.sources] == [
        (f"part-{i}", 1, 1, 0) for i in range(len(TOPICS))
    ]
    assert [(s.name, s.chunks) for s in whole.sources] == [(s.name, s.chunks) for s in sliced.sources]
    assert served(store, "sliced") == {f"part-{i}": [t] for i, t in enumerate(texts)}
    assert orphans(store) == 0
    progress = [(e.done, e.total) for e in events.seen if isinstance(e, WorkProgress) and e.stage == "embedding"]
    assert len(progress) >= 3 and progress[-1] == (6, 6)  # at least one event for each of the three slices
    assert [done for done, _ in progress] == sorted(done for done, _ in progress)
    hits = store.query("sliced", "how fast is a P1 answered?").hits
    assert hits and "fifteen minutes" in hits[0].text


def test_the_token_budget_is_checked_across_all_slices_before_anything_is_embedded(
    store: KnowledgeBaseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over spec.limits.maxTokensToEmbed only with every slice counted: nothing embedded, nothing written."""
    monkeypatch.setattr(ingest, "SLICE_CHARS", SLICE)
    embedder = get_embedder("local/all-MiniLM-L6-v2", store.settings)
    texts = sized([t.replace(".", ", by the book.") for t in TOPICS])
    needed = sum(embedder.count_tokens(texts))
    report = store.apply(parse_manifests(manifest("budget", texts, limits={"maxTokensToEmbed": needed - 1}), "kb.yaml"))
    [result] = report.results
    assert result.action == "failed" and "maxTokensToEmbed" in (result.message or "")
    counts = store.db.connection.execute(
        "SELECT (SELECT count(*) FROM kb_source_revisions), (SELECT count(*) FROM kb_embeddings)"
    ).fetchone()
    assert counts == (0, 0)
    [within] = store.apply(
        parse_manifests(manifest("budget", texts, limits={"maxTokensToEmbed": needed}), "kb.yaml")
    ).results
    assert within.action == "created" and sum(s.embedded for s in within.sources) == len(texts)


@pytest.fixture
def server(store: KnowledgeBaseStore) -> Iterator[EmbeddingServer]:
    """A loopback /v1/embeddings server sharing the test session's loaded local model."""
    with serve_embeddings(embedder=get_embedder("local/all-MiniLM-L6-v2", store.settings)) as srv:
        yield srv


@pytest.fixture
def http_store(
    store: KnowledgeBaseStore, server: EmbeddingServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[KnowledgeBaseStore]:
    """A store whose `loopback` provider is the server, one text a request."""
    config = f"embedding:\n  providers:\n    loopback: {{baseURL: '{server.url}', apiKeyEnv: LOOP_KEY, batchSize: 1}}\n"
    with configured_store(store, config, tmp_path, monkeypatch, {"LOOP_KEY": "loop-key"}) as s:
        yield s


def test_a_failed_apply_keeps_the_slices_it_wrote_and_the_next_one_reuses_them(
    http_store: KnowledgeBaseStore, server: EmbeddingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The endpoint refuses a text of the third slice: the apply fails and version 1 serves on, whole; the first
    two slices' revisions stay written, served by no version. The rerun embeds only the third slice's texts and
    reuses the rest; nothing is left unserved after it."""
    first = [f"Version one: {t}" for t in TOPICS]
    embedding = {"model": "loopback/all-MiniLM-L6-v2"}
    v1 = http_store.apply(parse_manifests(manifest("office", first, embedding=embedding), "kb.yaml")).results[0]
    assert (v1.action, v1.version) == ("created", 1)
    monkeypatch.setattr(ingest, "SLICE_CHARS", SLICE)
    second = sized([f"Version two: {t}" for t in TOPICS])
    server.refused_inputs = {second[5]}
    text = manifest("office", second, embedding=embedding)
    [failed] = http_store.apply(parse_manifests(text, "kb.yaml")).results
    assert failed.action == "failed"
    assert http_store.describe("office").version == 1
    assert served(http_store, "office") == {f"part-{i}": [t] for i, t in enumerate(first)}
    assert orphans(http_store) == 4  # slices one and two: parts 0-3

    server.refused_inputs = set()
    before = server.content_request_count
    [rerun] = http_store.apply(parse_manifests(text, "kb.yaml")).results
    assert (rerun.action, rerun.version) == ("configured", 2)
    assert server.content_request_count - before == 2  # part-4 and part-5, one text a request
    assert [(s.name, s.embedded, s.reused) for s in rerun.sources] == [
        *((f"part-{i}", 0, 1) for i in range(4)),
        ("part-4", 1, 0),
        ("part-5", 1, 0),
    ]
    assert served(http_store, "office") == {f"part-{i}": [t] for i, t in enumerate(second)}
    assert orphans(http_store) == 0  # version 1's revisions are its own still, kept in its history
