"""Chunking counterfactuals for bench/retrieval.py's `--variant`: what kbctl would embed if it chunked otherwise.

- `headings` (what kbctl does): each chunk is embedded as its heading path, a blank line, then its text;
  no chunk crosses a heading.
- `no-headings`: each chunk is embedded as its text alone (the heading path stays in the keyword index and the
  stored chunk; only the model no longer sees it). What it saves: the heading tokens of every chunk.
- `merged`: a section shorter than MERGE_BELOW characters is merged with the section after it when both sit
  under the same parent heading; the merged chunk's heading path is their common parent (the merged text
  still holds both headings). Fewer, fuller chunks, as a splitter that ignores headings makes.
- `window`: nothing cut by the model's window. A document whose chunks (heading path and title included, as
  embedded) would exceed the local model's 254 tokens is chunked again with a smaller `maxChars` (and the
  overlap in proportion), shrunk by the worst chunk's excess, until every chunk fits or `maxChars` reaches
  WINDOW_MIN_CHARS. kbctl instead keeps `maxChars` (1,200) and counts the chunks whose ends no vector holds.

They patch kbctl's chunker in this process only, before anything is chunked.
"""

from __future__ import annotations

from collections.abc import Callable

import kbctl.chunking as chunking
import kbctl.engine.ingest as ingest
from kbctl.config import Settings
from kbctl.embedding.local import MODEL_NAME, LocalEmbedder
from kbctl.engine.plan import SourcePlan
from kbctl.manifest import KnowledgeBase

VARIANTS = ("headings", "no-headings", "merged", "window")
MERGE_BELOW = 600
WINDOW_MIN_CHARS = 200


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


def _window_fitted(
    original: Callable[[SourcePlan, KnowledgeBase], ingest.Chunked], settings: Settings
) -> Callable[[SourcePlan, KnowledgeBase], ingest.Chunked]:
    counter = LocalEmbedder(MODEL_NAME, settings)  # counts tokens with the model's own tokenizer
    window = counter.window_tokens

    def chunk_source(plan: SourcePlan, kb: KnowledgeBase) -> ingest.Chunked:
        chunked = original(plan, kb)
        size, overlap = kb.spec.chunking.max_chars, kb.spec.chunking.overlap_chars
        while True:
            worst = max(counter.count_tokens([c.embed_text for c in chunked.chunks]), default=0)
            if worst <= window or size <= WINDOW_MIN_CHARS:
                return chunked
            smaller = max(WINDOW_MIN_CHARS, min(size - 1, int(size * window / worst * 0.95)))
            overlap = overlap * smaller // size
            size = smaller
            chunking_spec = kb.spec.chunking.model_copy(update={"max_chars": size, "overlap_chars": overlap})
            kb = kb.model_copy(update={"spec": kb.spec.model_copy(update={"chunking": chunking_spec})})
            chunked = original(plan, kb)

    return chunk_source


def apply_variant(name: str, settings: Settings) -> None:
    """Patch the chunker for `name` (one of VARIANTS); `headings` leaves kbctl as it is. `settings`: the run's
    (the `window` variant reads the local model's tokenizer through them)."""
    if name not in VARIANTS:
        raise SystemExit(f"unknown variant {name!r}: one of {', '.join(VARIANTS)}")
    if name == "no-headings":
        chunking.Chunk.embed_text = property(lambda self: self.text)  # type: ignore[method-assign,assignment]
    elif name == "merged":
        chunking._sections = _merged_sections(chunking._sections)  # type: ignore[assignment]
    elif name == "window":
        ingest.chunk_source = _window_fitted(ingest.chunk_source, settings)  # type: ignore[assignment]
