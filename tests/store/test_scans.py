"""No statement of a send reads a whole table on PostgreSQL, on a fresh database too.

A new database has no statistics: without them PostgreSQL estimates that a list of hundreds of
subscriber ids matches every row, and a prepared statement may keep the plan it made while the
edition's ledger was empty. Either way a table was read whole once per statement, and the first
edition on a new database grew with the square of its subscribers (15,800 sequential scans of
``editions`` reading 74.6 million rows in one 10,000-digest send). This test sends an edition of
a few thousand subscribers on a fresh schema and reads the server's own counters.
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from newsletter.clock import utcnow
from newsletter.config import load_config
from newsletter.sources.ingest import run_fetch
from newsletter.store import Store
from newsletter.store import tables as t
from tests.conftest import NOW, PG_URL, SmtpServer, base_config, write_config
from tests.sends import send_step

pytestmark = pytest.mark.postgres

SUBSCRIBERS = 2000
LEDGER_TABLES = ("editions", "subscriptions", "subscribers")


def _index_scans(schema: str) -> dict[str, int]:
    """Index scans started per index of ``schema`` (a nested loop starts one per outer row)."""
    engine = create_engine(PG_URL)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT indexrelname, idx_scan FROM pg_stat_user_indexes WHERE schemaname = :s"
                ),
                {"s": schema},
            ).all()
        return {r.indexrelname: int(r.idx_scan) for r in rows}
    finally:
        engine.dispose()


def _settled(sql: str, params: dict[str, str]) -> list[Any]:
    """The rows of a statistics query once they stop changing: backends report their counters
    when they go idle or exit."""
    engine = create_engine(PG_URL)
    try:
        last: list[Any] = []
        for _ in range(50):
            with engine.connect() as conn:
                now = [tuple(r) for r in conn.execute(text(sql), params)]
            if now == last:
                return now
            last = now
            time.sleep(0.2)
        return last
    finally:
        engine.dispose()


def _scans(schema: str) -> dict[str, tuple[int, int]]:
    """(sequential scans, rows they read) per table of ``schema``, once the counters settle."""
    rows = _settled(
        "SELECT relname, seq_scan, seq_tup_read FROM pg_stat_user_tables WHERE schemaname = :s "
        "ORDER BY relname",
        {"s": schema},
    )
    return {name: (int(scans), int(read)) for name, scans, read in rows}


@pytest.fixture
def fresh_schema(pg_schema_url: str) -> tuple[str, str]:
    """A fresh schema's name, and a URL whose connections use it."""
    return pg_schema_url.rsplit("search_path%3D", 1)[1], pg_schema_url


def test_a_first_edition_on_a_fresh_database_reads_no_table_whole_per_statement(
    tmp_path: Path, fresh_schema: tuple[str, str], smtp_server: SmtpServer
) -> None:
    schema, url = fresh_schema
    data = base_config(
        url,
        smtp_server,
        schedule={"no_listing": "send"},
        web={"secret_key": "scan-test-secret-0123456789abcdefgh"},
    )
    data["smtp"]["pool_size"] = 4
    config = load_config(write_config(tmp_path, data))
    store = Store(config.database_url)
    store.upgrade()
    run_fetch(config, store, utcnow() - timedelta(hours=1))
    topics = (("gpu-kernels",), ("rendering",), ("gpu-kernels", "rendering"))
    with store.engine.begin() as conn:  # a bulk import: rows, and no statistics yet
        # ... nor any during the send: an autovacuum's ANALYZE landing mid-send on a busy machine
        # (the suite's other workers) changed the plans half-way and this test's counts with them
        for table in LEDGER_TABLES:
            conn.execute(text(f"ALTER TABLE {table} SET (autovacuum_enabled = off)"))
        conn.execute(
            t.subscribers.insert(),
            [
                {
                    "email": f"reader{i:05d}@example.org",
                    "name": "",
                    "status": "active",
                    "timezone": "UTC",
                    "created": NOW,
                    "status_changed": NOW,
                    "confirmed": NOW,
                    "frequency": "daily",
                }
                for i in range(SUBSCRIBERS)
            ],
        )
        ids = [r[0] for r in conn.execute(text("SELECT id FROM subscribers ORDER BY id"))]
        conn.execute(
            t.subscriptions.insert(),
            [
                {"subscriber_id": sid, "topic": topic}
                for k, sid in enumerate(ids)
                for topic in topics[k % 3]
            ],
        )
    store.close()
    before = _scans(schema)
    indexes_before = _index_scans(schema)
    tuples_before = _index_tuples(schema)

    store = Store(config.database_url)
    report = send_step(config, store, utcnow())
    store.close()  # its backends exit and report their counters

    assert report.sent == SUBSCRIBERS and len(smtp_server.received) == SUBSCRIBERS
    after = _scans(schema)
    indexes = {k: v - indexes_before.get(k, 0) for k, v in _index_scans(schema).items()}
    # Each digest's statements find their rows by key: a handful of probes per digest. A plan
    # that walks every active subscriber per group commit (the begin's "still active?" check
    # written as a semi-join) probed the ledger hundreds of times per digest.
    assert indexes["uq_editions_subscriber_date"] <= 3 * SUBSCRIBERS, indexes
    assert indexes["ix_subscribers_status_id"] <= SUBSCRIBERS // 10, indexes
    # ... and each of those reads only its own rows: listing the readers 500 at a time by an
    # index on status alone read every active subscriber per batch, and a generic plan for the
    # begin read the whole (edition_date, status) index per group commit.
    entries = {k: v - tuples_before.get(k, 0) for k, v in _index_tuples(schema).items()}
    assert entries["ix_subscribers_status_id"] <= 2 * SUBSCRIBERS, entries
    assert entries["ix_editions_date_status"] <= SUBSCRIBERS, entries
    sizes = {"editions": SUBSCRIBERS, "subscribers": SUBSCRIBERS}
    sizes["subscriptions"] = sum(len(topics[k % 3]) for k in range(SUBSCRIBERS))
    for table in LEDGER_TABLES:
        scans = after[table][0] - before.get(table, (0, 0))[0]
        read = after[table][1] - before.get(table, (0, 0))[1]
        # A whole read of an empty table at the start costs nothing; anything more than one
        # pass over the table during the whole send is a scan per batch or per statement.
        assert read <= sizes[table], (table, scans, read)
    engine = create_engine(PG_URL)
    with engine.connect() as conn:
        carried = conn.execute(
            text(f'SELECT count(*) FROM "{schema}".editions WHERE paper_ids IS NOT NULL')
        ).scalar_one()
    engine.dispose()
    assert carried == SUBSCRIBERS  # the send placed papers: each edition recorded its own


def _index_tuples(schema: str) -> dict[str, int]:
    """Index entries returned per index of ``schema``, once the counters settle."""
    rows = _settled(
        "SELECT indexrelname, idx_tup_read FROM pg_stat_user_indexes WHERE schemaname = :s "
        "ORDER BY indexrelname",
        {"s": schema},
    )
    return {name: int(n) for name, n in rows}


def _tuples_read(schema: str, index: str) -> int:
    """Index entries ``index`` has returned, once the counters settle."""
    ((n,),) = _settled(
        "SELECT idx_tup_read FROM pg_stat_user_indexes WHERE schemaname = :s AND indexrelname = :i",
        {"s": schema, "i": index},
    )
    return int(n)


def test_a_send_reads_back_only_the_tail_of_a_readers_history(
    fresh_schema: tuple[str, str],
) -> None:
    """A year of digests is hundreds of editions per reader; a send asks only for those dated
    from the day's first candidate's first sighting on, and the ``(subscriber_id,
    edition_date)`` index reads just those."""
    from newsletter.edition.build import history_since
    from newsletter.models import EditionStatus, PaperData
    from newsletter.sources.ingest import decide

    schema, url = fresh_schema
    store = Store(url)
    try:
        store.upgrade()
        batch = [PaperData(key=f"2610.{i:05d}", title=f"Old {i}") for i in range(400)]
        old = list(store.write_papers("s", decide(batch, {}), NOW - timedelta(days=30)).values())
        new = decide([PaperData(key="2611.00001", title="New")], {})
        today = list(store.write_papers("s", new, NOW).values())
        sub, _ = store.add_subscriber("ada@example.org", topics=["t"], now=NOW)
        for day in range(20):  # twenty earlier editions of twenty papers each
            claim = store.claim_edition(
                sub.id, NOW.date() - timedelta(days=day + 5), f"<{day}@x>", NOW, owner="r"
            )
            assert claim is not None
            papers = old[day * 20 : (day + 1) * 20]
            store.mark_edition(claim.id, EditionStatus.SENT, NOW, paper_ids=papers)
        claim = store.claim_edition(sub.id, NOW.date(), "<today@x>", NOW, owner="r")
        assert claim is not None
        store.mark_edition(claim.id, EditionStatus.SENT, NOW, paper_ids=today)
        since = history_since(store.recent_papers(NOW - timedelta(days=2)))
        assert since is not None
        store.close()
        before = _tuples_read(schema, "uq_editions_subscriber_date")
        store = Store(url)
        assert store.sent_paper_ids([sub.id], since=since) == {sub.id: set(today)}
        store.close()
        tail = _tuples_read(schema, "uq_editions_subscriber_date") - before
        store = Store(url)
        assert len(store.sent_paper_ids([sub.id])[sub.id]) == 401
        store.close()
        whole = _tuples_read(schema, "uq_editions_subscriber_date") - before - tail
        assert tail <= 2 < 21 <= whole, (tail, whole)
    finally:
        store.close()


def _bulk_import(store: Store, n: int, *, unsubscribed_every: int = 0) -> None:
    """``n`` subscribers in one statement, as a bulk import leaves them: rows, and no
    statistics yet (every ``unsubscribed_every``-th one unsubscribed)."""
    with store.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO subscribers (email, name, status, timezone, created, "
                "status_changed, frequency, permanent_failures) SELECT "
                "'reader' || g || '@example.org', '', CASE WHEN :every > 0 AND g % :every = 0 "
                "THEN 'unsubscribed' ELSE 'active' END, 'UTC', now(), now(), 'daily', 0 "
                "FROM generate_series(1, :n) AS g"
            ),
            {"n": n, "every": unsubscribed_every},
        )


def test_listing_the_readers_reads_each_once_on_a_fresh_database(
    fresh_schema: tuple[str, str],
) -> None:
    """A send lists the active subscribers 500 at a time. Without statistics PostgreSQL took a
    bitmap scan for "the next 500", which cannot stop at the limit: every batch read all later
    subscribers (10 million index entries for 100,000, growing with the square of the list)."""
    from newsletter.models import SubscriberStatus

    schema, url = fresh_schema
    n = 20_000
    store = Store(url)
    try:
        store.upgrade()
        _bulk_import(store, n)
        store.close()
        before = _tuples_read(schema, "ix_subscribers_status_id")
        store = Store(url)
        listed = sum(len(b) for b in store.iter_subscribers(SubscriberStatus.ACTIVE, batch=500))
        store.close()
        read = _tuples_read(schema, "ix_subscribers_status_id") - before
        assert listed == n
        assert read <= n + n // 500 + 10, read
    finally:
        store.close()


def test_a_workers_chunks_read_only_their_own_readers_on_a_fresh_database(
    fresh_schema: tuple[str, str],
) -> None:
    """A worker lists its chunk's readers by id (and again when it checks what is unsettled).
    As "the next ones after ``last`` among these ids", PostgreSQL walked the ``(status, id)``
    index from ``last`` to the chunk's end; given the status, it read every active subscriber
    per batch. Either way a worker-mode send grew with the square of its list: 20 million rows
    for 100,000 subscribers, 200 per digest. Here 20 chunks of 1,000 read about 20,000."""
    from newsletter.models import SubscriberStatus

    schema, url = fresh_schema
    n, chunk = 20_000, 1000
    store = Store(url)
    try:
        store.upgrade()
        _bulk_import(store, n, unsubscribed_every=10)
        store.close()
        before = sum(v for k, v in _index_tuples(schema).items() if "subscribers" in k)
        store = Store(url)
        listed: list[int] = []
        for start in range(1, n + 1, chunk):
            ids = list(range(start + chunk - 1, start - 1, -1))  # any order, as a chunk may be
            for batch in store.iter_subscribers(SubscriberStatus.ACTIVE, ids=ids):
                listed += [s.id for s in batch]
        store.close()
        read = sum(v for k, v in _index_tuples(schema).items() if "subscribers" in k) - before
        assert listed == [i for i in range(1, n + 1) if i % 10]  # in id order, active only
        assert read <= n + n // 100, read
    finally:
        store.close()
