"""The libyaml fast path of manifest loading: the same data, lines and problems as ruamel's path, which it leaves
every uncertain document to (aliases, anchors, tags, deep nesting, duplicate keys, YAML 1.1 spellings)."""

from __future__ import annotations

import functools
import json
import re
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kbctl.errors import ManifestError
from kbctl.inputs import yaml_budget as _yaml_budget
from kbctl.inputs import yaml_lines as _yaml_lines
from kbctl.inputs.bounds import MAX_DEPTH
from kbctl.inputs.yaml_lines import MAX_NODES, YamlDocument, load_documents, locate, split_documents
from kbctl.manifest import load_manifests, parse_manifests

HEADER = "apiVersion: kbctl.dev/v1alpha1\nkind: KnowledgeBase\nmetadata:\n  name: docs\n"

pytestmark = pytest.mark.skipif(not _yaml_lines._LIBYAML, reason="PyYAML is built without libyaml here")


def shape(value: Any) -> Any:
    """value with the type of every part spelled out (1, 1.0 and True compare equal; their shapes do not)."""
    if isinstance(value, dict):
        return ("dict", [(key, shape(item)) for key, item in value.items()])
    if isinstance(value, list):
        return ("list", [shape(item) for item in value])
    return (type(value).__name__, repr(value))


@contextmanager
def libyaml(enabled: bool) -> Iterator[None]:
    """Turn the fast path on or off (off: every document is read by ruamel, as before the fast path)."""
    with mock.patch.object(_yaml_lines, "_LIBYAML", enabled):
        yield


def outcome(text: str, *, fast: bool) -> list[Any]:
    """What load_documents gives for text: each document's typed data and line, or each problem."""
    with libyaml(fast):
        return [
            ("document", shape(item.data), item.line)
            if isinstance(item, YamlDocument)
            else ("problem", item.line, item.message)
            for item in load_documents(text, known_keys=("apiVersion", "kind"))
        ]


def problems(text: str, *, fast: bool) -> list[str]:
    """The file:line problems parse_manifests reports for text."""
    with libyaml(fast), pytest.raises(ManifestError) as caught:
        parse_manifests(text, "kb.yaml")
    return [str(problem) for problem in caught.value.problems]


def fast_reads(text: str) -> bool:
    """Whether the fast path reads every non-empty document of text itself (leaving none to ruamel)."""
    chunks = [chunk for _, chunk in split_documents(text) if not _yaml_lines._is_empty(chunk)]
    return all(_yaml_lines._fast_load(chunk, MAX_NODES) is not None for chunk in chunks)


@contextmanager
def ruamel_forbidden() -> Iterator[None]:
    """Make any use of ruamel's loader fail the test."""

    def refuse(*_: object) -> None:
        raise AssertionError("ruamel's loader was used")

    with mock.patch.object(_yaml_lines, "_loader", refuse), mock.patch.object(_yaml_budget, "YAML", refuse):
        yield


@contextmanager
def ruamel_counted() -> Iterator[list[int]]:
    """Count the ruamel loaders made (one per document ruamel reads)."""
    made: list[int] = []
    real = _yaml_lines._loader

    def counting(budget: Any) -> Any:
        made.append(1)
        return real(budget)

    with mock.patch.object(_yaml_lines, "_loader", counting):
        yield made


# ---------------------------------------------------------------- generated documents: the same data both ways

# Plain scalars whose meaning differs between YAML 1.1 (libyaml, PyYAML) and 1.2 (ruamel), or that look like
# numbers, dates, nulls or booleans, next to ordinary words.
TRICKY_PLAIN = (
    "on off yes no y n Yes NO On 0777 007 00 0x1F 0o17 0b101 1_000 1:20 12:30:00 2024-01-01 2024-13-45 "
    "2001-12-14t21:59:43.10-05:00 .inf -.Inf .NaN ~ null Null NULL nUll True TRUE true false False fALSE -0 +0 0 "
    "1 -1 +12 123456789012345678901234567890 1e3 1E3 1e-3 1.5e3 1.e3 -1.5 .5 -.5 +.5 .5e+3 1. 0.0 -0.0 01.5 1e400 "
    "<< = . - -x +x a-b a.b a_b 'x http://example.com/a?b=c x#y ~x é 日本語 😀 Ünïcödé"
).split()
WORDS = st.from_regex(r"[a-z][a-z0-9-]{0,8}( [a-z0-9]{1,5})?", fullmatch=True)
PRINTABLE = st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\ufeff") | st.sampled_from("\t\x85")
YAML_ESCAPES = ("\\x41", "\\e", "\\N", "\\_", "\\0", "\\/", "\\L", "\\P", "\\U0001F600", "\\ud83d\\ude00", "\\t", "\\ ")


@dataclass(frozen=True)
class Scalar:
    """A scalar and how it is written: plain, single, double, or a block style (|, |-, >+, ...)."""

    style: str
    text: str


@dataclass(frozen=True)
class Seq:
    """A list, written as a flow (`[a, b]`) or a block (`- a`)."""

    items: list[Any]
    flow: bool


@dataclass(frozen=True)
class Map:
    """A mapping, written as a flow (`{a: b}`) or a block (`a: b`)."""

    pairs: list[tuple[Scalar, Any]]
    flow: bool


plain = st.builds(Scalar, st.just("plain"), st.sampled_from(TRICKY_PLAIN) | WORDS | st.just(""))
plain_keys = st.builds(Scalar, st.just("plain"), st.sampled_from(TRICKY_PLAIN) | WORDS)
single = st.builds(Scalar, st.just("single"), st.text(PRINTABLE, max_size=12) | st.sampled_from(TRICKY_PLAIN))
double = st.builds(
    Scalar,
    st.just("double"),
    st.builds(
        lambda text, ascii_only, escapes: json.dumps(text, ensure_ascii=ascii_only)[1:-1] + "".join(escapes),
        st.text(PRINTABLE, max_size=12) | st.sampled_from(TRICKY_PLAIN),
        st.booleans(),
        st.lists(st.sampled_from(YAML_ESCAPES), max_size=2),
    ),
)
block = st.builds(
    Scalar,
    st.sampled_from(["|", "|-", "|+", ">", ">-", ">+"]),
    st.lists(st.sampled_from(["", " ", "## Topic", "  indented more", "word\tword", "-- x"]) | WORDS, max_size=5).map(
        "\n".join
    ),
)
scalars = plain | single | double | block
keys = plain_keys | single | double
trees = st.recursive(
    scalars,
    lambda children: (
        st.builds(Seq, st.lists(children, max_size=4), st.booleans())
        | st.builds(Map, st.lists(st.tuples(keys, children), max_size=4), st.booleans())
    ),
    max_leaves=16,
)


def scalar_text(scalar: Scalar, indent: int, flow: bool) -> str:
    """A scalar as YAML (a block scalar's lines indented past indent; written double-quoted in a flow)."""
    if scalar.style == "plain":
        return scalar.text or ("~" if flow else "")
    if scalar.style == "single":
        return "'" + scalar.text.replace("'", "''") + "'"
    if scalar.style == "double":
        return '"' + scalar.text + '"'
    if flow:
        return json.dumps(scalar.text)
    pad = " " * (indent + 2)
    return scalar.style + "".join(f"\n{pad}{line}" if line else "\n" for line in scalar.text.split("\n"))


def flow_text(node: Any) -> str:
    if isinstance(node, Scalar):
        return scalar_text(node, 0, flow=True)
    if isinstance(node, Seq):
        return "[" + ", ".join(flow_text(item) for item in node.items) + "]"
    return "{" + ", ".join(f"{scalar_text(k, 0, flow=True)}: {flow_text(v)}" for k, v in node.pairs) + "}"


def block_text(node: Any, indent: int) -> str:
    """node as block YAML starting on a line of its own at indent (a scalar or flow collection: inline)."""
    pad = " " * indent
    if isinstance(node, Scalar):
        return pad + scalar_text(node, indent, flow=False)
    if node.flow or not (node.items if isinstance(node, Seq) else node.pairs):
        return pad + flow_text(node)
    lines: list[str] = []
    if isinstance(node, Seq):
        for item in node.items:
            lines.append(f"{pad}-{value_text(item, indent)}")
    else:
        for key, value in node.pairs:
            lines.append(f"{pad}{scalar_text(key, indent, flow=False)}:{value_text(value, indent)}")
    return "\n".join(lines)


def value_text(node: Any, indent: int) -> str:
    """What follows `key:` or `-`: a space and a scalar or flow collection, or the block collection below."""
    if isinstance(node, Scalar) or node.flow or not (node.items if isinstance(node, Seq) else node.pairs):
        text = block_text(node, indent).strip(" ")
        return f" {text}" if text else ""
    return "\n" + block_text(node, indent + 2)


documents = st.builds(
    lambda prefix, tree: prefix + block_text(tree, 0) + "\n",
    st.sampled_from(["", "---\n", "# a comment\n---\n", "\n\n"]),
    trees | st.builds(Map, st.lists(st.tuples(keys, trees), min_size=1, max_size=5), st.just(False)),
)
streams = st.lists(documents, min_size=1, max_size=3).map("---\n".join)


@given(streams)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_fast_path_gives_ruamels_data_types_and_lines(text: str) -> None:
    """For generated documents (tricky plain scalars, quotes, block scalars, flows, odd keys), the fast path gives
    exactly the data, Python types, lines and problems that ruamel's path gives."""
    event("read by libyaml" if fast_reads(text) else "left to ruamel")
    assert outcome(text, fast=True) == outcome(text, fast=False)


@pytest.mark.parametrize(
    "text",
    [
        "a:\tb\n",  # ruamel refuses a tab after a colon, libyaml takes it as a space
        "a: b\t\n",  # ... a trailing tab
        "a: x\ty\n",  # ... a tab inside a plain scalar
        "a: |\t\n  x\n",  # ... a tab after a block scalar's indicator
        "a: b\n  \t\nc: d\n",  # ... a tab on a blank line
        "- 'a'\t# c\n",
        "a: |\n  x\t\n  \ty\n",  # tabs inside a block scalar: both read them
        "|\n \n  indented more\n",  # ruamel refuses a blank first line less indented than the next, libyaml reads it
        "a: >-\n  \n   x\n",
        "a: |2\n  \n   x\n",  # ... but not with an indentation indicator
        "a: |\n\n  x\n",  # ... nor after an empty first line
        "|\n# y\n",  # a document that is one block scalar: ruamel reads a `#` line at column 0 as its text
        "a: 'x\ty'\nb: \"x\\ty\"\n",  # ... and inside quotes
        '["a":1]\n',  # ruamel refuses a JSON-style pair in a flow list, libyaml reads it
        "[a: 1, b: 2]\n",
        '{"a":1, "b":[1,2]}\n',  # compact JSON
        "{a:1}\n",
        "a: 1\r\nb: |\r\n  x\r\n  y\r\n",
        "a: b\rc: |\r  x\r  y\rd: e\r",
        "a: \x85b\n",
        "a: b\u2028c: d\n",
        "a: b\n\ufeffc: d\n",
        "%YAML 1.1\n---\na: yes\nb: 0777\n",
        "%TAG ! tag:example.com,2000:\n---\na: !x b\n",
        "a: 'unterminated\n",
        "a: \x00\n",
        'a: "\\ud83d\\ude00"\n',
        'a: "\\ud83d"\n',
        "? [a, b]\n: c\n",
        "? |\n  block key\n: v\n",
        "1: a\n'1': b\n",
        "1: a\n1.0: b\n",
        "true: a\n1: b\n",
        "null: a\n~: b\n",
        "-0: a\n0.0: b\n",
        "a: " + "9" * 5000 + "\n",
        "a" * 2000 + ": b\n",
        "--- |\n  text\n--- >\n  folded\n  text\n--- plain\n",
        "---\nnull\n--- ~\n---\n''\n",
        "- ? a\n- [? b : c]\n- {? d}\n",
    ],
)
def test_documents_libyaml_and_ruamel_read_differently_are_read_as_ruamel_reads_them(text: str) -> None:
    """Text where libyaml and ruamel part ways (tabs, JSON pairs in flow lists, YAML 1.1 line breaks and directives,
    surrogate escapes, non-str keys) gives exactly what ruamel's path gives."""
    assert outcome(text, fast=True) == outcome(text, fast=False)


LINE_BREAKS = ("\n", "\r\n", "\r", "\x85", "\u2028")
STREAM_LINES = (
    "---",
    "--- a: 1",
    "---x",
    "...",
    "... # end",
    "....",
    "# c",
    "%YAML 1.2",
    "",
    "  ",
    "a: b",
    "  - ---",
    "x",
)


def reference_split(text: str) -> list[tuple[int, str]]:
    """split_documents as it was written before the fast path: on a list of every line of the text."""
    text = text.removeprefix("\ufeff")
    lines, start = [], 0
    for match in re.finditer(r"\r\n|[\n\r\x85\u2028\u2029]", text):
        lines.append(text[start : match.end()])
        start = match.end()
    if start < len(text):
        lines.append(text[start:])
    doc_start = re.compile(r"---(?:[ \t\r\n\x85\u2028\u2029]|$)")
    doc_end = re.compile(r"\.\.\.(?:[ \t\r\n\x85\u2028\u2029]|$)")

    def prologue(line: str) -> bool:
        return not line.strip() or line.strip().startswith("#") or line.startswith("%")

    chunks: list[tuple[int, str]] = []
    current: list[str] = []
    first = 0
    for index, line in enumerate(lines):
        if doc_start.match(line) and not all(prologue(x) for x in current):
            chunks.append((first, "".join(current)))
            current, first = [], index
        current.append(line)
        if doc_end.match(line):
            chunks.append((first, "".join(current)))
            current, first = [], index + 1
    if current:
        chunks.append((first, "".join(current)))
    return chunks


@given(st.lists(st.tuples(st.sampled_from(STREAM_LINES), st.sampled_from(LINE_BREAKS)), max_size=12), st.booleans())
@settings(max_examples=300, deadline=None)
def test_split_documents_cuts_where_the_line_by_line_split_did(lines: list[tuple[str, str]], last_break: bool) -> None:
    """split_documents (which no longer makes a list of every line) cuts streams exactly where it used to, with
    the same start lines, whatever the line breaks."""
    text = "".join(line + brk for line, brk in lines)
    if not last_break and lines:
        text = text[: -len(lines[-1][1])]
    assert split_documents(text) == reference_split(text)


# ---------------------------------------------------------------- problems keep their lines


def sources(*items: str) -> str:
    return HEADER + "spec:\n  sources:\n" + "".join(textwrap.indent(textwrap.dedent(item), "    ") for item in items)


def test_an_invalid_document_read_by_libyaml_reports_its_problems_at_their_lines() -> None:
    """A document the fast path reads that fails validation reports the same file:line problems as before,
    the field's line found in the ruamel tree loaded only then."""
    text = sources(
        "- name: faq\n  text: |\n    ## One\n    Body.\n",
        "- name: about\n  format: markdown\n  urll: https://example.com\n",
        "- name: Bad Name\n  text: hi\n",
    )
    assert fast_reads(text)
    found = problems(text, fast=True)
    assert found == [
        "kb.yaml:13: spec.sources[1].urll: unknown field 'urll' (did you mean 'url'?)",
        "kb.yaml:14: spec.sources[2].name: must consist of lowercase letters, digits, '-', '_' and '.', "
        "and start and end with a letter or digit",
    ]
    assert found == problems(text, fast=False)


def test_identity_and_duplicate_name_problems_keep_their_lines() -> None:
    """A wrong apiVersion and a duplicate metadata.name in documents the fast path reads are placed on the same
    lines as before."""
    one = HEADER + "spec:\n  sources:\n    - name: a\n      text: hi\n"
    text = one + "---\n" + one + "---\n" + one.replace("kbctl.dev/v1alpha1", "kbctl.dev/v9")
    assert fast_reads(text)
    found = problems(text, fast=True)
    assert found == [
        "kb.yaml:13: metadata.name: duplicate KnowledgeBase name 'docs' (also defined at kb.yaml:1)",
        "kb.yaml:19: apiVersion: unsupported apiVersion 'kbctl.dev/v9', expected kbctl.dev/v1alpha1",
    ]
    assert found == problems(text, fast=False)


def test_a_document_read_by_libyaml_loads_its_ruamel_tree_only_when_asked() -> None:
    """A fast-path YamlDocument has the data at once and its round-trip tree (and so the lines) on first use."""
    text = "# lead\n---\na:\n  b: [1, 2]\n  c: |\n    x\n"
    with ruamel_forbidden():
        (document,) = load_documents(text)
    assert isinstance(document, YamlDocument)
    assert document.data == {"a": {"b": [1, 2], "c": "x\n"}} and document.line == 3
    with ruamel_counted() as made:
        assert locate(document, [("a",), ("c",)]) == (["a", "c"], 5)
        assert locate(document, [("a",), ("b",), 1]) == (["a", "b", 1], 4)
    assert made == [1]


def test_a_tree_ruamel_cannot_load_places_problems_on_the_documents_first_line() -> None:
    """Should ruamel refuse a document libyaml read, its problems still get a line: the document's first."""
    (document,) = load_documents("\n\na:\n  b: 1\n")
    assert isinstance(document, YamlDocument)
    with mock.patch.object(_yaml_lines, "_loader", side_effect=RuntimeError("refused")):
        assert locate(document, [("a",), ("b",)]) == ([None, None], 3)


# ---------------------------------------------------------------- what is left to ruamel


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: &x [1, 2]\nb: *x\n", None),  # an anchor and an alias: read by ruamel, loads
        ("a: &x 1\n", None),  # an anchor alone
        ("a: !!str 123\nb: !custom value\n", None),  # tags
        ("a: *nowhere\n", "kb.yaml:1: invalid YAML: found undefined alias (text omitted)"),
        ("a: &a [*a]\n", "kb.yaml:1: invalid YAML: an alias refers to a node that contains it"),
        ("a: 1\nb: 2\na: 3\n", "kb.yaml:3: invalid YAML: found a duplicate key"),
        (HEADER + "kind: KnowledgeBase\n", 'kb.yaml:5: invalid YAML: found duplicate key "kind" with value'),
        ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), f"kb.yaml:1: nesting too deep: more than {MAX_DEPTH} levels"),
        (
            "a:\n" + "".join("  " * i + "- \n" for i in range(1, MAX_DEPTH + 1)),
            f"kb.yaml:{MAX_DEPTH + 1}: nesting too deep: more than {MAX_DEPTH} levels",
        ),
        ("a: 0x1F\nb: 1_000\nc: 2024-01-01\nd: .inf\ne: 0777\n", None),  # numbers and dates ruamel reads its own way
        ("<<: {a: 1}\nb: 2\n", None),  # a merge key
    ],
)
def test_aliases_tags_depth_and_duplicates_are_left_to_ruamel(text: str, expected: str | None) -> None:
    """Aliases, anchors, tags, nesting past the limit, duplicate keys and numbers only ruamel reads take ruamel's
    path, with today's data and messages."""
    with ruamel_counted() as made:
        fast = outcome(text, fast=True)
    assert made, "the document was not left to ruamel"
    assert fast == outcome(text, fast=False)
    if expected is not None:
        assert fast[0][0] == "problem" and f"kb.yaml:{fast[0][1]}: {fast[0][2]}".startswith(expected), fast


def test_the_node_budget_is_shared_by_documents_read_either_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nodes the fast path reads count against the file's budget: a later document past it is refused at the
    same line as before."""
    monkeypatch.setattr(_yaml_lines, "_Budget", functools.partial(_yaml_lines._Budget, nodes=30))
    text = "a: [" + ", ".join(["1"] * 18) + "]\n---\nb:\n" + "".join(f"  - {i}\n" for i in range(15))
    fast = outcome(text, fast=True)
    assert fast == outcome(text, fast=False)
    assert fast[1] == ("problem", 10, f"more than {MAX_NODES} YAML nodes, the limit for one file")


def test_without_libyaml_every_document_is_read_by_ruamel() -> None:
    """When PyYAML has no libyaml, ruamel reads every document, as before."""
    with ruamel_counted() as made:
        outcome(HEADER + "---\n" + HEADER, fast=False)
    assert len(made) == 2


# ---------------------------------------------------------------- large manifests


PARAGRAPH = " ".join(["retrieval augmented generation over a knowledge base"] * 17)
BODY = "".join(f"## Topic {section}\n{PARAGRAPH}\n\n" for section in range(10))  # ~9.5 KB


def big_manifest(count: int) -> str:
    """A manifest of count inline Markdown sources of ~10 KB each, as `text: |` blocks."""
    body = textwrap.indent(BODY, " " * 8)
    items = "".join(f"    - name: part-{i:06d}\n      format: markdown\n      text: |\n{body}" for i in range(count))
    return HEADER + "spec:\n  sources:\n" + items


def test_a_large_valid_manifest_never_calls_ruamel(tmp_path: Path) -> None:
    """Loading a large valid manifest (300 sources of 10 KB text blocks) goes through libyaml alone, from a file
    or from text."""
    text = big_manifest(300)
    path = tmp_path / "kb.yaml"
    path.write_text(text, encoding="utf-8")
    with ruamel_forbidden():
        (from_file,) = load_manifests([str(path)])
        (from_text,) = parse_manifests(text, "kb.yaml")
    assert len(from_file.kb.spec.sources) == 300 and from_file.line == 1
    assert from_file.kb.spec.sources[299].name == "part-000299"
    assert from_file.kb.spec.sources[0].text == BODY.rstrip("\n") + "\n"  # `|` keeps one final line break
    assert from_text.kb == from_file.kb
