"""Subscribers: adding, importing, finding and listing them, their topics and status, and the
forgotten addresses an import must not bring back (a mixin of the Store)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Connection,
    delete,
    func,
    select,
    text,
    update,
)
from sqlalchemy.exc import SQLAlchemyError as _SAError

from newsletter.addresses import address_key
from newsletter.models import (
    Frequency,
    NewSubscriber,
    Subscriber,
    SubscriberStatus,
)
from newsletter.store import tables as t
from newsletter.store.base import StoreBase, _by_key, _naive

_SQLITE_ADD_SUBSCRIBER_SQL = (
    "INSERT INTO subscribers (email, name, status, timezone, send_hour, frequency, consent, "
    "created, status_changed, confirmed, permanent_failures, email_key) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8, ?8, 0, ?9)"
)


_PG_ADD_SUBSCRIBERS = text(
    # one statement per batch, its rows as one JSON document: psycopg's executemany would run
    # one INSERT per row, and text arrays cost a quoting pass per element on the client
    "INSERT INTO subscribers (email, name, status, status_changed, timezone, send_hour, "
    "frequency, confirmed, created, permanent_failures, consent, email_key) "
    "SELECT v.email, v.name, v.status, :now, v.timezone, v.send_hour, v.frequency, :now, :now, "
    "0, v.consent, v.email_key FROM json_to_recordset(CAST(:rows AS json)) AS v(email text, "
    "name text, status text, timezone text, send_hour integer, frequency text, consent json, "
    "email_key text) "
    "RETURNING id, email"
)


_PG_SUBSCRIPTIONS = text(
    "INSERT INTO subscriptions (subscriber_id, topic) "
    "SELECT v.s, v.t FROM json_to_recordset(CAST(:rows AS json)) AS v(s integer, t text)"
)


def _pg_add_subscribers(
    conn: Connection, values: Sequence[dict[str, Any]], now: datetime
) -> list[int]:
    """Insert subscriber rows in one statement; their ids in the order given."""
    keys = ("email", "name", "status", "timezone", "send_hour", "frequency", "consent", "email_key")
    rows = json.dumps([{k: v[k] for k in keys} for v in values])
    found = {
        email: sid
        for sid, email in conn.execute(_PG_ADD_SUBSCRIBERS, {"now": _naive(now), "rows": rows})
    }
    return [found[v["email"]] for v in values]


def _subscriber(r: Any, topics: tuple[str, ...]) -> Subscriber:
    return Subscriber(
        id=r.id,
        email=r.email,
        name=r.name,
        status=SubscriberStatus(r.status),
        topics=topics,
        timezone=r.timezone,
        created=r.created,
        send_hour=r.send_hour,
        frequency=Frequency(r.frequency),
        confirmed=r.confirmed,
        status_changed=r.status_changed,
    )


class SubscriberStore(StoreBase):
    """Subscribers, their topics and status, forgotten addresses and bulk imports."""

    def add_subscriber(
        self,
        email: str,
        *,
        name: str = "",
        topics: Sequence[str] = (),
        timezone: str = "UTC",
        status: SubscriberStatus = SubscriberStatus.ACTIVE,
        now: datetime,
        consent: dict[str, Any] | None = None,
    ) -> tuple[Subscriber, bool]:
        """Insert a subscriber, or return the existing one. The bool says whether it was created."""
        with self.engine.begin() as conn:
            stmt = (
                self._insert(t.subscribers)
                .values(
                    email=email,
                    email_key=address_key(email),
                    name=name,
                    status=status.value,
                    timezone=timezone,
                    created=now,
                    status_changed=now,
                    permanent_failures=0,
                    consent=consent,
                )
                .on_conflict_do_nothing(index_elements=["email"])  # type: ignore[attr-defined]
                .returning(t.subscribers.c.id)
            )
            inserted = conn.execute(stmt).scalar()
            created = inserted is not None
            sid = (
                inserted
                if created
                else conn.execute(
                    select(t.subscribers.c.id).where(t.subscribers.c.email == email)
                ).scalar_one()
            )
            if created and topics:
                conn.execute(
                    t.subscriptions.insert(),
                    [{"subscriber_id": sid, "topic": tp} for tp in dict.fromkeys(topics)],
                )
        sub = self.get_subscriber(email)
        assert sub is not None
        return sub, created

    def set_topics(self, subscriber_id: int, topics: Sequence[str]) -> None:
        """Replace a subscriber's topics with ``topics`` (repeats dropped)."""
        with self.engine.begin() as conn:
            conn.execute(
                delete(t.subscriptions).where(t.subscriptions.c.subscriber_id == subscriber_id)
            )
            if topics:
                conn.execute(
                    t.subscriptions.insert(),
                    [{"subscriber_id": subscriber_id, "topic": tp} for tp in dict.fromkeys(topics)],
                )

    def set_status(self, email: str, status: SubscriberStatus, now: datetime) -> bool:
        """Set the status of the subscriber with exactly this address; False if there is none."""
        with self.engine.begin() as conn:
            res = conn.execute(
                update(t.subscribers)
                .where(t.subscribers.c.email == email)
                .values(status=status.value, status_changed=now)
            )
            return res.rowcount == 1

    def remove_subscriber(
        self, email: str, *, forgotten: tuple[str, datetime] | None = None
    ) -> bool:
        """Delete a subscriber and everything recorded about them.

        ``forgotten``: a keyed hash of the address and the time, kept in ``forgotten`` so the
        address is not added back without a fresh confirmation (see :meth:`forgotten_at`).
        """
        with self.engine.begin() as conn:
            sid = conn.execute(
                select(t.subscribers.c.id).where(t.subscribers.c.email == email)
            ).scalar()
            if sid is None:
                return False
            for table in (t.subscriptions, t.editions, t.votes, t.own_topics):
                conn.execute(delete(table).where(table.c.subscriber_id == sid))
            conn.execute(delete(t.subscribers).where(t.subscribers.c.id == sid))
            if forgotten is not None:
                key, at = forgotten
                conn.execute(delete(t.forgotten).where(t.forgotten.c.hash == key))
                conn.execute(t.forgotten.insert().values(hash=key, at=at))
            return True

    def forgotten_at(self, key: str) -> datetime | None:
        """When the address with this keyed hash was erased, or ``None``."""
        with self.engine.connect() as conn:
            at: datetime | None = conn.execute(
                select(t.forgotten.c.at).where(t.forgotten.c.hash == key)
            ).scalar()
            return at

    def any_forgotten(self) -> bool:
        """Whether any address was ever erased (and not confirmed again since)."""
        with self.engine.connect() as conn:
            return conn.execute(select(t.forgotten.c.hash).limit(1)).first() is not None

    def unforget(self, key: str) -> None:
        """Drop an erased address's hash: it confirmed again, and is a subscriber once more."""
        with self.engine.begin() as conn:
            conn.execute(delete(t.forgotten).where(t.forgotten.c.hash == key))

    def said_no(self, email: str) -> list[Subscriber]:
        """The unsubscribed or suppressed subscribers whose address is ``email`` but for letter
        case (any letters: compared on :func:`~newsletter.addresses.address_key`, indexed)."""
        gone = [SubscriberStatus.UNSUBSCRIBED.value, SubscriberStatus.SUPPRESSED.value]
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(t.subscribers)
                .where(
                    t.subscribers.c.status.in_(gone),
                    t.subscribers.c.email_key == address_key(email),
                )
                .order_by(t.subscribers.c.id)
            ).all()
            topics = self._topics_for(conn, [r.id for r in rows])
        return [_subscriber(r, topics.get(r.id, ())) for r in rows]

    def import_lookup(
        self, emails: Sequence[str]
    ) -> tuple[
        dict[str, SubscriberStatus], dict[str, tuple[str, SubscriberStatus, datetime | None]]
    ]:
        """For a batch of addresses being imported: the status of each one present (exact
        address), and for each one that said no in any letter case (keyed by its
        :func:`~newsletter.addresses.address_key`) that row's address, status and since when.
        Two statements per batch."""
        gone = [SubscriberStatus.UNSUBSCRIBED.value, SubscriberStatus.SUPPRESSED.value]
        present: dict[str, SubscriberStatus] = {}
        said_no: dict[str, tuple[str, SubscriberStatus, datetime | None]] = {}
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(t.subscribers.c.email, t.subscribers.c.status).where(
                    t.subscribers.c.email.in_(sorted(set(emails)))
                )
            ).all()
            present = {r.email: SubscriberStatus(r.status) for r in rows}
            # compared on address_key, computed here: SQLite's lower() folds ASCII letters only
            no = conn.execute(
                select(
                    t.subscribers.c.email, t.subscribers.c.status, t.subscribers.c.status_changed
                )
                .where(
                    t.subscribers.c.status.in_(gone),
                    t.subscribers.c.email_key.in_(sorted({address_key(e) for e in emails})),
                )
                .order_by(t.subscribers.c.id)
            ).all()
            for r in no:
                said_no.setdefault(
                    address_key(r.email), (r.email, SubscriberStatus(r.status), r.status_changed)
                )
        return present, said_no

    def forgotten_among(self, keys: Sequence[str]) -> dict[str, datetime]:
        """Which of these erased-address hashes the store holds, and when each was erased."""
        if not keys:
            return {}
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(t.forgotten.c.hash, t.forgotten.c.at).where(
                    t.forgotten.c.hash.in_(sorted(set(keys)))
                )
            ).all()
        return {r.hash: r.at for r in rows}

    def add_subscribers(self, rows: Sequence[NewSubscriber], now: datetime) -> int:
        """Insert subscribers that are not in the store yet, with their topics, in one
        transaction (a bulk import: no row may exist already). Returns how many were added."""
        if not rows:
            return 0
        values = [
            {
                "email": r.email,
                "name": r.name,
                "status": r.status.value,
                "status_changed": now,
                "timezone": r.timezone,
                "send_hour": r.send_hour,
                "frequency": r.frequency.value,
                "confirmed": now,
                "created": now,
                "permanent_failures": 0,
                "consent": {**r.consent, "history": [r.consent]},
                "email_key": address_key(r.email),
            }
            for r in rows
        ]
        try:
            with self.engine.begin() as conn:
                if self.dialect == "postgresql":
                    ids = _pg_add_subscribers(conn, values, now)
                else:  # the sqlite3 cursor itself: SQLAlchemy's per-row binding costs more
                    stamp = self._sqlite_datetime(now)
                    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
                    try:
                        cursor.executemany(
                            _SQLITE_ADD_SUBSCRIBER_SQL,
                            [
                                (
                                    v["email"],
                                    v["name"],
                                    v["status"],
                                    v["timezone"],
                                    v["send_hour"],
                                    v["frequency"],
                                    json.dumps(v["consent"]),
                                    stamp,
                                    v["email_key"],
                                )
                                for v in values
                            ],
                        )
                    finally:
                        cursor.close()
                    found = {
                        email: sid
                        for email, sid in conn.execute(
                            select(t.subscribers.c.email, t.subscribers.c.id).where(
                                t.subscribers.c.email.in_([r.email for r in rows])
                            )
                        )
                    }
                    ids = [found[r.email] for r in rows]
                topics = [
                    (sid, tp)
                    for sid, r in zip(ids, rows, strict=True)
                    for tp in dict.fromkeys(r.topics)
                ]
                if topics and self.dialect == "postgresql":
                    rows_json = json.dumps([{"s": sid, "t": tp} for sid, tp in topics])
                    conn.execute(_PG_SUBSCRIPTIONS, {"rows": rows_json})
                elif topics:
                    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
                    try:
                        cursor.executemany(
                            "INSERT INTO subscriptions (subscriber_id, topic) VALUES (?, ?)",
                            topics,
                        )
                    finally:
                        cursor.close()
        except _SAError as e:
            raise self.error(e) from e
        return len(ids)

    def get_subscriber(self, email: str) -> Subscriber | None:
        """The subscriber with exactly this address, with their topics, or ``None``."""
        with self.engine.connect() as conn:
            row = conn.execute(select(t.subscribers).where(t.subscribers.c.email == email)).first()
            if row is None:
                return None
            return _subscriber(row, self._topics_for(conn, [row.id]).get(row.id, ()))

    def subscriber_by_id(self, subscriber_id: int) -> Subscriber | None:
        """The subscriber with this id, with their topics, or ``None``."""
        with self.engine.connect() as conn:
            row = conn.execute(
                select(t.subscribers).where(t.subscribers.c.id == subscriber_id)
            ).first()
            if row is None:
                return None
            return _subscriber(row, self._topics_for(conn, [row.id]).get(row.id, ()))

    def _topics_for(self, conn: Connection, ids: Sequence[int]) -> dict[int, tuple[str, ...]]:
        found: dict[int, list[str]] = {}
        _by_key(conn)
        q = (
            select(t.subscriptions.c.subscriber_id, t.subscriptions.c.topic)
            .where(t.subscriptions.c.subscriber_id.in_(ids))
            .order_by(t.subscriptions.c.subscriber_id, t.subscriptions.c.topic)
        )
        for sid, topic in conn.execute(q):
            found.setdefault(sid, []).append(topic)
        return {k: tuple(v) for k, v in found.items()}

    def iter_subscribers(
        self,
        status: SubscriberStatus | None = None,
        *,
        batch: int = 1000,
        email: str | None = None,
        ids: Sequence[int] | None = None,
    ) -> Iterator[list[Subscriber]]:
        """Subscribers in id order, in batches (memory stays flat however many there are).

        ``ids`` restricts the listing to those subscribers (a worker's chunk; keep it to a few
        thousand ids).
        """
        if ids is not None:
            yield from self._iter_by_ids(sorted(set(ids)), status, email, batch)
            return
        last = 0
        while True:
            with self.engine.connect() as conn:
                _by_key(conn)  # the next ``batch`` rows of the (status, id) index, not all later
                q = select(t.subscribers).where(t.subscribers.c.id > last)
                if status is not None:
                    q = q.where(t.subscribers.c.status == status.value)
                if email is not None:
                    q = q.where(t.subscribers.c.email == email)
                rows = conn.execute(q.order_by(t.subscribers.c.id).limit(batch)).all()
                if not rows:
                    return
                topics = self._topics_for(conn, [r.id for r in rows])
            yield [_subscriber(r, topics.get(r.id, ())) for r in rows]
            last = rows[-1].id

    def _iter_by_ids(
        self,
        ids: Sequence[int],
        status: SubscriberStatus | None,
        email: str | None,
        batch: int,
    ) -> Iterator[list[Subscriber]]:
        """:meth:`iter_subscribers` for a list of ids (sorted): each batch is looked up by its
        primary keys. As "``id > last`` in id order, among these ids", PostgreSQL walked the
        ``(status, id)`` index from ``last`` on, reading every later subscriber to find the
        chunk's: a worker's chunk read half the table, and a send grew with the square of
        its list. The status is checked here, not in SQL: given one, PostgreSQL without
        statistics still chose that index and read every active subscriber per batch."""
        for start in range(0, len(ids), batch):
            with self.engine.connect() as conn:
                _by_key(conn)
                q = select(t.subscribers).where(t.subscribers.c.id.in_(ids[start : start + batch]))
                rows = [
                    r
                    for r in conn.execute(q.order_by(t.subscribers.c.id))
                    if (status is None or r.status == status.value)
                    and (email is None or r.email == email)
                ]
                if not rows:
                    continue
                topics = self._topics_for(conn, [r.id for r in rows])
            yield [_subscriber(r, topics.get(r.id, ())) for r in rows]

    def count_subscribers(self, status: SubscriberStatus | None = None) -> int:
        """How many subscribers there are (only ``status`` when given)."""
        with self.engine.connect() as conn:
            q = select(func.count()).select_from(t.subscribers)
            if status is not None:
                q = q.where(t.subscribers.c.status == status.value)
            return int(conn.execute(q).scalar_one())
