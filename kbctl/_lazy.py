"""Package attributes imported on first use (PEP 562), so importing a package costs only what is used."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_attributes(package: str, where: Mapping[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package` that imports each name of `where` (name -> module) when first read,
    and keeps it in the package's `namespace` so the next read is an ordinary attribute."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(where[name]), name)
        namespace[name] = value
        return value

    return __getattr__
