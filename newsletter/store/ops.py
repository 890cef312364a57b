"""The ledger as operators see it: forcing a re-send, edition statuses and failures, settling
editions whose delivery is unknown, the archive's edition dates and the dashboard snapshot
(a mixin of the Store)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from datetime import date, datetime
from typing import Any, Literal

from sqlalchemy import (
    ARRAY,
    Date,
    Integer,
    bindparam,
    func,
    select,
    text,
    true,
    update,
)

from newsletter.models import (
    EditionClaim,
    EditionRecord,
    EditionStatus,
)
from newsletter.store import tables as t
from newsletter.store.base import StoreBase
from newsletter.store.tables import parse_paper_list

_UNSETTLED = (EditionStatus.UNKNOWN.value, EditionStatus.HELD.value, EditionStatus.RESEND.value)
"""Editions whose delivery is unknown until the next run re-sends them or an operator settles."""


def _edition(r: Any) -> EditionRecord:
    return EditionRecord(
        id=r.id,
        subscriber_id=r.subscriber_id,
        email=r.email,
        edition_date=r.edition_date,
        status=EditionStatus(r.status),
        message_id=r.message_id,
        attempts=r.attempts,
        item_count=r.item_count,
        last_error=r.last_error,
        claimed=r.claimed,
        finished=r.finished,
    )


_PG_STATUSES = text(
    # Each reader's rows by the (subscriber_id, edition_date) key, a nested loop over the ids:
    # as "subscriber_id IN (...) AND edition_date IN (...)" PostgreSQL without statistics took
    # the (edition_date, status) index and read every edition of the day so far, per batch of
    # readers (tests/store/test_scans.py: 4,000 to 19,000 entries for a 2,000-reader send, by
    # how far the senders had got). ``OFFSET 0`` keeps the subquery from being flattened.
    "SELECT e.subscriber_id, e.edition_date, e.status "
    "FROM unnest(CAST(:ids AS integer[])) AS u(sid) "
    "JOIN LATERAL (SELECT subscriber_id, edition_date, status FROM editions "
    "WHERE subscriber_id = u.sid AND edition_date = ANY(:dates) OFFSET 0) AS e ON true"
).bindparams(bindparam("ids", type_=ARRAY(Integer)), bindparam("dates", type_=ARRAY(Date)))


class OpsStore(StoreBase):
    """Forced re-sends, edition statuses, settlement and the ops dashboard snapshot."""

    def sent_edition_dates(self, limit: int = 30) -> list[date]:
        """The most recent edition dates on which at least one digest was sent, newest first."""
        with self.engine.connect() as conn:
            q = (
                select(t.editions.c.edition_date)
                .where(t.editions.c.status == EditionStatus.SENT.value)
                .distinct()
                .order_by(t.editions.c.edition_date.desc())
                .limit(limit)
            )
            return [r[0] for r in conn.execute(q)]

    def ops_snapshot(self, today: date, sources: Collection[str] | None = None) -> dict[str, Any]:
        """Counts for /metrics and `newsletter status`, in a handful of grouped queries.

        With ``sources``, failing sources are only those named there (the configured ones): a
        source removed from the config keeps its history here but raises no alert.
        """
        with self.engine.connect() as conn:
            subs: dict[Any, Any] = dict(
                conn.execute(
                    select(t.subscribers.c.status, func.count()).group_by(t.subscribers.c.status)
                ).all()
            )
            editions: dict[Any, Any] = dict(
                conn.execute(
                    select(t.editions.c.status, func.count())
                    .where(t.editions.c.edition_date == today)
                    .group_by(t.editions.c.status)
                ).all()
            )
            papers = conn.execute(select(func.count()).select_from(t.papers)).scalar_one()
            last_runs: dict[str, Any] = {}
            for kind, started, finished, status, duration in conn.execute(
                select(
                    t.runs.c.kind,
                    t.runs.c.started,
                    t.runs.c.finished,
                    t.runs.c.status,
                    t.runs.c.duration,
                ).order_by(t.runs.c.id)
            ):
                last_runs[kind] = {
                    "started": started,
                    "finished": finished,
                    "status": status,
                    "duration": duration,
                }
            failing = conn.execute(
                select(
                    t.source_state.c.source,
                    t.source_state.c.consecutive_failures,
                    t.source_state.c.last_error,
                )
                .where(t.source_state.c.consecutive_failures > 0)
                .where(true() if sources is None else t.source_state.c.source.in_(sorted(sources)))
                .order_by(t.source_state.c.source)
            ).all()
        return {
            "subscribers": {str(k): int(v) for k, v in subs.items()},
            "editions_today": {str(k): int(v) for k, v in editions.items()},
            "papers": int(papers),
            "last_runs": last_runs,
            "failing_sources": [(r[0], int(r[1]), r[2]) for r in failing],
        }

    def last_sent(self, subscriber_ids: Sequence[int]) -> dict[int, datetime]:
        """When each subscriber's most recent digest went out (absent: never)."""
        out: dict[int, datetime] = {}
        with self.engine.connect() as conn:
            for start in range(0, len(subscriber_ids), 500):
                q = (
                    select(t.editions.c.subscriber_id, func.max(t.editions.c.finished))
                    .where(
                        t.editions.c.subscriber_id.in_(subscriber_ids[start : start + 500]),
                        t.editions.c.status == EditionStatus.SENT.value,
                    )
                    .group_by(t.editions.c.subscriber_id)
                )
                for sid, finished in conn.execute(q):
                    if finished is not None:  # max() keeps the column type: aware UTC
                        out[sid] = finished
        return out

    def force_edition(
        self, subscriber_id: int, edition_date: date, message_id: str, now: datetime, *, owner: str
    ) -> tuple[EditionClaim, list[int]]:
        """Re-open today's edition for a forced re-send, marked ``forced``.

        Returns the claim (with a fresh Message-ID: it is a new message) and the ids of the
        papers the earlier send carried, so the re-send can carry them again.
        """
        with self.engine.begin() as conn:
            row = conn.execute(
                select(t.editions.c.id, t.editions.c.paper_ids).where(
                    t.editions.c.subscriber_id == subscriber_id,
                    t.editions.c.edition_date == edition_date,
                )
            ).first()
            if row is None:
                eid = conn.execute(
                    t.editions.insert()
                    .values(
                        subscriber_id=subscriber_id,
                        edition_date=edition_date,
                        status=EditionStatus.CLAIMED.value,
                        message_id=message_id,
                        claimed=now,
                        owner=owner,
                        attempts=0,
                        item_count=0,
                        forced=True,
                    )
                    .returning(t.editions.c.id)
                ).scalar_one()
                return EditionClaim(eid, subscriber_id, edition_date, message_id, resumed=False), []
            eid = row.id
            earlier = parse_paper_list(row.paper_ids)
            conn.execute(
                update(t.editions)
                .where(t.editions.c.id == eid)
                .values(
                    status=EditionStatus.CLAIMED.value,
                    message_id=message_id,
                    claimed=now,
                    owner=owner,
                    forced=True,
                    finished=None,
                    last_error=None,
                )
            )
            return EditionClaim(
                eid, subscriber_id, edition_date, message_id, resumed=False
            ), earlier

    def count_sent_since(self, since: datetime) -> int:
        """Editions handed to the relay since ``since`` (for the per-hour rate limit)."""
        with self.engine.connect() as conn:
            return int(
                conn.execute(
                    select(func.count())
                    .select_from(t.editions)
                    .where(
                        t.editions.c.status == EditionStatus.SENT.value,
                        t.editions.c.finished >= since,
                    )
                ).scalar_one()
            )

    def delivery_failures(self, subscriber_ids: Sequence[int]) -> dict[int, tuple[int, str | None]]:
        """``{subscriber id: (permanent failures, the relay's last answer)}``."""
        out: dict[int, tuple[int, str | None]] = {}
        with self.engine.connect() as conn:
            for start in range(0, len(subscriber_ids), 500):
                chunk = subscriber_ids[start : start + 500]
                counts = conn.execute(
                    select(t.subscribers.c.id, t.subscribers.c.permanent_failures).where(
                        t.subscribers.c.id.in_(chunk)
                    )
                ).all()
                last = dict(
                    conn.execute(
                        select(t.editions.c.subscriber_id, t.editions.c.last_error)
                        .where(
                            t.editions.c.subscriber_id.in_(chunk),
                            t.editions.c.status == EditionStatus.FAILED.value,
                        )
                        .order_by(t.editions.c.id)
                    ).all()
                )
                for sid, n in counts:
                    out[sid] = (int(n or 0), last.get(sid))
        return out

    def edition_statuses(
        self, subscriber_ids: Sequence[int], edition_dates: Iterable[date]
    ) -> dict[tuple[int, date], EditionStatus]:
        """The ledger status of each ``(subscriber, edition_date)`` that has a row."""
        dates = sorted(set(edition_dates))
        if not subscriber_ids or not dates:
            return {}
        ids = sorted(set(subscriber_ids))
        with self.engine.connect() as conn:
            if self.dialect == "postgresql":
                rows = conn.execute(_PG_STATUSES, {"ids": ids, "dates": dates})
            else:
                rows = conn.execute(
                    select(
                        t.editions.c.subscriber_id, t.editions.c.edition_date, t.editions.c.status
                    ).where(
                        t.editions.c.subscriber_id.in_(ids), t.editions.c.edition_date.in_(dates)
                    )
                )
            return {(r.subscriber_id, r.edition_date): EditionStatus(r.status) for r in rows}

    def editions_on(
        self, edition_date: date, status: EditionStatus | None = None
    ) -> list[EditionRecord]:
        """The ledger rows of one edition date (only ``status`` when given), in claim order."""
        with self.engine.connect() as conn:
            q = (
                select(t.editions, t.subscribers.c.email)
                .join(t.subscribers, t.subscribers.c.id == t.editions.c.subscriber_id)
                .where(t.editions.c.edition_date == edition_date)
            )
            if status is not None:
                q = q.where(t.editions.c.status == status.value)
            return [_edition(r) for r in conn.execute(q.order_by(t.editions.c.id))]

    def edition_for(self, subscriber_id: int, edition_date: date) -> EditionRecord | None:
        """The ledger row of one subscriber's edition on ``edition_date``, or ``None``."""
        with self.engine.connect() as conn:
            r = conn.execute(
                select(t.editions, t.subscribers.c.email)
                .join(t.subscribers, t.subscribers.c.id == t.editions.c.subscriber_id)
                .where(
                    t.editions.c.subscriber_id == subscriber_id,
                    t.editions.c.edition_date == edition_date,
                )
            ).first()
            return None if r is None else _edition(r)

    def unsettled_editions(self, limit: int = 1000) -> list[EditionRecord]:
        """Editions whose delivery is unknown (``unknown``, ``held``, ``resend``), oldest first."""
        with self.engine.connect() as conn:
            q = (
                select(t.editions, t.subscribers.c.email)
                .join(t.subscribers, t.subscribers.c.id == t.editions.c.subscriber_id)
                .where(t.editions.c.status.in_(_UNSETTLED))
                .order_by(t.editions.c.edition_date, t.editions.c.id)
                .limit(limit)
            )
            return [_edition(r) for r in conn.execute(q)]

    def settle_unknown(self, action: Literal["resend", "drop"], now: datetime) -> int:
        """Settle every ``unknown`` or ``held`` edition by hand; returns how many.

        ``resend``: the next send re-sends each once with its Message-ID (status ``resend``);
        ``drop``: given up (``dropped``, with when and how in ``last_error``).
        """
        pending = [EditionStatus.UNKNOWN.value, EditionStatus.HELD.value]
        if action == "drop":
            pending.append(EditionStatus.RESEND.value)
            values: dict[str, Any] = {
                "status": EditionStatus.DROPPED.value,
                "finished": now,
                "last_error": f"given up by hand ('send --settle-unknown drop', "
                f"{now:%Y-%m-%d %H:%M} UTC); the last answer: "
                + func.coalesce(t.editions.c.last_error, "none"),
            }
        else:
            values = {"status": EditionStatus.RESEND.value}
        with self.engine.begin() as conn:
            done = conn.execute(
                update(t.editions).where(t.editions.c.status.in_(pending)).values(**values)
            )
            return int(done.rowcount)
