"""`kbctl diff` and `apply --dry-run` / `--exit-code` on the real store: exact plans, exit codes, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from kbctl.chunking import chunk_document
from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.embedding import Embedder
from kbctl.engine.diff import diff_knowledge_bases
from kbctl.manifest import parse_manifests
from kbctl.sources.url import FetchPolicy
from tests.support.httpserver import serve

MODEL = "local/all-MiniLM-L6-v2"

REFUNDS = """# Refunds
## Cancelled engagements
A client who cancels more than 30 days before the start date receives a full refund of the deposit.

A client who cancels between 14 and 30 days before the start date receives 50% of the deposit back.

Cancellations less than 14 days before the start date are not refunded.
"""

RETENTION = "Invoices and accounting records are kept for ten years, then destroyed.\n"
FAQ = "# FAQ\nSessions can be moved free of charge up to 48 hours before they start.\n"


def manifest(
    name: str = "policies",
    *,
    refunds: str = REFUNDS,
    retention: str | None = RETENTION,
    extra: str = "",
    description: str = "Client policies.",
    max_chars: int = 150,
) -> str:
    """A KnowledgeBase with a refunds source (3 chunks), optionally a retention source (1 chunk), and `extra`."""

    def block(text: str) -> str:
        return "\n".join("        " + line for line in text.splitlines())

    sources = f"    - name: refunds\n      text: |\n{block(refunds)}\n"
    if retention is not None:
        sources += f"    - name: retention\n      format: text\n      text: |\n{block(retention)}\n"
    return f"""apiVersion: kbctl.dev/v1alpha1
kind: KnowledgeBase
metadata:
  name: {name}
  labels: {{team: ops}}
spec:
  description: {description}
  sources:
{sources}{extra}  chunking: {{maxChars: {max_chars}, overlapChars: 0}}
"""


def write(tmp_path: Path, text: str, name: str = "kb.yaml") -> str:
    """Write a manifest file and return its path."""
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def counts(store: KnowledgeBaseStore) -> dict[str, int]:
    """Row counts of every kb_ table a diff or dry run could touch."""
    extra = {
        t: int(store.db.connection.execute(f"SELECT count(*) FROM {t}").fetchone()[0])  # type: ignore[index]
        for t in ("kb_source_status", "kb_version_sources", "kb_schema_migrations")
    }
    rows = store.db.connection.execute(
        "SELECT name, labels, manifest, current_version, updated_at FROM kb_knowledge_bases ORDER BY name"
    ).fetchall()
    return {**store.db.counts(), **extra, "kb_rows_digest": hash(repr(rows))}


def usage_error(output: str) -> str:
    """The message of a usage error: what follows "Error: " after the usage lines (plain text, no box)."""
    assert output.startswith("Usage: kbctl ") and "│" not in output, output
    return output[output.index("\nError: ") + len("\nError: ") :].strip()


def tokens(store: KnowledgeBaseStore, text: str, *, max_chars: int = 150, markdown: bool = True) -> list[int]:
    """Model tokens each chunk of `text` sends the model (heading path and text), chunked as the manifests above
    chunk it: what apply bills against spec.limits.maxTokensToEmbed."""
    chunks = chunk_document(text, max_chars=max_chars, overlap_chars=0, markdown=markdown)
    return store.embedder(MODEL).count_tokens([c.embed_text for c in chunks])


def test_diff_after_apply_is_empty_and_exits_0(store: KnowledgeBaseStore, cli: CliRunner, tmp_path: Path) -> None:
    """Diffing the manifests just applied prints 'unchanged' and exits 0."""
    path = write(tmp_path, manifest())
    assert cli.invoke(app, ["apply", "--wait", "-f", path]).exit_code == 0
    result = cli.invoke(app, ["diff", "-f", path])
    assert (result.exit_code, result.stdout) == (0, "KnowledgeBase/policies unchanged\n")


def test_diff_of_a_new_knowledge_base_bills_each_new_text_once(
    store: KnowledgeBaseStore, cli: CliRunner, tmp_path: Path
) -> None:
    """A new KB lists its sources as added with their tokens; text already in the cache costs nothing."""
    refunds = sum(tokens(store, REFUNDS))
    retention = sum(tokens(store, RETENTION, markdown=False))
    path = write(tmp_path, manifest())
    result = cli.invoke(app, ["diff", "-f", path])
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        "KnowledgeBase/policies created",
        f"  source refunds added: +3 chunks, ~{refunds} tokens to embed",
        f"  source retention added: +1 chunk, ~{retention} tokens to embed",
    ]
    store.apply(parse_manifests(manifest("first"), "kb.yaml"))
    again = cli.invoke(app, ["diff", "-f", path])
    assert again.stdout.splitlines() == [
        "KnowledgeBase/policies created",
        "  source refunds added: +3 chunks",
        "  source retention added: +1 chunk",
    ]


def test_diff_of_one_changed_paragraph(store: KnowledgeBaseStore, cli: CliRunner, tmp_path: Path) -> None:
    """Editing one paragraph shows one chunk added and one removed, and exactly its tokens; exit code 1."""
    store.apply(parse_manifests(manifest(), "kb.yaml"))
    changed = REFUNDS.replace("50% of the deposit", "40% of the deposit")
    [new_chunk] = [c for c in chunk_document(changed, max_chars=150, overlap_chars=0) if "40%" in c.text]
    [expected] = store.embedder(MODEL).count_tokens([new_chunk.embed_text])
    result = cli.invoke(app, ["diff", "-f", write(tmp_path, manifest(refunds=changed))])
    assert expected > 0
    assert (result.exit_code, result.stdout.splitlines()) == (
        1,
        [
            "KnowledgeBase/policies configured",
            f"  source refunds changed: +1 \u22121 chunks, ~{expected} tokens to embed",
        ],
    )


def test_diff_of_fields_and_added_and_removed_sources(
    store: KnowledgeBaseStore, cli: CliRunner, tmp_path: Path
) -> None:
    """A spec field change, a new source and a removed one are each one exact line."""
    store.apply(parse_manifests(manifest(), "kb.yaml"))
    faq = sum(tokens(store, FAQ))
    extra = "    - name: faq\n      text: |\n" + "".join(f"        {line}\n" for line in FAQ.splitlines())
    text = manifest(retention=None, extra=extra, description="Policies for clients.")
    result = cli.invoke(app, ["diff", "-f", write(tmp_path, text)])
    assert (result.exit_code, result.stdout.splitlines()) == (
        1,
        [
            "KnowledgeBase/policies configured",
            '  spec.description: "Client policies." → "Policies for clients."',
            f"  source faq added: +1 chunk, ~{faq} tokens to embed",
            "  source retention removed: \u22121 chunk",
        ],
    )


def test_diff_of_a_chunking_change_rechunks_unchanged_sources(
    store: KnowledgeBaseStore, cli: CliRunner, tmp_path: Path
) -> None:
    """Changing maxChars shows the field and every re-chunked source, sources whose chunks stay the same too."""
    store.apply(parse_manifests(manifest(), "kb.yaml"))
    refunds = sum(tokens(store, REFUNDS, max_chars=1000))
    result = cli.invoke(app, ["diff", "-f", write(tmp_path, manifest(max_chars=1000))])
    assert (result.exit_code, result.stdout.splitlines()) == (
        1,
        [
            "KnowledgeBase/policies configured",
            "  spec.chunking.maxChars: 150 → 1000",
            f"  source refunds changed: +1 \u22123 chunks, ~{refunds} tokens to embed",
            "  source retention changed: same chunks",
        ],
    )


def test_diff_never_fetches_url_sources(store: KnowledgeBaseStore, cli: CliRunner, tmp_path: Path) -> None:
    """URL sources apply would fetch show 'would be fetched'; diff itself never sends the loopback server a request."""
    store.apply(parse_manifests(manifest(), "kb.yaml"))
    with serve() as site:
        site.route("/about", body="<h1>About</h1><p>We advise logistics firms on warehouse automation.</p>")
        path = write(tmp_path, manifest(extra=f"    - name: about\n      url: {site.url('/about')}\n"))
        added = cli.invoke(app, ["diff", "-f", path])
        assert (site.total_hits, added.exit_code, added.stdout.splitlines()) == (
            0,
            1,
            ["KnowledgeBase/policies configured", "  source about added: would be fetched"],
        )
        store.apply_paths([path])  # the SSRF guard refuses loopback: the source never gets content
        never = cli.invoke(app, ["diff", "-f", path])
        assert (site.total_hits, never.exit_code, never.stdout.splitlines()) == (
            0,
            1,
            ["KnowledgeBase/policies unchanged", "  source about would be fetched"],
        )
        store.fetch_policy = FetchPolicy(allowed_addresses=frozenset({("127.0.0.1", site.port)}))
        assert not store.apply_paths([path]).failed and site.total_hits == 1
        fetched = cli.invoke(app, ["diff", "-f", path])
        assert (site.total_hits, fetched.exit_code, fetched.stdout) == (1, 0, "KnowledgeBase/policies unchanged\n")


def test_diff_errors_exit_2(cli: CliRunner, tmp_path: Path) -> None:
    """An unknown file, an invalid manifest or a bad selector exit 2 (1 means differences)."""
    missing = cli.invoke(app, ["diff", "-f", str(tmp_path / "nope.yaml")])
    assert (missing.exit_code, missing.stdout, missing.stderr) == (
        2,
        "",
        f"{tmp_path / 'nope.yaml'}: no such file or directory\n",
    )
    bad = cli.invoke(app, ["diff", "-f", write(tmp_path, manifest().replace("maxChars", "maxChar"))])
    assert bad.exit_code == 2 and "spec.chunking.maxChar" in bad.stderr
    model = manifest() + "  embedding: {model: local/no-such-model}\n"
    unknown = cli.invoke(app, ["diff", "-f", write(tmp_path, model)])
    assert (unknown.exit_code, unknown.stderr) == (
        2,
        "Error: unknown local model 'no-such-model': the local provider has all-MiniLM-L6-v2, bge-small-en-v1.5\n",
    )
    selector = cli.invoke(app, ["diff", "-f", str(tmp_path), "--prune", "-l", "team in (web"])
    assert (selector.exit_code, usage_error(selector.output)) == (
        2,
        "Invalid value for '-l' / '--selector': 'team in (web' is not a requirement: use key=value, key==value, "
        "key!=value, key, !key, key in (a,b) or key notin (a,b)",
    )


def test_diff_json_is_the_plan_as_data(store: KnowledgeBaseStore, cli: CliRunner, tmp_path: Path) -> None:
    """`diff -o json` dumps the DiffReport (actions, fields, sources); text shared by two KBs is billed once."""
    store.apply(parse_manifests(manifest(), "kb.yaml"))
    changed = REFUNDS.replace("50% of the deposit", "40% of the deposit")
    [new_chunk] = [c for c in chunk_document(changed, max_chars=150, overlap_chars=0) if "40%" in c.text]
    [expected] = store.embedder(MODEL).count_tokens([new_chunk.embed_text])
    path = write(tmp_path, manifest(refunds=changed, retention=None) + "---\n" + manifest("copy", refunds=changed))
    result = cli.invoke(app, ["diff", "-f", path, "-o", "json"])
    assert result.exit_code == 1
    unchanged = {"fetch": False, "chunksAdded": 0, "chunksRemoved": 0, "tokensToEmbed": 0, "truncated": 0}
    assert json.loads(result.stdout) == {
        "results": [
            {
                "name": "policies",
                "action": "configured",
                "version": 1,
                "fields": [],
                "sources": [
                    {
                        "name": "refunds",
                        "kind": "text",
                        "change": "changed",
                        "fetch": False,
                        "chunksAdded": 1,
                        "chunksRemoved": 1,
                        "tokensToEmbed": expected,
                        "truncated": 0,
                    },
                    {"name": "retention", "kind": "text", "change": "removed", **unchanged, "chunksRemoved": 1},
                ],
                "overLimits": [],
                "unreadable": [],
                "calibrates": False,
            },
            {
                "name": "copy",
                "action": "created",
                "version": None,
                "fields": [],
                "sources": [
                    {"name": "refunds", "kind": "text", "change": "added", **unchanged, "chunksAdded": 3},
                    {"name": "retention", "kind": "text", "change": "added", **unchanged, "chunksAdded": 1},
                ],
                "overLimits": [],
                "unreadable": [],
                "calibrates": False,
            },
        ],
        "differs": True,
        "tokensToEmbed": expected,
    }


def test_diff_and_dry_run_write_nothing(store: KnowledgeBaseStore, cli: CliRunner, tmp_path: Path) -> None:
    """Neither diff nor apply --dry-run (with prune) writes a row, whatever they find to change."""
    store.apply(parse_manifests(manifest() + "---\n" + manifest("legacy"), "kb.yaml"))
    before = counts(store)
    changed = manifest(refunds=REFUNDS + "\nA brand new paragraph about refunds.\n") + "---\n" + manifest("fresh")
    path = write(tmp_path, changed)
    assert cli.invoke(app, ["diff", "-f", path, "--prune", "-l", "team=ops"]).exit_code == 1
    assert cli.invoke(app, ["apply", "-f", path, "--dry-run", "--prune", "-l", "team=ops"]).exit_code == 0
    assert counts(store) == before


def test_unchanged_diff_needs_no_tokenizer(store: KnowledgeBaseStore) -> None:
    """When nothing is new, diff counts no tokens and embeds nothing (so no model file is ever loaded)."""
    kbs = [m.kb for m in parse_manifests(manifest(), "kb.yaml")]
    store.apply(kbs)
    calls: list[str] = []

    class Recording:
        """The real embedder, recording which of its methods diff calls."""

        def __init__(self, inner: Embedder) -> None:
            self.inner, self.model_id, self.dimensions = inner, inner.model_id, inner.dimensions

        def embed(self, texts: object) -> object:
            calls.append("embed")
            return self.inner.embed(texts)  # type: ignore[arg-type]

        def count_tokens(self, texts: object) -> object:
            calls.append("count_tokens")
            return self.inner.count_tokens(texts)  # type: ignore[arg-type]

    report = diff_knowledge_bases(store.db, kbs, lambda model: Recording(store.embedder(model)))  # type: ignore[arg-type,return-value]
    assert ([r.action for r in report.results], report.differs, calls) == (["unchanged"], False, [])


def test_apply_dry_run_prints_the_plan(store: KnowledgeBaseStore, cli: CliRunner, tmp_path: Path) -> None:
    """`apply --dry-run` prints each action with '(dry run)' and diff's detail lines, and exits 0."""
    store.apply(parse_manifests(manifest(), "kb.yaml"))
    text = manifest(retention=None, description="Policies.") + "---\n" + manifest("other")
    result = cli.invoke(app, ["apply", "-f", write(tmp_path, text), "--dry-run"])
    assert (result.exit_code, result.stdout.splitlines()) == (
        0,
        [
            "KnowledgeBase/policies configured (dry run)",
            '  spec.description: "Client policies." → "Policies."',
            "  source retention removed: \u22121 chunk",
            "KnowledgeBase/other created (dry run)",
            "  source refunds added: +3 chunks",
            "  source retention added: +1 chunk",
        ],
    )
    assert [k.name for k in store.list()] == ["policies"]


def test_apply_exit_code_is_2_on_change_then_0(store: KnowledgeBaseStore, cli: CliRunner, tmp_path: Path) -> None:
    """`apply --exit-code` exits 2 when it created something, 0 on the unchanged re-apply; counts stay equal."""
    path = write(tmp_path, manifest())
    first = cli.invoke(app, ["apply", "--wait", "-f", path, "--exit-code"])
    assert (first.exit_code, first.stdout.splitlines()[-1]) == (2, "applied 1 resource")
    after_first = store.db.counts()
    second = cli.invoke(app, ["apply", "--wait", "-f", path, "--exit-code"])
    assert (second.exit_code, second.stdout.splitlines()) == (
        0,
        ["KnowledgeBase/policies unchanged (version 1)", "applied 1 resource"],
    )
    assert store.db.counts() == after_first
    dry = cli.invoke(app, ["apply", "-f", write(tmp_path, manifest(description="New.")), "--dry-run", "--exit-code"])
    assert dry.exit_code == 2
    failed = cli.invoke(app, ["apply", "--wait", "-f", write(tmp_path, manifest() + "  embedding: {model: local/x}\n")])
    assert failed.exit_code == 1
