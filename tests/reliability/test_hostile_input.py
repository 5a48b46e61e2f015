"""Hostile input: alias bombs, deep nesting, devices, secrets behind symlinks, huge files, NUL and lone surrogates.

Every manifest, eval set and BEIR file kbctl reads is either loaded or refused with one line per problem
naming the file (and the line): never a traceback, a hang, a MemoryError or a file's content in the error.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbctl.errors import BeirError, EvalSetError, InputError, ManifestError, ManifestProblem
from kbctl.eval.beir import MAX_LINE_BYTES, read_beir
from kbctl.eval.evalset import load_evalset, parse_evalset
from kbctl.inputs.bounds import MAX_DEPTH, MAX_FILE_BYTES, nesting_depth, read_bounded_text
from kbctl.inputs.yaml_lines import MAX_DOCUMENTS, MAX_NODES
from kbctl.manifest import LoadedManifest, load_manifests, parse_manifests

VALID = textwrap.dedent(
    """\
    apiVersion: kbctl.dev/v1alpha1
    kind: KnowledgeBase
    metadata:
      name: docs
      labels: {team: web}
    spec:
      description: Public pages.
      sources:
        - name: faq
          text: |
            ## How do I book?
            Choose a slot.
        - name: about
          url: https://www.example.com/about
      chunking: {maxChars: 500, overlapChars: 50}
      retrieval: {topK: 4, similarityThreshold: 0.2}
    """
)

pytestmark = pytest.mark.reliability


def billion_laughs(levels: int = 9, width: int = 10) -> str:
    """The classic YAML alias bomb: `levels` lists of `width` aliases to the list before (~700 bytes)."""
    lines = ["lol1: &lol1 [" + ", ".join(['"lol"'] * width) + "]"]
    for level in range(2, levels + 1):
        lines.append(f"lol{level}: &lol{level} [" + ", ".join([f"*lol{level - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def problems(error: InputError) -> list[str]:
    return [str(p) for p in error.problems]


def manifest_problems(text: str, path: str = "kb.yaml") -> list[str]:
    with pytest.raises(ManifestError) as caught:
        parse_manifests(text, path)
    return problems(caught.value)


def load_problems(*paths: str) -> list[str]:
    with pytest.raises(ManifestError) as caught:
        load_manifests(paths)
    return problems(caught.value)


def assert_well_formed(problem: ManifestProblem, path: str) -> None:
    """One problem: the file it names, a line or a file-level message, and one printable line of text."""
    assert problem.path == path
    assert problem.line is None or problem.line >= 1
    assert problem.message
    assert str(problem).isprintable(), str(problem)  # one line, no control characters, no raw surrogate


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


# ---------------------------------------------------------------- aliases


def test_billion_laughs_is_refused_without_growing_memory() -> None:
    """The 9 x 10 alias bomb is refused while it is read: one line, and a few MB at most (not gigabytes)."""
    bomb = billion_laughs()
    assert len(bomb.encode()) < 800
    tracemalloc.start()
    try:
        found = manifest_problems(bomb, "bomb.yaml")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert found == [f"bomb.yaml:5: YAML aliases expand to more than {MAX_NODES} nodes, the limit for one file"]
    assert peak < 20 * 1024 * 1024


def test_alias_bombs_in_keys_merges_and_later_documents_are_refused() -> None:
    """Expansion is counted wherever an alias is used, and across all documents of a file."""
    small = billion_laughs(4)  # 11,111 nodes: fine alone
    assert manifest_problems(small) == [
        "kb.yaml:1: apiVersion: required field is missing",
        "kb.yaml:1: kind: required field is missing",
    ]
    as_key = small + "".join(f"? [*lol4, {i}]\n: x\n" for i in range(10))
    as_merge = small + "".join(f"m{i}: {{<<: *lol4}}\n" for i in range(10))
    for text in (as_key, as_merge):
        [problem] = manifest_problems(text)
        assert problem.startswith("kb.yaml:") and "YAML aliases expand to more than" in problem, problem
        assert int(problem.split(":")[1]) > 4  # at a use of the alias, not where it was defined
    # many documents, each under the limit, share one budget for the file
    found = manifest_problems("---\n".join([small] * 30))
    assert found[-1].endswith(f"YAML aliases expand to more than {MAX_NODES} nodes, the limit for one file")
    assert len(found) < 30  # reading stopped at the limit


def test_recursive_alias_is_one_problem() -> None:
    assert manifest_problems("a: &a [1, *a]\n") == [
        "kb.yaml:1: invalid YAML: an alias refers to a node that contains it"
    ]
    assert manifest_problems("a: &a {b: *a}\n") == [
        "kb.yaml:1: invalid YAML: an alias refers to a node that contains it"
    ]


def test_anchors_and_aliases_within_the_limits_still_work() -> None:
    """Sharing settings with an anchor is ordinary YAML and loads as if written out."""
    text = VALID.replace("retrieval: {topK: 4", "retrieval: &r {topK: 4") + "  x-copy: *r\n"
    assert manifest_problems(text) == ["kb.yaml:17: spec.x-copy: unknown field 'x-copy'"]
    merged = VALID.replace("chunking: {maxChars: 500, overlapChars: 50}", "chunking: {<<: &c {maxChars: 500}}")
    (loaded,) = parse_manifests(merged, "kb.yaml")
    assert loaded.kb.spec.chunking.max_chars == 500


@pytest.mark.slow
def test_too_many_nodes_or_documents_are_refused() -> None:
    """A file of many tiny nodes or documents is refused at the limit, not parsed for minutes."""
    [problem] = manifest_problems("[" + "1," * (MAX_NODES + 10) + "]\n")
    assert problem == f"kb.yaml:1: more than {MAX_NODES} YAML nodes, the limit for one file"
    found = manifest_problems("---\na: 1\n" * (MAX_DOCUMENTS + 5))
    assert (
        found[-1]
        == f"kb.yaml:{2 * MAX_DOCUMENTS + 2}: more than {MAX_DOCUMENTS} YAML documents, the limit for one file"
    )
    # empty documents are skipped without being parsed
    (loaded,) = parse_manifests("---\n" * 50_000 + VALID, "kb.yaml")
    assert loaded.line == 50_001


# ---------------------------------------------------------------- nesting


@pytest.mark.parametrize(
    "text",
    [
        "[" * 300 + "]" * 300 + "\n",
        "[" * 300 + "\n",
        "a: " + "[" * 300 + "]" * 300 + "\n",
        "{a: " * 300 + "}" * 300 + "\n",
        "".join(" " * i + "k:\n" for i in range(3000)),
        "".join("  " * i + "- \n" for i in range(2000)),
    ],
    ids=["flow-lists", "unclosed", "value", "flow-maps", "block-map-3000", "block-list"],
)
def test_deep_nesting_is_one_problem_not_a_recursion_error(text: str) -> None:
    [problem] = manifest_problems(text)
    assert problem.endswith(f"nesting too deep: more than {MAX_DEPTH} levels of mappings and lists")


def test_documents_after_a_refused_one_are_still_read() -> None:
    """A document refused midway (too deep, a bad tag, a duplicate key) leaves no state for the next."""
    for bad in ("[" * 100 + "]" * 100 + "\n", "a: !!set \n", "a: 1\na: 2\n", "a: &a [*a]\n"):
        found = manifest_problems(bad + "---\n" + VALID.replace("name: docs", "name: Bad"))
        assert len(found) == 2 and found[1].endswith(
            "metadata.name: must consist of lowercase letters, digits and '-', and start and end with a letter or digit"
        ), found


def test_nesting_depth_counts_aliases_expanded() -> None:
    """Aliases that stack nests of about 40 give a data structure over 80 deep: refused at the alias that does it."""
    nest = "[" * 40 + "]" * 40
    text = f"a: &a {nest}\nb: &b {'[' * 39}*a{']' * 39}\nc: [*b]\n"
    assert manifest_problems(text) == [
        f"kb.yaml:2: nesting too deep: more than {MAX_DEPTH} levels of mappings and lists"
    ]


def test_nesting_up_to_the_limit_is_read() -> None:
    """A list nested exactly MAX_DEPTH deep loads (and is then not a manifest); one more level does not."""
    assert manifest_problems("[" * MAX_DEPTH + "]" * MAX_DEPTH) == [
        "kb.yaml:1: expected a mapping with apiVersion, kind, metadata and spec, got a list"
    ]
    assert "nesting too deep" in manifest_problems("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))[0]


def test_no_recursion_error_even_near_the_interpreter_limit() -> None:
    """With little stack left, reading a deep (allowed) document is still a problem, never a RecursionError."""
    text = "a: " + "[" * 60 + "]" * 60 + "\n"

    def nested(depth: int) -> list[str]:
        if depth:
            return nested(depth - 1)
        try:
            parse_manifests(text, "kb.yaml")
        except ManifestError as error:
            return problems(error)
        return []

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(400)
    try:
        for depth in (100, 200, 250, 300):
            found = nested(depth)
            assert len(found) >= 1 and all(p.startswith("kb.yaml:") for p in found)
    finally:
        sys.setrecursionlimit(limit)


def test_nesting_depth_helper_is_iterative() -> None:
    deep: list[object] = []
    for _ in range(100_000):
        deep = [deep]
    assert nesting_depth(deep) == MAX_DEPTH + 1
    assert nesting_depth({"a": [1, {"b": 2}]}) == 3
    assert nesting_depth("text") == 0


# ---------------------------------------------------------------- files that are not manifests


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_symlink_to_a_device_is_refused_without_reading_it(tmp_path: Path) -> None:
    (tmp_path / "kb.yaml").symlink_to("/dev/zero")
    assert load_problems("kb.yaml") == ["kb.yaml: is a device, expected a manifest file"]
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "zero.yaml").symlink_to("/dev/zero")
    assert load_problems("dir") == [f"{os.path.join('dir', 'zero.yaml')}: is a device, expected a manifest file"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "kb.yaml")
    assert load_problems("kb.yaml") == ["kb.yaml: is a named pipe (FIFO), expected a manifest file"]
    with pytest.raises(EvalSetError) as caught:
        load_evalset("kb.yaml")
    assert problems(caught.value) == ["kb.yaml: is a named pipe (FIFO), expected an eval set file"]


def test_directory_where_a_file_is_expected(tmp_path: Path) -> None:
    (tmp_path / "set.yaml").mkdir()
    with pytest.raises(EvalSetError) as caught:
        load_evalset("set.yaml")
    assert problems(caught.value) == ["set.yaml: is a directory, expected an eval set file"]


SHADOW = (
    "root:$6$saltsalt$SECRETHASHROOT:19000:0:99999:7:::\n"
    "daemon:*:19000:0:99999:7:::\n"
    "bob:$6$xyz$SECRETHASHBOB:19000:0:99999:7:::\n"
)
NOT_YAML = {
    "shadow": SHADOW,
    "duplicate-key": "user: alice\npassword: SECRETPW1\npassword: SECRETPW2\n",
    "undefined-alias": "token: *SECRETALIAS\n",
    "bad-escape": 'key: "SECRET\\q"\n',
    "unknown-keys": "SECRET_TOKEN: abc\nAWS_SECRET: def\n",
    "ini": "[default]\naws_secret_access_key = SECRETKEY\n",
    "tag-handle": "%TAG !s! tag:SECRET,2024:\n--- !x!y z\n",
    "passwd": "root:x:0:0:SECRETGECOS:/root:/bin/bash\n",
}


@pytest.mark.parametrize("content", NOT_YAML.values(), ids=NOT_YAML.keys())
def test_a_file_that_is_not_a_manifest_is_never_echoed(tmp_path: Path, content: str) -> None:
    """A symlink to a password file (a pull request can add one) gives problems that quote none of it."""
    secret = tmp_path / "secret-file"
    secret.write_text(content)
    (tmp_path / "kb.yaml").symlink_to(secret)
    (tmp_path / "set.yaml").symlink_to(secret)
    found = load_problems("kb.yaml")
    with pytest.raises(EvalSetError) as caught:
        load_evalset("set.yaml")
    for problem in [*found, *problems(caught.value)]:
        assert "SECRET" not in problem and "root" not in problem and "alice" not in problem, problem
    assert found[0].startswith("kb.yaml:")


def test_shadow_file_gives_only_what_a_manifest_needs(tmp_path: Path) -> None:
    (tmp_path / "shadow").write_text(SHADOW)
    (tmp_path / "kb.yaml").symlink_to(tmp_path / "shadow")
    assert load_problems("kb.yaml") == [
        "kb.yaml:1: apiVersion: required field is missing",
        "kb.yaml:1: kind: required field is missing",
    ]


def test_parser_messages_keep_tokens_and_drop_text() -> None:
    """Syntax problems still say what the parser expected, without quoting what the file holds."""
    assert manifest_problems("a: [1, 2\n") == ["kb.yaml:2: invalid YAML: expected ',' or ']', but got '<stream end>'"]
    assert manifest_problems("a: *nowhere\n") == ["kb.yaml:1: invalid YAML: found undefined alias (text omitted)"]
    assert manifest_problems("a: 1\nb: 2\na: 3\n") == ["kb.yaml:3: invalid YAML: found a duplicate key"]
    [raw_nul] = manifest_problems("apiVersion: kbctl.dev/v1alpha1\nkind: KnowledgeBase\nx: a\x00b\n")
    assert raw_nul == "kb.yaml:3: invalid YAML: unacceptable character #x0000: special characters are not allowed"


def test_file_size_limit(tmp_path: Path) -> None:
    """A file or stdin past MAX_FILE_BYTES is refused with the limit in the message; up to it is read."""
    (tmp_path / "big.yaml").write_bytes(b"#" * (MAX_FILE_BYTES + 1))
    assert load_problems("big.yaml") == ["big.yaml: too large: more than 8 MiB, the limit for one file"]
    with pytest.raises(ManifestError) as caught:
        load_manifests(["-"], stdin=io.StringIO("#" * (MAX_FILE_BYTES + 1)))
    assert problems(caught.value) == ["<stdin>: too large: more than 8 MiB, the limit for one file"]
    with pytest.raises(ManifestError) as caught:  # counted in bytes of UTF-8, not characters
        load_manifests(["-"], stdin=io.StringIO("#" + "é" * (MAX_FILE_BYTES // 2)))
    assert problems(caught.value) == ["<stdin>: too large: more than 8 MiB, the limit for one file"]
    (tmp_path / "fits.yaml").write_bytes(b"#" * (MAX_FILE_BYTES - len(VALID) - 1) + b"\n" + VALID.encode())
    assert [m.kb.name for m in load_manifests(["fits.yaml"])] == ["docs"]
    with pytest.raises(EvalSetError) as caught_set:
        load_evalset("big.yaml")
    assert problems(caught_set.value) == ["big.yaml: too large: more than 8 MiB, the limit for one file"]
    with pytest.raises(EvalSetError) as caught_set:
        load_evalset("-", stdin=io.StringIO("#" * (MAX_FILE_BYTES + 1)))
    assert problems(caught_set.value) == ["<stdin>: too large: more than 8 MiB, the limit for one file"]


def test_stdin_that_is_not_utf8_is_a_problem() -> None:
    stream = io.TextIOWrapper(io.BytesIO(b"kind: \xff\xfe\n"), encoding="utf-8")
    with pytest.raises(ManifestError) as caught:
        load_manifests(["-"], stdin=stream)
    assert problems(caught.value) == ["<stdin>: cannot read: not valid UTF-8"]


def test_read_bounded_text_drops_a_bom(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"\xef\xbb\xbfhello")
    assert read_bounded_text(tmp_path / "a.txt") == "hello"


# ---------------------------------------------------------------- characters PostgreSQL cannot store


def with_text(text: str) -> str:
    """VALID with the first source's text (on line 10) written as text."""
    block = "text: |\n        ## How do I book?\n        Choose a slot."
    assert block in VALID
    return VALID.replace(block, f"text: {text}")


def test_nul_in_inline_text_is_refused_at_its_line() -> None:
    assert manifest_problems(with_text('"a\\0b"')) == [
        "kb.yaml:10: spec.sources[0].text: must not contain a NUL character (\\0), found at character 2"
    ]
    assert manifest_problems(with_text('"abc\\x00"')) == [
        "kb.yaml:10: spec.sources[0].text: must not contain a NUL character (\\0), found at character 4"
    ]


def test_lone_surrogate_in_inline_text_is_refused_at_its_line() -> None:
    assert manifest_problems(with_text('"half \\ud83d of an emoji"')) == [
        "kb.yaml:10: spec.sources[0].text: must not contain a lone surrogate (U+D83D, not valid Unicode), "
        "found at character 6"
    ]
    (loaded,) = parse_manifests(with_text('"a whole \\ud83d\\ude00 emoji"'), "kb.yaml")  # a pair is one character
    assert loaded.kb.spec.sources[0].text == "a whole \U0001f600 emoji"


def test_nul_and_surrogates_are_refused_in_every_string_field() -> None:
    text = (
        VALID.replace("description: Public pages.", 'description: "x\\0"')
        .replace("name: docs", 'name: "do\\0cs"')
        .replace("team: web", '"te\\0am": web')
        .replace("url: https://www.example.com/about", 'url: "https://www.example.com/\\udc80"')
        .replace("topK: 4,", 'topK: 4, rerank: {model: "local/x\\ud800"},')
        + '  embedding: {profile: "p\\0"}\n'
    )
    assert manifest_problems(text) == [
        "kb.yaml:4: metadata.name: must not contain a NUL character (\\0), found at character 3",
        'kb.yaml:5: metadata.labels["te\\u0000am"]: invalid label key: the name must be 1-63 characters of '
        "letters, digits, '-', '_' and '.', starting and ending with a letter or digit",
        "kb.yaml:7: spec.description: must not contain a NUL character (\\0), found at character 2",
        "kb.yaml:14: spec.sources[1].url: must not contain a lone surrogate (U+DC80, not valid Unicode), "
        "found at character 25",
        "kb.yaml:16: spec.retrieval.rerank.model: must not contain a lone surrogate (U+D800, not valid Unicode), "
        "found at character 8",
        "kb.yaml:17: spec.embedding.profile: must not contain a NUL character (\\0), found at character 2",
    ]


def test_unknown_keys_with_control_characters_are_escaped() -> None:
    text = VALID + '  "bad\\0\\u202ekey": 1\n'
    assert manifest_problems(text) == ["kb.yaml:17: spec[\"bad\\u0000\\u202ekey\"]: unknown field 'bad\\x00\\u202ekey'"]


# ---------------------------------------------------------------- eval sets and BEIR files


def test_eval_set_bounds(tmp_path: Path) -> None:
    """Eval sets get the same bounds: aliases, nesting (YAML and JSON Lines), a file that is not one."""
    cases = {
        "bomb.yaml": (billion_laughs(), f"5: YAML aliases expand to more than {MAX_NODES} nodes"),
        "deep.yaml": ("queries: " + "[" * 300 + "]" * 300, f"1: {nesting_message()}"),
        "deep.jsonl": ('{"id": 1, "question": "q", "x": ' + "[" * 100_000 + "]" * 100_000 + "}", "1: nesting too deep"),
        "nested.jsonl": ('{"id": 1, "question": "q", "x": ' + "[" * 80 + "]" * 80 + "}", f"1: {nesting_message()}"),
        "secret.yaml": ("SECRET_KEY: abc\n", "1: expected a mapping with queries (and optionally knowledgeBase)"),
    }
    for name, (text, message) in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(EvalSetError) as caught:
            load_evalset(name)
        [problem] = problems(caught.value)
        assert problem.startswith(f"{name}:{message}"), problem


def test_eval_set_duplicate_keys_are_named_in_an_eval_set() -> None:
    with pytest.raises(EvalSetError) as caught:
        parse_evalset("queries: []\nqueries: []\n", "set.yaml")
    assert problems(caught.value) == [
        'set.yaml:2: invalid YAML: found duplicate key "queries" with value "[]" (original value: "[]")'
    ]


def write_beir(folder: Path, corpus: str, queries: str = '{"_id": "q", "text": "what?"}\n') -> None:
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text(corpus)
    (folder / "queries.jsonl").write_text(queries)
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq\td\t1\n")


def beir_problem(folder: Path) -> str:
    with pytest.raises(BeirError) as caught:
        read_beir(folder)
    [problem] = caught.value.problems
    return str(problem)


def test_beir_files_are_bounded(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    write_beir(folder, '{"_id": "d", "text": "' + "x" * MAX_LINE_BYTES + '"}\n')
    assert beir_problem(folder) == f"{folder / 'corpus.jsonl'}:1: line too long: more than 8 MiB"
    write_beir(folder, '{"_id": "d", "text": "ok"}\n' + "[" * 100_000 + "]" * 100_000 + "\n")
    assert beir_problem(folder) == f"{folder / 'corpus.jsonl'}:2: {nesting_message()}"
    write_beir(folder, '{"_id": "d", "text": "a\\u0000b"}\n')
    assert beir_problem(folder) == (
        f"{folder / 'corpus.jsonl'}:1: text: must not contain a NUL character (\\0), found at character 2"
    )
    write_beir(folder, '{"_id": "d", "text": "ok"}\n', '{"_id": "q", "text": "\\ud800?"}\n')
    assert "queries.jsonl:1: text: must not contain a lone surrogate (U+D800" in beir_problem(folder)


@pytest.mark.skipif(not os.path.exists("/dev/zero") or not hasattr(os, "mkfifo"), reason="needs /dev/zero and FIFOs")
def test_beir_files_must_be_regular_files(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    write_beir(folder, '{"_id": "d", "text": "ok"}\n')
    (folder / "corpus.jsonl").unlink()
    (folder / "corpus.jsonl").symlink_to("/dev/zero")
    assert beir_problem(folder) == f"{folder / 'corpus.jsonl'}: is a device, expected a file"
    write_beir(folder.parent / "other", '{"_id": "d", "text": "ok"}\n')
    qrels = folder.parent / "other" / "qrels" / "test.tsv"
    qrels.unlink()
    os.mkfifo(qrels)
    assert beir_problem(folder.parent / "other") == f"{qrels}: is a named pipe (FIFO), expected a file"


def nesting_message() -> str:
    return f"nesting too deep: more than {MAX_DEPTH} levels of mappings and lists"


# ---------------------------------------------------------------- the CLI


def run_kbctl(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KBCTL_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}  # validate needs no database
    return subprocess.run(
        [sys.executable, "-m", "kbctl", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def test_cli_validate_refuses_an_alias_bomb_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "bomb.yaml").write_text(billion_laughs())
    (tmp_path / "deep.yaml").write_text("".join(" " * i + "k:\n" for i in range(3000)))
    result = run_kbctl("validate", "-f", "bomb.yaml", "-f", "deep.yaml", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        f"bomb.yaml:5: YAML aliases expand to more than {MAX_NODES} nodes, the limit for one file",
        f"deep.yaml:64: {nesting_message()}",
    ]


# ---------------------------------------------------------------- properties

YAML_PIECES = [
    "apiVersion: kbctl.dev/v1alpha1\n",
    "kind: KnowledgeBase\n",
    "metadata:\n",
    "  name: docs\n",
    "spec:\n",
    "  sources:\n",
    "    - name: a\n",
    "      text: hi\n",
    "      url: https://x.org\n",
    "-",
    "- ",
    ": ",
    ":",
    ",",
    "[",
    "]",
    "{",
    "}",
    "? ",
    "&a ",
    "*a",
    "&b ",
    "*b",
    "<<: ",
    "!",
    "!!str ",
    "!!binary ",
    "!!set ",
    "!!omap ",
    "!!python/object:os.system ",
    "!foo ",
    "%YAML 1.2\n",
    "%TAG ! tag:x,2024:\n",
    "---\n",
    "...\n",
    "--- ",
    "|\n",
    ">-\n",
    "|2\n",
    "'",
    '"',
    "\\",
    "\\0",
    "\\x00",
    "\\ud800",
    "\\U0001F600",
    "#",
    " #c",
    "\n",
    "\r\n",
    "\r",
    "\t",
    "  ",
    "    ",
    "\x00",
    "\ud800",
    "\x85",
    "\u2028",
    "\ufeff",
    "\x1b",
    "0",
    "1",
    "-1",
    "1e9",
    ".inf",
    ".nan",
    "0x1F",
    "0o17",
    "~",
    "null",
    "true",
    "yes",
    "2024-13-45",
    "2024-01-01",
    "12:30:00",
    "a",
    "b",
    "SECRET",
    "é",
    "🙂",
]
pieces = st.lists(st.sampled_from(YAML_PIECES), max_size=40).map("".join)
texts = st.one_of(pieces, st.text(max_size=200), st.binary(max_size=100).map(lambda b: b.decode("latin-1")))


@st.composite
def mutated_manifests(draw: st.DrawFn) -> str:
    """The valid manifest with a few random insertions, deletions and duplications."""
    text = VALID
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        operation = draw(st.sampled_from(["insert", "delete", "duplicate"]))
        if operation == "insert":
            text = text[:at] + draw(st.sampled_from(YAML_PIECES)) + text[at:]
        elif operation == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 20)) :]
        else:
            end = min(len(text), at + draw(st.integers(1, 60)))
            text = text[:end] + text[at:end] + text[end:]
    return text


@st.composite
def hostile(draw: st.DrawFn) -> str:
    """Alias bombs, nesting, cycles and odd constructs of random sizes, alone or inside a manifest."""
    depth = draw(st.integers(1, 400))
    construct = draw(
        st.sampled_from(
            [
                billion_laughs(draw(st.integers(2, 9)), draw(st.integers(2, 12))),
                "[" * depth + "]" * depth,
                "{a: " * depth + "}" * depth,
                "".join(" " * i + "k:\n" for i in range(depth)),
                "a: &a [*a]\n",
                "a: &a {<<: *a}\n",
                "? [a, b]\n: c\n",
                "? {a: b}\n: c\n",
                "a: !!binary AAAA\n",
                "a: !!set {x, y}\n",
                "a: !!omap [{a: 1}, {a: 2}]\n",
                '"a\\0": "\\ud800"\n',
                "a: &x 1\nb: &x 2\nc: *x\n",
            ]
        )
    )
    if draw(st.booleans()):
        return construct
    return VALID + "  extra: " + construct.replace("\n", "\n    ")


def check(text: str) -> list[LoadedManifest]:
    """parse_manifests succeeds or raises ManifestError with well-formed problems, nothing else."""
    try:
        return parse_manifests(text, "kb.yaml")
    except ManifestError as error:
        for problem in error.problems:
            assert_well_formed(problem, "kb.yaml")
        return []


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(texts, mutated_manifests(), hostile()))
def test_any_text_is_a_manifest_or_a_manifest_error(text: str) -> None:
    check(text)
    try:  # the same through load_manifests (stdin) and as an eval set
        load_manifests(["-"], stdin=io.StringIO(text))
    except ManifestError as error:
        for problem in error.problems:
            assert_well_formed(problem, "<stdin>")
    try:
        parse_evalset(text, "set.yaml")
    except EvalSetError as error:
        for problem in error.problems:
            assert_well_formed(problem, "set.yaml")


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=300))
def test_any_file_is_loaded_or_refused(data: bytes) -> None:
    path = Path("kb.yaml")
    path.write_bytes(data)
    try:
        load_manifests([str(path)])
    except ManifestError as error:
        for problem in error.problems:
            assert_well_formed(problem, "kb.yaml")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=30), st.sampled_from(['{"id": 1', "[" * 2000, '"\\u0000"'])), max_size=5))
def test_any_jsonl_eval_set_is_loaded_or_refused(lines: list[str]) -> None:
    try:
        parse_evalset("\n".join(lines), "set.jsonl")
    except EvalSetError as error:
        for problem in error.problems:
            assert_well_formed(problem, "set.jsonl")
