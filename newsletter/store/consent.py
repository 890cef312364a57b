"""Consent: confirming a subscription, changing preferences, unsubscribing, the consent record
and the rate limits that guard the public forms (a mixin of the Store)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    Connection,
    delete,
    func,
    select,
    text,
    update,
)

from newsletter.addresses import address_key
from newsletter.models import (
    Frequency,
    Subscriber,
    SubscriberStatus,
)
from newsletter.store import tables as t
from newsletter.store.base import StoreBase

#: The first half of the two-integer PostgreSQL advisory lock key a rate check takes (the second
#: half is a hash of its key): "rate" in ASCII. The two-integer key space does not overlap the
#: one-bigint space other locks may use.
RATE_LOCK_SPACE = 0x72617465

_SAVE_ATTEMPTS = 5
"""How often a preferences save starts again when the status changed between its read and its
write (each time means another request changed it just then)."""


class ConsentStore(StoreBase):
    """Confirmation, preferences, unsubscribing, the consent record and rate limits."""

    if TYPE_CHECKING:

        def subscriber_by_id(self, subscriber_id: int) -> Subscriber | None: ...

    def confirm_subscriber(
        self,
        email: str,
        *,
        topics: Sequence[str],
        timezone: str,
        send_hour: int | None,
        frequency: Frequency,
        now: datetime,
        consent: dict[str, Any],
        name: str = "",
        status: SubscriberStatus = SubscriberStatus.ACTIVE,
    ) -> tuple[Subscriber, bool]:
        """Make ``email`` an active, confirmed subscriber with these choices (insert or update).

        ``status``: an import keeps a row's paused, unsubscribed or suppressed state. The
        consent record is appended to the subscriber's history (``consent["history"]``), so
        a re-subscription keeps the earlier ones. The bool says whether the row was created.
        """
        with self.engine.begin() as conn:
            row = conn.execute(
                select(t.subscribers.c.id, t.subscribers.c.consent).where(
                    t.subscribers.c.email == email
                )
            ).first()
            values: dict[str, Any] = {
                "status": status.value,
                "status_changed": now,
                "timezone": timezone,
                "send_hour": send_hour,
                "frequency": frequency.value,
                "confirmed": now,
                "permanent_failures": 0,
            }
            if row is None:
                record = {**consent, "history": [consent]}
                sid = conn.execute(
                    t.subscribers.insert()
                    .values(
                        email=email,
                        email_key=address_key(email),
                        name=name,
                        created=now,
                        consent=record,
                        **values,
                    )
                    .returning(t.subscribers.c.id)
                ).scalar_one()
            else:
                sid = row.id
                old = dict(row.consent or {})
                history = list(old.get("history") or ([old] if old else []))
                record = {**consent, "history": [*history, consent]}
                conn.execute(
                    update(t.subscribers)
                    .where(t.subscribers.c.id == sid)
                    .values(consent=record, **values)
                )
            conn.execute(delete(t.subscriptions).where(t.subscriptions.c.subscriber_id == sid))
            if topics:
                conn.execute(
                    t.subscriptions.insert(),
                    [{"subscriber_id": sid, "topic": tp} for tp in dict.fromkeys(topics)],
                )
        sub = self.subscriber_by_id(sid)
        assert sub is not None
        return sub, row is None

    def update_preferences(
        self,
        subscriber_id: int,
        *,
        topics: Sequence[str],
        send_hour: int | None,
        frequency: Frequency,
        paused: bool,
        now: datetime,
        timezone: str | None = None,
        name: str | None = None,
    ) -> Subscriber | None:
        """Save a subscriber's choices (manage page, API, ``subscribers set``); pausing keeps
        everything else. ``timezone`` and ``name`` are left as they are when ``None``.

        Only an active or paused subscriber can be changed; returns ``None`` otherwise.

        The row is written only if its status is still the one read: an unsubscribe committed
        between the read and the write (another request, another process) must stick, and a
        save that turns "paused" into "active" must not undo it. When the status changed in
        between, the save starts again from the new status.
        """
        live = (SubscriberStatus.ACTIVE.value, SubscriberStatus.PAUSED.value)
        for _ in range(_SAVE_ATTEMPTS):
            with self.engine.begin() as conn:
                status = conn.execute(
                    select(t.subscribers.c.status).where(t.subscribers.c.id == subscriber_id)
                ).scalar()
                if status not in live:
                    return None
                values: dict[str, Any] = {"send_hour": send_hour, "frequency": frequency.value}
                if timezone is not None:
                    values["timezone"] = timezone
                if name is not None:
                    values["name"] = name
                wanted = (SubscriberStatus.PAUSED if paused else SubscriberStatus.ACTIVE).value
                if wanted != status:
                    values.update(status=wanted, status_changed=now)
                written = conn.execute(
                    update(t.subscribers)
                    .where(t.subscribers.c.id == subscriber_id, t.subscribers.c.status == status)
                    .values(**values)
                ).rowcount
                if written != 1:
                    continue  # changed since it was read: read it again
                conn.execute(
                    delete(t.subscriptions).where(t.subscriptions.c.subscriber_id == subscriber_id)
                )
                if topics:
                    conn.execute(
                        t.subscriptions.insert(),
                        [
                            {"subscriber_id": subscriber_id, "topic": tp}
                            for tp in dict.fromkeys(topics)
                        ],
                    )
            return self.subscriber_by_id(subscriber_id)
        return None  # the status kept changing under us; the caller says it could not save

    def unsubscribe_id(self, subscriber_id: int, now: datetime) -> bool:
        """Mark a subscriber unsubscribed (idempotent). True when the status changed just now."""
        with self.engine.begin() as conn:
            res = conn.execute(
                update(t.subscribers)
                .where(
                    t.subscribers.c.id == subscriber_id,
                    t.subscribers.c.status != SubscriberStatus.UNSUBSCRIBED.value,
                )
                .values(status=SubscriberStatus.UNSUBSCRIBED.value, status_changed=now)
            )
            return res.rowcount == 1

    def consent_record(self, subscriber_id: int) -> dict[str, Any] | None:
        """The subscriber's consent record (how, when and where, with its history), or ``None``."""
        with self.engine.connect() as conn:
            value = conn.execute(
                select(t.subscribers.c.consent).where(t.subscribers.c.id == subscriber_id)
            ).scalar()
        return dict(value) if value else None

    def hit_rate(self, key: str, now: datetime, *, window: timedelta, limit: int) -> bool:
        """Count one request for ``key`` unless ``limit`` were already made within ``window``.

        True: allowed (and counted). False: over the limit (not counted). Old events of the key
        are pruned on the way.

        Atomic per key, across threads and processes: the count and the insert run under a lock
        on the key (:func:`_lock_rate_key`), so requests made at once never all count the same
        events and all get through.
        """
        return self.take_rate(key, now, window=window, limit=limit) is not None

    def take_rate(
        self, key: str, now: datetime, *, window: timedelta, limit: int
    ) -> tuple[int, int] | None:
        """:meth:`hit_rate` that says more: ``(the counted event's id, how many are counted
        within ``window`` with it)``, or ``None`` when over the limit (not counted). The id
        lets the caller take the event back (:meth:`drop_rate_event`)."""
        since = now - window
        with self.engine.begin() as conn:
            _lock_rate_key(conn, key)
            conn.execute(
                delete(t.rate_events).where(t.rate_events.c.key == key, t.rate_events.c.at < since)
            )
            used = conn.execute(
                select(func.count())
                .select_from(t.rate_events)
                .where(t.rate_events.c.key == key, t.rate_events.c.at >= since)
            ).scalar_one()
            if used >= limit:
                return None
            event_id = conn.execute(
                t.rate_events.insert().values(key=key, at=now).returning(t.rate_events.c.id)
            ).scalar_one()
            return int(event_id), int(used) + 1

    def drop_rate_event(self, event_id: int) -> None:
        """Take back one counted request (an id from :meth:`take_rate`)."""
        with self.engine.begin() as conn:
            conn.execute(delete(t.rate_events).where(t.rate_events.c.id == event_id))

    def forget_rate(self, key: str) -> None:
        """Drop every request counted for ``key`` (an erased address leaves none)."""
        with self.engine.begin() as conn:
            conn.execute(delete(t.rate_events).where(t.rate_events.c.key == key))

    def prune_rate_events(self, before: datetime) -> int:
        """Delete the requests counted before ``before``, for every key; returns how many."""
        with self.engine.begin() as conn:
            return int(
                conn.execute(delete(t.rate_events).where(t.rate_events.c.at < before)).rowcount
            )


def _lock_rate_key(conn: Connection, key: str) -> None:
    """Serialize the rate checks of ``key`` until ``conn``'s transaction ends.

    PostgreSQL (READ COMMITTED): a transaction-scoped advisory lock on a hash of the key; the
    next check of the key waits for this transaction to commit and then counts its event (each
    statement reads what was committed before it started). Keys whose hashes collide only wait
    for each other. SQLite: nothing to take here; the check's first statement is a write (the
    ``DELETE`` of old events), which takes the database's write lock before anything is
    counted, so checks run one after another.
    """
    if conn.dialect.name != "postgresql":
        return
    digest = hashlib.sha256(key.encode()).digest()
    conn.execute(
        text("SELECT pg_advisory_xact_lock(CAST(:space AS integer), CAST(:id AS integer))"),
        {"space": RATE_LOCK_SPACE, "id": int.from_bytes(digest[:4], "big", signed=True)},
    )
