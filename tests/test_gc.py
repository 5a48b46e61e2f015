"""Garbage collection of cached vectors: exactly the unreferenced ones, in batches, never during an apply."""

from __future__ import annotations

from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.manifest import parse_manifests
from kbctl.store.database import Database
from kbctl.store.history import GcResult

POLICIES = [
    "Invoices and accounting records are kept for ten years, then destroyed.",
    "Payroll records of former employees are kept for six years after they leave.",
    "Signed client contracts are kept for five years after the engagement ends.",
    "Emails of former employees are deleted two years after their last working day.",
    "Nightly database backups are kept for ninety days, then overwritten.",
]


def manifest(name: str, paragraphs: list[str], *, extra: str = "") -> str:
    """A KnowledgeBase whose `retention` source has one chunk per paragraph."""
    text = "\n\n".join(f"        {p}" for p in paragraphs)
    return f"""apiVersion: kbctl.dev/v1alpha1
kind: KnowledgeBase
metadata:
  name: {name}
spec:
  sources:
    - name: retention
      format: text
      text: |
{text}
{extra}  chunking: {{maxChars: 100, overlapChars: 0}}
"""


def apply_text(store: KnowledgeBaseStore, text: str) -> None:
    """Apply manifests given as YAML text through the Python API, which must succeed."""
    assert not store.apply(parse_manifests(text, "kb.yaml")).failed


def prune(store: KnowledgeBaseStore, name: str, keep: int) -> None:
    """Keep only the newest `keep` versions of a knowledge base."""
    row = store.db.get_kb(name)
    assert row is not None
    store.db.prune_history(row.id, keep)


def unreferenced(db: Database) -> int:
    """Cached vectors that no chunk points at."""
    row = db.connection.execute(
        "SELECT count(*) FROM kb_embeddings e WHERE NOT EXISTS (SELECT 1 FROM kb_chunks c WHERE c.embedding_id = e.id)"
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_gc_removes_the_vectors_of_pruned_versions_in_batches(store: KnowledgeBaseStore) -> None:
    """After pruning a version, gc with batch=2 deletes its 5 vectors in 3 batches and nothing else."""
    apply_text(store, manifest("policies", POLICIES))
    apply_text(store, manifest("policies", [f"{p[:-1]} by law." for p in POLICIES]))
    assert store.db.counts()["embeddings"] == 10
    prune(store, "policies", 1)
    assert unreferenced(store.db) == 5
    assert store.db.collect_garbage(batch=2) == GcResult(removed=5, batches=3, skipped=False, texts_removed=1)
    assert (store.db.counts()["embeddings"], unreferenced(store.db)) == (5, 0)
    hit = store.query("policies", "how long are invoices kept?").hits[0]
    assert hit.text == "Invoices and accounting records are kept for ten years, then destroyed by law."
    assert store.db.collect_garbage(batch=2) == GcResult(removed=0, batches=0, skipped=False)


def test_gc_keeps_vectors_another_knowledge_base_uses(store: KnowledgeBaseStore, cli: CliRunner) -> None:
    """Vectors a pruned version or a deleted KB shared with another KB stay; only the orphan goes."""
    apply_text(store, manifest("first", POLICIES[:2]))
    notes = "    - name: notes\n      text: Keys are rotated every month.\n"
    apply_text(store, manifest("second", POLICIES[:2], extra=notes))
    apply_text(store, manifest("second", POLICIES[1:3]))
    prune(store, "second", 1)  # version 1 held ten years (shared with first) and notes (second's own)
    store.delete("second")
    assert (store.db.counts()["embeddings"], unreferenced(store.db)) == (3, 1)
    result = cli.invoke(app, ["gc"])
    assert (result.exit_code, result.stdout) == (0, "removed 1 unreferenced vector, 2 unused source texts\n")
    assert (store.db.counts()["embeddings"], unreferenced(store.db)) == (2, 0)
    hits = store.query("first", "how long are invoices kept?").hits
    assert hits[0].text == POLICIES[0]
    again = cli.invoke(app, ["gc", "--batch", "1"])
    assert (again.exit_code, again.stdout) == (0, "removed 0 unreferenced vectors\n")


def test_gc_skips_while_an_apply_holds_the_lock(store: KnowledgeBaseStore, cli: CliRunner, database_url: str) -> None:
    """While another connection holds the shared `applying` lock, gc deletes nothing and says it skipped."""
    apply_text(store, manifest("policies", POLICIES))
    apply_text(store, manifest("policies", POLICIES[:3]))
    prune(store, "policies", 1)
    with Database(database_url) as other, other.applying():
        with store.db.applying():  # applies do not wait for each other
            pass
        assert store.db.collect_garbage(batch=1) == GcResult(removed=0, batches=0, skipped=True)
        result = cli.invoke(app, ["gc"])
        assert (result.exit_code, result.stdout) == (0, "skipped: an apply is in progress\n")
        assert unreferenced(store.db) == 2
    result = cli.invoke(app, ["gc", "-o", "json"])
    expected = '{\n  "removed": 2,\n  "batches": 1,\n  "skipped": false,\n  "textsRemoved": 1\n}\n'
    assert (result.exit_code, result.stdout) == (0, expected)
    assert unreferenced(store.db) == 0
