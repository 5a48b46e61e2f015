"""Query a knowledge base: nearest chunks by cosine similarity, cut by threshold and token budget."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel

from kbctl.embedding import Embedder
from kbctl.errors import NotFoundError
from kbctl.store.database import Database

__all__ = ["QueryHit", "QueryResult", "query_knowledge_base"]


class QueryHit(BaseModel):
    """One chunk of context, in rank order."""

    rank: int
    source: str
    title: str | None
    origin: str
    heading_path: list[str]
    position: int
    char_start: int
    char_end: int
    score: float
    tokens: int
    text: str


class QueryResult(BaseModel):
    """The answer to a query: the chunks kept, and why the others were not."""

    knowledge_base: str
    version: int
    model: str
    question: str
    top_k: int
    similarity_threshold: float
    max_context_tokens: int
    hits: list[QueryHit]
    candidates: int
    below_threshold: int
    over_budget: int
    tokens: int
    best_score: float | None

    @property
    def message(self) -> str:
        """A plain sentence on the outcome, honest when nothing relevant was found."""
        kb = f"KnowledgeBase/{self.knowledge_base}"
        if self.hits:
            noun = "chunk" if len(self.hits) == 1 else "chunks"
            return f"{len(self.hits)} {noun} from {kb} (version {self.version}), {self.tokens} tokens"
        if self.candidates == 0:
            return f"nothing relevant found: {kb} has no chunks"
        if self.below_threshold == self.candidates:
            return (
                f"nothing relevant found in {kb}: the best match scores {self.best_score:.2f}, "
                f"below the similarity threshold {self.similarity_threshold:.2f}"
            )
        return f"nothing fits the token budget of {self.max_context_tokens} tokens in {kb}"


def query_knowledge_base(
    db: Database,
    name: str,
    question: str,
    embedder_for: Callable[[str], Embedder],
    *,
    top_k: int | None = None,
    threshold: float | None = None,
    max_tokens: int | None = None,
) -> QueryResult:
    """Retrieve the chunks of the current version of `name` most similar to `question`.

    The best `top_k` chunks by cosine similarity are kept in rank order while their score is at
    least the threshold and their tokens fit the budget (the first chunk that does not fit ends the
    list). Unset limits come from the version's `spec.retrieval`; the question is embedded with the
    model of the version, whatever the manifest says now.
    """
    if not question.strip():
        raise ValueError("question must not be empty")
    row = db.get_kb(name)
    if row is None:
        raise NotFoundError(f'knowledgebase "{name}" not found')
    if row.current_version is None:
        raise NotFoundError(f'knowledgebase "{name}" has no published version yet (is a controller running?)')
    version = db.get_version(row.id, row.current_version)
    assert version is not None
    retrieval = version.manifest["spec"]["retrieval"]
    k = top_k if top_k is not None else int(retrieval["topK"])
    th = threshold if threshold is not None else float(retrieval["similarityThreshold"])
    budget = max_tokens if max_tokens is not None else int(retrieval["maxContextTokens"])
    if k < 1 or budget < 1:
        raise ValueError("top_k and max_tokens must be at least 1")
    embedder = embedder_for(version.model)
    [vector] = embedder.embed([question], purpose="query")
    candidates = db.search(version.id, vector, k)
    hits: list[QueryHit] = []
    below = over = used = 0
    for c in candidates:
        if c.score < th:
            below += 1
        elif over or used + c.token_count > budget:
            over += 1
        else:
            used += c.token_count
            hits.append(
                QueryHit(
                    rank=len(hits) + 1,
                    source=c.source_name,
                    title=c.title,
                    origin=c.origin,
                    heading_path=list(c.heading_path),
                    position=c.ordinal,
                    char_start=c.char_start,
                    char_end=c.char_end,
                    score=round(float(c.score), 4),
                    tokens=c.token_count,
                    text=c.content,
                )
            )
    return QueryResult(
        knowledge_base=name,
        version=version.number,
        model=version.model,
        question=question,
        top_k=k,
        similarity_threshold=th,
        max_context_tokens=budget,
        hits=hits,
        candidates=len(candidates),
        below_threshold=below,
        over_budget=over,
        tokens=used,
        best_score=round(float(candidates[0].score), 4) if candidates else None,
    )
