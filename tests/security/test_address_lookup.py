"""Issue 27, item 3 (the index half): a bounce for an address we do not know, in any spelling,
is looked up through an index (``subscribers.email_key``, migration 0012). With
``lower(email) = ?`` each of the thousands of addresses a report can name read every subscriber:
1,000 of them against 200,000 subscribers held SQLite for 35 s.

SQLite: the plan of every statement the lookup runs searches an index. PostgreSQL: the server's
own counters, as ``tests/store/test_scans.py`` reads them: no sequential scan of ``subscribers``,
one ``email_key`` index scan per lookup that gets that far.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event

from newsletter.store import Store
from newsletter.store import tables as t
from tests.conftest import NOW
from tests.store.test_scans import _index_scans, _settled

SUBSCRIBERS = 20_000
LOOKUPS = 50


def _fill(store: Store) -> None:
    rows = [
        {
            "email": f"Reader{i}@Example.org",
            "name": "",
            "status": "active",
            "timezone": "UTC",
            "created": NOW,
            "status_changed": NOW,
            "permanent_failures": 0,
        }
        for i in range(SUBSCRIBERS)
    ]
    with store.engine.begin() as conn:
        conn.execute(t.subscribers.insert(), rows)


@contextmanager
def _statements(store: Store) -> Iterator[list[tuple[str, Any]]]:
    """The statements (and parameters) the store runs inside the block."""
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, sql: str, params: Any, context: Any, many: bool) -> None:
        seen.append((sql, params))

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(store.engine, "before_cursor_execute", record)


def _read(schema: str) -> tuple[int, int]:
    """Sequential scans of ``subscribers``, and the rows read from it by any scan."""
    ((scans, rows),) = _settled(
        "SELECT seq_scan, seq_tup_read + coalesce(idx_tup_fetch, 0) FROM pg_stat_user_tables "
        "WHERE schemaname = :s AND relname = 'subscribers'",
        {"s": schema},
    )
    return int(scans), int(rows)


def _lookups(store: Store) -> None:
    """Unknown addresses, and known ones spelt in another letter case (found by the key)."""
    for i in range(LOOKUPS // 2):
        assert store.subscriber_for_address(f"stranger{i}@example.org") is None
        found = store.subscriber_for_address(f"READER{i}@example.ORG")
        assert found is not None and found.email == f"Reader{i}@Example.org"


def test_lookup_by_address_uses_an_index_on_sqlite(tmp_path: Any) -> None:
    store = Store(f"sqlite:///{tmp_path / 'lookup.db'}")
    try:
        store.upgrade()
        _fill(store)
        with _statements(store) as seen:
            _lookups(store)
        on_subscribers = [(sql, p) for sql, p in seen if "FROM subscribers" in sql]
        assert on_subscribers
        with store.engine.connect() as conn:
            for sql, params in on_subscribers:
                plan = [r[-1] for r in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}", params)]
                assert any(p.startswith("SEARCH subscribers USING") for p in plan), (sql, plan)
                assert not any(p.startswith("SCAN subscribers") for p in plan), (sql, plan)
    finally:
        store.close()


def test_lookup_by_address_uses_an_index_on_postgresql(pg_schema_url: str) -> None:
    schema = pg_schema_url.rsplit("search_path%3D", 1)[1]
    store = Store(pg_schema_url)
    try:
        store.upgrade()
        _fill(store)
        store.engine.dispose()  # backends report their counters when they exit
        scans, rows = _read(schema)
        index_before = _index_scans(schema).get("ix_subscribers_email_key", 0)
        _lookups(store)
        store.engine.dispose()
        scans_after, rows_after = _read(schema)
        index_after = _index_scans(schema).get("ix_subscribers_email_key", 0)
        assert scans_after == scans  # no sequential scan of subscribers
        # a few rows per lookup (the one found, read again by id), not the table per lookup
        assert rows_after - rows <= 3 * LOOKUPS, (rows, rows_after)
        assert index_after - index_before >= LOOKUPS, (index_before, index_after)
    finally:
        store.close()
