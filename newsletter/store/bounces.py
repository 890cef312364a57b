"""Bounce and complaint storage: the events, each subscriber's score, suppression by them.

A mixin that :class:`newsletter.store.db.Store` inherits, kept in its own module so the
deliverability tables and queries sit together (migration 0008 creates the tables). Each event
is stored once: its ``event_key`` (the provider's event id, else a hash of what the report
says) is unique, so a replayed report changes nothing.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    Boolean,
    Column,
    Date,
    Engine,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    and_,
    delete,
    func,
    select,
    update,
)
from sqlalchemy.sql.dml import Insert

from newsletter.addresses import address_key
from newsletter.bounces.score import ScoreState
from newsletter.models import EditionStatus, SubscriberStatus
from newsletter.store import tables as t
from newsletter.store.tables import UTCDateTime

if TYPE_CHECKING:
    from newsletter.models import Subscriber

bounce_events = Table(
    "bounce_events",
    t.metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column(
        "subscriber_id", Integer, ForeignKey("subscribers.id", ondelete="CASCADE"), nullable=False
    ),
    Column("kind", String(16), nullable=False),
    Column("source", String(16), nullable=False),
    Column("status", String(16)),
    Column("diagnostic", Text, nullable=False, default=""),
    Column("edition", Date),
    Column("message_id", String(255)),
    Column("provider_id", String(255)),
    Column("event_key", String(64), nullable=False, unique=True),
    Column("verified", Boolean, nullable=False),
    Column("counted", Float, nullable=False, default=0.0),
    Column("received_at", UTCDateTime, nullable=False),
)
Index("ix_bounce_events_subscriber", bounce_events.c.subscriber_id)
Index("ix_bounce_events_edition_kind", bounce_events.c.edition, bounce_events.c.kind)
Index("ix_bounce_events_received_at", bounce_events.c.received_at)

bounce_scores = Table(
    "bounce_scores",
    t.metadata,
    Column(
        "subscriber_id", Integer, ForeignKey("subscribers.id", ondelete="CASCADE"), primary_key=True
    ),
    Column("score", Float, nullable=False, default=0.0),
    Column("last_bounce", Date),
    Column("suppressed_reason", Text),
    Column("suppressed_at", UTCDateTime),
)

# Mailgun signing tokens in use (migration 0012): a token is reserved by inserting its row
# before its request's events are applied, so of concurrent requests with one token only one
# body gets through, in every web process and after a restart. ``digest`` is the SHA-256 of the
# body that reserved it (the same body again is a provider's retry); rows older than the
# accepted timestamp window are pruned on the way, as such a token is refused as stale anyway.
webhook_tokens = Table(
    "webhook_tokens",
    t.metadata,
    Column("token", String(200), primary_key=True),
    Column("digest", String(64), nullable=False),
    Column("seen_at", UTCDateTime, nullable=False),
)
Index("ix_webhook_tokens_seen_at", webhook_tokens.c.seen_at)

# A bounce names the digest it is about by its Message-ID: found through this index.
Index("ix_editions_message_id", t.editions.c.message_id)


@dataclass(frozen=True, slots=True)
class BounceRecord:
    """One stored bounce, complaint or unsubscribe event about a subscriber."""

    kind: str
    source: str
    status: str | None
    diagnostic: str
    edition: date | None
    verified: bool
    counted: float
    """What it added to the bounce score (0: the same day, unverified, or not a bounce)."""
    received_at: datetime


@dataclass(frozen=True, slots=True)
class BounceScore:
    """A subscriber's bounce score, and why they were suppressed by a report (if they were)."""

    score: float
    last_bounce: date | None
    suppressed_reason: str | None
    suppressed_at: datetime | None


@dataclass(frozen=True, slots=True)
class ScoreChange:
    """What one counted bounce did."""

    score: float
    added: float
    suppressed: bool
    """True when this bounce suppressed the address just now."""


@dataclass(frozen=True, slots=True)
class EditionRates:
    """Bounces and complaints about one edition date, against the digests sent that day."""

    edition: date
    sent: int
    hard: int
    soft: int
    complaints: int

    def rate(self, count: int) -> float:
        """``count`` as a share of the digests sent (0 when none was)."""
        return count / self.sent if self.sent else 0.0


_LIVE = (
    SubscriberStatus.ACTIVE.value,
    SubscriberStatus.PAUSED.value,
    SubscriberStatus.PENDING.value,
)


class BounceStore:
    """The bounce part of :class:`~newsletter.store.db.Store` (a mixin: it uses its engine)."""

    engine: Engine

    if TYPE_CHECKING:

        def subscriber_by_id(self, subscriber_id: int) -> Subscriber | None: ...

    def _insert_ignore(self, table: Table) -> Insert:
        if self.engine.dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as pg_insert

            return pg_insert(table)
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert(table)

    def subscriber_for_address(self, address: str) -> Subscriber | None:
        """The subscriber with this address (exactly, else but for letter case), or ``None``.

        Both lookups go through an index (the address's own, then ``email_key``, migration
        0012): a report naming thousands of unknown addresses costs thousands of index probes,
        where ``lower(email) = ?`` read every subscriber for each."""
        with self.engine.connect() as conn:
            sid = conn.execute(
                select(t.subscribers.c.id).where(t.subscribers.c.email == address)
            ).scalar()
            if sid is None:
                sid = conn.execute(
                    select(t.subscribers.c.id)
                    .where(t.subscribers.c.email_key == address_key(address))
                    .order_by(t.subscribers.c.id)
                    .limit(1)
                ).scalar()
        return None if sid is None else self.subscriber_by_id(sid)

    def reserve_webhook_token(
        self, token: str, digest: str, now: datetime, *, keep: timedelta
    ) -> bool:
        """Reserve a provider's one-time token (Mailgun's) for the body with this ``digest``,
        atomically, before anything of that body is applied. True when the token is new here,
        or was reserved by the same body (the provider's retry: each event is stored once
        anyway); False when another body holds it (a captured signature with a forged body).

        The row is inserted or not in one statement, so of concurrent requests, in any
        process, one body wins; it stays for ``keep``, past which the token's timestamp is
        refused as stale: older rows are pruned on the way.
        """
        with self.engine.begin() as conn:
            conn.execute(delete(webhook_tokens).where(webhook_tokens.c.seen_at < now - keep))
            mine = conn.execute(
                self._insert_ignore(webhook_tokens)
                .values(token=token, digest=digest, seen_at=now)
                .on_conflict_do_nothing(index_elements=["token"])  # type: ignore[attr-defined]
                .returning(webhook_tokens.c.token)
            ).scalar()
            if mine is not None:
                return True
            held = conn.execute(
                select(webhook_tokens.c.digest).where(webhook_tokens.c.token == token)
            ).scalar()
        return held is not None and hmac.compare_digest(str(held), digest)

    def edition_by_message_id(self, message_id: str) -> tuple[int, date] | None:
        """The ``(subscriber id, edition date)`` of the digest with this Message-ID, or None."""
        with self.engine.connect() as conn:
            row = conn.execute(
                select(t.editions.c.subscriber_id, t.editions.c.edition_date)
                .where(t.editions.c.message_id == message_id)
                .limit(1)
            ).first()
        return None if row is None else (row.subscriber_id, row.edition_date)

    def record_bounce_event(
        self,
        subscriber_id: int,
        row: dict[str, Any],
        *,
        score: Callable[[ScoreState | None, datetime | None], tuple[ScoreState, float]] | None,
        threshold: float,
        reason: Callable[[float], str],
        now: datetime,
    ) -> ScoreChange | None:
        """Store one event (``row``: the ``bounce_events`` columns but ids) and, when ``score``
        is given, count it: ``score(old state, when the subscriber last confirmed)`` gives the
        new state and what it added. At ``threshold`` an active, paused or pending address is
        suppressed with ``reason(score)``. ``None`` when the event was already stored (a
        replay): nothing changes then."""
        with self.engine.begin() as conn:
            inserted = conn.execute(
                self._insert_ignore(bounce_events)
                .values(subscriber_id=subscriber_id, counted=0.0, **row)
                .on_conflict_do_nothing(index_elements=["event_key"])  # type: ignore[attr-defined]
                .returning(bounce_events.c.id)
            ).scalar()
            if inserted is None:
                return None
            if score is None:
                return ScoreChange(score=0.0, added=0.0, suppressed=False)
            q = select(bounce_scores).where(bounce_scores.c.subscriber_id == subscriber_id)
            # One subscriber's score is updated by one transaction at a time: PostgreSQL by
            # this row lock, SQLite by the write lock the insert above already holds.
            conn.execute(
                select(t.subscribers.c.id)
                .where(t.subscribers.c.id == subscriber_id)
                .with_for_update()
            )
            old = conn.execute(q).first()
            confirmed = conn.execute(
                select(t.subscribers.c.confirmed).where(t.subscribers.c.id == subscriber_id)
            ).scalar()
            state = None if old is None else ScoreState(old.score, old.last_bounce)
            new, added = score(state, confirmed)
            if old is None:
                conn.execute(
                    bounce_scores.insert().values(
                        subscriber_id=subscriber_id, score=new.score, last_bounce=new.last_bounce
                    )
                )
            else:
                conn.execute(
                    update(bounce_scores)
                    .where(bounce_scores.c.subscriber_id == subscriber_id)
                    .values(score=new.score, last_bounce=new.last_bounce)
                )
            conn.execute(
                update(bounce_events).where(bounce_events.c.id == inserted).values(counted=added)
            )
            suppressed = False
            if added and new.score >= threshold:
                suppressed = self._suppress(conn, subscriber_id, reason(new.score), now)
            return ScoreChange(score=new.score, added=added, suppressed=suppressed)

    def record_complaint(
        self,
        subscriber_id: int,
        row: dict[str, Any],
        *,
        status: SubscriberStatus,
        reason: str,
        now: datetime,
    ) -> bool | None:
        """Store a complaint or unsubscribe event and stop mail to the address at once
        (``status``: suppressed for a complaint, unsubscribed for a request). True when the
        status changed now; ``None`` for a replay."""
        with self.engine.begin() as conn:
            inserted = conn.execute(
                self._insert_ignore(bounce_events)
                .values(subscriber_id=subscriber_id, counted=0.0, **row)
                .on_conflict_do_nothing(index_elements=["event_key"])  # type: ignore[attr-defined]
                .returning(bounce_events.c.id)
            ).scalar()
            if inserted is None:
                return None
            return self._suppress(conn, subscriber_id, reason, now, status=status)

    def _suppress(
        self,
        conn: Any,
        subscriber_id: int,
        reason: str,
        now: datetime,
        *,
        status: SubscriberStatus = SubscriberStatus.SUPPRESSED,
    ) -> bool:
        stoppable = list(_LIVE)
        if status is SubscriberStatus.SUPPRESSED:
            stoppable.append(SubscriberStatus.UNSUBSCRIBED.value)
        res = conn.execute(
            update(t.subscribers)
            .where(and_(t.subscribers.c.id == subscriber_id, t.subscribers.c.status.in_(stoppable)))
            .values(status=status.value, status_changed=now)
        )
        if res.rowcount != 1:
            return False
        exists = conn.execute(
            select(bounce_scores.c.subscriber_id).where(
                bounce_scores.c.subscriber_id == subscriber_id
            )
        ).first()
        values = {"suppressed_reason": reason, "suppressed_at": now}
        if exists is None:
            conn.execute(
                bounce_scores.insert().values(subscriber_id=subscriber_id, score=0.0, **values)
            )
        else:
            conn.execute(
                update(bounce_scores)
                .where(bounce_scores.c.subscriber_id == subscriber_id)
                .values(**values)
            )
        return True

    def bounce_score(self, subscriber_id: int) -> BounceScore | None:
        """A subscriber's bounce score and suppression reason, or ``None`` (never bounced)."""
        with self.engine.connect() as conn:
            r = conn.execute(
                select(bounce_scores).where(bounce_scores.c.subscriber_id == subscriber_id)
            ).first()
        if r is None:
            return None
        return BounceScore(r.score, r.last_bounce, r.suppressed_reason, r.suppressed_at)

    def bounce_history(self, subscriber_id: int, limit: int = 100) -> list[BounceRecord]:
        """A subscriber's bounce, complaint and unsubscribe events, newest first."""
        e = bounce_events
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(e)
                .where(e.c.subscriber_id == subscriber_id)
                .order_by(e.c.received_at.desc(), e.c.id.desc())
                .limit(limit)
            ).all()
        return [
            BounceRecord(
                kind=r.kind,
                source=r.source,
                status=r.status,
                diagnostic=r.diagnostic,
                edition=r.edition,
                verified=r.verified,
                counted=r.counted,
                received_at=r.received_at,
            )
            for r in rows
        ]

    def edition_rates(self, since: date) -> list[EditionRates]:
        """Per edition date from ``since``: digests sent, and the subscribers with a verified
        hard bounce, soft bounce or complaint about that edition (each counted once)."""
        e = bounce_events
        with self.engine.connect() as conn:
            sent: dict[date, int] = {
                d: int(n)
                for d, n in conn.execute(
                    select(t.editions.c.edition_date, func.count())
                    .where(
                        t.editions.c.edition_date >= since,
                        t.editions.c.status.in_([s.value for s in EditionStatus if s.delivered]),
                    )
                    .group_by(t.editions.c.edition_date)
                )
            }
            counts: dict[tuple[date, str], int] = {
                (d, k): n
                for d, k, n in conn.execute(
                    select(e.c.edition, e.c.kind, func.count(func.distinct(e.c.subscriber_id)))
                    .where(e.c.edition >= since, e.c.verified.is_(True))
                    .group_by(e.c.edition, e.c.kind)
                ).all()
            }
        days = sorted(set(sent) | {d for d, _ in counts})
        return [
            EditionRates(
                edition=d,
                sent=int(sent.get(d, 0)),
                hard=counts.get((d, "hard"), 0),
                soft=counts.get((d, "soft"), 0),
                complaints=counts.get((d, "complaint"), 0),
            )
            for d in days
        ]

    def events_per_day(self, since: datetime) -> dict[date, dict[str, int]]:
        """Verified events received per UTC day since ``since``, by kind.

        Unverified reports (stored only in the named subscriber's history) are left out: a
        forged report about a stranger stores nothing, so counting them here would tell
        whoever sees these numbers (``/metrics``) that the address it named is a subscriber.
        """
        e = bounce_events
        out: dict[date, dict[str, int]] = {}
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(e.c.received_at, e.c.kind).where(
                    e.c.received_at >= since, e.c.verified.is_(True)
                )
            ).all()
        for at, kind in rows:
            day = out.setdefault(at.date(), {})
            day[kind] = day.get(kind, 0) + 1
        return dict(sorted(out.items()))
