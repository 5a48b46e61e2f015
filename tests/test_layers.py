"""The package's shape: imports flow one way down the pipeline, and the public API is complete and importable."""

from __future__ import annotations

import ast
from pathlib import Path

import kbctl

PACKAGE = Path(kbctl.__file__).resolve().parent

# Lowest first. A module may import from its own layer and the layers before it, never from a later one.
LAYERS: list[tuple[str, ...]] = [
    ("kbctl._version", "kbctl.errors", "kbctl._lazy", "kbctl.defaults"),  # defaults: every default and tuning constant
    ("kbctl.inputs",),  # bounded files, YAML with lines, located problems: for manifests, config, eval sets, sources
    ("kbctl.userconfig", "kbctl.config"),
    ("kbctl.manifest",),
    ("kbctl._http",),
    ("kbctl.sources",),
    ("kbctl.chunking",),
    ("kbctl._providers",),
    ("kbctl.embedding", "kbctl.rerank", "kbctl.chat"),
    ("kbctl.store",),
    ("kbctl.engine",),
    ("kbctl.query",),
    ("kbctl.answer",),
    ("kbctl.eval",),
    ("kbctl.telemetry",),  # OpenTelemetry: the OTEL_* provider, the spans of queries and applies (for client, serve)
    ("kbctl.client",),
    ("kbctl.serve",),
    ("kbctl.integrations",),  # agent frameworks' retrievers and the tool export: on client and serve, imported by none
    ("kbctl.cli", "kbctl.__main__"),
]


def layer_of(module: str) -> int:
    """The index in LAYERS of the layer that holds `module` (a module, or a package and everything in it)."""
    for index, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return index
    raise AssertionError(f"{module} is in no layer of tests/test_layers.py: place it")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> set[str]:
    """Every kbctl module `path` imports, at the top or inside a function (lazy imports count too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            found |= {n for n in names if n.startswith("kbctl")}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("kbctl")}
    return found


def known(name: str) -> bool:
    """Whether a dotted name is a kbctl module or package (not an attribute imported from one)."""
    relative = Path(*name.split("."))
    return (PACKAGE.parent / relative.with_suffix(".py")).exists() or (PACKAGE.parent / relative).is_dir()


def test_no_import_points_back_up_the_pipeline() -> None:
    """Every module imports only from its own layer or earlier ones (the facade kbctl/__init__ excepted)."""
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "__init__.py":
            continue
        mine = layer_of(module_name(path))
        for target in sorted(t for t in imported(path) if known(t) and t != "kbctl"):
            if layer_of(target) > mine:
                upward.append(f"{module_name(path)} imports {target}")
    assert not upward, "imports pointing back up the pipeline:\n" + "\n".join(upward)


def test_public_api_is_complete_sorted_and_importable() -> None:
    """`kbctl.__all__` is sorted, each name resolves, and the names the README's API example uses are in it."""
    assert kbctl.__all__ == sorted(kbctl.__all__)
    for name in kbctl.__all__:
        assert getattr(kbctl, name) is not None
    assert {"KnowledgeBaseStore", "QueryResult", "KbctlError", "load_manifests"} <= set(kbctl.__all__)
    missing = [n for n in kbctl.__all__ if n not in dir(kbctl)]
    assert not missing


def test_the_facades_static_imports_are_its_list() -> None:
    """kbctl/__init__.py's TYPE_CHECKING imports (what type checkers see) name exactly `_WHERE`'s names, each from
    the module `_WHERE` gives it and re-exported explicitly (`X as X`); `_WHERE` is sorted and `__all__` is it."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    static: dict[str, str] = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.module, ast.unparse(node)
        for alias in node.names:
            assert alias.asname == alias.name, f"import {alias.name} as {alias.name} (an explicit re-export)"
            assert alias.name not in static, f"{alias.name} imported twice"
            static[alias.name] = node.module
    where: dict[str, str] = kbctl._WHERE  # type: ignore[attr-defined]
    assert list(where) == sorted(where), "kbctl._WHERE is kept sorted"
    assert static == where, sorted(static.items() ^ where.items())
    assert kbctl.__all__ == list(where)


def _package(module: str) -> str:
    """`kbctl.X` for a module of the subpackage X, else the module itself (a top-level module is its own)."""
    return ".".join(module.split(".")[:2])


def test_no_import_of_another_packages_private_module() -> None:
    """A package's `_private` modules are imported only from inside it; what others need is a public name of the
    package (kbctl.manifest's lazy attributes) or lives at the base level."""
    crossings = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        importer = module_name(path)
        for target in imported(path):
            parts = target.split(".")
            private = len(parts) >= 3 and parts[2].startswith("_") and not parts[2].startswith("__")
            if private and known(".".join(parts[:3])) and _package(importer) != _package(target):
                crossings.add((importer, ".".join(parts[:3])))
    assert not crossings, f"imports of another package's private modules: {sorted(crossings)}"


def test_every_error_lives_in_errors_and_is_exported() -> None:
    """The one exception tree: every kbctl error class is defined in kbctl/errors.py, named in its tree drawing,
    and exported by the package."""
    from kbctl import errors

    defined_elsewhere = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and any(getattr(base, "id", "") in errors.__all__ for base in node.bases):
                defined_elsewhere.append(f"{module_name(path)}.{node.name}")
    assert not defined_elsewhere, f"error classes outside kbctl/errors.py: {defined_elsewhere}"
    tree = [
        name
        for name in errors.__all__
        if isinstance(getattr(errors, name), type) and issubclass(getattr(errors, name), errors.KbctlError)
    ]
    assert len(tree) >= 14
    assert not [n for n in tree if n not in kbctl.__all__], "error classes kbctl does not export"
    assert not [n for n in tree if n not in (errors.__doc__ or "")], "error classes missing from the tree drawing"


def _module_of(name: str) -> str:
    """The kbctl module a dotted import name loads: `kbctl.a.b.Name` -> `kbctl.a.b`."""
    while not known(name):
        name = name.rpartition(".")[0]
    return name


def _import_graph(*, lazy: bool) -> dict[str, set[str]]:
    """module -> the kbctl modules it imports: at module level (run when it loads, `if TYPE_CHECKING:` blocks
    included), or anywhere in it when `lazy`."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        nodes = (
            list(ast.walk(tree))
            if lazy
            else [
                n
                for top in tree.body
                for n in ast.walk(top)
                if not isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            ]
        )
        found: set[str] = set()
        for node in nodes:
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("kbctl"):
                found |= {_module_of(f"{node.module}.{a.name}") for a in node.names}
            elif isinstance(node, ast.Import):
                found |= {_module_of(a.name) for a in node.names if a.name.startswith("kbctl")}
        me = module_name(path)
        graph[me] = found - {me}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next((c for c in children if c in graph), None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_module_cycles() -> None:
    """No two modules import each other when they load; the only lazy cycles are a package's __init__ loading one
    of its own implementations on demand (the embedder and chat registries), which then imports the package."""
    assert not _cycles(_import_graph(lazy=False))
    for component in _cycles(_import_graph(lazy=True)):
        packages = {_package(m) for m in component}
        assert len(packages) == 1 and packages <= set(component), f"import cycle: {component}"


def test_the_cycle_check_finds_a_cycle() -> None:
    """The check above can fail: a two-module loop and a three-module loop are both found."""
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]


# What the CLI and serve may not import: they reach the engine and the store only through KnowledgeBaseStore
# (kbctl.client) and the types it exports (kbctl), so that what a command does, an agent can do.
BEHIND_THE_FACADE = (
    "kbctl.engine",
    "kbctl.store",
    "kbctl.query",
    "kbctl.answer",
    "kbctl.eval",
    "kbctl.sources",
    "kbctl.chunking",
    "kbctl.embedding",
    "kbctl.rerank",
    "kbctl.chat",
    "kbctl._http",
    "kbctl._providers",
)


def test_cli_and_serve_reach_the_engine_and_store_only_through_the_facade() -> None:
    """cli (its docs generator too), serve and the integrations import kbctl, kbctl.client and the layers below the
    pipeline's stages (manifest, inputs, config, errors), never a stage itself; type-only imports count too."""
    reached = []
    for path in sorted(PACKAGE.rglob("*.py")):
        importer = module_name(path)
        if _package(importer) not in ("kbctl.cli", "kbctl.serve", "kbctl.integrations"):
            continue
        for target in sorted(imported(path)):
            if any(target == p or target.startswith(p + ".") for p in BEHIND_THE_FACADE):
                reached.append(f"{importer} imports {target}")
    assert not reached, "behind the facade:\n" + "\n".join(reached)


_GENERIC = {"str", "int", "float", "bool", "None", "list", "dict", "tuple", "set", "object", "type", "Any", "Path"}
_GENERIC |= {"Sequence", "Callable", "Iterator", "Mapping", "Collection", "Unpack", "datetime"}


def test_every_type_in_the_facades_signatures_is_exported() -> None:
    """A caller of KnowledgeBaseStore can name every type its public methods take and return: each is in
    kbctl.__all__ (and is the very object the signature means)."""
    import inspect

    from kbctl import client

    missing = []
    for attr, member in inspect.getmembers(client.KnowledgeBaseStore):
        if attr.startswith("_") and attr != "__init__":
            continue
        function = member.fget if isinstance(member, property) else member
        for annotation in getattr(function, "__annotations__", {}).values():
            for node in ast.walk(ast.parse(str(annotation), mode="eval")):
                if isinstance(node, ast.Name) and node.id not in _GENERIC and node.id not in kbctl.__all__:
                    missing.append(f"{attr}: {node.id}")
    assert not missing, f"not exported by kbctl: {sorted(set(missing))}"
    # The names are the same objects the signatures were written with.
    assert kbctl.ApplyReport is __import__("kbctl.engine.results", fromlist=["ApplyReport"]).ApplyReport
    assert kbctl.Selector is __import__("kbctl.manifest.selectors", fromlist=["Selector"]).Selector


def test_nothing_imports_the_integrations() -> None:
    """kbctl.integrations sits on the client and serve (the frameworks are optional extras): no other kbctl module
    imports it, lazily or not, so kbctl never needs langchain-core or llama-index-core."""
    importers = [
        f"{module_name(path)} imports {target}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if _package(module_name(path)) != "kbctl.integrations"
        for target in sorted(imported(path))
        if target == "kbctl.integrations" or target.startswith("kbctl.integrations.")
    ]
    assert not importers, "imports of kbctl.integrations:\n" + "\n".join(importers)
