"""The edition ledger's contract, transition by transition, on every backend: SQLite,
PostgreSQL and the in-memory store (one suite over every backend, as APScheduler runs its data
stores' tests).

Each transition is run through every way a store has of writing it (issue 18): the single
writes (``begin_send``, ``mark_edition``, ``release_edition``…), the group commit
(``apply_ledger``, whose usual ops go straight to the driver on the SQL store: sqlite3 on
SQLite, one psycopg statement on PostgreSQL) and the sender's ledger session (on PostgreSQL the
autocommit one-statement group commit, whose taking the ops is asserted on its own). Each
variant starts from the same row (a subscriber of its own) and must leave the same row: same
status, attempts, owner, times, error, item count, the papers it carried and what the mail
showed besides them (its layout). A last test runs
one script of transitions on every backend and compares what they hold.

Two tests are SQL-only, and say so: that the fast variants really bypass SQLAlchemy (a memory
store has no SQL to bypass) and that the one-statement group commit takes only the usual ops.

PostgreSQL runs against 127.0.0.1:5432 (tests/conftest.py); those cases skip only when the
server is truly absent, saying so.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, select, update

from newsletter.errors import StoreError
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
from newsletter.store.memory import MemoryStore
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
LAYOUT = '{"v":1,"t":["Q\\"uoted \\\\ topic"],"s":[["t","T",[[1,"title: *x* · 2 upvotes",2]]]]}'
"""A layout with a quote and a backslash: PostgreSQL's one statement passes it in an array."""

Backend = Store | MemoryStore
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres), "memory"]


def open_backend(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> Backend:
    if name == "memory":
        return MemoryStore()
    if name == "sqlite":
        url = f"sqlite:///{tmp_path / f'ledger-{name}.db'}"
    else:
        url = str(request.getfixturevalue("pg_schema_url"))
    store = Store(url)
    store.upgrade()
    return store


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    store = open_backend(request.param, tmp_path, request)
    yield store
    if isinstance(store, Store):
        store.close()


class Ledger:
    """A store with papers, and helpers to set up one subscriber's edition and read it back
    (the rows through SQL on the SQL store, from its dictionaries on the memory store)."""

    def __init__(self, store: Backend) -> None:
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
        if isinstance(self.store, MemoryStore):
            m = self.store
            with m._lock:
                m._put(replace(m._editions[edition_id], **values))
            return
        with self.store.engine.begin() as conn:
            conn.execute(update(t.editions).where(t.editions.c.id == edition_id).values(**values))

    def row(self, edition_id: int, subscriber_id: int) -> dict[str, Any] | None:
        """The edition's row as a variant left it (ids and the Message-ID made comparable), its
        papers, and its subscriber's status and failure count."""
        if isinstance(self.store, MemoryStore):
            e, lists, s = self._memory_row(edition_id, subscriber_id)
        else:
            e, lists, s = self._sql_row(edition_id, subscriber_id)
        papers = sorted(pid for ids in lists for pid in parse_paper_list(ids))
        out: dict[str, Any] = {"subscriber": s, "papers": papers}
        if e is None:
            return out | {"edition": None}
        edition = dict(e)
        for key in ("id", "subscriber_id"):
            edition.pop(key)
        edition["message_id"] = edition["message_id"].replace(str(subscriber_id), "N")
        for key in ("claimed", "finished"):
            if edition[key] is not None:
                edition[key] = _utc(edition[key])
        return out | {"edition": edition}

    def _sql_row(self, edition_id: int, subscriber_id: int) -> tuple[Any, list[Any], Any]:
        assert isinstance(self.store, Store)
        with self.store.engine.connect() as conn:
            e = conn.execute(select(t.editions).where(t.editions.c.id == edition_id)).first()
            lists = list(
                conn.execute(
                    select(t.editions.c.paper_ids).where(
                        t.editions.c.subscriber_id == subscriber_id
                    )
                ).scalars()
            )
            s = conn.execute(
                select(t.subscribers.c.status, t.subscribers.c.permanent_failures).where(
                    t.subscribers.c.id == subscriber_id
                )
            ).one()
        return (None if e is None else e._mapping), lists, (s.status, s.permanent_failures)

    def _memory_row(self, edition_id: int, subscriber_id: int) -> tuple[Any, list[Any], Any]:
        m = self.store
        assert isinstance(m, MemoryStore)
        with m._lock:
            e = m._editions.get(edition_id)
            lists = [r.paper_ids for r in m._editions.values() if r.subscriber_id == subscriber_id]
            s = (m._subs[subscriber_id].status.value, m._failures[subscriber_id])
        return (None if e is None else asdict(e)), lists, s


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


@pytest.fixture
def ledger(backend: Backend) -> Ledger:
    return Ledger(backend)


Variant = Callable[[Backend, EditionClaim], Any]
Ops = Callable[[EditionClaim], list[LedgerOp]]


def _group_commits(store: Backend, ops: Ops) -> dict[str, Variant]:
    """``ops`` through ``apply_ledger`` (whose usual ops go to the driver on the SQL store) and
    through a ledger session (the sender's writer's way: on PostgreSQL its autocommit
    one-statement group commit, which a third variant requires to take these ops); each variant
    returns the first op's result."""

    def apply(s: Backend, c: EditionClaim) -> Any:
        return s.apply_ledger(ops(c), LATER)[0]

    def session(s: Backend, c: EditionClaim) -> Any:
        held = s.ledger_session()
        try:
            return held.apply(ops(c), LATER)[0]
        finally:
            held.close()

    def at_once(s: Backend, c: EditionClaim) -> Any:
        assert isinstance(s, Store)
        conn = s._ledger_connection()
        assert conn is not None
        try:
            results = s._apply_at_once(ops(c), LATER, conn)
        finally:
            conn.close()
        assert results is not None, "the one-statement group commit did not take these ops"
        return results[0]

    variants = {"apply_ledger (driver)": apply, "ledger_session": session}
    if isinstance(store, Store) and store.dialect == "postgresql":
        variants["one statement (autocommit)"] = at_once
    return variants


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
            "layout": None,
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
    store.mark_edition(
        fresh.id, EditionStatus.SENT, NOW, paper_ids=ledger.papers[:3], layout=LAYOUT
    )
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
        "layout": LAYOUT,  # the mail it describes, until the next one's sent mark replaces it
    }


# ---------------------------------------------------------------------------- begin


def _begin_send(store: Backend, c: EditionClaim) -> Any:
    return store.begin_send(c.id, c.subscriber_id, OWNER, LATER)


def _begin_ops(c: EditionClaim) -> list[LedgerOp]:
    return [LedgerOp("begin", c.id, c.subscriber_id, owner=OWNER)]


def _begin_op(store: Backend, c: EditionClaim) -> Any:
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
    store: Backend,
    status: EditionStatus,
    error: str | None,
    papers: tuple[int, ...],
    layout: str | None = LAYOUT,
) -> dict[str, Variant]:
    def mark_edition(s: Backend, c: EditionClaim) -> Any:
        return s.mark_edition(c.id, status, LATER, error=error, paper_ids=papers, layout=layout)

    def ops(c: EditionClaim, subscriber: bool = True) -> list[LedgerOp]:
        sid = c.subscriber_id if subscriber else 0
        op = LedgerOp("mark", c.id, sid, status=status, error=error, paper_ids=papers)
        return [replace(op, layout=layout)]

    def op_unknown(s: Backend, c: EditionClaim) -> Any:
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
    assert edition["layout"] == (LAYOUT if status in DELIVERED else None)


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

    variants = _mark_variants(ledger.store, EditionStatus.SENT, None, (), None)
    _, row = _same_rows(ledger, variants, setup)
    assert row["edition"]["item_count"] == 7 and row["papers"] == []
    assert row["edition"]["layout"] is None


# ---------------------------------------------------------------------------- release, failures


@pytest.mark.parametrize("case", ["never tried", "tried", "sent"])
def test_release_leaves_the_same_row_every_way(ledger: Ledger, case: str) -> None:
    def release_edition(s: Backend, c: EditionClaim) -> Any:
        return s.release_edition(c.id, error="relay down")

    def op(s: Backend, c: EditionClaim) -> Any:
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
    def direct(s: Backend, c: EditionClaim) -> Any:
        return [s.record_permanent_failure(c.subscriber_id, 2, NOW) for _ in range(2)]

    def op(s: Backend, c: EditionClaim) -> Any:
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
                LedgerOp(
                    "mark",
                    c.id,
                    c.subscriber_id,
                    status=EditionStatus.SENT,
                    paper_ids=p,
                    layout=lay,
                )
                for c, p, lay in zip(
                    sent, (ledger.papers, ledger.papers[:1], ()), (LAYOUT, None, None), strict=True
                )
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

    def through_session() -> tuple[list[Any], list[Any]]:
        """The same batch through a ledger session (its release makes PostgreSQL's session
        fall back from one statement to a transaction)."""
        begin = [ledger.claimed() for _ in range(2)]
        sent = [ledger.claimed(started=True) for _ in range(2)]
        released = ledger.claimed()
        ops = [
            *(LedgerOp("begin", c.id, c.subscriber_id, owner=OWNER) for c in begin),
            *(
                LedgerOp("mark", c.id, c.subscriber_id, status=EditionStatus.SENT, paper_ids=(p,))
                for c, p in zip(sent, ledger.papers, strict=False)
            ),
            LedgerOp("release", released.id, released.subscriber_id, error="stop"),
        ]
        session = store.ledger_session()
        try:
            results = [session.apply(ops[:4], LATER), session.apply(ops[4:], LATER)]
        finally:
            session.close()
        claims = [*begin, *sent, released]
        return results, [ledger.row(c.id, c.subscriber_id) for c in claims]

    results, rows = through_session()
    assert results == [["ok", "ok", None, None], [None]]
    assert [r["edition"] and r["edition"]["status"] for r in rows] == [
        "sending",
        "sending",
        "sent",
        "sent",
        None,  # never tried: given back
    ]


def test_a_group_commit_that_fails_applies_nothing(ledger: Ledger) -> None:
    """All or nothing, as a transaction: a batch whose last op fails (a ``sending`` mark of an
    edition that does not exist) leaves the begin before it unapplied, every way."""
    claim = ledger.claimed()
    before = ledger.row(claim.id, claim.subscriber_id)
    ops = [
        LedgerOp("begin", claim.id, claim.subscriber_id, owner=OWNER),
        LedgerOp("permanent_failure", subscriber_id=claim.subscriber_id, limit=1),
        LedgerOp("mark", 10**6, 0, status=EditionStatus.SENDING),
    ]
    with pytest.raises(StoreError):
        ledger.store.apply_ledger(ops, LATER)
    session = ledger.store.ledger_session()
    try:
        with pytest.raises(StoreError):
            session.apply(ops, LATER)
        assert session.apply(ops[:1], LATER) == ["ok"]  # and the session goes on
    finally:
        session.close()
    after = ledger.row(claim.id, claim.subscriber_id)
    assert before is not None and after is not None
    assert after["subscriber"] == before["subscriber"] == ("active", 0)
    assert after["edition"]["status"] == "sending" and after["edition"]["attempts"] == 1


def test_runs_claiming_at_once_get_each_edition_once(ledger: Ledger) -> None:
    """Four runs claim the same twenty editions from four threads at the same moment: each
    edition goes to exactly one of them."""
    sids = [ledger.subscriber() for _ in range(20)]
    wanted = [(sid, DAY, f"<{sid}@x>") for sid in sids]
    got: dict[str, list[EditionClaim | None]] = {}
    start = threading.Barrier(4)

    def run(owner: str) -> None:
        start.wait()
        got[owner] = ledger.store.claim_editions(wanted, NOW, owner=owner)

    threads = [threading.Thread(target=run, args=(f"run-{i}",)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    winners = [[owner for owner, claims in got.items() if claims[k] is not None] for k in range(20)]
    assert all(len(w) == 1 for w in winners), winners
    for k, sid in enumerate(sids):
        [claim] = [claims[k] for claims in got.values() if claims[k] is not None]
        assert claim is not None and not claim.resumed and claim.subscriber_id == sid
        row = ledger.row(claim.id, sid)
        assert row is not None and row["edition"]["owner"] == winners[k][0]


# ---------------------------------------------------------------------------- SQL only


def test_one_statement_group_commits_take_only_the_usual_ops(store: Store) -> None:
    """SQL-only (the memory store has one way to write): PostgreSQL's autocommit statement
    takes begins of one owner and sent marks, and nothing else (the session then uses a
    transaction); SQLite has no such statement."""
    ledger = Ledger(store)
    conn = store._ledger_connection()
    if store.dialect != "postgresql":
        assert conn is None
        return
    assert conn is not None
    try:
        begin = [ledger.claimed() for _ in range(2)]
        sent = [ledger.claimed(started=True) for _ in range(2)]
        ops = [
            *(LedgerOp("begin", c.id, c.subscriber_id, owner=OWNER) for c in begin),
            *(
                LedgerOp("mark", c.id, c.subscriber_id, status=EditionStatus.SENT, paper_ids=(p,))
                for c, p in zip(sent, ledger.papers, strict=False)
            ),
        ]
        assert store._apply_at_once(ops, LATER, conn) == ["ok", "ok", None, None]
        release = LedgerOp("release", begin[0].id, begin[0].subscriber_id)
        assert store._apply_at_once([*ops, release], LATER, conn) is None
        other = LedgerOp("begin", begin[1].id, begin[1].subscriber_id, owner="another")
        assert store._apply_at_once([ops[0], other], LATER, conn) is None  # two owners
    finally:
        conn.close()


def test_the_fast_variants_really_bypass_sqlalchemy(store: Store) -> None:
    """SQL-only (the memory store runs no SQL): the variants compared above are different code.
    The group commit's begins and sent marks, through ``apply_ledger`` and through the ledger
    session, do not pass through SQLAlchemy's statement execution; ``begin_send`` and
    ``mark_edition`` do (so the comparisons are not of one path with itself)."""
    ledger = Ledger(store)
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(" ".join(statement.split()).upper())

    claim, other, third = ledger.claimed(), ledger.claimed(), ledger.claimed()
    session = store.ledger_session()
    event.listen(store.engine, "before_cursor_execute", record)
    try:
        assert _begin_op(store, claim) == "ok"
        op = LedgerOp("mark", claim.id, claim.subscriber_id, status=EditionStatus.SENT)
        store.apply_ledger([op], LATER)
        assert session.apply(_begin_ops(third), LATER) == ["ok"]
        op = LedgerOp("mark", third.id, third.subscriber_id, status=EditionStatus.SENT)
        assert session.apply([op], LATER) == [None]
        fast = [s for s in seen if s.startswith(("UPDATE", "INSERT", "WITH"))]
        seen.clear()
        assert _begin_send(store, other) == "ok"
        store.mark_edition(other.id, EditionStatus.SENT, LATER, paper_ids=ledger.papers)
        slow = [s for s in seen if s.startswith(("UPDATE", "INSERT", "WITH"))]
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
        session.close()
    assert fast == []
    assert any(s.startswith("UPDATE EDITIONS") for s in slow)
    assert ledger.row(third.id, third.subscriber_id)["edition"]["status"] == "sent"  # type: ignore[index]


# ---------------------------------------------------------------------------- every backend


def _script(store: Backend) -> list[Any]:
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
        LedgerOp("mark", claims[0].id, claims[0].subscriber_id, status=EditionStatus.SENT, paper_ids=ledger.papers, layout=LAYOUT),
        LedgerOp("mark", claims[1].id, claims[1].subscriber_id, status=EditionStatus.UNKNOWN, error="lost line"),
        LedgerOp("mark", claims[2].id, 0, status=EditionStatus.DEFERRED, error="451"),
        LedgerOp("release", claims[3].id, claims[3].subscriber_id),
        LedgerOp("permanent_failure", subscriber_id=claims[4].subscriber_id, limit=1),
    ]  # fmt: skip
    out.append(store.apply_ledger(marks, LATER))
    store.mark_edition(
        claims[5].id,
        EditionStatus.RESEND_REFUSED,
        LATER,
        paper_ids=ledger.papers[:2],
        layout=LAYOUT,
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


@pytest.mark.parametrize("other", [pytest.param("postgres", marks=pytest.mark.postgres), "memory"])
def test_every_backend_holds_the_same_ledger_as_sqlite(
    tmp_path: Path, request: pytest.FixtureRequest, other: str
) -> None:
    results = []
    for name in ("sqlite", other):
        store = open_backend(name, tmp_path, request)
        try:
            results.append(_script(store))
        finally:
            if isinstance(store, Store):
                store.close()
    sqlite, theirs = results
    assert sqlite == theirs
