"""One error root: every error kbctl raises on purpose is a KbctlError; a bad argument is UsageError, which is a
ValueError too, so `except ValueError` keeps working; no bare ValueError is raised outside pydantic validators."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeGuard

import pytest

import kbctl
from kbctl import errors
from kbctl.chunking import chunk_document
from kbctl.errors import InputError, KbctlError, ManifestError, UsageError
from kbctl.manifest import check_dns_label, check_git_url, duration_seconds, parse_manifests
from kbctl.manifest.explain import explain
from kbctl.manifest.selectors import Selector, parse_selector
from kbctl.query.options import QueryOptions

PACKAGE = Path(kbctl.__file__).resolve().parent

VALIDATORS = {"field_validator", "model_validator"}

# Helpers that only pydantic validators call (directly, through AfterValidator, or through each other): pydantic
# turns their ValueError into a ValidationError, which the loaders turn into ManifestError / EvalSetError.
# test_validator_helpers_have_only_validator_callers keeps them so.
VALIDATOR_HELPERS = {
    ("manifest/_field_checks.py", "check_url"),  # Source.url, Crawl.url
    ("manifest/_field_checks.py", "check_relative_path"),  # Source.path, include/exclude, GitRepository.paths
    ("manifest/settings.py", "_provider_slash_name"),  # Embedding.model, Answer.model (via _chat_model)
    ("manifest/settings.py", "_chat_model"),  # Answer.model
    ("eval/evalset.py", "_not_blank"),  # EvalQuery's text fields
}
_HELPER_NAMES = {name for _, name in VALIDATOR_HELPERS}


def _decorator_name(node: ast.expr) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    return target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")


def _is_validator(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(_decorator_name(d) in VALIDATORS for d in func.decorator_list)


def _walk_with_functions(
    node: ast.AST, functions: tuple[ast.FunctionDef | ast.AsyncFunctionDef, ...] = ()
) -> list[tuple[ast.AST, tuple[ast.FunctionDef | ast.AsyncFunctionDef, ...]]]:
    """Every node below `node`, with the functions that enclose it (outermost first)."""
    found = []
    for child in ast.iter_child_nodes(node):
        inner = (*functions, child) if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else functions
        found.append((child, inner))
        found.extend(_walk_with_functions(child, inner))
    return found


def _sources() -> list[tuple[str, ast.Module]]:
    return [
        (path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text(encoding="utf-8"), str(path)))
        for path in sorted(PACKAGE.rglob("*.py"))
    ]


def _allowed(relative: str, functions: tuple[ast.FunctionDef | ast.AsyncFunctionDef, ...]) -> bool:
    return any(_is_validator(f) or (relative, f.name) in VALIDATOR_HELPERS for f in functions)


def _raises_value_error(node: ast.AST) -> TypeGuard[ast.Raise]:
    if not isinstance(node, ast.Raise) or node.exc is None:
        return False
    exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
    return isinstance(exc, ast.Name) and exc.id == "ValueError"


def test_no_bare_value_error_outside_validators() -> None:
    """`raise ValueError` only inside a pydantic validator (or a helper only validators call); everywhere else a
    bad argument is UsageError and a failure a KbctlError of its kind."""
    bare = [
        f"kbctl/{relative}:{node.lineno}"
        for relative, tree in _sources()
        for node, functions in _walk_with_functions(tree)
        if _raises_value_error(node) and not _allowed(relative, functions)
    ]
    assert not bare, f"raise UsageError (kbctl.errors) instead of a bare ValueError at: {bare}"


def test_validator_helpers_have_only_validator_callers() -> None:
    """The allow-listed helpers exist, and each use of one is inside a validator, an AfterValidator(...) /
    BeforeValidator(...) annotation or another such helper: a caller outside them must get a UsageError."""
    defined = {
        (relative, node.name)
        for relative, tree in _sources()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and not _is_validator(node)
    }
    stale = VALIDATOR_HELPERS - defined
    assert not stale, f"allow-listed helpers that no longer exist: {stale}"
    outside = []
    for relative, tree in _sources():
        annotated = {
            id(arg)
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and _decorator_name(node) in ("AfterValidator", "BeforeValidator")
            for arg in node.args
        }
        for node, functions in _walk_with_functions(tree):
            if not isinstance(node, ast.Name) or node.id not in _HELPER_NAMES or id(node) in annotated:
                continue
            if not _allowed(relative, functions):
                outside.append(f"kbctl/{relative}:{node.lineno} {node.id}")
    assert not outside, f"a validator-only helper used elsewhere (make it raise UsageError): {outside}"


def test_every_error_class_is_a_kbctl_error_and_exported() -> None:
    """kbctl.errors defines one tree: each exception class in it derives from KbctlError and is exported, both
    from kbctl.errors and from kbctl."""
    classes = {
        name: value
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == errors.__name__
    }
    assert {"KbctlError", "UsageError", "InputError", "ManifestError"} <= set(classes)
    assert not [n for n, c in classes.items() if not issubclass(c, KbctlError)], "error classes outside the root"
    assert not [n for n in classes if n not in errors.__all__], "error classes missing from kbctl.errors.__all__"
    assert not [n for n in classes if n not in kbctl.__all__], "error classes kbctl does not export"
    assert kbctl.UsageError is UsageError
    assert issubclass(UsageError, ValueError), "`except ValueError` must keep catching a bad argument"


def _manifest(git_url: str) -> str:
    return f"""apiVersion: kbctl.dev/v1alpha1
kind: KnowledgeBase
metadata: {{name: docs}}
spec:
  sources:
    - name: repo
      git: {{url: "{git_url}"}}
"""


BAD_CALLS: list[tuple[str, Callable[[], Any], str]] = [
    ("top_k=0", lambda: QueryOptions(top_k=0), r"top_k must be a whole number from 1 to 200, got 0"),
    ("mode", lambda: QueryOptions(mode="x"), r"mode must be hybrid, vector or keyword, got 'x'"),  # type: ignore[arg-type]
    ("threshold", lambda: QueryOptions(threshold=2.0), r"threshold must be a number from -1 to 1, got 2.0"),
    ("build mode", lambda: QueryOptions.build(mode="fuzzy"), r"mode must be hybrid, vector or keyword"),
    ("max_chars", lambda: chunk_document("text", max_chars=0), r"max_chars must be >= 1, got 0"),
    ("overlap", lambda: chunk_document("text", max_chars=10, overlap_chars=10), r"overlap_chars must be >= 0"),
    ("empty selector", lambda: parse_selector(" "), r"the label selector is empty"),
    ("bad selector", lambda: parse_selector("team in ()"), r"'team in \(\)': in needs at least one value"),
    ("bad label", lambda: parse_selector("Bad Key=x"), r"is not a requirement"),
    ("no requirements", lambda: Selector(()), r"a selector needs at least one requirement"),
    ("prune everything", lambda: kbctl.PruneScope(), r"kbctl never prunes everything"),
    ("fetch policy", lambda: kbctl.FetchPolicy(max_bytes=0), r"FetchPolicy.max_bytes must be at least 1"),
    ("no problems", lambda: InputError([]), r"InputError needs at least one problem"),
    ("explain", lambda: explain("kb.spec.nope"), r"field 'nope' does not exist in knowledgebase.spec"),
    ("name", lambda: check_dns_label("Bad_Name"), r"must consist of lowercase letters"),
    ("duration", lambda: duration_seconds("soon"), r"invalid duration 'soon'"),
    ("git url", lambda: check_git_url("ext::sh -c id"), r"must be a repository URL without spaces"),
]


@pytest.mark.parametrize(("call", "message"), [(c, m) for _, c, m in BAD_CALLS], ids=[i for i, _, _ in BAD_CALLS])
def test_a_bad_argument_is_a_usage_error_and_a_value_error(call: Callable[[], Any], message: str) -> None:
    with pytest.raises(UsageError, match=message) as raised:
        call()
    assert isinstance(raised.value, KbctlError)
    try:
        call()
    except ValueError as exc:  # what callers wrote before UsageError existed still catches it
        assert type(exc) is UsageError
    else:
        pytest.fail("no ValueError raised")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ext::sh -c id", "must be a repository URL without spaces or control characters"),
        (
            "ext::id",
            "must not name a git transport ('<transport>::<address>'); use https://host/org/repo, "
            "ssh://user@host/org/repo or user@host:org/repo",
        ),
        ("-oProxyCommand=x", "must not start with '-' (git would read it as an option)"),
    ],
)
def test_a_shared_check_still_reads_as_a_manifest_problem(url: str, message: str) -> None:
    """A check both validators and other code call (the git source checks URLs again) raises UsageError; in a
    manifest pydantic still reports it as the field's problem, worded as before (no "Value error, " prefix)."""
    with pytest.raises(ManifestError) as raised:
        parse_manifests(_manifest(url), "kb.yaml")
    [problem] = raised.value.problems
    assert (problem.field, problem.line) == ("spec.sources[0].git.url", 7)
    assert problem.message.startswith(message), problem.message
    assert not isinstance(raised.value, ValueError)
