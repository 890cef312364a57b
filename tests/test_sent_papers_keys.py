"""Migration 0009: ``sent_papers`` keeps only the edition's foreign key.

The subscriber's and the paper's keys cost the database server a locking read per row (about
20 rows per digest) and guarded nothing the edition's key does not: these tests hold the
migration to keeping every row, and the remaining key to still erasing a reader's sent papers
with them, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

from datetime import UTC, date, datetime

from sqlalchemy import delete, func, inspect, select

from newsletter.ingest import decide
from newsletter.models import EditionStatus, PaperData
from newsletter.store import Store
from newsletter.store import tables as t

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


def _keys(store: Store) -> set[tuple[str, str, str | None]]:
    with store.engine.connect() as conn:
        found = inspect(conn).get_foreign_keys("sent_papers")
    return {
        (",".join(k["constrained_columns"]), k["referred_table"], k["options"].get("ondelete"))
        for k in found
    }


def _rows(store: Store) -> list[tuple[int, int, int]]:
    sp = t.sent_papers
    with store.engine.connect() as conn:
        q = select(sp.c.subscriber_id, sp.c.paper_id, sp.c.edition_id)
        return sorted(tuple(r) for r in conn.execute(q))  # type: ignore[misc]


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
        ids = _papers(store, "2611.00001", "2611.00002", "2611.00003")
        ada = _sent(store, "ada@example.org", ids)
        _sent(store, "bob@example.org", ids[:1])
        before = _rows(store)
        assert len(before) == 4

        store.upgrade()
        assert store.current_revision() == store.head_revision()
        assert _keys(store) == {("edition_id", "editions", "CASCADE")}
        assert _rows(store) == before
        assert store.sent_paper_ids([ada]) == {ada: set(ids)}

        _downgrade(store, "0008")
        assert {k[:2] for k in _keys(store)} == {
            ("subscriber_id", "subscribers"),
            ("paper_id", "papers"),
            ("edition_id", "editions"),
        }
        assert _rows(store) == before
        store.upgrade()
        assert _rows(store) == before
    finally:
        store.close()


def test_erasing_a_reader_still_erases_their_sent_papers(store: Store) -> None:
    ids = _papers(store, "2611.00001", "2611.00002")
    _sent(store, "ada@example.org", ids)
    bob = _sent(store, "bob@example.org", ids)
    assert store.remove_subscriber("ada@example.org")
    assert {r[0] for r in _rows(store)} == {bob}


def test_the_edition_key_still_cascades_in_the_database(store: Store) -> None:
    """A subscriber deleted by hand (not through the store) takes their editions, and through
    the edition's key their sent papers, with them."""
    ids = _papers(store, "2611.00001", "2611.00002")
    ada = _sent(store, "ada@example.org", ids)
    bob = _sent(store, "bob@example.org", ids[:1])
    with store.engine.begin() as conn:
        conn.execute(delete(t.subscriptions).where(t.subscriptions.c.subscriber_id == ada))
        conn.execute(delete(t.subscribers).where(t.subscribers.c.id == ada))
        left = conn.execute(select(func.count()).select_from(t.editions)).scalar_one()
    assert left == 1
    assert _rows(store) == [(bob, ids[0], _rows(store)[0][2])]


def test_a_send_reads_only_the_tail_of_a_readers_history(store: Store) -> None:
    """``from_paper``: the papers sent before the day's first candidate are not read back."""
    old = _papers(store, *(f"2610.{i:05d}" for i in range(1, 31)))
    today = _papers(store, "2611.00001", "2611.00002", "2611.00003")
    ada = _sent(store, "ada@example.org", old + today[:1])
    assert store.sent_paper_ids([ada]) == {ada: set(old) | {today[0]}}
    assert store.sent_paper_ids([ada], from_paper=min(today)) == {ada: {today[0]}}
    assert store.sent_paper_ids([ada, ada + 1], from_paper=min(today)) == {
        ada: {today[0]},
        ada + 1: set(),
    }
