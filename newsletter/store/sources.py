"""Each source's fetch state: HTTP validators, last fetch and success, consecutive failures
(a mixin of the Store)."""

from __future__ import annotations

from sqlalchemy import (
    select,
)

from newsletter.models import SourceState
from newsletter.store import tables as t
from newsletter.store.base import StoreBase


class SourceStore(StoreBase):
    """Each source's fetch state (ETag, Last-Modified, failures)."""

    def source_state(self, source: str) -> SourceState:
        """A source's fetch state; a blank one for a source never fetched."""
        with self.engine.connect() as conn:
            r = conn.execute(
                select(t.source_state).where(t.source_state.c.source == source)
            ).first()
        if r is None:
            return SourceState(source)
        return SourceState(
            r.source,
            r.etag,
            r.last_modified,
            r.last_fetch,
            r.last_success,
            r.last_error,
            r.last_count,
            r.consecutive_failures,
        )

    def all_source_states(self) -> list[SourceState]:
        """The fetch state of every source that has one, by source name."""
        with self.engine.connect() as conn:
            names = [
                r[0]
                for r in conn.execute(
                    select(t.source_state.c.source).order_by(t.source_state.c.source)
                )
            ]
        return [self.source_state(n) for n in names]

    def save_source_state(self, state: SourceState) -> None:
        """Store a source's fetch state, replacing the one it had."""
        values = {
            "etag": state.etag,
            "last_modified": state.last_modified,
            "last_fetch": state.last_fetch,
            "last_success": state.last_success,
            "last_error": state.last_error,
            "last_count": state.last_count,
            "consecutive_failures": state.consecutive_failures,
        }
        with self.engine.begin() as conn:
            stmt = self._insert(t.source_state).values(source=state.source, **values)
            conn.execute(stmt.on_conflict_do_update(index_elements=["source"], set_=values))  # type: ignore[attr-defined]
