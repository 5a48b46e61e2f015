"""The bounds of one YAML file while ruamel reads it: at most MAX_NODES nodes (an alias counting as every node it
repeats), MAX_DOCUMENTS documents and MAX_DEPTH of nesting, spent by a composer as it reads, so an alias bomb
or a deep nesting is refused before anything walks it. The loader (kbctl.inputs.yaml_lines) reads through it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from ruamel.yaml import YAML
from ruamel.yaml.composer import Composer
from ruamel.yaml.events import AliasEvent

from kbctl.inputs.bounds import MAX_DEPTH, too_deep_message

MAX_NODES: Final = 100_000
"""Most YAML nodes one file may hold, an alias counting as every node it repeats. A manifest of 8 MiB
with ~7,500 one-page sources has ~55,000 (7 a source); a 700-byte alias bomb would expand to a billion.
ruamel composes ~25,000 nodes a second, so this also bounds what one file costs (~4 s, ~70 MB)."""

MAX_DOCUMENTS: Final = 1_000
"""Most non-empty YAML documents in one file (each costs a parser start, ~0.2 ms even when tiny)."""


class _Refused(Exception):
    """A document past one of the bounds (nodes, depth), or an alias into the node that holds it."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.message = message
        self.line = line  # 0-based, in the document's text


@dataclass
class _Budget:
    """What one file may still cost: nodes (aliases counted as what they repeat) and documents."""

    nodes: int = MAX_NODES
    documents: int = MAX_DOCUMENTS
    depth: int = MAX_DEPTH
    sizes: dict[int, tuple[int, int]] = field(default_factory=dict)  # id(anchored node) → (nodes, height)


class _BoundedComposer(Composer):
    """ruamel's composer, counting every node as the data will hold it (an alias: all the nodes it repeats)
    and the depth it reaches, so an alias bomb or a deep nesting is refused while it is read, before
    anything walks the tree it would expand to; the recursion of composing never goes past the depth."""

    budget: _Budget
    root: Any = None
    _heights: list[int]

    def compose_document(self) -> Any:
        self.budget.sizes.clear()  # node ids of a previous document may be reused
        self._heights = []
        self.root = None
        self.root = super().compose_document()
        return self.root

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.parser.peek_event()
        line = int(event.start_mark.line)
        budget = self.budget
        if isinstance(event, AliasEvent):
            node = super().compose_node(parent, index)  # an undefined alias raises here
            if id(node) not in budget.sizes:
                raise _Refused("invalid YAML: an alias refers to a node that contains it", line)
            size, height = budget.sizes[id(node)]
            if self.depth + height > budget.depth:
                raise _Refused(too_deep_message(budget.depth), line)
            self._spend(size, line, f"YAML aliases expand to more than {MAX_NODES} nodes, the limit for one file")
        else:
            if self.depth + 1 > budget.depth:
                raise _Refused(too_deep_message(budget.depth), line)
            self._spend(1, line, f"more than {MAX_NODES} YAML nodes, the limit for one file")
            before = budget.nodes
            self._heights.append(0)
            node = super().compose_node(parent, index)
            height = 1 + self._heights.pop()
            if event.anchor is not None:
                budget.sizes[id(node)] = (before - budget.nodes + 1, height)
        if self._heights:
            self._heights[-1] = max(self._heights[-1], height)
        return node

    def _spend(self, nodes: int, line: int, message: str) -> None:
        self.budget.nodes -= nodes
        if self.budget.nodes < 0:
            raise _Refused(message, line)


def _loader(budget: _Budget) -> YAML:
    """A round-trip YAML loader whose composer spends budget."""
    loader = YAML(typ="rt")
    loader.Composer = _BoundedComposer
    composer = loader.composer
    assert isinstance(composer, _BoundedComposer)
    composer.budget = budget
    composer.warn_double_anchors = False  # legal YAML; the warning would print the file's lines on stderr
    return loader
