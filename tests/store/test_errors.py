"""Every database failure leaves a public Store method as a ``StoreError`` subclass, never a
SQLAlchemy or driver exception (issue 18): a real read-only SQLite file, a real PostgreSQL
port nobody listens on, and a real PostgreSQL backend terminated under a statement."""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import SQLAlchemyError

from newsletter.errors import DatabaseReadOnly, DatabaseUnavailable, StoreError
from newsletter.models import EditionStatus, LedgerOp, SourceState
from newsletter.operations.smtp_sink import free_port
from newsletter.store import Store
from newsletter.store.guard import guarded_names
from tests.conftest import NOW, PG_URL
from tests.faults.harness import TcpProxy, terminate_backends, with_application_name

DAY = date(2026, 11, 17)

Call = Callable[[Store], Any]


def _no_database_exception(error: BaseException) -> None:
    """The error a caller sees is newsletter's, with the database's own chained under it."""
    assert isinstance(error, StoreError)
    assert not isinstance(error, (SQLAlchemyError, sqlite3.Error))
    assert isinstance(error.__cause__, (SQLAlchemyError, sqlite3.Error))
    assert "\n" not in str(error)


def test_every_public_method_that_runs_sql_is_guarded() -> None:
    names = guarded_names(Store)
    assert {"claim_editions", "apply_ledger", "iter_subscribers", "count_subscribers"} <= set(names)
    for name in names:
        assert getattr(getattr(Store, name), "__store_guarded__", False), name
    # a guarded method keeps its signature and docstring
    assert "for several" in (Store.claim_editions.__doc__ or "")


# ---------------------------------------------------------------------------- SQLite read-only


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Store]:
    """A migrated SQLite file with one subscriber and one claimed edition, opened read-only by
    SQLite itself (``mode=ro``: tests run as root, which may write a 0444 file)."""
    db = tmp_path / "newsletter.db"
    store = Store(f"sqlite:///{db}")
    store.upgrade()
    sub, _ = store.add_subscriber("a@example.org", topics=["t"], now=NOW)
    [claim] = store.claim_editions([(sub.id, DAY, "<m@x>")], NOW, owner="run-1")
    assert claim is not None
    store.close()
    db.chmod(0o444)
    ro = Store(f"sqlite:///file:{db}?mode=ro&uri=true")
    yield ro
    ro.close()


WRITES: dict[str, Call] = {
    "add_subscriber": lambda s: s.add_subscriber("b@example.org", now=NOW),
    "claim_editions": lambda s: s.claim_editions(
        [(1, DAY + timedelta(1), "<n@x>")], NOW, owner="r"
    ),
    "mark_edition": lambda s: s.mark_edition(1, EditionStatus.FAILED, NOW, error="x"),
    "release_edition": lambda s: s.release_edition(1),
    "begin_send": lambda s: s.begin_send(1, 1, "run-1", NOW),
    "force_edition": lambda s: s.force_edition(1, DAY, "<f@x>", NOW, owner="r"),
    "start_run": lambda s: s.start_run("send", NOW),
    "save_source_state": lambda s: s.save_source_state(SourceState("arxiv", etag="e")),
    # the fast path: SQL run on the sqlite3 connection itself, not through SQLAlchemy
    "apply_ledger(begin)": lambda s: s.apply_ledger(
        [LedgerOp("begin", edition_id=1, subscriber_id=1, owner="run-1")], NOW
    ),
    "apply_ledger(sent)": lambda s: s.apply_ledger(
        [LedgerOp("mark", 1, 1, status=EditionStatus.SENT, paper_ids=(1,))], NOW
    ),
}


@pytest.mark.parametrize("name", list(WRITES))
def test_read_only_sqlite_writes_raise_database_read_only(read_only: Store, name: str) -> None:
    with pytest.raises(DatabaseReadOnly, match="read-only") as caught:
        WRITES[name](read_only)
    _no_database_exception(caught.value)
    # reading still works
    assert read_only.count_subscribers() == 1


# ---------------------------------------------------------------------------- PostgreSQL away


READS_AND_WRITES: dict[str, Call] = {
    "check_connection": lambda s: s.check_connection(),
    "count_subscribers": lambda s: s.count_subscribers(),
    "get_subscriber": lambda s: s.get_subscriber("a@example.org"),
    "iter_subscribers": lambda s: list(s.iter_subscribers()),
    "claim_editions": lambda s: s.claim_editions([(1, DAY, "<m@x>")], NOW, owner="r"),
    "mark_edition": lambda s: s.mark_edition(1, EditionStatus.SENT, NOW),
    "sent_paper_ids": lambda s: s.sent_paper_ids([1]),
    "ledger_session": lambda s: s.ledger_session().apply(
        [LedgerOp("begin", edition_id=1, subscriber_id=1, owner="r")], NOW
    ),
    "last_runs": lambda s: s.last_runs(),
}


@pytest.mark.parametrize("name", list(READS_AND_WRITES))
def test_unreachable_postgresql_raises_database_unavailable(name: str) -> None:
    pytest.importorskip("psycopg")
    port = free_port()  # nothing listens there
    store = Store(
        f"postgresql+psycopg://postgres@127.0.0.1:{port}/test",
        connect_args={"connect_timeout": 3},
    )
    try:
        with pytest.raises(DatabaseUnavailable, match="cannot connect") as caught:
            READS_AND_WRITES[name](store)
        _no_database_exception(caught.value)
    finally:
        store.close()


# ---------------------------------------------------------------------------- PostgreSQL ended


@pytest.fixture
def pg_store(pg_schema_url: str) -> Iterator[tuple[Store, str, str]]:
    name = f"nl-{uuid.uuid4().hex[:10]}"
    store = Store(with_application_name(pg_schema_url, name))
    store.upgrade()
    sub, _ = store.add_subscriber("a@example.org", topics=["t"], now=NOW)
    [claim] = store.claim_editions([(sub.id, DAY, "<m@x>")], NOW, owner="run-1")
    assert claim is not None
    yield store, name, pg_schema_url
    store.close()


ENDED: dict[str, Call] = {
    "count_subscribers": lambda s: s.count_subscribers(),
    "claim_editions": lambda s: s.claim_editions(
        [(1, DAY + timedelta(1), "<n@x>")], NOW, owner="r"
    ),
    "mark_edition": lambda s: s.mark_edition(1, EditionStatus.FAILED, NOW, error="x"),
    "release_edition": lambda s: s.release_edition(1),
    "iter_subscribers": lambda s: list(s.iter_subscribers()),
}


@pytest.mark.postgres
@pytest.mark.parametrize("name", list(ENDED))
def test_backend_terminated_under_a_statement_raises_database_unavailable(
    pg_store: tuple[Store, str, str], name: str
) -> None:
    store, app_name, url = pg_store
    blocker = create_engine(url)
    outcome: list[BaseException | None] = []
    try:
        with blocker.connect() as hold:
            hold.execute(text("LOCK TABLE editions, subscribers IN ACCESS EXCLUSIVE MODE"))

            def call() -> None:
                try:
                    ENDED[name](store)
                    outcome.append(None)
                except BaseException as e:
                    outcome.append(e)

            worker = threading.Thread(target=call)
            worker.start()
            _wait_until_blocked(app_name)
            assert terminate_backends(app_name) >= 1
            worker.join(30)
            hold.rollback()
    finally:
        blocker.dispose()
    [error] = outcome
    assert isinstance(error, DatabaseUnavailable), repr(error)
    _no_database_exception(error)
    assert store.count_subscribers() == 1  # the next call works on a fresh connection


def _wait_until_blocked(app_name: str) -> None:
    admin = create_engine(with_application_name(PG_URL, "nl-watch"))
    try:
        for _ in range(300):
            with admin.connect() as conn:
                waiting = conn.execute(
                    text(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = :n "
                        "AND wait_event_type = 'Lock'"
                    ),
                    {"n": app_name},
                ).scalar_one()
            if waiting:
                return
            time.sleep(0.02)
        raise AssertionError("the store's statement never waited on the lock")
    finally:
        admin.dispose()


@pytest.mark.postgres
def test_a_ledger_write_that_cannot_reconnect_gives_up_with_its_own_message(
    pg_schema_url: str,
) -> None:
    """The retry's own ``DatabaseUnavailable`` passes the guard unchanged (not re-mapped)."""
    host, port = "127.0.0.1", int(PG_URL.rsplit(":", 1)[1].split("/")[0])
    proxy = TcpProxy((host, port))
    try:
        store = Store(proxy.url(pg_schema_url), reconnect_seconds=0.5)
        store.upgrade()
        sub, _ = store.add_subscriber("a@example.org", now=NOW)
        [claim] = store.claim_editions([(sub.id, DAY, "<m@x>")], NOW, owner="run-1")
        assert claim is not None
        session = store.ledger_session()  # its connections held open, as the sender's are
        op = LedgerOp("begin", edition_id=claim.id, subscriber_id=sub.id, owner="run-1")
        assert session.apply([op], NOW) == ["ok"]
        proxy.down()
        with pytest.raises(DatabaseUnavailable, match="did not come back") as caught:
            session.apply([op], NOW)
        session.close()
        _no_database_exception(caught.value)
        store.close()
    finally:
        proxy.down()
