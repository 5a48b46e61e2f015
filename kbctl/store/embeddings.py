"""Embeddings: the content-addressed cache of chunk vectors per model, the background questions' vectors, and the
calibration of a version from them (kbctl.embedding.background)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kbctl.errors import NotFoundError
from kbctl.inputs.access import Reader
from kbctl.store.access import Rule, readable_background, store_calibration, version_rules
from kbctl.store.chunks import Chunks
from kbctl.store.search import as_float32

if TYPE_CHECKING:
    from kbctl.embedding import Vector

__all__ = ["Embeddings"]


class Embeddings(Chunks):
    """The vector cache (kb_embeddings), the background vectors (kb_background_vectors) and calibration."""

    def cached_embeddings(self, model: str, hashes: Sequence[bytes]) -> dict[bytes, int]:
        """Ids of the stored vectors among `hashes` for `model` (the content-addressed cache)."""
        if not hashes:
            return {}
        rows = self._conn.execute(
            "SELECT text_sha256, id FROM kb_embeddings WHERE model = %s AND text_sha256 = ANY(%s)",
            (model, list(hashes)),
        ).fetchall()
        return {bytes(h): i for h, i in rows}

    def store_embeddings(self, model: str, items: Sequence[tuple[bytes, Vector]]) -> dict[bytes, int]:
        """Add vectors to the cache (committed at once, so a later failure loses none); return their ids."""
        if not items:
            return {}
        ids: dict[bytes, int] = {}
        with self._conn.transaction(), self._conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO kb_embeddings (model, text_sha256, embedding) VALUES (%s, %s, %s)"
                " ON CONFLICT (model, text_sha256) DO NOTHING RETURNING text_sha256, id",
                [(model, h, as_float32(v)) for h, v in items],
                returning=True,
            )
            while True:
                ids.update((bytes(h), i) for h, i in cur.fetchall())
                if not cur.nextset():
                    break
        # A vector another writer stored meanwhile returns no row here: look those few up (reading back the rows
        # just inserted would cost a random heap read each, seconds on a cold 100k-vector table).
        others = [h for h, _ in items if h not in ids]
        return (ids | self.cached_embeddings(model, others)) if others else ids

    def background_vectors(self, model: str) -> dict[bytes, Vector]:
        """The stored vectors of the background questions for `model`, by question key."""
        rows = self._conn.execute(
            "SELECT question_sha256, embedding FROM kb_background_vectors WHERE model = %s", (model,), binary=True
        ).fetchall()
        return {bytes(k): as_float32(v) for k, v in rows}

    def store_background_vectors(self, model: str, items: Sequence[tuple[bytes, Vector]]) -> None:
        """Keep background questions' vectors for `model` (committed at once; a vector already stored stays)."""
        if not items:
            return
        with self._conn.transaction(), self._conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO kb_background_vectors (model, question_sha256, embedding) VALUES (%s, %s, %s)"
                " ON CONFLICT DO NOTHING",
                [(model, k, as_float32(v)) for k, v in items],
            )

    def background_similarity(
        self, version_id: int, model: str, chunks: int, vectors: Sequence[Vector]
    ) -> float | None:
        """The background similarity of a version (kbctl.embedding.background): each background question's best
        cosine similarity among its `chunks` chunks, searched as a query searches them, then their quantile."""
        from kbctl.embedding.background import background_similarity

        return background_similarity(self.background_bests(version_id, model, chunks, vectors))

    def background_bests(
        self, version_id: int, model: str, chunks: int, vectors: Sequence[Vector], part: Rule | None = None
    ) -> list[float]:
        """Each background question's best cosine similarity among a version's `chunks` chunks, in the order of
        `vectors`, searched as a query searches them; with a `part`, among the chunks behind that rule alone
        (`chunks` of them). Empty when there are none (or a question finds none: no line comes of a part half
        searched)."""
        if chunks <= 0:
            return []
        bests = [
            hits[0].score
            for vector in vectors
            if (hits := self.search(version_id, vector, 1, model=model, version_chunks=chunks, reader=part))
        ]
        return bests if len(bests) == len(vectors) else []

    def background_keyword(self, version_id: int, language: str, vectors: Sequence[Vector]) -> float | None:
        """The background keyword share of a version (kbctl.embedding.background): each background question's
        keyword share, searched as a query searches (full text in `language`; `vectors` the questions' own, in
        order), then their quantile."""
        from kbctl.embedding.background import background_keyword, background_questions, keyword_share

        shares = []
        for question, vector in zip(background_questions(), vectors, strict=True):
            ranking = self.keyword_ranking(version_id, language, question, vector, 1)
            shares.append(keyword_share(ranking.best_score, ranking.idf_total))
        return background_keyword(shares)

    def calibrate(self, version_id: int, vectors: Sequence[Vector], language: str) -> tuple[float | None, float | None]:
        """Calibrate a published version in place, as a publish now would (`vectors`: the background questions', of
        the version's model; `language`: its spec's): for one published before calibration (migration 22) or
        before the keyword line (migration 28). Its content is untouched. Returns its background similarity and
        background keyword share."""
        with self._conn.transaction():  # an indexed search's settings last until the end of the transaction
            row = self._conn.execute(
                "SELECT model, chunk_count, restricted_chunks FROM kb_versions WHERE id = %s FOR UPDATE", (version_id,)
            ).fetchone()
            if row is None:
                raise NotFoundError(f"version {version_id} is gone")
            return self._calibrate(version_id, str(row[0]), int(row[1]), int(row[2]), vectors, language)

    def _calibrate(
        self, version_id: int, model: str, chunks: int, restricted: int, vectors: Sequence[Vector], language: str
    ) -> tuple[float | None, float | None]:
        """Calibrate a version being published, or published before (kbctl.embedding.background): the background
        questions' best similarities among its chunks behind no rule and, when it restricts some, among each rule's,
        searched apart (kbctl.store.access), so that every caller's line is of what it may read; the version's own is
        of them all. A version that restricts none gets its background keyword share too (one that does keeps the
        similarity line alone: a share measured over every chunk would move with text a caller may not read).
        Returns the background similarity and background keyword share stored."""
        from kbctl.embedding.background import joint_similarity

        if not restricted:
            bests = self.background_bests(version_id, model, chunks, vectors)
            similarity, keyword = joint_similarity([bests]), self.background_keyword(version_id, language, vectors)
            store_calibration(self._conn, version_id, similarity, bests, {})
            self._conn.execute("UPDATE kb_versions SET background_keyword = %s WHERE id = %s", (keyword, version_id))
            return similarity, keyword
        open_bests = self.background_bests(version_id, model, chunks - restricted, vectors, Rule(None, None))
        rule_bests = {
            rule: self.background_bests(version_id, model, count, vectors, part)
            for rule, part, count in version_rules(self._conn, version_id)
        }
        whole = joint_similarity([open_bests, *rule_bests.values()])
        store_calibration(self._conn, version_id, whole, open_bests, rule_bests)
        return whole, None

    def readable_background(self, version_id: int, reader: Reader) -> float | None:
        """The background similarity of what `reader` may read of a version (kbctl.store.access.readable_background;
        None: nothing, or a version published before it was calibrated per rule, of which it may not read all)."""
        return readable_background(self._conn, version_id, reader)
