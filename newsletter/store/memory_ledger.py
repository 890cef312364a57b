"""The edition ledger of :class:`~newsletter.store.memory.MemoryStore`, and the lock and the
undo log every write of that store runs under.

:class:`MemoryLedger` follows the SQL ledger (:mod:`.ledger`) transition by transition: claims
and their leases, ``owner_gone`` and ``resend_unknown`` take-overs, forced re-opens, begins that
answer ``inactive`` or ``lost``, final marks with the papers a delivered edition carried,
releases, permanent failures that suppress at the limit. ``tests/store/test_ledger_contract.py``
runs one contract over it, SQLite and PostgreSQL. A write is all or nothing, as a transaction
is: it keeps the rows it replaces until it is done, and puts them back if it fails.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from typing import Any

from newsletter.errors import StoreError
from newsletter.models import (
    EditionClaim,
    EditionStatus,
    LedgerOp,
    Subscriber,
    SubscriberStatus,
)
from newsletter.store.ledger_sql import _DELIVERED, _FINAL, may_take_over
from newsletter.store.protocol import LedgerSession
from newsletter.store.tables import paper_list, parse_paper_list

_CLAIMED, _SENDING = EditionStatus.CLAIMED.value, EditionStatus.SENDING.value
_IN_HAND = frozenset({_CLAIMED, _SENDING, EditionStatus.UNKNOWN.value})
"""Rows a begin may move to ``sending`` (the SQL ledger's ``_BEGIN_SEND``)."""
_ACTIVE = SubscriberStatus.ACTIVE


@dataclass(frozen=True, slots=True)
class _Edition:
    """One ledger row, the columns of ``editions``."""

    id: int
    subscriber_id: int
    edition_date: date
    status: str
    message_id: str
    claimed: datetime
    owner: str
    finished: datetime | None = None
    attempts: int = 0
    item_count: int = 0
    last_error: str | None = None
    forced: bool = False
    paper_ids: str | None = None
    layout: str | None = None


class _Session:
    """The memory store's :class:`~newsletter.store.protocol.LedgerSession`: each batch is
    :meth:`MemoryLedger.apply_ledger`; it holds nothing."""

    def __init__(self, store: MemoryLedger) -> None:
        self._store = store

    def apply(self, ops: Sequence[LedgerOp], now: datetime) -> list[str | bool | None]:
        return self._store.apply_ledger(ops, now)

    def close(self) -> None:
        """Nothing to let go of."""


class MemoryLedger:
    """The ledger's rows and the subscribers' states, behind one lock (a base of MemoryStore)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._ids: dict[str, int] = {}
        self._subs: dict[int, Subscriber] = {}
        self._failures: dict[int, int] = {}
        self._editions: dict[int, _Edition] = {}
        self._by_sub: dict[int, dict[date, int]] = {}
        """Each subscriber's editions by date: the ``(subscriber_id, edition_date)`` key."""
        self._undo: dict[tuple[str, int], Any] | None = None
        """The write under way: each row it replaced, as it was (``None``: it was new)."""

    # ------------------------------------------------------------------ internals

    def _next(self, kind: str) -> int:
        self._ids[kind] = self._ids.get(kind, 0) + 1
        return self._ids[kind]

    @contextmanager
    def _atomic(self) -> Iterator[None]:
        """One transaction: under the lock, and undone if it fails (nested: the outer one's)."""
        with self._lock:
            if self._undo is not None:
                yield
                return
            self._undo = {}
            try:
                yield
            except BaseException:
                for (kind, key), old in self._undo.items():
                    if kind == "edition":
                        self._restore_edition(key, old)
                    else:
                        self._subs[key], self._failures[key] = old
                raise
            finally:
                self._undo = None

    def _keep(self, kind: str, key: int, old: Any) -> None:
        if self._undo is not None and (kind, key) not in self._undo:
            self._undo[kind, key] = old

    def _put(self, row: _Edition) -> None:
        self._keep("edition", row.id, self._editions.get(row.id))
        self._restore_edition(row.id, row)

    def _delete(self, edition_id: int) -> None:
        self._keep("edition", edition_id, self._editions.get(edition_id))
        self._restore_edition(edition_id, None)

    def _restore_edition(self, edition_id: int, row: _Edition | None) -> None:
        old = self._editions.pop(edition_id, None)
        if old is not None:
            self._by_sub[old.subscriber_id].pop(old.edition_date, None)
        if row is not None:
            self._editions[edition_id] = row
            self._by_sub.setdefault(row.subscriber_id, {})[row.edition_date] = edition_id

    def _put_sub(self, sub: Subscriber, failures: int) -> None:
        self._keep("subscriber", sub.id, (self._subs[sub.id], self._failures[sub.id]))
        self._subs[sub.id], self._failures[sub.id] = sub, failures

    def _row(self, subscriber_id: int, edition_date: date) -> _Edition | None:
        eid = self._by_sub.get(subscriber_id, {}).get(edition_date)
        return None if eid is None else self._editions[eid]

    def _subscriber(self, subscriber_id: int) -> Subscriber:
        sub = self._subs.get(subscriber_id)
        if sub is None:
            raise StoreError(f"no subscriber with id {subscriber_id}")
        return sub

    # ------------------------------------------------------------------ Ledger

    def ledger_session(self) -> LedgerSession:
        """A session for the sender's ledger writer: each batch one :meth:`apply_ledger`."""
        return _Session(self)

    def record_permanent_failure(self, subscriber_id: int, limit: int, now: datetime) -> bool:
        """Count a permanent failure; suppress the address at ``limit``. True when suppressed."""
        with self._atomic():
            return self._permanent_failure(subscriber_id, limit, now)

    def _permanent_failure(self, subscriber_id: int, limit: int, now: datetime) -> bool:
        sub = self._subs.get(subscriber_id)
        if sub is None:
            return False
        failures = self._failures[subscriber_id] + 1
        suppress = failures >= limit and sub.status is _ACTIVE
        if suppress:
            sub = replace(sub, status=SubscriberStatus.SUPPRESSED, status_changed=now)
        self._put_sub(sub, failures)
        return suppress

    def claim_edition(
        self,
        subscriber_id: int,
        edition_date: date,
        message_id: str,
        now: datetime,
        *,
        owner: str,
        lease: timedelta = timedelta(minutes=10),
        owner_gone: Callable[[str], bool] | None = None,
    ) -> EditionClaim | None:
        """Claim ``(subscriber, edition_date)`` before sending. ``None``: someone else has it."""
        [claim] = self.claim_editions(
            [(subscriber_id, edition_date, message_id)],
            now,
            owner=owner,
            lease=lease,
            owner_gone=owner_gone,
        )
        return claim

    def claim_editions(
        self,
        wanted: Sequence[tuple[int, date, str]],
        now: datetime,
        *,
        owner: str,
        lease: timedelta = timedelta(minutes=10),
        owner_gone: Callable[[str], bool] | None = None,
        resend_unknown: bool = False,
    ) -> list[EditionClaim | None]:
        """:meth:`claim_edition` for several ``(subscriber_id, edition_date, message_id)``, as
        one transaction; results in the same order."""
        order = sorted(range(len(wanted)), key=lambda k: (wanted[k][0], wanted[k][1]))
        out: list[EditionClaim | None] = [None] * len(wanted)
        with self._atomic():
            inserted: dict[tuple[int, date], int] = {}
            for k in order:  # the multi-row INSERT … ON CONFLICT DO NOTHING
                sid, day, mid = wanted[k]
                self._subscriber(sid)
                if self._row(sid, day) is None:
                    eid = self._next("edition")
                    self._put(_Edition(eid, sid, day, _CLAIMED, mid, now, owner))
                    inserted[sid, day] = eid
            for k in order:
                sid, day, mid = wanted[k]
                new = inserted.get((sid, day))
                if new is not None:
                    out[k] = EditionClaim(new, sid, day, mid, resumed=False)
                else:
                    out[k] = self._take_over(
                        sid, day, now, owner, lease, owner_gone, resend_unknown
                    )
        return out

    def _take_over(
        self,
        subscriber_id: int,
        edition_date: date,
        now: datetime,
        owner: str,
        lease: timedelta,
        owner_gone: Callable[[str], bool] | None,
        resend_unknown: bool,
    ) -> EditionClaim | None:
        row = self._row(subscriber_id, edition_date)
        assert row is not None
        status = row.status
        if not may_take_over(
            status, row.owner, row.claimed, owner, now, lease, owner_gone, resend_unknown
        ):
            return None
        self._put(replace(row, owner=owner, claimed=now, status=_CLAIMED))
        return EditionClaim(
            row.id,
            subscriber_id,
            edition_date,
            row.message_id,
            resumed=True,
            earlier=EditionStatus(status),
        )

    def mark_edition(
        self,
        edition_id: int,
        status: EditionStatus,
        now: datetime,
        *,
        error: str | None = None,
        paper_ids: Sequence[int] = (),
        attempts: int | None = None,
        layout: str | None = None,
    ) -> None:
        """Record an edition's outcome; a ``sent`` edition records its papers and its layout
        with it."""
        with self._atomic():
            self._mark(edition_id, status, now, error, paper_ids, attempts, layout)

    def _mark(
        self,
        edition_id: int,
        status: EditionStatus,
        now: datetime,
        error: str | None,
        paper_ids: Sequence[int],
        attempts: int | None = None,
        layout: str | None = None,
    ) -> None:
        row = self._editions.get(edition_id)
        if row is None:
            if status is EditionStatus.SENDING and attempts is None:
                raise StoreError(f"no edition with id {edition_id}")
            return
        items = len(paper_ids) if paper_ids else row.item_count
        if status in _FINAL:
            delivered = status in _DELIVERED
            papers = paper_list(paper_ids) if delivered else None
            laid = layout if delivered else None
            self._put(
                replace(
                    row,
                    status=status.value,
                    last_error=error,
                    finished=now,
                    item_count=items,
                    paper_ids=row.paper_ids if papers is None else papers,
                    layout=row.layout if laid is None else laid,
                )
            )
            return
        if status is EditionStatus.SENDING:
            tries = row.attempts + 1 if attempts is None else attempts
            row = replace(row, attempts=tries)
        self._put(replace(row, status=status.value, last_error=error, item_count=items))

    def release_edition(self, edition_id: int, *, error: str | None = None) -> None:
        """Give back a claim whose message did not go out in this run (relay down, stop)."""
        with self._atomic():
            self._release(edition_id, error)

    def _release(self, edition_id: int, error: str | None) -> None:
        row = self._editions.get(edition_id)
        if row is None or row.status not in (_CLAIMED, _SENDING):
            return
        if row.attempts == 0:  # never handed to the relay: the next run claims it afresh
            self._delete(edition_id)
        else:
            self._put(replace(row, status=EditionStatus.DEFERRED.value, last_error=error))

    def begin_send(self, edition_id: int, subscriber_id: int, owner: str, now: datetime) -> str:
        """Mark a claimed edition ``sending`` just before it goes to the relay: ``"ok"``,
        ``"inactive"`` (the subscriber left; the edition is ``skipped``) or ``"lost"``."""
        with self._atomic():
            return self._begin(edition_id, subscriber_id, owner, now)

    def _begin(self, edition_id: int, subscriber_id: int, owner: str, now: datetime) -> str:
        row = self._editions.get(edition_id)
        sub = self._subs.get(subscriber_id)
        active = sub is not None and sub.status is _ACTIVE
        if (
            row is not None
            and row.owner == owner
            and row.status in _IN_HAND
            and row.subscriber_id == subscriber_id
            and active
        ):
            self._put(replace(row, status=_SENDING, attempts=row.attempts + 1, claimed=now))
            return "ok"
        if active:
            return "lost"
        if row is not None and row.owner == owner:
            skipped = EditionStatus.SKIPPED.value
            why = "unsubscribed before sending"
            self._put(replace(row, status=skipped, finished=now, last_error=why))
        return "inactive"

    def apply_ledger(self, ops: Sequence[LedgerOp], now: datetime) -> list[str | bool | None]:
        """Several senders' ledger writes as one transaction (group commit); one result per op:
        what :meth:`begin_send` and :meth:`record_permanent_failure` return, else ``None``."""
        out: list[str | bool | None] = []
        with self._atomic():
            for op in ops:
                if op.kind == "begin":
                    out.append(self._begin(op.edition_id, op.subscriber_id, op.owner, now))
                elif op.kind == "mark":
                    assert op.status is not None
                    self._mark(
                        op.edition_id, op.status, now, op.error, op.paper_ids, layout=op.layout
                    )
                    out.append(None)
                elif op.kind == "release":
                    self._release(op.edition_id, op.error)
                    out.append(None)
                elif op.kind == "permanent_failure":
                    out.append(self._permanent_failure(op.subscriber_id, op.limit, now))
                else:  # pragma: no cover - a programming error
                    raise ValueError(f"unknown ledger op {op.kind!r}")
        return out

    # ------------------------------------------------------------------ LedgerState

    def force_edition(
        self, subscriber_id: int, edition_date: date, message_id: str, now: datetime, *, owner: str
    ) -> tuple[EditionClaim, list[int]]:
        """Re-open today's edition for a forced re-send, marked ``forced``; returns the claim
        and the papers the earlier send carried."""
        with self._atomic():
            self._subscriber(subscriber_id)
            claim = EditionClaim(0, subscriber_id, edition_date, message_id, resumed=False)
            row = self._row(subscriber_id, edition_date)
            if row is None:
                eid = self._next("edition")
                self._put(
                    _Edition(
                        eid,
                        subscriber_id,
                        edition_date,
                        _CLAIMED,
                        message_id,
                        now,
                        owner,
                        forced=True,
                    )
                )
                return replace(claim, id=eid), []
            self._put(
                replace(
                    row,
                    status=_CLAIMED,
                    message_id=message_id,
                    claimed=now,
                    owner=owner,
                    forced=True,
                    finished=None,
                    last_error=None,
                )
            )
            return replace(claim, id=row.id), parse_paper_list(row.paper_ids)

    def last_sent(self, subscriber_ids: Sequence[int]) -> dict[int, datetime]:
        """When each subscriber's most recent digest went out (absent: never)."""
        out: dict[int, datetime] = {}
        with self._lock:
            for sid in subscriber_ids:
                rows = (self._editions[e] for e in self._by_sub.get(sid, {}).values())
                done = [r.finished for r in rows if r.status == "sent" and r.finished]
                if done:
                    out[sid] = max(done)
        return out

    def count_sent_since(self, since: datetime) -> int:
        """Editions handed to the relay since ``since`` (for the per-hour rate limit)."""
        with self._lock:
            return sum(
                r.status == "sent" and r.finished is not None and r.finished >= since
                for r in self._editions.values()
            )

    def edition_statuses(
        self, subscriber_ids: Sequence[int], edition_dates: Iterable[date]
    ) -> dict[tuple[int, date], EditionStatus]:
        """The ledger status of each ``(subscriber, edition_date)`` that has a row."""
        dates = set(edition_dates)
        out: dict[tuple[int, date], EditionStatus] = {}
        with self._lock:
            for sid in set(subscriber_ids):
                for day in dates:
                    row = self._row(sid, day)
                    if row is not None:
                        out[sid, day] = EditionStatus(row.status)
        return out
