"""Tests of kbctl.chunking: invariants over generated markdown, and behaviour on real-looking documents."""

from __future__ import annotations

import re
from itertools import pairwise

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbctl.chunking import Chunk, chunk_document

# ---------------------------------------------------------------------------------------------------------
# Generated markdown-ish documents
# ---------------------------------------------------------------------------------------------------------

_VOCABULARY = [
    "the", "client", "refund", "invoice", "within", "days", "e.g.", "Dr.", "3.5", "i.e.", "policy",
    "engagement", "(see", "below)", "U.S.", "No.", "fee", "30%", "manager", "and", "or", "must",
]  # fmt: skip
_words = st.one_of(
    st.sampled_from(_VOCABULARY),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyzABC", min_size=1, max_size=14),
)
_long_words = st.text(alphabet="abcdefghij", min_size=40, max_size=2500)


@st.composite
def _sentence(draw: st.DrawFn) -> str:
    words = draw(st.lists(_words, min_size=1, max_size=25))
    if draw(st.integers(0, 9)) == 0:
        words.insert(draw(st.integers(0, len(words))), draw(_long_words))
    return " ".join(words) + draw(st.sampled_from([".", ".", "!", "?", "", ".)"]))


@st.composite
def _block(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["paragraph", "paragraph", "heading", "list", "table", "code"]))
    if kind == "heading":
        return "#" * draw(st.integers(1, 6)) + " " + " ".join(draw(st.lists(_words, min_size=1, max_size=5)))
    if kind == "list":
        items = draw(st.lists(_sentence(), min_size=1, max_size=6))
        return "\n".join(f"{draw(st.sampled_from(['-', '*', '1.']))} {item}" for item in items)
    if kind == "table":
        rows = draw(st.lists(st.lists(_words, min_size=2, max_size=3), min_size=1, max_size=6))
        return "\n".join("| " + " | ".join(row) + " |" for row in rows)
    if kind == "code":
        return "```\n# comment " + draw(_words) + "\nx = 1\n```"
    sentences = draw(st.lists(_sentence(), min_size=1, max_size=12))
    return draw(st.sampled_from([" ", "\n"])).join(sentences)


@st.composite
def _document(draw: st.DrawFn) -> str:
    blocks = draw(st.lists(_block(), min_size=0, max_size=14))
    separators = draw(st.lists(st.sampled_from(["\n", "\n\n", "\n\n\n", "\n \t\n"]), min_size=len(blocks)))
    body = "".join(block + sep for block, sep in zip(blocks, separators, strict=False))
    return draw(st.sampled_from(["", "  ", "\n\n"])) + body


@st.composite
def _limits(draw: st.DrawFn) -> tuple[int, int]:
    max_chars = draw(st.one_of(st.integers(20, 120), st.integers(20, 2000)))
    overlap = draw(st.one_of(st.just(0), st.integers(0, max_chars - 1), st.integers(0, max_chars // 4)))
    return max_chars, overlap


_PROPERTY_SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _first_unseen(source: str, prev: Chunk | None, chunk: Chunk) -> int:
    """Where the new content of `chunk` starts: after the overlap with `prev`, skipping whitespace."""
    if prev is None or chunk.start >= prev.end:
        return chunk.start
    match = re.compile(r"\S").search(source, prev.end)
    assert match is not None
    return match.start()


def _check_invariants(source: str, chunks: list[Chunk], max_chars: int, overlap: int) -> None:
    covered = bytearray(len(source))
    for i, chunk in enumerate(chunks):
        assert chunk.ordinal == i
        assert 0 < len(chunk.text) <= max_chars
        assert chunk.text == source[chunk.start : chunk.end]
        assert chunk.text == chunk.text.strip()
        covered[chunk.start : chunk.end] = b"\x01" * (chunk.end - chunk.start)
    assert all(covered[i] or ch.isspace() for i, ch in enumerate(source))
    for prev, nxt in pairwise(chunks):
        assert prev.start < nxt.start and prev.end < nxt.end
        assert prev.end - nxt.start <= overlap
        if nxt.start < prev.end:  # overlapped: same section, starting at a word start
            assert nxt.heading_path == prev.heading_path
            assert source[nxt.start - 1].isspace()
    for before, chunk in zip([None, *chunks], chunks, strict=False):
        cut_mid_word = chunk.end < len(source) and not source[chunk.end].isspace()
        if cut_mid_word:
            # a hard cut only happens when no word boundary exists in the chunk's new content
            assert not re.search(r"\s", source[_first_unseen(source, before, chunk) : chunk.end])


@_PROPERTY_SETTINGS
@given(_document(), _limits())
def test_invariants_hold_on_generated_markdown(source: str, limits: tuple[int, int]) -> None:
    """Limits, exact slices, coverage, order, bounded overlap and word-boundary cuts hold for any markdown."""
    max_chars, overlap = limits
    chunks = chunk_document(source, max_chars=max_chars, overlap_chars=overlap)
    _check_invariants(source, chunks, max_chars, overlap)
    assert chunks == chunk_document(source, max_chars=max_chars, overlap_chars=overlap)


@_PROPERTY_SETTINGS
@given(_document(), _limits())
def test_invariants_hold_without_markdown(source: str, limits: tuple[int, int]) -> None:
    """With markdown=False the same invariants hold and no chunk has a heading path."""
    max_chars, overlap = limits
    chunks = chunk_document(source, max_chars=max_chars, overlap_chars=overlap, markdown=False)
    _check_invariants(source, chunks, max_chars, overlap)
    assert all(chunk.heading_path == () for chunk in chunks)


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=" \t\nab.#|-`", max_size=300), st.integers(1, 40), st.data())
def test_invariants_hold_on_adversarial_characters(source: str, max_chars: int, data: st.DataObject) -> None:
    """Tiny limits over text made of separators, punctuation and fences still respect every invariant."""
    overlap = data.draw(st.integers(0, max_chars - 1))
    chunks = chunk_document(source, max_chars=max_chars, overlap_chars=overlap)
    _check_invariants(source, chunks, max_chars, overlap)


# ---------------------------------------------------------------------------------------------------------
# Real-looking documents
# ---------------------------------------------------------------------------------------------------------

POLICY = """\
# Client Service Policy

This policy applies to every engagement run by Northwind Advisory.

# Refunds

## Cancelled engagements

If a client cancels more than 30 days before the agreed start date, we refund 100% of the deposit.
Between 14 and 30 days before the start, we refund 50% of the deposit.
Less than 14 days before the start, the deposit is not refunded.

## Partially delivered engagements

Work delivered is invoiced at the agreed day rate; the rest of the prepayment is refunded.

### Approval

Refunds above EUR 10,000 need the approval of the Finance Director.

## Disputes

Disputed refunds go to the Head of Client Services.

# Service levels

We answer priority-1 requests within 4 business hours.
"""


def test_nested_headings_give_exact_heading_paths() -> None:
    """Each section's chunk carries the stack of enclosing headings, and a `##` after a `###` pops it."""
    chunks = chunk_document(POLICY, max_chars=1200, overlap_chars=0)
    assert [c.heading_path for c in chunks] == [
        ("Client Service Policy",),
        ("Refunds", "Cancelled engagements"),
        ("Refunds", "Partially delivered engagements"),
        ("Refunds", "Partially delivered engagements", "Approval"),
        ("Refunds", "Disputes"),
        ("Service levels",),
    ]
    assert chunks[1].heading == "Refunds > Cancelled engagements"


def test_heading_only_section_is_merged_into_the_next() -> None:
    """A heading followed directly by another heading starts the next section's chunk instead of its own."""
    chunks = chunk_document(POLICY, max_chars=1200, overlap_chars=0)
    refunds = chunks[1]
    assert refunds.text.startswith("# Refunds\n\n## Cancelled engagements\n\nIf a client cancels")
    assert refunds.text.endswith("the deposit is not refunded.")
    assert not any(c.text == "# Refunds" for c in chunks)


def test_heading_line_is_kept_with_its_section_text() -> None:
    """Every section's chunk starts with its own heading line, so no character of the source is lost."""
    chunks = chunk_document(POLICY, max_chars=1200, overlap_chars=0)
    assert [c.text.splitlines()[0] for c in chunks] == [
        "# Client Service Policy",
        "# Refunds",
        "## Partially delivered engagements",
        "### Approval",
        "## Disputes",
        "# Service levels",
    ]


def test_heading_is_not_a_chunk_of_its_own_when_body_is_long() -> None:
    """When the section body does not fit, the first chunk still carries body text after the heading."""
    source = "# Refunds\n\n" + " ".join(f"Clause {i} applies to every refund request." for i in range(40))
    chunks = chunk_document(source, max_chars=200, overlap_chars=0)
    assert chunks[0].text.startswith("# Refunds\n\nClause 0 applies")
    assert chunks[0].text.endswith(".")


def test_bulleted_list_is_cut_between_items() -> None:
    """A list longer than the limit is cut at line ends, so every item stays whole in one chunk."""
    items = [f"- Step {i}: notify the engagement partner and log the request in the CRM." for i in range(30)]
    source = "## Escalation steps\n\n" + "\n".join(items)
    chunks = chunk_document(source, max_chars=300, overlap_chars=0)
    assert len(chunks) > 1
    for chunk in chunks[1:]:
        assert all(line in items for line in chunk.text.splitlines())
    assert sum(len(c.text.splitlines()) for c in chunks) == len(items) + 2  # + heading line and blank line


TABLE = """\
| Record type        | Retention period        |
|--------------------|-------------------------|
| Invoices           | 10 years after issue    |
| Engagement letters | 7 years after closure   |
| Working papers     | 5 years after closure   |
| CVs of applicants  | 6 months after decision |"""


def test_table_that_fits_a_chunk_is_not_cut() -> None:
    """A table that fits in one chunk is kept whole: the overlap shrinks rather than cut inside it."""
    intro = "## Retention\n\n" + "Records are kept for the periods below, counted from the trigger. " * 3
    source = intro.strip() + "\n\n" + TABLE + "\n\nAfter the period ends, records are destroyed securely."
    chunks = chunk_document(source, max_chars=len(TABLE) + 10, overlap_chars=60)
    table_chunk = next(c for c in chunks if TABLE in c.text)
    previous = chunks[table_chunk.ordinal - 1]
    assert 0 < previous.end - table_chunk.start < 60


def test_table_larger_than_a_chunk_is_cut_at_row_ends() -> None:
    """A table longer than the limit is cut only between rows."""
    chunks = chunk_document(TABLE, max_chars=120, overlap_chars=0)
    rows = TABLE.splitlines()
    assert len(chunks) == 3
    assert [c.text for c in chunks] == ["\n".join(rows[0:2]), "\n".join(rows[2:4]), "\n".join(rows[4:6])]


def _sentences(count: int, length: int) -> list[str]:
    """`count` distinct sentences of exactly `length` characters each."""
    sentences = []
    for i in range(count):
        head = f"Sentence {i:02d} says the client may cancel"
        sentences.append(head + " " + "x" * (length - len(head) - 2) + ".")
    return sentences


def test_long_paragraph_is_cut_at_sentence_ends() -> None:
    """A 5,000-character paragraph of 99-character sentences packs exactly ten sentences per chunk."""
    sentences = _sentences(50, 99)
    source = " ".join(sentences)
    assert len(source) == 4999
    chunks = chunk_document(source, max_chars=1000, overlap_chars=0)
    assert [c.text for c in chunks] == [" ".join(sentences[i : i + 10]) for i in range(0, 50, 10)]


def test_sentence_ends_skip_abbreviations_and_numbers() -> None:
    """Cuts do not fall after "e.g.", "Dr." or inside "3.5"; they fall after real sentence ends."""
    source = "Ask Dr. Smith about fees, e.g. the 3.5 percent surcharge. " * 30
    chunks = chunk_document(source, max_chars=200, overlap_chars=0)
    assert all(c.text.endswith("surcharge.") for c in chunks)
    assert all(c.text.startswith("Ask Dr. Smith") for c in chunks)


def test_overlapping_chunks_start_at_earliest_word_in_overlap_window() -> None:
    """With overlap, a chunk starts at the earliest word start in the last overlap_chars of the one before."""
    source = " ".join(_sentences(30, 99))
    word_starts = [m.start() for m in re.finditer(r"\S+", source)]
    chunks = chunk_document(source, max_chars=500, overlap_chars=60)
    assert len(chunks) == 7
    for prev, nxt in pairwise(chunks[:-1]):
        assert nxt.start == min(s for s in word_starts if s >= prev.end - 60)
        assert 0 < prev.end - nxt.start <= 60
    # the last five sentences fit exactly in one chunk, so overlap would only force a worse cut
    assert (chunks[-1].start, chunks[-1].end) == (chunks[-2].end + 1, len(source))


def test_sentence_longer_than_limit_is_cut_at_word_boundaries() -> None:
    """One sentence longer than the limit is cut between words, never inside one."""
    words = [f"obligation{i}" for i in range(60)]
    source = "The consultant " + " ".join(words) + "."
    chunks = chunk_document(source, max_chars=100, overlap_chars=20)
    assert len(chunks) > 5
    for chunk in chunks:
        assert chunk.start == 0 or source[chunk.start - 1] == " "
        assert chunk.end == len(source) or source[chunk.end] == " "


def test_word_longer_than_limit_is_cut_hard() -> None:
    """Only a single word longer than the limit is cut at exactly max_chars."""
    source = "x" * 250
    chunks = chunk_document(source, max_chars=100, overlap_chars=10)
    assert [(c.start, c.end) for c in chunks] == [(0, 100), (100, 200), (200, 250)]


def test_hash_line_in_fenced_code_is_not_a_heading() -> None:
    """A line starting with `#` inside a ``` or ~~~ fence stays in its section and starts no new one."""
    source = (
        "# Deployment\n\nRun the script:\n\n```bash\n# install dependencies\npip install kbctl\n```\n\n"
        "~~~\n## also not a heading\n~~~\n\nThen verify.\n"
    )
    chunks = chunk_document(source, max_chars=1200, overlap_chars=0)
    assert len(chunks) == 1
    assert chunks[0].heading_path == ("Deployment",)
    assert chunks[0].text == source.strip()


def test_markdown_false_keeps_one_section_without_headings() -> None:
    """With markdown=False, `#` lines are plain text and chunks carry no heading path."""
    chunks = chunk_document(POLICY, max_chars=1200, overlap_chars=0, markdown=False)
    assert len(chunks) == 1
    assert chunks[0].heading_path == ()
    assert chunks[0].text == POLICY.strip()


def test_embed_text_prefixes_heading_path() -> None:
    """embed_text is "heading path, blank line, text" with a heading path, and just the text without."""
    with_heading = Chunk(0, "Deposits are refunded.", 0, 22, ("Refunds", "Cancelled engagements"))
    without = Chunk(1, "Deposits are refunded.", 0, 22, ())
    assert with_heading.embed_text == "Refunds > Cancelled engagements\n\nDeposits are refunded."
    assert without.heading == ""
    assert without.embed_text == "Deposits are refunded."


def test_chunks_never_span_two_sections() -> None:
    """Even with a large limit and overlap, each section's text is chunked on its own."""
    chunks = chunk_document(POLICY, max_chars=80, overlap_chars=40)
    for chunk in chunks:
        headings_inside = [line for line in chunk.text.splitlines()[1:] if line.startswith("#")]
        assert headings_inside in ([], ["## Cancelled engagements"])


@pytest.mark.parametrize("source", ["", "   ", "\n\n\t\n"])
def test_empty_input_gives_no_chunks(source: str) -> None:
    """Empty or whitespace-only input returns an empty list."""
    assert chunk_document(source) == []


@pytest.mark.parametrize(("max_chars", "overlap_chars"), [(0, 0), (-5, 0), (100, -1), (100, 100), (10, 50)])
def test_invalid_arguments_raise_value_error(max_chars: int, overlap_chars: int) -> None:
    """max_chars below 1 or overlap_chars outside [0, max_chars) is rejected with ValueError."""
    with pytest.raises(ValueError):
        chunk_document("text", max_chars=max_chars, overlap_chars=overlap_chars)
