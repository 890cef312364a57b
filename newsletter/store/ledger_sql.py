"""The edition ledger's hot statements, built once: the claim, the begin-send and final-mark
updates and the driver-level SQL the fast paths run on SQLite (sqlite3) and PostgreSQL
(psycopg), plus the status sets the ledger checks transitions against.

A delivered edition's papers go into its own row (``editions.paper_ids``, see
:func:`~newsletter.store.tables.paper_list`), and with them what the mail showed besides them
(``editions.layout``, :mod:`newsletter.edition.layout`), in the same statement. The begin and
the sent mark are written more than once on purpose: as SQLAlchemy statements
(``begin_send``, ``mark_edition``, and the fallbacks), per row for sqlite3 (an in-process
database: ``executemany`` of a tiny UPDATE is its cheapest form, and SQLite has no arrays) and
as one array statement for psycopg (one round trip per group commit). One SQL text for both
drivers would force PostgreSQL back to a statement per row or SQLite onto ``json_each`` joins;
``tests/store/test_ledger_contract.py`` instead runs every variant of each transition on both
databases and requires identical rows."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    ARRAY,
    Connection,
    Date,
    Integer,
    Text,
    bindparam,
    func,
    select,
    text,
    update,
)

from newsletter.models import (
    EditionStatus,
    LedgerOp,
    SubscriberStatus,
)
from newsletter.store import tables as t
from newsletter.store.base import _naive
from newsletter.store.tables import paper_list

# The senders' hot statements, built once (their compiled form is cached; building them per
# message costs more than running them).
_e, _s = t.editions, t.subscribers


_BEGIN_SEND = (
    update(_e)
    .where(
        _e.c.id == bindparam("b_id"),
        _e.c.owner == bindparam("b_owner"),
        _e.c.status.in_(
            [EditionStatus.CLAIMED.value, EditionStatus.SENDING.value, EditionStatus.UNKNOWN.value]
        ),
        _e.c.subscriber_id.in_(
            select(_s.c.id).where(
                _s.c.id == bindparam("b_sid"), _s.c.status == SubscriberStatus.ACTIVE.value
            )
        ),
    )
    .values(
        status=EditionStatus.SENDING.value,
        attempts=_e.c.attempts + 1,
        claimed=bindparam("b_now", type_=_e.c.claimed.type),
    )
)


def pg_array(values: Sequence[int | str | None]) -> str:
    """``values`` as a PostgreSQL array literal (``{1,NULL,"a\\"b"}``), for a parameter the
    statement casts (``CAST(%(ids)s AS integer[])``).

    psycopg adapts a list element by element in Python (finding the element type, a dumper per
    element): a third of the ledger writer's CPU on PostgreSQL went to the five lists of each
    group commit. One string is adapted once. Every string element is quoted, with ``\\`` and
    ``"`` escaped, which the array input reads back as it was, whatever it holds.
    """
    items = []
    for v in values:
        if v is None:
            items.append("NULL")
        elif isinstance(v, int):
            items.append(str(int(v)))
        else:
            items.append('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return "{" + ",".join(items) + "}"


_PG_BEGIN_STATUSES = {
    "sending": EditionStatus.SENDING.value,
    "in_hand": pg_array(
        [EditionStatus.CLAIMED.value, EditionStatus.SENDING.value, EditionStatus.UNKNOWN.value]
    ),
    "active": SubscriberStatus.ACTIVE.value,
}


_PG_LEDGER_AT_ONCE_SQL = (
    # a group commit in one statement: sent marks with their papers, then the begins (different
    # editions: a sender's begin returns before it can post that edition's mark)
    "WITH marked AS (UPDATE editions AS e SET status = %(sent)s, "
    "last_error = NULL, finished = %(now)s, item_count = coalesce(v.n, e.item_count), "
    "paper_ids = coalesce(v.p, e.paper_ids), layout = coalesce(v.l, e.layout) "
    "FROM unnest(CAST(%(ids)s AS integer[]), CAST(%(counts)s AS integer[]), "
    "CAST(%(papers)s AS text[]), CAST(%(layouts)s AS text[])) AS v(id, n, p, l) "
    "WHERE e.id = v.id) "
    "UPDATE editions SET status = %(sending)s, attempts = attempts + 1, claimed = %(now)s "
    "WHERE id = ANY(CAST(%(bids)s AS integer[])) AND owner = %(owner)s "
    "AND status = ANY(CAST(%(in_hand)s AS text[])) "
    # each edition's own subscriber, looked up by key: as "subscriber_id IN (SELECT id FROM
    # subscribers WHERE status = 'active')" PostgreSQL walked every active subscriber once per
    # group commit (a send grew with the square of its subscribers)
    "AND (SELECT s.status FROM subscribers AS s WHERE s.id = editions.subscriber_id) "
    "= %(active)s RETURNING id"
)


def _pg_ledger(
    conn: Connection, marks: Sequence[LedgerOp], begins: Sequence[LedgerOp], now: datetime
) -> set[int]:
    """Sent marks (with their papers and layouts) and begins of one owner in one statement;
    returns the editions whose begin applied."""
    params = {
        "ids": pg_array([op.edition_id for op in marks]),
        "counts": pg_array([len(op.paper_ids) or None for op in marks]),
        "papers": pg_array([paper_list(op.paper_ids) for op in marks]),
        "layouts": pg_array([op.layout for op in marks]),
        "now": _naive(now),
        "sent": EditionStatus.SENT.value,
        "bids": pg_array([op.edition_id for op in begins]),
        "owner": begins[0].owner if begins else "",
        **_PG_BEGIN_STATUSES,
    }
    return {row[0] for row in _driver_execute(conn, _PG_LEDGER_AT_ONCE_SQL, params)}


def _driver_execute(conn: Connection, sql: str, params: dict[str, Any]) -> list[Any]:
    """``sql`` on the DBAPI connection under ``conn`` (inside its transaction), prepared once
    per connection by psycopg; returns the rows, if any."""
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(sql, params, prepare=True)
        return cursor.fetchall() if cursor.description else []
    finally:
        cursor.close()


_SQLITE_BEGIN_SQL = (
    "UPDATE editions SET status = :sending, attempts = attempts + 1, claimed = :now "
    "WHERE id = :id AND owner = :owner AND status IN (:claimed, :sending, :unknown) "
    "AND subscriber_id IN (SELECT id FROM subscribers WHERE id = :sid AND status = :active)"
)


_SQLITE_BEGIN_ARGS = {
    "sending": EditionStatus.SENDING.value,
    "claimed": EditionStatus.CLAIMED.value,
    "unknown": EditionStatus.UNKNOWN.value,
    "active": SubscriberStatus.ACTIVE.value,
}


_SQLITE_MARK_SENT_SQL = (
    "UPDATE editions SET status = ?, last_error = NULL, finished = ?, "
    "item_count = coalesce(?, item_count), paper_ids = coalesce(?, paper_ids), "
    "layout = coalesce(?, layout) WHERE id = ?"
)


_PG_CLAIM = text(
    # claims as arrays: one statement whatever their number, rows inserted in the order given
    "INSERT INTO editions (subscriber_id, edition_date, status, message_id, claimed, owner, "
    "attempts, item_count, forced) "
    "SELECT v.s, v.d, :status, v.m, :now, :owner, 0, 0, false "
    "FROM unnest(CAST(:sids AS integer[]), CAST(:dates AS date[]), CAST(:mids AS text[])) "
    "WITH ORDINALITY AS v(s, d, m, k) ORDER BY v.k "
    "ON CONFLICT (subscriber_id, edition_date) DO NOTHING "
    "RETURNING id, subscriber_id, edition_date"
).bindparams(
    bindparam("sids", type_=ARRAY(Integer)),
    bindparam("dates", type_=ARRAY(Date)),
    bindparam("mids", type_=ARRAY(Text)),
    bindparam("now", type_=_e.c.claimed.type),
    status=EditionStatus.CLAIMED.value,
)


def _is_sent_mark(op: LedgerOp) -> bool:
    """A ``sent`` mark that :meth:`Store._mark_sent_many` can take with others."""
    return (
        op.kind == "mark"
        and op.status is EditionStatus.SENT
        and op.subscriber_id > 0
        and not op.error
    )


_FINAL = frozenset(
    {
        EditionStatus.SENT,
        EditionStatus.FAILED,
        EditionStatus.SKIPPED,
        EditionStatus.UNKNOWN,
        EditionStatus.HELD,
        EditionStatus.RESEND_REFUSED,
    }
)


_DELIVERED = frozenset({EditionStatus.SENT, EditionStatus.RESEND_REFUSED})


_RETRIED = frozenset({EditionStatus.DEFERRED.value, EditionStatus.RESEND.value})
_IN_FLIGHT = frozenset({EditionStatus.CLAIMED.value, EditionStatus.SENDING.value})


def may_take_over(
    status: str,
    holder: str,
    claimed: datetime,
    owner: str,
    now: datetime,
    lease: timedelta,
    owner_gone: Callable[[str], bool] | None,
    resend_unknown: bool,
) -> bool:
    """Whether ``owner``'s claim at ``now`` takes over an edition's existing row (``status``,
    claimed by ``holder`` at ``claimed``), keeping its Message-ID: a ``deferred`` row (a
    temporary failure: any later run retries it), a ``resend`` row (its one re-send; ``unknown``
    ones too with ``resend_unknown``), and a ``claimed`` or ``sending`` row that is this run's,
    whose lease ran out, or whose owner's process is gone (``owner_gone``). Never a row another
    run is working on right now, nor a settled one. The one rule of both ledgers
    (:mod:`.ledger`, :mod:`.memory_ledger`)."""
    if status in _RETRIED or (resend_unknown and status == EditionStatus.UNKNOWN.value):
        return True
    if status not in _IN_FLIGHT:
        return False
    return (
        holder == owner or claimed <= now - lease or (owner_gone is not None and owner_gone(holder))
    )


_MARK_FINAL = (
    update(_e)
    .where(_e.c.id == bindparam("b_id"))
    .values(
        status=bindparam("b_status", type_=_e.c.status.type),
        last_error=bindparam("b_error", type_=_e.c.last_error.type),
        finished=bindparam("b_finished", type_=_e.c.finished.type),
        item_count=func.coalesce(bindparam("b_items", type_=Integer), _e.c.item_count),
        paper_ids=func.coalesce(bindparam("b_papers", type_=Text), _e.c.paper_ids),
        layout=func.coalesce(bindparam("b_layout", type_=Text), _e.c.layout),
    )
)
