"""Readers' own topics: a sentence and example papers each, in the reader's order (a mixin of
the Store). The checks (length, HTML, links, limits) are :mod:`newsletter.subscribe.own_topics`'; this
module stores what passed them, and keeps the count under the limit it is given."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, func, select, update

from newsletter.models import OwnTopic, SubscriberStatus
from newsletter.store import tables as t
from newsletter.store.base import StoreBase, _by_key

CHUNK = 500
"""Subscriber ids per ``IN (...)`` list."""


def _own(r: Any) -> OwnTopic:
    return OwnTopic(
        id=r.id,
        subscriber_id=r.subscriber_id,
        position=r.position,
        text=r.text,
        text_hash=r.text_hash,
        examples=tuple(x for x in (r.examples or "").split(",") if x),
        created=r.created,
        updated=r.updated,
    )


class OwnTopicStore(StoreBase):
    """Own topics by reader: listed, added under a limit, edited, removed (positions kept 1..n)."""

    def own_topics_of(self, subscriber_ids: Sequence[int]) -> dict[int, tuple[OwnTopic, ...]]:
        """Each of these readers' own topics in their order (readers without any left out)."""
        ids = sorted(set(subscriber_ids))
        out: dict[int, list[OwnTopic]] = {}
        o = t.own_topics
        with self.engine.connect() as conn:
            _by_key(conn)
            for start in range(0, len(ids), CHUNK):
                rows = conn.execute(
                    select(o)
                    .where(o.c.subscriber_id.in_(ids[start : start + CHUNK]))
                    .order_by(o.c.subscriber_id, o.c.position, o.c.id)
                )
                for r in rows:
                    out.setdefault(r.subscriber_id, []).append(_own(r))
        return {k: tuple(v) for k, v in out.items()}

    def own_topic_readers(self) -> list[int]:
        """The active readers that have own topics, by id."""
        o, s = t.own_topics, t.subscribers
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(o.c.subscriber_id)
                .join(s, s.c.id == o.c.subscriber_id)
                .where(s.c.status == SubscriberStatus.ACTIVE.value)
                .distinct()
                .order_by(o.c.subscriber_id)
            )
            return [int(r[0]) for r in rows]

    def add_own_topic(
        self,
        subscriber_id: int,
        text: str,
        text_hash: str,
        examples: Sequence[str],
        now: datetime,
        *,
        limit: int,
    ) -> OwnTopic | None:
        """Add an own topic last in the reader's list; ``None`` when they have ``limit``
        already. A topic with the same text is not added twice: that one is returned."""
        o = t.own_topics
        with self.engine.begin() as conn:
            self._lock_reader(conn, subscriber_id)
            rows = conn.execute(
                select(o).where(o.c.subscriber_id == subscriber_id).order_by(o.c.position)
            ).all()
            same = next((r for r in rows if r.text_hash == text_hash), None)
            if same is not None:
                return _own(same)
            if len(rows) >= limit:
                return None
            new_id = conn.execute(
                o.insert()
                .values(
                    subscriber_id=subscriber_id,
                    position=len(rows) + 1,
                    text=text,
                    text_hash=text_hash,
                    examples=",".join(examples),
                    created=now,
                    updated=now,
                )
                .returning(o.c.id)
            ).scalar_one()
            row = conn.execute(select(o).where(o.c.id == new_id)).one()
        return _own(row)

    def edit_own_topic(
        self,
        subscriber_id: int,
        topic_id: int,
        text: str,
        text_hash: str,
        examples: Sequence[str],
        now: datetime,
    ) -> OwnTopic | None:
        """Change one of the reader's own topics (same id and place, so votes on it stay);
        ``None`` when the reader has no topic with that id."""
        o = t.own_topics
        with self.engine.begin() as conn:
            done = conn.execute(
                update(o)
                .where(o.c.id == topic_id, o.c.subscriber_id == subscriber_id)
                .values(text=text, text_hash=text_hash, examples=",".join(examples), updated=now)
            )
            if done.rowcount != 1:
                return None
            row = conn.execute(select(o).where(o.c.id == topic_id)).one()
        return _own(row)

    def remove_own_topic(self, subscriber_id: int, topic_id: int) -> bool:
        """Remove one of the reader's own topics (the later ones move up one place); False when
        the reader has no topic with that id."""
        o = t.own_topics
        with self.engine.begin() as conn:
            self._lock_reader(conn, subscriber_id)
            gone = conn.execute(
                delete(o).where(o.c.id == topic_id, o.c.subscriber_id == subscriber_id)
            )
            if gone.rowcount != 1:
                return False
            ids = conn.execute(
                select(o.c.id).where(o.c.subscriber_id == subscriber_id).order_by(o.c.position)
            ).scalars()
            for position, tid in enumerate(list(ids), start=1):
                conn.execute(update(o).where(o.c.id == tid).values(position=position))
        return True

    def count_own_topics(self) -> int:
        """How many own topics all readers have (``status`` shows the number, never the text)."""
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(t.own_topics)).scalar_one())

    def _lock_reader(self, conn: Connection, subscriber_id: int) -> None:
        """Serialize changes to one reader's list (PostgreSQL: a row lock on the reader;
        SQLite's writer lock already does it), so two adds cannot both pass the limit."""
        if self.dialect == "postgresql":
            conn.execute(
                select(t.subscribers.c.id)
                .where(t.subscribers.c.id == subscriber_id)
                .with_for_update()
            )
