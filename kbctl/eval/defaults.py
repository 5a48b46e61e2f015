"""Defaults of a BEIR import, in a module without imports: the CLI shows them in `--help`, which must start fast."""

from __future__ import annotations

from typing import Final

DEFAULT_SPLIT: Final = "test"
"""Which qrels/<split>.tsv judges the queries."""

RANKING_TOP_K: Final = 10
RANKING_THRESHOLD: Final = -1.0
RANKING_MAX_TOKENS: Final = 100_000
"""Retrieval settings that measure ranking rather than cut-offs: every candidate passes the threshold and the
token budget never binds, so recall@10 and nDCG@10 see the full top 10."""
