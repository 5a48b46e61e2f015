"""Tests for kbctl.manifest: the KnowledgeBase models, loading, and problems at exact file:line places."""

from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path

import pytest

from kbctl.errors import ManifestError, ManifestProblem
from kbctl.manifest import (
    API_VERSION,
    DEFAULT_MODEL,
    KIND,
    Chunking,
    KnowledgeBase,
    LoadedManifest,
    Metadata,
    Source,
    Spec,
    json_schema,
    load_manifests,
    parse_manifests,
    write_schema,
)
from kbctl.manifest.digest import ManifestDigests, manifest_digests, sha256_json
from kbctl.manifest.load import _main

SCHEMA_FILE = Path(__file__).resolve().parent.parent / "schemas" / "knowledgebase.schema.json"

HEADER = "apiVersion: kbctl.dev/v1alpha1\nkind: KnowledgeBase\n"
SOURCES = "spec:\n  sources:\n    - name: faq\n      text: hello\n"
DNS_LABEL_RULE = "must consist of lowercase letters, digits and '-', and start and end with a letter or digit"
SOURCE_NAME_RULE = (
    "must consist of lowercase letters, digits, '-', '_' and '.', and start and end with a letter or digit"
)
LABEL_CHARS = "letters, digits, '-', '_' and '.', starting and ending with a letter or digit"


def manifest(name: str = "docs", spec: str = SOURCES) -> str:
    """A manifest whose metadata.name is on line 4 and whose spec starts on line 5."""
    return f"{HEADER}metadata:\n  name: {name}\n{spec}"


def write(directory: Path, name: str, text: str) -> str:
    """Write dedented text to directory/name (creating parents) and return the path relative to cwd."""
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return name


def problems_of(text: str, path: str = "kb.yaml") -> list[str]:
    """The problems parse_manifests reports for text, as "path:line: field: message" strings."""
    with pytest.raises(ManifestError) as caught:
        parse_manifests(textwrap.dedent(text), path)
    return [str(p) for p in caught.value.problems]


def load_problems(*paths: str, recursive: bool = False) -> list[str]:
    """The problems load_manifests reports for paths, as strings."""
    with pytest.raises(ManifestError) as caught:
        load_manifests(paths, recursive=recursive)
    return [str(p) for p in caught.value.problems]


def spec_problems(spec_body: str) -> list[str]:
    """Problems for a manifest with the given (dedented) spec body; `spec:` is on line 5 of kb.yaml."""
    spec = "spec:\n" + textwrap.indent(textwrap.dedent(spec_body), "  ")
    return problems_of(manifest(spec=spec))


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run every test in its own directory so problem paths are short and relative."""
    monkeypatch.chdir(tmp_path)


# ---------------------------------------------------------------- models and defaults


def test_defaults_are_filled_in() -> None:
    """A minimal manifest gets every default, and to_manifest() returns the full camelCase manifest."""
    (loaded,) = parse_manifests(manifest(), "kb.yaml")
    kb = loaded.kb
    assert (loaded.path, loaded.line, kb.name) == ("kb.yaml", 1, "docs")
    assert kb.to_manifest() == {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": "docs", "labels": {}},
        "spec": {
            "description": "",
            "sources": [{"name": "faq", "url": None, "text": "hello", "format": "markdown"}],
            "chunking": {"maxChars": 1200, "overlapChars": 150},
            "retrieval": {
                "topK": 10,
                "similarityThreshold": None,  # the model's calibrated value, when queried
                "maxContextTokens": 3000,
                "mode": "hybrid",
                "language": "english",
            },
            "embedding": {"model": DEFAULT_MODEL, "profile": None},
            "versionHistory": 5,
        },
    }


def test_camel_case_keys_are_accepted_and_map_to_snake_case_attributes() -> None:
    """Every camelCase YAML key lands on its snake_case attribute."""
    text = manifest(
        spec="""\
spec:
  description: Product docs
  sources:
    - name: site
      url: https://example.com/docs
      format: text
  chunking: {maxChars: 800, overlapChars: 80}
  retrieval: {topK: 3, similarityThreshold: 0.5, maxContextTokens: 900}
  embedding: {model: openai/text-embedding-3-small}
"""
    )
    kb = parse_manifests(text, "kb.yaml")[0].kb
    assert kb.api_version == API_VERSION and kb.kind == KIND
    assert kb.spec.description == "Product docs"
    assert kb.spec.chunking.max_chars == 800 and kb.spec.chunking.overlap_chars == 80
    retrieval = kb.spec.retrieval
    assert (retrieval.top_k, retrieval.similarity_threshold, retrieval.max_context_tokens) == (3, 0.5, 900)
    assert kb.spec.embedding.model == "openai/text-embedding-3-small"
    source = kb.spec.sources[0]
    assert (source.url, source.text) == ("https://example.com/docs", None)
    assert (source.format, source.kind) == ("text", "url")


def test_models_can_be_built_in_python_with_snake_case_names() -> None:
    """populate_by_name lets Python code use the attribute names; Source.kind tells text from url."""
    kb = KnowledgeBase(
        api_version=API_VERSION,
        kind=KIND,
        metadata=Metadata(name="py", labels={"app.kubernetes.io/name": "kbctl", "tier": ""}),
        spec=Spec(sources=[Source(name="a", text="x")], chunking=Chunking(max_chars=500, overlap_chars=0)),
    )
    assert kb.name == "py"
    assert kb.spec.sources[0].kind == "text"
    assert kb.to_manifest()["spec"]["chunking"] == {"maxChars": 500, "overlapChars": 0}


def test_models_are_frozen() -> None:
    """Models are immutable once validated."""
    kb = parse_manifests(manifest(), "kb.yaml")[0].kb
    with pytest.raises(ValueError, match="frozen"):
        kb.metadata.name = "other"


def test_spec_hash_is_stable_and_changes_with_source_text() -> None:
    """spec_hash is the same for equal specs (however written) and changes when a source's text does."""
    first = parse_manifests(manifest(), "a.yaml")[0].kb
    explicit_defaults = manifest(
        spec="spec:\n  sources: [{name: faq, text: hello, format: markdown}]\n  chunking: {maxChars: 1200}\n"
    )
    same = parse_manifests(explicit_defaults, "b.yaml")[0].kb
    renamed = parse_manifests(manifest(name="other"), "c.yaml")[0].kb
    edited = manifest(spec="spec:\n  sources: [{name: faq, text: hello!}]\n")
    changed = parse_manifests(edited, "d.yaml")[0].kb
    assert len(first.spec_hash()) == 64
    assert first.spec_hash() == first.spec_hash() == same.spec_hash() == renamed.spec_hash()
    assert changed.spec_hash() != first.spec_hash()


def test_manifest_digests_equal_the_digest_of_each_part_encoded_alone() -> None:
    """manifest_digests assembles the manifest's digest from its sources' encodings: the same digests as
    sha256_json of the whole manifest and of each source's dump, whatever the text and the kinds of source."""
    spec = textwrap.dedent(
        """\
        spec:
          description: "Politique d'accès — ünïcode, \\"quotes\\" and a backslash \\\\"
          sources:
            - name: faq
              text: "héllo \\u2603 wörld\\n\\ttabbed"
            - {name: page, url: "https://example.com/a?b=c"}
            - {name: docs, path: "notes/**/*.md"}
            - {name: repo, git: {url: "https://example.com/r.git", ref: main}}
          chunking: {maxChars: 900, overlapChars: 100}
          retrieval: {topK: 4, mode: vector}
        """
    )
    kb = parse_manifests(manifest(spec=spec), "kb.yaml")[0].kb
    data = kb.to_manifest()
    digests = manifest_digests(data)
    assert digests.manifest == sha256_json(data)
    assert digests.sources == tuple(sha256_json(s.model_dump(by_alias=True, mode="json")) for s in kb.spec.sources)
    assert len(set(digests.sources)) == 4
    assert manifest_digests({"kind": "x"}) == ManifestDigests(sha256_json({"kind": "x"}), ())


# ---------------------------------------------------------------- sources


def test_both_url_and_text_is_reported_at_the_source() -> None:
    """The spec's example: the 2nd source sets both url and text, reported at that list item's line."""
    path = write(
        Path.cwd(),
        "site.yaml",
        """\
        apiVersion: kbctl.dev/v1alpha1
        kind: KnowledgeBase
        metadata:
          name: site
        spec:
          sources:
            - name: intro
              text: Welcome.
            - name: docs
              url: https://example.com/docs
              text: also inline
        """,
    )
    assert load_problems(path) == ["site.yaml:9: spec.sources[1]: set exactly one of url, text, path, git or crawl"]


def test_neither_url_nor_text_is_reported_at_the_source() -> None:
    """A source with neither url nor text is also "set exactly one"."""
    assert spec_problems("sources:\n  - name: a\n") == [
        "kb.yaml:7: spec.sources[0]: set exactly one of url, text, path, git or crawl"
    ]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://example.com/file", "URL scheme must be http or https, got 'ftp'"),
        ("https://user:secret@example.com/", "URL must not contain credentials"),
        ("https://token@example.com/", "URL must not contain credentials"),
        ("https:///path-only", "URL must have a host"),
        ("example.com/docs", "URL must start with http:// or https://"),
        ("https://example.com:99999/", "URL is malformed: Port out of range 0-65535"),
        ("https://example.com/a b", "URL must not contain whitespace or control characters"),
        ("''", "must not be empty"),
    ],
)
def test_bad_urls_are_rejected_with_a_reason(url: str, message: str) -> None:
    """Only absolute http(s) URLs with a host and without credentials are accepted."""
    assert spec_problems(f"sources:\n  - name: a\n    url: {url}\n") == [f"kb.yaml:8: spec.sources[0].url: {message}"]


def test_http_and_https_urls_are_accepted() -> None:
    """Plain http and https URLs (any case of scheme, with port and query) pass."""
    text = manifest(spec="spec:\n  sources:\n    - {name: a, url: 'HTTP://a.example:8080/x?q=1'}\n")
    assert parse_manifests(text, "kb.yaml")[0].kb.spec.sources[0].kind == "url"


def test_whitespace_only_text_is_rejected() -> None:
    """Inline text must have some content."""
    assert spec_problems("sources:\n  - name: a\n    text: '  '\n") == [
        "kb.yaml:8: spec.sources[0].text: must not be empty or whitespace-only"
    ]


def test_duplicate_source_names_are_reported_at_the_later_name() -> None:
    """A reused source name is reported where it is reused, pointing at the first use."""
    body = "sources:\n  - {name: faq, text: a}\n  - {name: other, text: b}\n  - {name: faq, text: c}\n"
    assert spec_problems(body) == [
        "kb.yaml:9: spec.sources[2].name: duplicate source name 'faq' (also spec.sources[0])"
    ]


def test_duplicate_source_names_are_reported_alongside_other_source_problems() -> None:
    """Duplicates are found even when another source is invalid too."""
    body = "sources:\n  - {name: faq, text: a}\n  - {name: faq, text: b, format: html}\n"
    assert spec_problems(body) == [
        "kb.yaml:8: spec.sources[1].name: duplicate source name 'faq' (also spec.sources[0])",
        "kb.yaml:8: spec.sources[1].format: must be one of: markdown, text (the others go with path or git)",
    ]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("Bad_Name", SOURCE_NAME_RULE),
        ("-a", SOURCE_NAME_RULE),
        ("a" * 64, "must be at most 63 characters"),
        ("''", "must not be empty"),
    ],
)
def test_source_name_rules(name: str, message: str) -> None:
    """Source names are lowercase alphanumerics with '-', '_' and '.', at most 63 characters."""
    assert spec_problems(f"sources:\n  - name: {name}\n    text: x\n") == [
        f"kb.yaml:7: spec.sources[0].name: {message}"
    ]


def test_source_names_may_contain_dots_and_underscores() -> None:
    """Names like 'v1.2_notes' are valid source names."""
    text = manifest(spec="spec:\n  sources: [{name: v1.2_notes, text: x}]\n")
    assert parse_manifests(text, "kb.yaml")[0].kb.spec.sources[0].name == "v1.2_notes"


# ---------------------------------------------------------------- metadata


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("Docs", DNS_LABEL_RULE),
        ("my_docs", DNS_LABEL_RULE),
        ("docs-", DNS_LABEL_RULE),
        ("d" * 64, "must be at most 63 characters"),
        ("''", "must not be empty"),
        ("42", "must be a string"),
    ],
)
def test_metadata_name_must_be_a_dns_label(name: str, message: str) -> None:
    """metadata.name is a DNS-1123 label."""
    assert problems_of(manifest(name=name)) == [f"kb.yaml:4: metadata.name: {message}"]


def test_valid_labels_are_kept() -> None:
    """Kubernetes-style label keys (with DNS prefix) and values, including empty ones, are accepted."""
    text = f"{HEADER}metadata:\n  name: docs\n  labels:\n    app.kubernetes.io/name: kbctl\n    Tier_1: ''\n"
    text += "spec:\n  sources: [{name: a, text: x}]\n"
    labels = parse_manifests(text, "kb.yaml")[0].kb.metadata.labels
    assert labels == {"app.kubernetes.io/name": "kbctl", "Tier_1": ""}


def test_bad_labels_are_reported_per_key_and_value() -> None:
    """Bad label keys point at the key, bad values at the value, each with the Kubernetes rule broken."""
    text = """\
        apiVersion: kbctl.dev/v1alpha1
        kind: KnowledgeBase
        metadata:
          name: docs
          labels:
            ok: fine
            Bad/x: v
            "has space": v
            team: "two words"
            version: 2
        spec:
          sources: [{name: a, text: x}]
        """
    prefix_rule = "(lowercase letters, digits, '-' and '.', at most 253 characters)"
    assert problems_of(text) == [
        f"kb.yaml:7: metadata.labels[\"Bad/x\"]: invalid label key: the prefix before '/' must be a DNS "
        f"subdomain {prefix_rule}",
        f'kb.yaml:8: metadata.labels["has space"]: invalid label key: the name must be 1-63 characters of '
        f"{LABEL_CHARS}",
        f'kb.yaml:9: metadata.labels["team"]: invalid label value: must be empty or 1-63 characters of {LABEL_CHARS}',
        'kb.yaml:10: metadata.labels["version"]: must be a string',
    ]


# ---------------------------------------------------------------- chunking, retrieval, embedding


def test_overlap_must_be_less_than_max_chars() -> None:
    """overlapChars >= maxChars is reported at overlapChars, naming maxChars' value."""
    assert spec_problems("sources: [{name: a, text: x}]\nchunking:\n  maxChars: 500\n  overlapChars: 500\n") == [
        "kb.yaml:9: spec.chunking.overlapChars: must be less than maxChars (500)"
    ]


def test_default_overlap_is_checked_against_a_small_max_chars() -> None:
    """The default overlap (150) is checked too, at the chunking key's line as overlapChars is unset."""
    assert spec_problems("sources: [{name: a, text: x}]\nchunking:\n  maxChars: 100\n") == [
        "kb.yaml:7: spec.chunking.overlapChars: must be less than maxChars (100)"
    ]


@pytest.mark.parametrize(
    ("block", "field", "message"),
    [
        ("chunking: {maxChars: 99}", "chunking.maxChars", "must be at least 100"),
        ("chunking: {maxChars: 100001}", "chunking.maxChars", "must be at most 100000"),
        ("chunking: {overlapChars: -1}", "chunking.overlapChars", "must be at least 0"),
        ("chunking: {maxChars: '1200'}", "chunking.maxChars", "must be an integer"),
        ("chunking: {maxChars: 1200.5}", "chunking.maxChars", "must be an integer"),
        ("retrieval: {topK: 0}", "retrieval.topK", "must be at least 1"),
        ("retrieval: {topK: 201}", "retrieval.topK", "must be at most 200"),
        ("retrieval: {topK: true}", "retrieval.topK", "must be an integer"),
        ("retrieval: {similarityThreshold: 1.5}", "retrieval.similarityThreshold", "must be at most 1.0"),
        ("retrieval: {similarityThreshold: -2}", "retrieval.similarityThreshold", "must be at least -1.0"),
        ("retrieval: {similarityThreshold: high}", "retrieval.similarityThreshold", "must be a number"),
        (
            "retrieval: {similarityThreshold: .nan}",
            "retrieval.similarityThreshold",
            "must be a finite number",
        ),
        ("retrieval: {maxContextTokens: 0}", "retrieval.maxContextTokens", "must be at least 1"),
        ("embedding: {model: ''}", "embedding.model", "must not be empty"),
        ("embedding: {model: minilm}", "embedding.model", "must be of the form provider/name, got 'minilm'"),
        ("embedding: {model: local/}", "embedding.model", "must be of the form provider/name, got 'local/'"),
        ("description: 5", "description", "must be a string"),
        ("chunking: [1, 2]", "chunking", "must be a mapping"),
    ],
)
def test_bad_values_get_short_messages_at_the_value_line(block: str, field: str, message: str) -> None:
    """Type and range errors are short, human and located at the value (line 7, after the sources line)."""
    assert spec_problems(f"sources: [{{name: a, text: x}}]\n{block}\n") == [f"kb.yaml:7: spec.{field}: {message}"]


def test_integer_similarity_threshold_is_a_number() -> None:
    """An integer is a valid number for similarityThreshold."""
    text = manifest(spec="spec:\n  sources: [{name: a, text: x}]\n  retrieval: {similarityThreshold: 0}\n")
    assert parse_manifests(text, "kb.yaml")[0].kb.spec.retrieval.similarity_threshold == 0.0


def test_wrong_format_lists_the_choices() -> None:
    """A Literal field's error lists the allowed values."""
    assert spec_problems("sources:\n  - {name: a, text: x, format: html}\n") == [
        "kb.yaml:7: spec.sources[0].format: must be one of: markdown, text (the others go with path or git)"
    ]


def test_sources_must_be_a_non_empty_list() -> None:
    """spec.sources needs at least one source, and must be a list."""
    assert spec_problems("sources: []\n") == ["kb.yaml:6: spec.sources: must have at least 1 item"]
    assert spec_problems("sources:\n  name: a\n") == ["kb.yaml:6: spec.sources: must be a list"]


# ---------------------------------------------------------------- structure


def test_missing_required_fields_are_reported_at_the_parent_mapping() -> None:
    """A missing field is reported at the line of the mapping that should hold it."""
    text = """\
        # leading comment
        apiVersion: kbctl.dev/v1alpha1
        kind: KnowledgeBase
        metadata:
          labels: {}
        spec:
          sources:
            - text: hello
        """
    assert problems_of(text) == [
        "kb.yaml:4: metadata.name: required field is missing",
        "kb.yaml:8: spec.sources[0].name: required field is missing",
    ]


def test_missing_top_level_fields_are_reported_at_the_document_start() -> None:
    """Missing apiVersion, metadata and spec are reported at the document's first line."""
    assert problems_of("\n\nkind: KnowledgeBase\n") == [
        "kb.yaml:3: apiVersion: required field is missing",
        "kb.yaml:3: metadata: required field is missing",
        "kb.yaml:3: spec: required field is missing",
    ]


def test_a_mapping_without_api_version_and_kind_is_not_read_further() -> None:
    """Without apiVersion and kind a document is no KnowledgeBase: only those two are reported, so the
    keys of some other file (a symlink to a password file) are never echoed."""
    assert problems_of("\nroot:$6$hash:19000:0:99999:7:::\nmetadata: {name: x}\n") == [
        "kb.yaml:2: apiVersion: required field is missing",
        "kb.yaml:2: kind: required field is missing",
    ]


def test_unknown_field_suggests_the_closest_allowed_name() -> None:
    """An unknown key is reported at its own line, with a "did you mean" hint when one is close."""
    assert spec_problems("sources: [{name: a, text: x}]\nchunking:\n  maxChar: 500\n") == [
        "kb.yaml:8: spec.chunking.maxChar: unknown field 'maxChar' (did you mean 'maxChars'?)"
    ]


def test_unknown_field_without_a_close_match_has_no_hint() -> None:
    """Unknown keys far from every allowed name get no hint, at any level."""
    text = manifest() + "comments:\n  ready: true\n"
    assert problems_of(text) == ["kb.yaml:9: comments: unknown field 'comments'"]
    assert spec_problems("sources: [{name: a, text: x, color: red}]\n") == [
        "kb.yaml:6: spec.sources[0].color: unknown field 'color'"
    ]


def test_status_and_server_metadata_are_read_and_ignored() -> None:
    """What `get -o yaml` adds (status, metadata.generation, creationTimestamp) applies again as the manifest."""
    plain = parse_manifests(manifest(), "kb.yaml")[0].kb
    written = manifest().replace(
        "  name: docs\n", "  name: docs\n  generation: 4\n  creationTimestamp: '2026-12-01T00:00:00Z'\n"
    )
    assert written != manifest()
    [loaded] = parse_manifests(written + "status:\n  version: 3\n", "kb.yaml")
    assert loaded.kb == plain and loaded.kb.spec_hash() == plain.spec_hash()


def test_snake_case_keys_are_reported_as_written() -> None:
    """A field written in snake_case is accepted, and its problems name it as written."""
    assert spec_problems("sources: [{name: a, text: x}]\nretrieval:\n  top_k: 0\n") == [
        "kb.yaml:8: spec.retrieval.top_k: must be at least 1"
    ]


def test_unsupported_api_version_and_kind() -> None:
    """An object that claims to be kbctl's (its apiVersion's group, or kind KnowledgeBase) with another version or
    kind is reported once, without noise about the rest of the object; another tool's object is skipped."""
    assert problems_of("apiVersion: kbctl.dev/v1alpha1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\n") == [
        "kb.yaml:2: kind: unsupported kind 'ConfigMap', expected KnowledgeBase",
    ]
    assert problems_of("apiVersion: v1\nkind: KnowledgeBase\nmetadata: {name: x}\n") == [
        "kb.yaml:1: apiVersion: unsupported apiVersion 'v1', expected kbctl.dev/v1alpha1",
    ]
    assert problems_of("apiVersion: kbctl.dev/v2\nkind: Other\n") == [
        "kb.yaml:1: apiVersion: unsupported apiVersion 'kbctl.dev/v2', expected kbctl.dev/v1alpha1",
        "kb.yaml:2: kind: unsupported kind 'Other', expected KnowledgeBase",
    ]
    assert parse_manifests("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\n", "kb.yaml") == []


def test_document_must_be_a_mapping() -> None:
    """A document that is a list or a scalar is a problem at its first line."""
    assert problems_of("- a\n- b\n---\njust text\n") == [
        "kb.yaml:1: expected a mapping with apiVersion, kind, metadata and spec, got a list",
        "kb.yaml:4: expected a mapping with apiVersion, kind, metadata and spec, got a string",
    ]


def test_yaml_syntax_error_has_the_line_of_the_problem() -> None:
    """A YAML syntax error is one problem, at the line from the error's mark."""
    assert problems_of(manifest() + "  chunking: {maxChars: 100\n") == [
        "kb.yaml:10: invalid YAML: expected ',' or '}', but got '<stream end>'"
    ]


def test_duplicate_yaml_keys_are_a_syntax_problem() -> None:
    """A key repeated in one mapping is reported at the repeat."""
    assert problems_of(manifest() + "kind: KnowledgeBase\n") == [
        'kb.yaml:9: invalid YAML: found duplicate key "kind" with value "KnowledgeBase" '
        '(original value: "KnowledgeBase")'
    ]


# ---------------------------------------------------------------- multi-document streams


def test_multi_document_stream_loads_each_document_with_its_line() -> None:
    """Documents separated by --- load in order; empty documents are skipped; lines are absolute."""
    text = f"---\n{manifest(name='one')}---\n---\n# nothing here\n---\n{manifest(name='two')}...\n"
    loaded = parse_manifests(text, "multi.yaml")
    assert [(m.kb.name, m.path, m.line) for m in loaded] == [
        ("one", "multi.yaml", 2),
        ("two", "multi.yaml", 14),
    ]


def test_errors_in_the_second_document_have_absolute_lines() -> None:
    """An error in the 2nd document is reported at its line in the file, not in the document."""
    second = manifest(name="two", spec="spec:\n  sources:\n    - name: a\n      url: ftp://x.org\n")
    text = manifest(name="one") + "---\n" + second
    assert problems_of(text) == ["kb.yaml:17: spec.sources[0].url: URL scheme must be http or https, got 'ftp'"]


def test_windows_line_endings_split_documents_and_keep_lines() -> None:
    """CRLF streams split at '---' like LF ones, with the same line numbers."""
    text = (manifest(name="a") + "---\n" + manifest(name="a")).replace("\n", "\r\n")
    assert problems_of(text) == [
        "kb.yaml:13: metadata.name: duplicate KnowledgeBase name 'a' (also defined at kb.yaml:1)"
    ]


def test_a_syntax_error_does_not_hide_other_documents() -> None:
    """A broken document is reported, and the documents around it are still validated."""
    text = manifest(name="Bad") + "---\nkey: [unclosed\n---\n" + manifest(name="also-bad", spec="spec: {}\n")
    assert problems_of(text) == [
        f"kb.yaml:4: metadata.name: {DNS_LABEL_RULE}",
        "kb.yaml:11: invalid YAML: expected ',' or ']', but got '<stream end>'",
        "kb.yaml:16: spec.sources: required field is missing",
    ]


def test_block_scalars_survive_document_splitting() -> None:
    """A multi-line text block (with '---' indented inside it) stays intact."""
    block = "      text: |\n        line one\n        ---\n        line three\n"
    spec = "spec:\n  sources:\n    - name: a\n" + block
    (loaded,) = parse_manifests(manifest(spec=spec), "kb.yaml")
    assert loaded.kb.spec.sources[0].text == "line one\n---\nline three\n"


def test_duplicate_knowledge_base_names_are_reported_at_the_second() -> None:
    """Two documents with one metadata.name: the second is reported, pointing at the first."""
    text = manifest(name="x") + "---\n" + manifest(name="x")
    assert problems_of(text, "kb/a.yaml") == [
        "kb/a.yaml:13: metadata.name: duplicate KnowledgeBase name 'x' (also defined at kb/a.yaml:1)"
    ]


# ---------------------------------------------------------------- files, directories, stdin


def test_json_files_are_manifests_too() -> None:
    """JSON is read like YAML, with lines."""
    document = json.loads(json.dumps({"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "j"}}))
    document["spec"] = {"sources": [{"name": "a", "url": "https://x.org"}], "retrieval": {"topK": "3"}}
    Path("kb.json").write_text(json.dumps(document, indent=2), encoding="utf-8")
    assert load_problems("kb.json") == ["kb.json:15: spec.retrieval.topK: must be an integer"]


def test_json_escaped_surrogate_pairs_are_one_character() -> None:
    """JSON writers escape an emoji as a surrogate pair ("\\ud83d\\ude00"): read as the one character it is."""
    document = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "j"}}
    document["spec"] = {"sources": [{"name": "a", "text": "smile \U0001f600"}]}
    Path("kb.json").write_text(json.dumps(document), encoding="utf-8")
    assert "\\ud83d\\ude00" in Path("kb.json").read_text(encoding="utf-8")
    (loaded,) = load_manifests(["kb.json"])
    assert loaded.kb.spec.sources[0].text == "smile \U0001f600"


def test_recursive_directories_are_walked_in_place_however_deep() -> None:
    """Subdirectories are read where they sort, however deep (walked with a stack, not recursion)."""
    write(Path.cwd(), "kb/a.yaml", manifest(name="a"))
    write(Path.cwd(), "kb/b/one.yaml", manifest(name="b"))
    write(Path.cwd(), "kb/c.yaml", manifest(name="c"))
    deep = Path("kb", "d", *(["x"] * 300))
    write(Path.cwd(), str(deep / "deep.yaml"), manifest(name="deep"))
    assert [m.kb.name for m in load_manifests(["kb"], recursive=True)] == ["a", "b", "c", "deep"]


def test_directory_loads_manifest_files_sorted_without_subdirectories() -> None:
    """A directory means its *.yaml, *.yml and *.json files, sorted; other files and subdirs are skipped."""
    write(Path.cwd(), "kb/b.yml", manifest(name="b"))
    write(Path.cwd(), "kb/a.yaml", manifest(name="a"))
    write(Path.cwd(), "kb/c.json", json.dumps(parse_manifests(manifest(name="c"), "x")[0].kb.to_manifest()))
    write(Path.cwd(), "kb/notes.txt", "not yaml: [")
    write(Path.cwd(), "kb/sub/d.yaml", manifest(name="d"))
    loaded = load_manifests(["kb"])
    assert [(m.kb.name, m.path) for m in loaded] == [
        ("a", "kb/a.yaml"),
        ("b", "kb/b.yml"),
        ("c", "kb/c.json"),
    ]


def test_recursive_loads_subdirectories_in_place() -> None:
    """With recursive=True subdirectories are walked too, in sorted order."""
    write(Path.cwd(), "kb/a.yaml", manifest(name="a"))
    write(Path.cwd(), "kb/m/b.yaml", manifest(name="b"))
    write(Path.cwd(), "kb/m/n/c.yaml", manifest(name="c"))
    write(Path.cwd(), "kb/z.yaml", manifest(name="z"))
    loaded = load_manifests(["kb"], recursive=True)
    assert [m.path for m in loaded] == ["kb/a.yaml", "kb/m/b.yaml", "kb/m/n/c.yaml", "kb/z.yaml"]


def test_stdin_is_read_for_dash() -> None:
    """A path of "-" reads manifests from stdin, reported as <stdin>."""
    stdin = io.StringIO(manifest(name="piped") + "---\n" + manifest(name="Bad"))
    with pytest.raises(ManifestError) as caught:
        load_manifests(["-"], stdin=stdin)
    assert [str(p) for p in caught.value.problems] == [f"<stdin>:13: metadata.name: {DNS_LABEL_RULE}"]
    loaded = load_manifests(["-"], stdin=io.StringIO(manifest(name="piped")))
    assert [(m.kb.name, m.path, m.line) for m in loaded] == [("piped", "<stdin>", 1)]


def test_files_and_directories_mix_in_argument_order() -> None:
    """Paths are loaded in the order given: a file, then a directory."""
    write(Path.cwd(), "z.yaml", manifest(name="z"))
    write(Path.cwd(), "kb/a.yaml", manifest(name="a"))
    assert [m.kb.name for m in load_manifests(["z.yaml", "kb/"])] == ["z", "a"]


def test_missing_path_and_empty_directory_are_problems() -> None:
    """A path that does not exist, or a directory or file without manifests, is a problem without a line."""
    Path("empty").mkdir()
    write(Path.cwd(), "blank.yaml", "# nothing yet\n")
    problems = load_problems("nope.yaml", "empty", "blank.yaml")
    assert problems == [
        "nope.yaml: no such file or directory",
        "empty: no manifests found",
        "blank.yaml: no manifests found",
    ]


def test_every_problem_in_every_file_is_reported_in_file_order() -> None:
    """Problems are collected across all files and documents, then raised once, in file order."""
    write(Path.cwd(), "kb/a.yaml", manifest(name="x") + "  retrieval: {topK: 0}\n")
    no_sources = manifest(name="y", spec="spec: {sources: []}\n")
    write(Path.cwd(), "kb/b.yaml", manifest(name="x") + "---\n" + no_sources)
    write(Path.cwd(), "kb/c.yaml", "a: [\n")
    with pytest.raises(ManifestError) as caught:
        load_manifests(["kb", "missing"])
    assert [str(p) for p in caught.value.problems] == [
        "kb/a.yaml:9: spec.retrieval.topK: must be at least 1",
        "kb/b.yaml:4: metadata.name: duplicate KnowledgeBase name 'x' (also defined at kb/a.yaml:1)",
        "kb/b.yaml:14: spec.sources: must have at least 1 item",
        "kb/c.yaml:2: invalid YAML: expected the node content, but found '<stream end>'",
        "missing: no such file or directory",
    ]
    first = caught.value.problems[0]
    assert first == ManifestProblem("kb/a.yaml", 9, "spec.retrieval.topK", "must be at least 1")
    assert str(caught.value) == "\n".join(str(p) for p in caught.value.problems)


def test_a_single_string_is_not_a_list_of_paths() -> None:
    """Passing one path as a bare string is a programming error, not a manifest problem."""
    with pytest.raises(TypeError, match="sequence of paths"):
        load_manifests("kb.yaml")


def test_loaded_manifest_is_a_plain_record() -> None:
    """LoadedManifest carries the KnowledgeBase, its path and its document's first line."""
    write(Path.cwd(), "kb.yaml", "# header\n" + manifest())
    (loaded,) = load_manifests(["kb.yaml"])
    assert loaded == LoadedManifest(kb=loaded.kb, path="kb.yaml", line=2)


# ---------------------------------------------------------------- JSON schema


def test_committed_schema_is_up_to_date() -> None:
    """schemas/knowledgebase.schema.json matches the models."""
    committed = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    assert committed == json_schema(), (
        "schemas/knowledgebase.schema.json is stale; regenerate it with:\n"
        "    python -m kbctl.manifest --write-schema schemas/knowledgebase.schema.json"
    )


def test_schema_is_deterministic_and_describes_the_manifest() -> None:
    """json_schema() is stable, carries $schema and title, and requires the four top-level fields."""
    schema = json_schema()
    assert schema == json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"] == "KnowledgeBase (kbctl.dev/v1alpha1)"
    assert schema["required"] == ["apiVersion", "kind", "metadata", "spec"]
    assert schema["additionalProperties"] is False
    assert set(schema["$defs"]["Chunking"]["properties"]) == {"maxChars", "overlapChars"}


def test_write_schema_writes_indented_json_with_a_trailing_newline(tmp_path: Path) -> None:
    """write_schema writes json_schema() as indented JSON ending in a newline."""
    target = tmp_path / "out.schema.json"
    write_schema(target)
    text = target.read_text(encoding="utf-8")
    assert text.endswith("}\n") and text.startswith('{\n  "$schema"')
    assert json.loads(text) == json_schema()


def test_module_command_writes_the_schema(tmp_path: Path) -> None:
    """`python -m kbctl.manifest --write-schema PATH` writes the same file as write_schema."""
    target = tmp_path / "cli.schema.json"
    assert _main(["--write-schema", str(target)]) == 0
    assert json.loads(target.read_text(encoding="utf-8")) == json_schema()
