"""Chunking counterfactuals for bench/retrieval.py's `--variant`: what kbctl would embed if it chunked otherwise.

- `headings` (what kbctl does): each chunk is embedded as its heading path, a blank line, then its text;
  no chunk crosses a heading.
- `no-headings`: each chunk is embedded as its text alone (the heading path stays in the keyword index and the
  stored chunk; only the model no longer sees it). What it saves: the heading tokens of every chunk.
- `merged`: a section shorter than MERGE_BELOW characters is merged with the section after it when both sit
  under the same parent heading; the merged chunk's heading path is their common parent (the merged text
  still holds both headings). Fewer, fuller chunks, as a splitter that ignores headings makes.

They patch kbctl's chunker in this process only, before anything is chunked.
"""

from __future__ import annotations

from collections.abc import Callable

import kbctl.chunking as chunking

VARIANTS = ("headings", "no-headings", "merged")
MERGE_BELOW = 600


def _merged_sections(
    original: Callable[[str, bool], list[chunking._Section]],
) -> Callable[..., list[chunking._Section]]:
    def sections(text: str, markdown: bool) -> list[chunking._Section]:
        out: list[chunking._Section] = []
        for section in original(text, markdown):
            last = out[-1] if out else None
            parent = last.path[:-1] if last is not None else ()
            if (
                last is not None
                and last.path  # never the text before the first heading
                and last.end - last.start < MERGE_BELOW
                and section.path[: len(parent)] == parent  # the next section is a sibling or a child
            ):
                common = last.path if section.path[: len(last.path)] == last.path else parent
                out[-1] = chunking._Section(last.start, section.end, last.body, common)
            else:
                out.append(section)
        return out

    return sections


def apply_variant(name: str) -> None:
    """Patch the chunker for `name` (one of VARIANTS); `headings` leaves kbctl as it is."""
    if name not in VARIANTS:
        raise SystemExit(f"unknown variant {name!r}: one of {', '.join(VARIANTS)}")
    if name == "no-headings":
        chunking.Chunk.embed_text = property(lambda self: self.text)  # type: ignore[method-assign,assignment]
    elif name == "merged":
        chunking._sections = _merged_sections(chunking._sections)  # type: ignore[assignment]
