"""The edition ledger's contract, transition by transition, on SQLite and on PostgreSQL.

Each transition is run through every way the Store has of writing it (issue 18): the
SQLAlchemy statements (``begin_send``, ``mark_edition``, ``release_edition``…), the group commit
(``apply_ledger``, whose usual ops go straight to the driver: sqlite3 on SQLite, one psycopg
statement on PostgreSQL) and PostgreSQL's autocommit one-statement group commit (``_apply_at_once``). Each variant
starts from the same row (a subscriber of its own) and must leave the same row: same status,
attempts, owner, times, error, item count and the papers it carried. A last test runs one script of
transitions on both databases and compares what they hold.

PostgreSQL runs against 127.0.0.1:5432 (tests/conftest.py); those cases skip only when the
server is truly absent, saying so.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event, select, update

from newsletter.models import (
    EditionClaim,
    EditionStatus,
    LedgerOp,
    PaperData,
    PaperWrite,
    SubscriberStatus,
)
from newsletter.store import Store
from newsletter.store import tables as t
from newsletter.store.tables import parse_paper_list
from tests.conftest import NOW

DAY = date(2026, 11, 17)
LATER = NOW + timedelta(minutes=1)
OWNER = "host:1:run-1"
FINAL = {
    EditionStatus.SENT,
    EditionStatus.FAILED,
    EditionStatus.SKIPPED,
    EditionStatus.UNKNOWN,
    EditionStatus.HELD,
    EditionStatus.RESEND_REFUSED,
}
DELIVERED = {EditionStatus.SENT, EditionStatus.RESEND_REFUSED}


class Ledger:
    """A store with papers, and helpers to set up one subscriber's edition and read it back."""

    def __init__(self, store: Store) -> None:
        self.store = store
        ids = store.write_papers(
            "contract",
            [
                PaperWrite(PaperData(key=f"2611.{i:05d}", title=f"Paper {i}"), None, True, True)
                for i in range(1, 6)
            ],
            NOW,
        )
        self.papers = tuple(sorted(ids.values()))
        self.count = 0

    def subscriber(self, status: SubscriberStatus = SubscriberStatus.ACTIVE) -> int:
        self.count += 1
        sub, _ = self.store.add_subscriber(f"r{self.count}@example.org", now=NOW)
        if status is not SubscriberStatus.ACTIVE:
            self.store.set_status(sub.email, status, NOW)
        return sub.id

    def claimed(self, *, owner: str = OWNER, started: bool = False) -> EditionClaim:
        """A new subscriber's claimed edition; ``started``: handed to the relay once already."""
        sid = self.subscriber()
        [claim] = self.store.claim_editions([(sid, DAY, f"<{sid}@x>")], NOW, owner=owner)
        assert claim is not None
        if started:
            assert self.store.begin_send(claim.id, sid, owner, NOW) == "ok"
        return claim

    def set(self, edition_id: int, **values: Any) -> None:
        with self.store.engine.begin() as conn:
            conn.execute(update(t.editions).where(t.editions.c.id == edition_id).values(**values))

    def row(self, edition_id: int, subscriber_id: int) -> dict[str, Any] | None:
        """The edition's row as a variant left it (ids and the Message-ID made comparable), its
        papers, and its subscriber's status and failure count."""
        with self.store.engine.connect() as conn:
            e = conn.execute(select(t.editions).where(t.editions.c.id == edition_id)).first()
            papers = sorted(
                pid
                for (ids,) in conn.execute(
                    select(t.editions.c.paper_ids).where(
                        t.editions.c.subscriber_id == subscriber_id
                    )
                )
                for pid in parse_paper_list(ids)
            )
            s = conn.execute(
                select(t.subscribers.c.status, t.subscribers.c.permanent_failures).where(
                    t.subscribers.c.id == subscriber_id
                )
            ).one()
        out: dict[str, Any] = {"subscriber": (s.status, s.permanent_failures), "papers": papers}
        if e is None:
            return out | {"edition": None}
        edition = dict(e._mapping)
        for key in ("id", "subscriber_id"):
            edition.pop(key)
        edition["message_id"] = edition["message_id"].replace(str(subscriber_id), "N")
        for key in ("claimed", "finished"):
            if edition[key] is not None:
                edition[key] = _utc(edition[key])
        return out | {"edition": edition}


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


@pytest.fixture
def ledger(store: Store) -> Ledger:
    return Ledger(store)


Variant = Callable[[Store, EditionClaim], Any]
Ops = Callable[[EditionClaim], list[LedgerOp]]


def _group_commits(store: Store, ops: Ops) -> dict[str, Variant]:
    """``ops`` through ``apply_ledger`` (whose usual ops go to the driver), and on PostgreSQL
    also through ``_apply_at_once`` on the sender's autocommit connection; each variant
    returns the first op's result."""

    def apply(s: Store, c: EditionClaim) -> Any:
        return s.apply_ledger(ops(c), LATER)[0]

    def at_once(s: Store, c: EditionClaim) -> Any:
        conn = s._ledger_connection()
        assert conn is not None
        try:
            results = s._apply_at_once(ops(c), LATER, conn)
        finally:
            conn.close()
        assert results is not None, "apply_ledger_at_once did not take these ops"
        return results[0]

    if store.dialect == "postgresql":
        return {"apply_ledger (driver)": apply, "apply_ledger_at_once": at_once}
    return {"apply_ledger (driver)": apply}


def _same_rows(
    ledger: Ledger, variants: dict[str, Variant], setup: Callable[[], EditionClaim]
) -> Any:
    """Run each variant on its own, identical edition; all results and rows must agree."""
    seen: dict[str, tuple[Any, dict[str, Any] | None]] = {}
    for name, run in variants.items():
        claim = setup()
        result = run(ledger.store, claim)
        seen[name] = (result, ledger.row(claim.id, claim.subscriber_id))
    first_name, first = next(iter(seen.items()))
    for name, got in seen.items():
        assert got == first, f"{name} left {got}, {first_name} left {first}"
    return first


# ---------------------------------------------------------------------------- claims


def test_claims_insert_new_rows_in_the_order_given(ledger: Ledger) -> None:
    store = ledger.store
    sids = [ledger.subscriber() for _ in range(4)]
    wanted = [(sid, DAY, f"<{sid}@x>") for sid in reversed(sids)]
    claims = store.claim_editions(wanted, NOW, owner=OWNER)
    assert [(c.subscriber_id, c.message_id, c.resumed) for c in claims if c] == [
        (sid, mid, False) for sid, _, mid in wanted
    ]
    for c in claims:
        assert c is not None
        row = ledger.row(c.id, c.subscriber_id)
        assert row is not None and row["edition"] == {
            "edition_date": DAY,
            "status": "claimed",
            "message_id": "<N@x>",
            "claimed": NOW,
            "owner": OWNER,
            "finished": None,
            "attempts": 0,
            "item_count": 0,
            "last_error": None,
            "forced": False,
            "paper_ids": None,
        }
    # claimed already: nobody else gets them while the lease runs
    assert store.claim_editions(wanted, LATER, owner="other") == [None] * 4
    # claim_edition is the same claim for one
    sid = ledger.subscriber()
    one = store.claim_edition(sid, DAY, f"<{sid}@x>", NOW, owner=OWNER)
    [many] = store.claim_editions([(sid, DAY + timedelta(1), f"<{sid}@x>")], NOW, owner=OWNER)
    assert one is not None and many is not None
    rows = [ledger.row(c.id, sid)["edition"] for c in (one, many)]  # type: ignore[index]
    assert rows[0] | {"edition_date": DAY} == rows[1] | {"edition_date": DAY}


TAKEOVER = [
    # status, owner, claimed, owner_gone, resend_unknown -> taken over?
    ("claimed", "other", NOW - timedelta(minutes=11), False, False, True),  # lease ran out
    ("sending", "other", NOW - timedelta(minutes=11), False, False, True),
    ("claimed", "other", NOW - timedelta(minutes=1), False, False, False),  # lease still on
    ("claimed", "other", NOW - timedelta(minutes=1), True, False, True),  # its process is gone
    ("claimed", OWNER, NOW - timedelta(minutes=1), False, False, True),  # our own claim
    ("deferred", "other", NOW - timedelta(minutes=1), False, False, True),
    ("resend", "other", NOW - timedelta(minutes=1), False, False, True),
    ("unknown", "other", NOW - timedelta(minutes=1), False, False, False),
    ("unknown", "other", NOW - timedelta(minutes=1), False, True, True),  # resend_unknown
    ("sent", "other", NOW - timedelta(minutes=11), True, True, False),
    ("failed", "other", NOW - timedelta(minutes=11), True, True, False),
    ("held", "other", NOW - timedelta(minutes=11), True, True, False),
    ("dropped", "other", NOW - timedelta(minutes=11), True, True, False),
]


@pytest.mark.parametrize(("status", "owner", "claimed", "gone", "resend", "taken"), TAKEOVER)
def test_claim_takes_over_a_row_only_when_it_may(
    ledger: Ledger,
    status: str,
    owner: str,
    claimed: datetime,
    gone: bool,
    resend: bool,
    taken: bool,
) -> None:
    first = ledger.claimed(owner=owner)
    ledger.set(first.id, status=status, claimed=claimed, attempts=1)
    before = ledger.row(first.id, first.subscriber_id)
    [claim] = ledger.store.claim_editions(
        [(first.subscriber_id, DAY, "<new@x>")],
        LATER,
        owner=OWNER,
        lease=timedelta(minutes=10),
        owner_gone=(lambda who: gone),
        resend_unknown=resend,
    )
    after = ledger.row(first.id, first.subscriber_id)
    if not taken:
        assert claim is None and after == before
        return
    assert claim is not None and claim.resumed and claim.id == first.id
    assert claim.message_id == first.message_id  # a resumed claim keeps its Message-ID
    assert claim.earlier == EditionStatus(status)
    assert after is not None and before is not None
    assert after["edition"] == before["edition"] | {
        "status": "claimed",
        "owner": OWNER,
        "claimed": LATER,
    }


def test_force_edition_reopens_a_sent_edition_with_its_papers(ledger: Ledger) -> None:
    store = ledger.store
    sid = ledger.subscriber()
    fresh, papers = store.force_edition(sid, DAY, "<forced@x>", NOW, owner=OWNER)
    assert papers == [] and not fresh.resumed
    assert ledger.row(fresh.id, sid)["edition"]["forced"] is True  # type: ignore[index]
    store.mark_edition(fresh.id, EditionStatus.SENT, NOW, paper_ids=ledger.papers[:3])
    again, papers = store.force_edition(sid, DAY, "<again@x>", LATER, owner="run-2")
    assert again.id == fresh.id and sorted(papers) == list(ledger.papers[:3])
    row = ledger.row(again.id, sid)
    assert row is not None and row["edition"] == {
        "edition_date": DAY,
        "status": "claimed",
        "message_id": "<again@x>",
        "claimed": LATER,
        "owner": "run-2",
        "finished": None,
        "attempts": 0,  # a forced re-open counts no attempt: its begin will
        "item_count": 3,
        "last_error": None,
        "forced": True,
        "paper_ids": f"{ledger.papers[0]},{ledger.papers[1]},{ledger.papers[2]}",  # delivered
    }


# ---------------------------------------------------------------------------- begin


def _begin_send(store: Store, c: EditionClaim) -> Any:
    return store.begin_send(c.id, c.subscriber_id, OWNER, LATER)


def _begin_ops(c: EditionClaim) -> list[LedgerOp]:
    return [LedgerOp("begin", c.id, c.subscriber_id, owner=OWNER)]


def _begin_op(store: Store, c: EditionClaim) -> Any:
    return store.apply_ledger(_begin_ops(c), LATER)[0]


@pytest.mark.parametrize("case", ["ok", "again", "inactive", "lost", "unknown", "sent"])
def test_begin_leaves_the_same_row_every_way(ledger: Ledger, case: str) -> None:
    def setup() -> EditionClaim:
        claim = ledger.claimed(started=case == "again")
        if case == "inactive":
            email = f"r{ledger.count}@example.org"
            ledger.store.set_status(email, SubscriberStatus.UNSUBSCRIBED, NOW)
        elif case == "lost":
            ledger.set(claim.id, owner="another-run")
        elif case in ("unknown", "sent"):
            ledger.set(claim.id, status=case, attempts=1)
        return claim

    variants = {"begin_send": _begin_send, **_group_commits(ledger.store, _begin_ops)}
    result, row = _same_rows(ledger, variants, setup)
    edition = row["edition"]
    expected = {"ok": "ok", "again": "ok", "unknown": "ok", "inactive": "inactive"}
    assert result == expected.get(case, "lost")
    if result == "ok":
        assert edition["status"] == "sending" and edition["claimed"] == LATER
        assert edition["attempts"] == (2 if case in ("again", "unknown") else 1)
    elif case == "inactive":
        assert edition["status"] == "skipped" and edition["finished"] == LATER
        assert edition["last_error"] == "unsubscribed before sending"
    else:
        assert edition["status"] == ("sent" if case == "sent" else "claimed")


# ---------------------------------------------------------------------------- marks


def _mark_variants(
    store: Store, status: EditionStatus, error: str | None, papers: tuple[int, ...]
) -> dict[str, Variant]:
    def mark_edition(s: Store, c: EditionClaim) -> Any:
        return s.mark_edition(c.id, status, LATER, error=error, paper_ids=papers)

    def ops(c: EditionClaim, subscriber: bool = True) -> list[LedgerOp]:
        sid = c.subscriber_id if subscriber else 0
        return [LedgerOp("mark", c.id, sid, status=status, error=error, paper_ids=papers)]

    def op_unknown(s: Store, c: EditionClaim) -> Any:
        return s.apply_ledger(ops(c, subscriber=False), LATER)[0]

    slow = {"mark_edition": mark_edition, "apply_ledger (no subscriber)": op_unknown}
    if status is EditionStatus.SENT and error is None:  # the sent mark's fast path
        return slow | _group_commits(store, ops)
    return slow | {"apply_ledger (subscriber)": lambda s, c: s.apply_ledger(ops(c), LATER)[0]}


@pytest.mark.parametrize("error", [None, "550 mailbox unavailable"])
@pytest.mark.parametrize("status", list(EditionStatus), ids=str)
def test_mark_leaves_the_same_row_every_way(
    ledger: Ledger, status: EditionStatus, error: str | None
) -> None:
    papers = ledger.papers[:4]
    result, row = _same_rows(
        ledger,
        _mark_variants(ledger.store, status, error, papers),
        lambda: ledger.claimed(started=True),
    )
    edition = row["edition"]
    assert result is None
    assert edition["status"] == status.value and edition["last_error"] == error
    assert edition["finished"] == (LATER if status in FINAL else None)
    assert edition["attempts"] == (2 if status is EditionStatus.SENDING else 1)
    assert edition["item_count"] == 4
    assert row["papers"] == (list(papers) if status in DELIVERED else [])


def test_a_sent_mark_twice_is_the_same_row(ledger: Ledger) -> None:
    """Marks are retried after a lost connection: applying one again changes nothing."""
    papers = ledger.papers
    variants = _mark_variants(ledger.store, EditionStatus.SENT, None, papers)

    def twice(run: Variant) -> Variant:
        return lambda s, c: (run(s, c), run(s, c))[1]

    _same_rows(
        ledger,
        {**variants, **{f"{k} twice": twice(v) for k, v in variants.items()}},
        lambda: ledger.claimed(started=True),
    )


def test_mark_without_papers_keeps_the_item_count(ledger: Ledger) -> None:
    def setup() -> EditionClaim:
        claim = ledger.claimed(started=True)
        ledger.set(claim.id, item_count=7)
        return claim

    _, row = _same_rows(ledger, _mark_variants(ledger.store, EditionStatus.SENT, None, ()), setup)
    assert row["edition"]["item_count"] == 7 and row["papers"] == []


# ---------------------------------------------------------------------------- release, failures


@pytest.mark.parametrize("case", ["never tried", "tried", "sent"])
def test_release_leaves_the_same_row_every_way(ledger: Ledger, case: str) -> None:
    def release_edition(s: Store, c: EditionClaim) -> Any:
        return s.release_edition(c.id, error="relay down")

    def op(s: Store, c: EditionClaim) -> Any:
        return s.apply_ledger(
            [LedgerOp("release", c.id, c.subscriber_id, error="relay down")], NOW
        )[0]

    def setup() -> EditionClaim:
        claim = ledger.claimed(started=case != "never tried")
        if case == "sent":
            ledger.store.mark_edition(claim.id, EditionStatus.SENT, NOW)
        return claim

    _, row = _same_rows(ledger, {"release_edition": release_edition, "apply_ledger": op}, setup)
    if case == "never tried":  # the next run claims it afresh
        assert row["edition"] is None
    elif case == "tried":  # keeps its Message-ID for the next attempt
        assert row["edition"]["status"] == "deferred"
        assert row["edition"]["last_error"] == "relay down"
    else:
        assert row["edition"]["status"] == "sent"


def test_permanent_failures_suppress_at_the_limit_every_way(ledger: Ledger) -> None:
    def direct(s: Store, c: EditionClaim) -> Any:
        return [s.record_permanent_failure(c.subscriber_id, 2, NOW) for _ in range(2)]

    def op(s: Store, c: EditionClaim) -> Any:
        ops = [LedgerOp("permanent_failure", subscriber_id=c.subscriber_id, limit=2)] * 2
        return s.apply_ledger(ops, NOW)

    result, row = _same_rows(
        ledger, {"record_permanent_failure": direct, "apply_ledger": op}, ledger.claimed
    )
    assert result == [False, True]
    assert row["subscriber"] == ("suppressed", 2)


# ---------------------------------------------------------------------------- group commits


def test_a_group_commit_leaves_what_each_op_alone_leaves(ledger: Ledger) -> None:
    """A sender's batch (begins of one owner, sent marks, a failure, a release) in one
    ``apply_ledger`` call, against the same ops applied one call each."""
    store = ledger.store

    def batch(one_by_one: bool) -> tuple[list[Any], list[Any]]:
        begin = [ledger.claimed() for _ in range(3)]
        sent = [ledger.claimed(started=True) for _ in range(3)]
        failed, released = ledger.claimed(started=True), ledger.claimed()
        ops = [
            *(LedgerOp("begin", c.id, c.subscriber_id, owner=OWNER) for c in begin),
            *(
                LedgerOp("mark", c.id, c.subscriber_id, status=EditionStatus.SENT, paper_ids=p)
                for c, p in zip(sent, (ledger.papers, ledger.papers[:1], ()), strict=True)
            ),
            LedgerOp("mark", failed.id, failed.subscriber_id, status=EditionStatus.FAILED),
            LedgerOp("release", released.id, released.subscriber_id, error="stop"),
        ]
        if one_by_one:
            results = [store.apply_ledger([op], LATER)[0] for op in ops]
        else:
            results = store.apply_ledger(ops, LATER)
        claims = [*begin, *sent, failed, released]
        return results, [ledger.row(c.id, c.subscriber_id) for c in claims]

    assert batch(one_by_one=False) == batch(one_by_one=True)
    if store.dialect == "postgresql":  # and as one statement on the autocommit connection
        conn = store._ledger_connection()
        assert conn is not None
        try:
            begin = [ledger.claimed() for _ in range(2)]
            sent = [ledger.claimed(started=True) for _ in range(2)]
            ops = [
                *(LedgerOp("begin", c.id, c.subscriber_id, owner=OWNER) for c in begin),
                *(
                    LedgerOp(
                        "mark", c.id, c.subscriber_id, status=EditionStatus.SENT, paper_ids=(p,)
                    )
                    for c, p in zip(sent, ledger.papers, strict=False)
                ),
            ]
            assert store._apply_at_once(ops, LATER, conn) == ["ok", "ok", None, None]
            # anything else is not for one statement: the caller uses apply_ledger
            release = LedgerOp("release", begin[0].id, begin[0].subscriber_id)
            assert store._apply_at_once([*ops, release], LATER, conn) is None
        finally:
            conn.close()


# ---------------------------------------------------------------------------- distinct paths


def test_the_fast_variants_really_bypass_sqlalchemy(ledger: Ledger) -> None:
    """The variants compared above are different code: the group commit's begins and sent marks
    do not pass through SQLAlchemy's statement execution, ``begin_send`` and ``mark_edition``
    do (so the comparisons are not of one path with itself)."""
    store = ledger.store
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(" ".join(statement.split()).upper())

    claim, other = ledger.claimed(), ledger.claimed()
    event.listen(store.engine, "before_cursor_execute", record)
    try:
        assert _begin_op(store, claim) == "ok"
        op = LedgerOp("mark", claim.id, claim.subscriber_id, status=EditionStatus.SENT)
        store.apply_ledger([op], LATER)
        fast = [s for s in seen if s.startswith(("UPDATE", "INSERT", "WITH"))]
        seen.clear()
        assert _begin_send(store, other) == "ok"
        store.mark_edition(other.id, EditionStatus.SENT, LATER, paper_ids=ledger.papers)
        slow = [s for s in seen if s.startswith(("UPDATE", "INSERT", "WITH"))]
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    assert fast == []
    assert any(s.startswith("UPDATE EDITIONS") for s in slow)


# ---------------------------------------------------------------------------- both databases


def _script(store: Store) -> list[Any]:
    """Every transition once, in a send's order; returns the results and every row."""
    ledger = Ledger(store)
    out: list[Any] = []
    claims = [ledger.claimed() for _ in range(6)]
    out.append(
        store.apply_ledger(
            [LedgerOp("begin", c.id, c.subscriber_id, owner=OWNER) for c in claims], LATER
        )
    )
    marks = [
        LedgerOp("mark", claims[0].id, claims[0].subscriber_id, status=EditionStatus.SENT, paper_ids=ledger.papers),
        LedgerOp("mark", claims[1].id, claims[1].subscriber_id, status=EditionStatus.UNKNOWN, error="lost line"),
        LedgerOp("mark", claims[2].id, 0, status=EditionStatus.DEFERRED, error="451"),
        LedgerOp("release", claims[3].id, claims[3].subscriber_id),
        LedgerOp("permanent_failure", subscriber_id=claims[4].subscriber_id, limit=1),
    ]  # fmt: skip
    out.append(store.apply_ledger(marks, LATER))
    store.mark_edition(
        claims[5].id, EditionStatus.RESEND_REFUSED, LATER, paper_ids=ledger.papers[:2]
    )
    out.append(
        [
            (c.subscriber_id, c.message_id, c.resumed, c.earlier) if c else None
            for c in store.claim_editions(
                [(c.subscriber_id, DAY, "<again@x>") for c in claims],
                LATER + timedelta(minutes=30),
                owner="run-2",
                resend_unknown=True,
            )
        ]
    )
    forced, papers = store.force_edition(claims[0].subscriber_id, DAY, "<f@x>", LATER, owner="r3")
    out.append((forced.message_id, forced.resumed, sorted(papers)))
    out.append([ledger.row(c.id, c.subscriber_id) for c in claims])
    return out


@pytest.mark.postgres
def test_sqlite_and_postgresql_hold_the_same_ledger(tmp_path: Any, pg_schema_url: str) -> None:
    results = []
    for url in (f"sqlite:///{tmp_path / 'ledger.db'}", pg_schema_url):
        store = Store(url)
        store.upgrade()
        try:
            results.append(_script(store))
        finally:
            store.close()
    sqlite, postgres = results
    assert sqlite == postgres
