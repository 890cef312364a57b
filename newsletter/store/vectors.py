"""Embedding vectors by model and text hash, for semantic ranking (a mixin of the Store)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime

from sqlalchemy import delete, select

from newsletter.store import tables as t
from newsletter.store.base import StoreBase

CHUNK = 500
"""Hashes per ``IN (...)`` list: well under SQLite's and PostgreSQL's parameter limits."""


class VectorStore(StoreBase):
    """Vectors (raw float32 bytes) keyed by ``(model, text hash)``."""

    def vectors(self, model: str, hashes: Collection[str]) -> dict[str, bytes]:
        """The stored vectors of ``model`` for these text hashes; unknown hashes are left out."""
        wanted = list(dict.fromkeys(hashes))
        out: dict[str, bytes] = {}
        e = t.embeddings
        with self.engine.connect() as conn:
            for start in range(0, len(wanted), CHUNK):
                rows = conn.execute(
                    select(e.c.text_hash, e.c.vector).where(
                        e.c.model == model, e.c.text_hash.in_(wanted[start : start + CHUNK])
                    )
                )
                out.update((r.text_hash, bytes(r.vector)) for r in rows)
        return out

    def put_vectors(self, model: str, vectors: Mapping[str, bytes], now: datetime) -> int:
        """Keep ``vectors`` (text hash → bytes) of ``model``; a hash stored already (another
        process embedded the same text first) keeps its row. Returns how many were new."""
        if not vectors:
            return 0
        e = t.embeddings
        hashes = list(vectors)
        added = 0
        with self.engine.begin() as conn:
            for start in range(0, len(hashes), CHUNK):
                chunk = hashes[start : start + CHUNK]
                have = set(
                    conn.execute(
                        select(e.c.text_hash).where(e.c.model == model, e.c.text_hash.in_(chunk))
                    ).scalars()
                )
                rows = [
                    {"model": model, "text_hash": h, "vector": vectors[h], "created_at": now}
                    for h in chunk
                    if h not in have
                ]
                if rows:
                    stmt = self._insert(e).on_conflict_do_nothing(  # type: ignore[attr-defined]
                        index_elements=["model", "text_hash"]
                    )
                    conn.execute(stmt, rows)
                    added += len(rows)
        return added

    def prune_vectors(self, before: datetime) -> int:
        """Delete vectors stored before ``before`` (texts no run has needed since); returns how
        many. A vector still needed is simply embedded again."""
        with self.engine.begin() as conn:
            return int(
                conn.execute(
                    delete(t.embeddings).where(t.embeddings.c.created_at < before)
                ).rowcount
                or 0
            )
