"""The edition ledger: claiming each subscriber's edition, beginning a send, marking it sent,
failed or unknown, releasing a claim, and applying a sender's batched ledger operations in one
transaction (SQLite) or one statement (PostgreSQL). A mixin of the Store; its statements are in
:mod:`.ledger_sql`, and the sender's writer applies its group commits through the session of
:mod:`.ledger_session`.

Why one module of this length: each write a sender batches (begin, mark, release, permanent
failure) is written once as a function of an open connection, used both by its public method
(its own transaction) and by :meth:`LedgerStore.apply_ledger` (many senders' ops in one
transaction), next to the driver-level fast paths for the usual batches, which must leave the
same rows; the claims, which take over the rows those writes leave, are the rest. Split, a
write and the batch that repeats it would sit in different modules; what keeps them equal is
``tests/store/test_ledger_contract.py``, which requires the same rows from every way."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import date, datetime, timedelta
from typing import Any

from sqlalchemy import (
    Connection,
    Insert,
    and_,
    delete,
    select,
    update,
)

from newsletter.models import (
    EditionClaim,
    EditionStatus,
    LedgerOp,
    SubscriberStatus,
)
from newsletter.store import tables as t
from newsletter.store.base import StoreBase
from newsletter.store.ledger_session import SqlLedgerSession
from newsletter.store.ledger_sql import (
    _BEGIN_SEND,
    _DELIVERED,
    _FINAL,
    _MARK_FINAL,
    _PG_CLAIM,
    _SQLITE_BEGIN_ARGS,
    _SQLITE_BEGIN_SQL,
    _SQLITE_MARK_SENT_SQL,
    _is_sent_mark,
    _pg_ledger,
    may_take_over,
)
from newsletter.store.protocol import LedgerSession
from newsletter.store.tables import paper_list


class LedgerStore(StoreBase):
    """Claims, sends and marks: the write side of the edition ledger."""

    def ledger_session(self) -> LedgerSession:
        """The sender's ledger writer's own session (:class:`~.ledger_session.SqlLedgerSession`):
        its group commits on connections of its own, opened on first use."""
        return SqlLedgerSession(self)

    def _writer_connection(self) -> Connection:
        """A connection of the ledger writer's own, for its batches in a transaction."""
        return self.engine.connect()

    def _ledger_connection(self) -> Connection | None:
        """PostgreSQL: an autocommit connection for the sender's one-statement group commits,
        planned for key lookups (``None`` on SQLite, whose writer uses its own transactions).

        Every ledger statement finds its rows by primary key. On a fresh database the editions
        table has no statistics and starts empty, so the planner would read it whole for each
        statement; as the edition fills it, that grows with the square of its subscribers. This
        connection tells the planner to prefer the indexes. With that, one generic plan serves
        every group commit: its statements are prepared once and not planned again for each
        batch (every other connection plans each execution, see ``_postgres_session``). Bitmap
        scans are off too: with them, a generic plan combined the primary key with the whole
        ``(edition_date, status)`` index, read once per group commit (a million index entries
        for a 2,000-digest send, ``tests/store/test_scans.py``)."""
        if self.dialect != "postgresql":
            return None
        conn = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        conn.exec_driver_sql("SET enable_seqscan = off")
        conn.exec_driver_sql("SET enable_bitmapscan = off")
        conn.exec_driver_sql("SET plan_cache_mode = force_generic_plan")
        return conn

    def _claim_insert(self) -> Insert:
        """The claim: ``INSERT … ON CONFLICT DO NOTHING RETURNING``, built once per store."""
        if self._claim_stmt is None:
            e = t.editions
            self._claim_stmt = (
                self._insert(e)
                .on_conflict_do_nothing(index_elements=["subscriber_id", "edition_date"])  # type: ignore[attr-defined]
                .returning(e.c.id, e.c.subscriber_id, e.c.edition_date)
            )
        return self._claim_stmt

    def record_permanent_failure(self, subscriber_id: int, limit: int, now: datetime) -> bool:
        """Count a permanent failure; suppress the address at ``limit``. True when suppressed."""
        with self.engine.begin() as conn:
            return self._permanent_failure(conn, subscriber_id, limit, now)

    @staticmethod
    def _permanent_failure(conn: Connection, subscriber_id: int, limit: int, now: datetime) -> bool:
        conn.execute(
            update(t.subscribers)
            .where(t.subscribers.c.id == subscriber_id)
            .values(permanent_failures=t.subscribers.c.permanent_failures + 1)
        )
        res = conn.execute(
            update(t.subscribers)
            .where(
                and_(
                    t.subscribers.c.id == subscriber_id,
                    t.subscribers.c.permanent_failures >= limit,
                    t.subscribers.c.status == SubscriberStatus.ACTIVE.value,
                )
            )
            .values(status=SubscriberStatus.SUPPRESSED.value, status_changed=now)
        )
        return res.rowcount == 1

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
        """Claim ``(subscriber, edition_date)`` before sending. ``None``: someone else has it.

        The claim is one atomic INSERT on the unique ``(subscriber_id, edition_date)``; a claim
        left in ``claimed`` or ``sending`` by an interrupted run is taken over (compare-and-set
        on owner and time) once its lease has run out, or at once when ``owner_gone(owner)``
        says its owner process no longer exists, keeping its Message-ID. ``deferred`` rows (a
        run stopped before their message went out) are taken over by any later run.
        """
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
        """:meth:`claim_edition` for several ``(subscriber_id, edition_date, message_id)`` in one
        transaction (one multi-row INSERT); results in the same order.

        ``resend_unknown`` (``delivery.on_unknown: resend``) also takes over ``unknown`` rows,
        for their one re-send with the same Message-ID; ``resend`` rows (settled by hand) are
        always taken over.

        Rows are inserted in subscriber order, so two runs claiming overlapping sets at the same
        moment wait for each other instead of deadlocking (PostgreSQL).
        """
        if not wanted:
            return []
        order = sorted(range(len(wanted)), key=lambda k: (wanted[k][0], wanted[k][1]))
        out: list[EditionClaim | None] = [None] * len(wanted)
        with self.engine.begin() as conn:
            if self.dialect == "postgresql":
                rows = conn.execute(
                    _PG_CLAIM,
                    {
                        "sids": [wanted[k][0] for k in order],
                        "dates": [wanted[k][1] for k in order],
                        "mids": [wanted[k][2] for k in order],
                        "now": now,
                        "owner": owner,
                    },
                )
            else:
                rows = self._claim_rows(conn, wanted, order, now, owner)
            inserted = {(r.subscriber_id, r.edition_date): r.id for r in rows}
            for k in order:
                sid, day, mid = wanted[k]
                eid = inserted.get((sid, day))
                if eid is not None:
                    out[k] = EditionClaim(eid, sid, day, mid, resumed=False)
                else:
                    out[k] = self._take_over(
                        conn, sid, day, now, owner, lease, owner_gone, resend_unknown
                    )
        return out

    def _claim_rows(
        self,
        conn: Connection,
        wanted: Sequence[tuple[int, date, str]],
        order: Sequence[int],
        now: datetime,
        owner: str,
    ) -> Any:
        # executemany with RETURNING ("insertmanyvalues"): one cached statement, rows sent as
        # multi-row INSERTs in the order given
        return conn.execute(
            self._claim_insert(),
            [
                {
                    "subscriber_id": wanted[k][0],
                    "edition_date": wanted[k][1],
                    "status": EditionStatus.CLAIMED.value,
                    "message_id": wanted[k][2],
                    "claimed": now,
                    "owner": owner,
                    "attempts": 0,
                    "item_count": 0,
                    "forced": False,
                }
                for k in order
            ],
        )

    @staticmethod
    def _take_over(
        conn: Connection,
        subscriber_id: int,
        edition_date: date,
        now: datetime,
        owner: str,
        lease: timedelta,
        owner_gone: Callable[[str], bool] | None,
        resend_unknown: bool = False,
    ) -> EditionClaim | None:
        """The existing ledger row, if this run may resume it (compare-and-set)."""
        row = conn.execute(
            select(t.editions).where(
                t.editions.c.subscriber_id == subscriber_id,
                t.editions.c.edition_date == edition_date,
            )
        ).one()
        if not may_take_over(
            row.status, row.owner, row.claimed, owner, now, lease, owner_gone, resend_unknown
        ):
            return None
        took = conn.execute(
            update(t.editions)
            .where(
                t.editions.c.id == row.id,
                t.editions.c.owner == row.owner,
                t.editions.c.claimed == row.claimed,
                t.editions.c.status == row.status,
            )
            .values(owner=owner, claimed=now, status=EditionStatus.CLAIMED.value)
        )
        if took.rowcount != 1:
            return None
        return EditionClaim(
            row.id,
            subscriber_id,
            edition_date,
            row.message_id,
            resumed=True,
            earlier=EditionStatus(row.status),
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
        """Record an edition's outcome; a ``sent`` edition records its papers and its
        ``layout`` (what the mail showed besides them) in the same commit."""
        with self.engine.begin() as conn:
            self._mark(conn, edition_id, status, now, error, paper_ids, attempts, layout)

    def _mark(
        self,
        conn: Connection,
        edition_id: int,
        status: EditionStatus,
        now: datetime,
        error: str | None = None,
        paper_ids: Sequence[int] = (),
        attempts: int | None = None,
        layout: str | None = None,
    ) -> None:
        if status in _FINAL:
            delivered = status in _DELIVERED
            conn.execute(
                _MARK_FINAL,
                {
                    "b_id": edition_id,
                    "b_status": status.value,
                    "b_error": error,
                    "b_finished": now,
                    "b_items": len(paper_ids) if paper_ids else None,
                    "b_papers": paper_list(paper_ids) if delivered else None,
                    "b_layout": layout if delivered else None,
                },
            )
            return
        done = 0
        if status is EditionStatus.SENDING and attempts is None:
            done = conn.execute(
                select(t.editions.c.attempts).where(t.editions.c.id == edition_id)
            ).scalar_one()
        values: dict[str, Any] = {"status": status.value, "last_error": error}
        if status is EditionStatus.SENDING:
            values["attempts"] = done + 1 if attempts is None else attempts
        if paper_ids:
            values["item_count"] = len(paper_ids)
        conn.execute(update(t.editions).where(t.editions.c.id == edition_id).values(**values))

    def release_edition(self, edition_id: int, *, error: str | None = None) -> None:
        """Give back a claim whose message did not go out in this run (relay down, stop).

        A claim never handed to the relay (no attempt yet) is deleted: the next run claims it
        afresh. One that was tried already (a resumed claim, a retry) becomes ``deferred`` and
        keeps its Message-ID, so if an earlier attempt did reach the reader, the next one folds
        with it.
        """
        with self.engine.begin() as conn:
            self._release(conn, edition_id, error)

    @staticmethod
    def _release(conn: Connection, edition_id: int, error: str | None) -> None:
        active = [EditionStatus.CLAIMED.value, EditionStatus.SENDING.value]
        conn.execute(
            delete(t.editions).where(
                t.editions.c.id == edition_id,
                t.editions.c.status.in_(active),
                t.editions.c.attempts == 0,
            )
        )
        conn.execute(
            update(t.editions)
            .where(t.editions.c.id == edition_id, t.editions.c.status.in_(active))
            .values(status=EditionStatus.DEFERRED.value, last_error=error)
        )

    def begin_send(self, edition_id: int, subscriber_id: int, owner: str, now: datetime) -> str:
        """Mark a claimed edition ``sending`` just before it goes to the relay.

        One compare-and-set that also checks, at send time, that the subscriber is still
        active and that this run still owns the claim. Returns ``"ok"``, ``"inactive"``
        (unsubscribed or suppressed since the digest was rendered; the edition is then
        ``skipped``) or ``"lost"`` (another run took the claim over).
        """
        with self.engine.begin() as conn:
            return self._begin_send(conn, edition_id, subscriber_id, owner, now)

    @staticmethod
    def _begin_send(
        conn: Connection, edition_id: int, subscriber_id: int, owner: str, now: datetime
    ) -> str:
        e, sub = t.editions, t.subscribers
        res = conn.execute(
            _BEGIN_SEND,
            {"b_id": edition_id, "b_owner": owner, "b_sid": subscriber_id, "b_now": now},
        )
        if res.rowcount == 1:
            return "ok"
        active = conn.execute(
            select(sub.c.status).where(sub.c.id == subscriber_id)
        ).scalar_one_or_none()
        if active != SubscriberStatus.ACTIVE.value:
            conn.execute(
                update(e)
                .where(e.c.id == edition_id, e.c.owner == owner)
                .values(
                    status=EditionStatus.SKIPPED.value,
                    finished=now,
                    last_error="unsubscribed before sending",
                )
            )
            return "inactive"
        return "lost"

    def apply_ledger(self, ops: Sequence[LedgerOp], now: datetime) -> list[str | bool | None]:
        """Several senders' ledger writes in one transaction (group commit); one result per op.

        ``begin`` returns what :meth:`begin_send` returns, ``permanent_failure`` what
        :meth:`record_permanent_failure` returns, the others ``None``. Nothing is applied if
        one op fails. Ops are applied in order; a run of ``begin`` ops (one owner) is one
        ``UPDATE … RETURNING``, and a run of ``sent`` marks is one ``UPDATE`` and one insert of
        their papers, whatever their number (on PostgreSQL as arrays: one round trip each).
        The sender's writer applies its batches through :meth:`ledger_session` instead, on a
        connection it keeps open (no pool checkout each time).
        """
        with self.engine.connect() as own:
            return self._apply_held(ops, now, own)

    def _apply_held(
        self, ops: Sequence[LedgerOp], now: datetime, conn: Connection
    ) -> list[str | bool | None]:
        """:meth:`apply_ledger` on ``conn``, a connection the caller keeps open (reconnected
        and run again if it was lost: the ledger's writes are idempotent)."""
        return self._retrying(lambda: self._apply_ledger(ops, now, conn), conn)

    def _apply_ledger(
        self, ops: Sequence[LedgerOp], now: datetime, conn: Connection
    ) -> list[str | bool | None]:
        out: list[str | bool | None] = []
        with conn.begin():
            at = 0
            while at < len(ops):
                op = ops[at]
                end = at + 1
                if op.kind == "begin":
                    while (
                        end < len(ops) and ops[end].kind == "begin" and ops[end].owner == op.owner
                    ):
                        end += 1
                    out += self._begin_many(conn, ops[at:end], now)
                elif _is_sent_mark(op):
                    while end < len(ops) and _is_sent_mark(ops[end]):
                        end += 1
                    self._mark_sent_many(conn, ops[at:end], now)
                    out += [None] * (end - at)
                elif op.kind == "mark":
                    assert op.status is not None
                    self._mark(
                        conn,
                        op.edition_id,
                        op.status,
                        now,
                        op.error,
                        op.paper_ids,
                        layout=op.layout,
                    )
                    out.append(None)
                elif op.kind == "release":
                    self._release(conn, op.edition_id, op.error)
                    out.append(None)
                elif op.kind == "permanent_failure":
                    out.append(self._permanent_failure(conn, op.subscriber_id, op.limit, now))
                else:  # pragma: no cover - a programming error
                    raise ValueError(f"unknown ledger op {op.kind!r}")
                at = end
        return out

    def _apply_at_once(
        self, ops: Sequence[LedgerOp], now: datetime, conn: Connection
    ) -> list[str | bool | None] | None:
        """The usual group commit (``begin``s of one owner and ``sent`` marks) on PostgreSQL as
        one statement on the autocommit connection of :meth:`_ledger_connection`: one round
        trip, atomic as any statement.

        ``None`` when ``ops`` hold anything else, or on SQLite: use :meth:`_apply_held`. A
        ``begin`` that did not apply (the subscriber left, or another run took the edition) is
        looked at again in a transaction, to say which.
        """
        if self.dialect != "postgresql":
            return None
        begins = [op for op in ops if op.kind == "begin"]
        marks = [op for op in ops if _is_sent_mark(op)]
        if len(begins) + len(marks) != len(ops) or len({op.owner for op in begins}) > 1:
            return None
        done = self._retrying(lambda: _pg_ledger(conn, marks, begins, now), conn, autocommit=True)
        out: list[str | bool | None] = []
        for op in ops:
            if op.kind != "begin":
                out.append(None)
            elif op.edition_id in done:
                out.append("ok")
            else:
                with self.engine.begin() as again:
                    out.append(
                        self._begin_send(again, op.edition_id, op.subscriber_id, op.owner, now)
                    )
        return out

    def _begin_many(
        self, conn: Connection, ops: Sequence[LedgerOp], now: datetime
    ) -> list[str | bool | None]:
        """:meth:`_begin_send` for several editions of one owner: one statement when all are
        still theirs and active (the usual case); each one that is not is looked at alone."""
        if self.dialect != "postgresql":  # on SQLite one by one is cheaper
            claimed = self._sqlite_datetime(now)
            cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
            out: list[str | bool | None] = []
            try:
                for op in ops:
                    cursor.execute(
                        _SQLITE_BEGIN_SQL,
                        {
                            "now": claimed,
                            "id": op.edition_id,
                            "owner": op.owner,
                            "sid": op.subscriber_id,
                            **_SQLITE_BEGIN_ARGS,
                        },
                    )
                    out.append(
                        "ok"
                        if cursor.rowcount == 1  # else: why not (inactive, or lost)
                        else self._begin_send(conn, op.edition_id, op.subscriber_id, op.owner, now)
                    )
            finally:
                cursor.close()
            return out
        # The hot path goes to psycopg directly, as a prepared statement: SQLAlchemy's share of
        # a statement's CPU is about as large as the driver's, and this runs for every message.
        done = _pg_ledger(conn, (), ops, now)
        return [
            "ok"
            if op.edition_id in done
            else self._begin_send(conn, op.edition_id, op.subscriber_id, op.owner, now)
            for op in ops
        ]

    def _mark_sent_many(self, conn: Connection, ops: Sequence[LedgerOp], now: datetime) -> None:
        """``sent`` marks with their papers (see :func:`_is_sent_mark`): two statements, one on
        PostgreSQL."""
        if self.dialect == "postgresql":
            _pg_ledger(conn, ops, (), now)
            return
        # SQLite: straight to the sqlite3 cursor with positional rows (SQLAlchemy builds a
        # parameter dict per row); the datetime goes through the column type's own bind
        # processor, so it is stored exactly as SQLAlchemy stores it.
        finished = self._sqlite_datetime(now)
        cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        try:
            cursor.executemany(
                _SQLITE_MARK_SENT_SQL,
                [
                    (
                        EditionStatus.SENT.value,
                        finished,
                        len(op.paper_ids) or None,
                        paper_list(op.paper_ids),
                        op.layout,
                        op.edition_id,
                    )
                    for op in ops
                ],
            )
        finally:
            cursor.close()
