"""Where a sent edition's papers are kept, and the migrations that moved them.

Migration 0009 dropped two of ``sent_papers``' three foreign keys (each cost the database
server a locking read per row, about 20 rows per digest); migration 0011 moved the papers into
the edition's own row (``editions.paper_ids``) and dropped the table. These tests hold both to
keeping every sent paper, up and down, and the papers to going with their reader, on SQLite
and on PostgreSQL.
"""

from __future__ import annotations

from datetime import UTC, date, datetime

from sqlalchemy import delete, func, inspect, select, text

from newsletter.models import EditionStatus, PaperData
from newsletter.sources.ingest import decide
from newsletter.store import Store
from newsletter.store import tables as t
from tests.sends import papers_before_0014, sent_before_0011, subscriber_before_0012

NOW = datetime(2026, 11, 17, 6, 0, tzinfo=UTC)
DAY = date(2026, 11, 17)


def _papers(store: Store, *keys: str) -> list[int]:
    batch = [PaperData(key=k, title=f"Paper {k}", abstract="About things.") for k in keys]
    return list(store.write_papers("s", decide(batch, {}), NOW).values())


def _sent(store: Store, email: str, paper_ids: list[int]) -> int:
    sub, _ = store.add_subscriber(email, topics=["t"], now=NOW)
    claim = store.claim_edition(sub.id, DAY, f"<{email}>", NOW, owner="r")
    assert claim is not None
    store.mark_edition(claim.id, EditionStatus.SENT, NOW, paper_ids=paper_ids)
    return sub.id


def _old_sent(store: Store, email: str, paper_ids: list[int], day: date = DAY) -> int:
    sid = subscriber_before_0012(store, email, ["t"], NOW)
    sent_before_0011(store, sid, day, paper_ids, NOW)
    return sid


def _keys(store: Store) -> set[tuple[str, str, str | None]]:
    with store.engine.connect() as conn:
        found = inspect(conn).get_foreign_keys("sent_papers")
    return {
        (",".join(k["constrained_columns"]), k["referred_table"], k["options"].get("ondelete"))
        for k in found
    }


def _rows(store: Store) -> list[tuple[int, int, int]]:
    """``sent_papers`` (before migration 0011): (subscriber, paper, edition) rows, sorted."""
    with store.engine.connect() as conn:
        q = text("SELECT subscriber_id, paper_id, edition_id FROM sent_papers")
        return sorted(tuple(r) for r in conn.execute(q))  # type: ignore[misc]


def _edition_lists(store: Store) -> dict[int, str | None]:
    """``editions.paper_ids`` (from migration 0011) by edition id."""
    with store.engine.connect() as conn:
        return dict(conn.execute(select(t.editions.c.id, t.editions.c.paper_ids)).all())  # type: ignore[arg-type]


def _downgrade(store: Store, revision: str) -> None:
    """What ``alembic downgrade`` would do (the product has no downgrade command)."""
    from alembic import command

    with store.engine.connect() as conn:
        if store.dialect == "sqlite":  # as Store.upgrade: a rebuilt table must not cascade
            conn.exec_driver_sql("PRAGMA foreign_keys=OFF")
            conn.commit()
        with conn.begin():
            command.downgrade(store._alembic_config(conn), revision)
        if store.dialect == "sqlite":
            conn.exec_driver_sql("PRAGMA foreign_keys=ON")
            conn.commit()


def test_0009_drops_two_keys_and_keeps_every_row(db_url: str) -> None:
    store = Store(db_url)
    try:
        store.upgrade("0008")
        assert {k[:2] for k in _keys(store)} == {
            ("subscriber_id", "subscribers"),
            ("paper_id", "papers"),
            ("edition_id", "editions"),
        }
        ids = papers_before_0014(store, NOW, "2611.00001", "2611.00002", "2611.00003")
        _old_sent(store, "ada@example.org", ids)
        _old_sent(store, "bob@example.org", ids[:1])
        before = _rows(store)
        assert len(before) == 4

        store.upgrade("0010")
        assert _keys(store) == {("edition_id", "editions", "CASCADE")}
        assert _rows(store) == before

        _downgrade(store, "0008")
        assert {k[:2] for k in _keys(store)} == {
            ("subscriber_id", "subscribers"),
            ("paper_id", "papers"),
            ("edition_id", "editions"),
        }
        assert _rows(store) == before
        store.upgrade("0010")
        assert _rows(store) == before
    finally:
        store.close()


def test_0011_moves_every_sent_paper_into_its_edition_and_back(db_url: str) -> None:
    store = Store(db_url)
    try:
        store.upgrade("0010")
        p1, p2, p3, p4 = papers_before_0014(
            store, NOW, "2611.00001", "2611.00002", "2611.00003", "2611.00004"
        )
        ada = _old_sent(store, "ada@example.org", [p3, p1, p2])
        bob = _old_sent(store, "bob@example.org", [p1])
        _old_sent(store, "ada@example.org", [p1, p4], day=date(2026, 11, 18))  # p1: no row
        before = _rows(store)
        assert len(before) == 5

        store.upgrade()
        assert store.current_revision() == store.head_revision()
        with store.engine.connect() as conn:
            assert not inspect(conn).has_table("sent_papers")
        lists = sorted(v for v in _edition_lists(store).values() if v)
        assert lists == sorted([f"{p1},{p2},{p3}", f"{p1}", f"{p4}"])  # paper id order
        assert store.sent_paper_ids([ada, bob]) == {ada: {p1, p2, p3, p4}, bob: {p1}}

        _downgrade(store, "0010")
        assert _rows(store) == before
        with store.engine.connect() as conn:
            columns = {c["name"] for c in inspect(conn).get_columns("editions")}
        assert "paper_ids" not in columns
        store.upgrade()
        assert sorted(v for v in _edition_lists(store).values() if v) == lists
    finally:
        store.close()


def test_erasing_a_reader_erases_the_papers_sent_to_them(store: Store) -> None:
    ids = _papers(store, "2611.00001", "2611.00002")
    ada = _sent(store, "ada@example.org", ids)
    bob = _sent(store, "bob@example.org", ids)
    assert store.remove_subscriber("ada@example.org")
    assert store.sent_paper_ids([ada, bob]) == {ada: set(), bob: set(ids)}


def test_a_reader_deleted_by_hand_takes_their_sent_papers_along(store: Store) -> None:
    """Not through the store: the subscriber's key cascades to their editions, and the papers
    are in the editions' rows."""
    ids = _papers(store, "2611.00001", "2611.00002")
    ada = _sent(store, "ada@example.org", ids)
    bob = _sent(store, "bob@example.org", ids[:1])
    with store.engine.begin() as conn:
        conn.execute(delete(t.subscriptions).where(t.subscriptions.c.subscriber_id == ada))
        conn.execute(delete(t.subscribers).where(t.subscribers.c.id == ada))
        left = conn.execute(select(func.count()).select_from(t.editions)).scalar_one()
    assert left == 1
    assert store.sent_paper_ids([ada, bob]) == {ada: set(), bob: {ids[0]}}


def test_a_western_readers_edition_dated_before_the_papers_first_sighting_is_still_read(
    store: Store,
) -> None:
    """A paper first seen at 01:00 UTC on the 18th goes out to a reader in Honolulu in their
    edition of the 17th (their local date). The next day's send reads the history from
    :func:`history_since` of the day's papers: that edition must be in it, or the paper would
    be sent to them again."""
    from newsletter.edition.build import history_since

    seen = datetime(2026, 11, 18, 1, 0, tzinfo=UTC)
    batch = [PaperData(key="2611.00001", title="Paper", abstract="About things.")]
    (pid,) = store.write_papers("s", decide(batch, {}), seen).values()
    sub, _ = store.add_subscriber("kai@example.org", topics=["t"], now=NOW)
    claim = store.claim_edition(sub.id, date(2026, 11, 17), "<kai>", seen, owner="r")
    assert claim is not None
    store.mark_edition(claim.id, EditionStatus.SENT, seen, paper_ids=[pid])
    papers = store.recent_papers(seen)
    since = history_since(papers)
    assert since is not None and since <= date(2026, 11, 17)
    assert store.sent_paper_ids([sub.id], since=since) == {sub.id: {pid}}
    assert history_since([]) is None
