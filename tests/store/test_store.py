"""The store on SQLite and on the real PostgreSQL: schema, papers, subscribers, the ledger."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from newsletter.errors import StoreError
from newsletter.models import AnnounceType, EditionStatus, PaperData, SubscriberStatus
from newsletter.sources.ingest import decide
from newsletter.store import Store
from newsletter.store.tables import metadata

NOW = datetime(2026, 11, 17, 6, 0, tzinfo=UTC)


def paper(key: str, **kw: object) -> PaperData:
    base = {
        "title": f"Paper {key}",
        "abstract": "About things.",
        "authors": ("A. Author",),
        "version": 1,
    }
    base.update(kw)
    return PaperData(key=key, **base)  # type: ignore[arg-type]


def test_migrations_create_exactly_the_tables_the_code_uses(store: Store) -> None:
    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    assert diff == []
    assert store.current_revision() == store.head_revision()


def test_unmigrated_database_says_what_to_run(db_url: str) -> None:
    s = Store(db_url)
    try:
        with pytest.raises(StoreError, match="run 'newsletter db upgrade' first"):
            s.check_schema()
    finally:
        s.close()


def test_papers_insert_then_rerun_changes_nothing(store: Store) -> None:
    batch = [paper("2611.00001"), paper("2611.00002", upvotes=5)]
    writes = decide(batch, store.papers_by_keys(p.key for p in batch))
    store.write_papers("cs-dc", writes, NOW)
    assert store.count_papers() == 2
    again = decide(batch, store.papers_by_keys(p.key for p in batch))
    assert all(not w.metadata_changed and not w.signals_changed for w in again)
    assert all(w.paper_id is not None for w in again)


def test_datetimes_come_back_aware_utc(store: Store) -> None:
    store.write_papers("s", decide([paper("2611.00003")], {}), NOW)
    got = store.papers_by_keys(["2611.00003"])["2611.00003"]
    assert got.first_seen == NOW and got.first_seen.tzinfo is not None


def test_same_paper_from_two_sources_is_one_record(store: Store) -> None:
    store.write_papers("cs-dc", decide([paper("2611.00015", categories=("cs.DC",))], {}), NOW)
    existing = store.papers_by_keys(["2611.00015"])
    store.write_papers(
        "cs-lg",
        decide([paper("2611.00015", categories=("cs.LG",))], existing),
        NOW + timedelta(minutes=1),
    )
    got = store.papers_by_keys(["2611.00015"])["2611.00015"]
    assert store.count_papers() == 1
    assert got.sources == ("cs-dc", "cs-lg")
    assert set(got.categories) == {"cs.DC", "cs.LG"}


def test_replacement_updates_and_is_not_new(store: Store) -> None:
    store.write_papers("cs-dc", decide([paper("2611.00003", abstract="Old.")], {}), NOW)
    existing = store.papers_by_keys(["2611.00003"])
    v2 = paper(
        "2611.00003",
        abstract="Revised; corrects Table 3.",
        version=2,
        announce_type=AnnounceType.REPLACE,
    )
    writes = decide([v2], existing)
    assert writes[0].paper_id is not None and writes[0].metadata_changed
    store.write_papers("cs-dc", writes, NOW + timedelta(days=1))
    got = store.papers_by_keys(["2611.00003"])["2611.00003"]
    assert got.version == 2 and got.abstract.endswith("corrects Table 3.")
    assert got.first_seen == NOW  # still first seen on day one: never re-announced


def test_replacement_of_an_unknown_paper_is_stored_but_not_new(store: Store) -> None:
    old = paper("2610.04417", version=2, announce_type=AnnounceType.REPLACE)
    store.write_papers("cs-dc", decide([old], {}), NOW)
    assert store.count_papers() == 1
    assert store.recent_papers(NOW - timedelta(days=1)) == []


def test_subscribers_round_trip(store: Store) -> None:
    sub, created = store.add_subscriber(
        "ada@example.org", name="Ada", topics=["moe", "llm"], timezone="Europe/London", now=NOW
    )
    assert created and sub.topics == ("llm", "moe") and sub.status is SubscriberStatus.ACTIVE
    again, created2 = store.add_subscriber("ada@example.org", topics=["other"], now=NOW)
    assert not created2 and again.id == sub.id and again.topics == ("llm", "moe")
    assert store.set_status("ada@example.org", SubscriberStatus.UNSUBSCRIBED, NOW)
    active = [s for b in store.iter_subscribers(SubscriberStatus.ACTIVE) for s in b]
    assert active == []
    assert (
        store.remove_subscriber("ada@example.org")
        and store.get_subscriber("ada@example.org") is None
    )


def test_iter_subscribers_streams_in_batches(store: Store) -> None:
    for i in range(7):
        store.add_subscriber(f"u{i}@example.org", topics=["t"], now=NOW)
    batches = list(store.iter_subscribers(SubscriberStatus.ACTIVE, batch=3))
    assert [len(b) for b in batches] == [3, 3, 1]


def test_edition_claim_is_once_per_subscriber_and_date(store: Store) -> None:
    sub, _ = store.add_subscriber("ada@example.org", topics=["t"], now=NOW)
    day = date(2026, 11, 17)
    first = store.claim_edition(sub.id, day, "<a@x>", NOW, owner="run-1")
    assert first is not None and not first.resumed
    assert store.claim_edition(sub.id, day, "<b@x>", NOW, owner="run-2") is None
    store.mark_edition(first.id, EditionStatus.SENT, NOW)
    later = NOW + timedelta(hours=5)
    assert store.claim_edition(sub.id, day, "<c@x>", later, owner="run-3") is None
    assert (
        store.claim_edition(sub.id, day + timedelta(days=1), "<d@x>", later, owner="run-3")
        is not None
    )


def test_stale_claim_is_resumed_with_its_message_id(store: Store) -> None:
    sub, _ = store.add_subscriber("ada@example.org", topics=["t"], now=NOW)
    day = date(2026, 11, 17)
    assert store.claim_edition(sub.id, day, "<orig@x>", NOW, owner="crashed") is not None
    soon = store.claim_edition(sub.id, day, "<new@x>", NOW + timedelta(minutes=1), owner="other")
    assert soon is None  # the lease has not run out: maybe the first run is still working
    late = store.claim_edition(sub.id, day, "<new@x>", NOW + timedelta(minutes=11), owner="other")
    assert late is not None and late.resumed and late.message_id == "<orig@x>"


def test_deferred_edition_is_retried_with_the_same_message_id(store: Store) -> None:
    sub, _ = store.add_subscriber("ada@example.org", topics=["t"], now=NOW)
    day = date(2026, 11, 17)
    claim = store.claim_edition(sub.id, day, "<orig@x>", NOW, owner="r1")
    assert claim is not None
    store.mark_edition(claim.id, EditionStatus.DEFERRED, NOW, error="451 try later")
    retry = store.claim_edition(sub.id, day, "<new@x>", NOW, owner="r2")
    assert retry is not None and retry.message_id == "<orig@x>"


def test_sent_papers_are_remembered(store: Store) -> None:
    sub, _ = store.add_subscriber("ada@example.org", topics=["t"], now=NOW)
    ids = store.write_papers("s", decide([paper("2611.00001"), paper("2611.00002")], {}), NOW)
    claim = store.claim_edition(sub.id, date(2026, 11, 17), "<a@x>", NOW, owner="r")
    assert claim is not None
    store.mark_edition(claim.id, EditionStatus.SENT, NOW, paper_ids=list(ids.values()))
    assert store.sent_paper_ids([sub.id]) == {sub.id: set(ids.values())}
    record = store.edition_for(sub.id, date(2026, 11, 17))
    assert record is not None and record.item_count == 2 and record.status is EditionStatus.SENT


def test_permanent_failures_suppress_at_the_limit(store: Store) -> None:
    sub, _ = store.add_subscriber("gone@example.org", topics=["t"], now=NOW)
    assert not store.record_permanent_failure(sub.id, 2, NOW)
    assert store.record_permanent_failure(sub.id, 2, NOW)
    got = store.get_subscriber("gone@example.org")
    assert got is not None and got.status is SubscriberStatus.SUPPRESSED


def test_a_group_commit_of_begins_and_sent_marks_gives_each_op_its_own_result(
    store: Store,
) -> None:
    """One apply_ledger call as the ledger writer makes it: begins of several senders (one
    edition another run took, one whose subscriber left) and sent marks with their papers."""
    from newsletter.models import LedgerOp

    day = date(2026, 11, 17)
    ids = store.write_papers("s", decide([paper(f"2611.0000{i}") for i in range(1, 4)], {}), NOW)
    pids = sorted(ids.values())
    subs = [store.add_subscriber(f"u{i}@example.org", topics=["t"], now=NOW)[0] for i in range(6)]
    claims = [store.claim_edition(s.id, day, f"<{s.id}@x>", NOW, owner="me") for s in subs]
    assert all(c is not None for c in claims)
    c = [cl for cl in claims if cl is not None]
    store.set_status("u1@example.org", SubscriberStatus.UNSUBSCRIBED, NOW)  # left meanwhile
    store.mark_edition(c[2].id, EditionStatus.SENT, NOW)  # another run finished this one
    begins = [LedgerOp("begin", c[i].id, subs[i].id, "me") for i in range(4)]
    assert store.apply_ledger(begins, NOW) == ["ok", "inactive", "lost", "ok"]
    later = NOW + timedelta(seconds=5)
    ops = [
        LedgerOp("mark", c[0].id, subs[0].id, status=EditionStatus.SENT, paper_ids=tuple(pids)),
        LedgerOp("mark", c[3].id, subs[3].id, status=EditionStatus.SENT, paper_ids=(pids[0],)),
        LedgerOp("begin", c[4].id, subs[4].id, "me"),
        LedgerOp("begin", c[5].id, subs[5].id, "someone else"),
    ]
    assert store.apply_ledger(ops, later) == [None, None, "ok", "lost"]
    sent_ids = store.sent_paper_ids([s.id for s in subs])
    assert {k: v for k, v in sent_ids.items() if v} == {
        subs[0].id: set(pids),
        subs[3].id: {pids[0]},
    }
    status = {s.email: store.edition_for(s.id, day) for s in subs}
    got = {e: (r.status, r.item_count) for e, r in status.items() if r is not None}
    assert got == {
        "u0@example.org": (EditionStatus.SENT, 3),
        "u1@example.org": (EditionStatus.SKIPPED, 0),
        "u2@example.org": (EditionStatus.SENT, 0),
        "u3@example.org": (EditionStatus.SENT, 1),
        "u4@example.org": (EditionStatus.SENDING, 0),
        "u5@example.org": (EditionStatus.CLAIMED, 0),
    }
    sent = status["u0@example.org"]
    assert sent is not None and sent.finished == later and sent.attempts == 1


def test_each_edition_keeps_the_papers_it_carried_in_digest_order(store: Store) -> None:
    """The papers live in the edition's own row (migration 0011): in the order the digest
    showed them, each edition with all of its own (a paper an earlier edition carried too is
    not dropped from the later one), erased with the edition, and read back from a date on."""
    sub, _ = store.add_subscriber("ada@example.org", topics=["t"], now=NOW)
    ids = store.write_papers("s", decide([paper(f"2611.0000{i}") for i in range(1, 5)], {}), NOW)
    p1, p2, p3, p4 = sorted(ids.values())
    days = [date(2026, 11, 15), date(2026, 11, 16), date(2026, 11, 17)]
    carried = [[p3, p1], [p1, p4, p2], []]
    claims = []
    for day, papers in zip(days, carried, strict=True):
        claim = store.claim_edition(sub.id, day, f"<{day}@x>", NOW, owner="r")
        assert claim is not None
        claims.append(claim)
        store.mark_edition(claim.id, EditionStatus.SENT, NOW, paper_ids=papers)
    assert [[p.id for p in store.edition_papers(c.id)] for c in claims] == carried
    assert store.sent_paper_ids([sub.id]) == {sub.id: {p1, p2, p3, p4}}
    assert store.sent_paper_ids([sub.id], since=days[1]) == {sub.id: {p1, p2, p4}}
    assert store.sent_paper_ids([sub.id], since=days[2]) == {sub.id: set()}
    failed = store.claim_edition(sub.id, date(2026, 11, 18), "<f@x>", NOW, owner="r")
    assert failed is not None  # a failed edition carried nothing to the reader
    store.mark_edition(failed.id, EditionStatus.FAILED, NOW, error="550", paper_ids=[p3])
    assert store.sent_paper_ids([sub.id], since=days[2]) == {sub.id: set()}
    assert store.remove_subscriber("ada@example.org")
    assert store.sent_paper_ids([sub.id]) == {sub.id: set()}


def test_a_group_commit_in_one_statement_gives_the_same_results(store: Store) -> None:
    """PostgreSQL's one-statement group commit (autocommit connection) against the same
    scenario as the transactional one; SQLite says it cannot and the session falls back. (The
    store's private fast path, called directly: the ledger session takes it when it can.)"""
    from newsletter.models import LedgerOp

    day = date(2026, 11, 17)
    ids = store.write_papers("s", decide([paper(f"2611.0010{i}") for i in range(1, 4)], {}), NOW)
    pids = sorted(ids.values())
    subs = [store.add_subscriber(f"v{i}@example.org", topics=["t"], now=NOW)[0] for i in range(5)]
    c = [store.claim_edition(s.id, day, f"<{s.id}@y>", NOW, owner="me") for s in subs]
    assert all(x is not None for x in c)
    claims = [x for x in c if x is not None]
    with store.engine.connect() as conn:
        fast = conn.execution_options(isolation_level="AUTOCOMMIT")
        begins = [LedgerOp("begin", claims[i].id, subs[i].id, "me") for i in range(3)]
        if store.dialect != "postgresql":
            assert store._apply_at_once(begins, NOW, fast) is None
            return
        store.set_status("v1@example.org", SubscriberStatus.UNSUBSCRIBED, NOW)
        store.mark_edition(claims[2].id, EditionStatus.SENT, NOW)
        assert store._apply_at_once(begins, NOW, fast) == ["ok", "inactive", "lost"]
        ops = [
            LedgerOp(
                "mark", claims[0].id, subs[0].id, status=EditionStatus.SENT, paper_ids=tuple(pids)
            ),
            LedgerOp("begin", claims[3].id, subs[3].id, "me"),
            LedgerOp("begin", claims[4].id, subs[4].id, "me"),
        ]
        assert store._apply_at_once(ops, NOW, fast) == [None, "ok", "ok"]
        other = [LedgerOp("release", claims[3].id, error="x")]
        assert store._apply_at_once(other, NOW, fast) is None  # not the usual kinds
    sent_ids = store.sent_paper_ids([s.id for s in subs])
    assert {k: v for k, v in sent_ids.items() if v} == {subs[0].id: set(pids)}
    got = {s.email: store.edition_for(s.id, day) for s in subs}
    assert {e: r.status for e, r in got.items() if r is not None} == {
        "v0@example.org": EditionStatus.SENT,
        "v1@example.org": EditionStatus.SKIPPED,
        "v2@example.org": EditionStatus.SENT,
        "v3@example.org": EditionStatus.SENDING,
        "v4@example.org": EditionStatus.SENDING,
    }
    first = got["v0@example.org"]
    assert first is not None and first.item_count == 3 and first.attempts == 1


def test_schema_revisions_are_read_without_alembic_and_agree_with_it(db_url: str) -> None:
    """``check_schema`` (every command) reads the revisions itself; Alembic must agree."""
    from alembic.config import Config as AlembicConfig
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    from newsletter.store.base import MIGRATIONS, migrations_head

    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    assert migrations_head() == ScriptDirectory.from_config(cfg).get_current_head()
    s = Store(db_url)
    try:
        assert s.current_revision() is None  # never migrated
        with pytest.raises(StoreError, match="is empty; run 'newsletter db upgrade' first"):
            s.check_schema()
        s.upgrade("0006")
        with s.engine.connect() as conn:
            assert s.current_revision() == MigrationContext.configure(conn).get_current_revision()
        with pytest.raises(
            StoreError, match=f"is at revision 0006, code needs {migrations_head()}"
        ):
            s.check_schema()
        s.upgrade()
        assert s.current_revision() == migrations_head()
        s.check_schema()
    finally:
        s.close()


def test_the_ledgers_sqlite_datetimes_are_stored_as_sqlalchemy_stores_them(store: Store) -> None:
    """The ledger's fast path converts its ``now`` once per batch (the last one is kept): the
    value is what the column type's bind processor gives, for the same instant in another zone
    too, and a new moment is converted anew."""
    if store.dialect != "sqlite":
        pytest.skip("the conversion is SQLite's fast path")
    from sqlalchemy.dialects import sqlite

    from newsletter.store import tables as t

    column = t.editions.c.finished.type
    process = column.dialect_impl(sqlite.dialect()).bind_processor(sqlite.dialect())
    assert process is not None
    first = datetime(2026, 11, 17, 6, 0, 1, 250_000, tzinfo=UTC)
    same_elsewhere = first.astimezone(timezone(timedelta(hours=9)))
    later = first + timedelta(microseconds=1)
    for moment in (first, first, same_elsewhere, later, first):
        assert store._sqlite_datetime(moment) == process(moment)
    assert store._sqlite_datetime(later) != store._sqlite_datetime(first)


def test_the_ledgers_array_literals_read_back_as_they_were(store: Store) -> None:
    """The PostgreSQL group commit passes its lists as array literals (``pg_array``): the
    database reads back every element as it was, quotes, backslashes, braces, commas, spaces,
    NULLs and non-ASCII included, and the empty list as an empty array."""
    if store.dialect != "postgresql":
        pytest.skip("array literals are PostgreSQL's (SQLite's ledger runs a statement per row)")
    from sqlalchemy import text

    from newsletter.store.ledger_sql import pg_array

    texts = [
        'a"b',
        "c\\d",
        "{e,f}",
        "g h",
        "",
        "NULL",
        "null",
        "é ü 中",
        "12,34,56",
        None,
        ",",
        "\\",
    ]
    numbers = [0, -7, 2_147_483_647, None, 42]
    with store.engine.connect() as conn:
        got_texts = conn.execute(
            text("SELECT CAST(:v AS text[])"), {"v": pg_array(texts)}
        ).scalar_one()
        got_numbers = conn.execute(
            text("SELECT CAST(:v AS integer[])"), {"v": pg_array(numbers)}
        ).scalar_one()
        empty = conn.execute(text("SELECT CAST(:v AS integer[])"), {"v": pg_array([])}).scalar_one()
    assert got_texts == texts
    assert got_numbers == numbers
    assert empty == []
