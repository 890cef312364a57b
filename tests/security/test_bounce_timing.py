"""Issue 42, item 8: how long a bounce takes to answer must not tell who is subscribed.

A DSN naming a subscriber was answered in a median 10-13 ms, one naming a stranger in 7-8 ms
(PostgreSQL): the subscriber's report was written to their history before the ``250``, the
stranger's was not. The reply path now does the same work for both (the per-host count), and
the report is read and applied afterwards, off it. No clock is read here: the tests count the
statements the reply path sends to the database, and hold the history write to show the reply
does not wait for it. A real aiosmtpd receiver (``newsletter inbound``), SQLite and PostgreSQL.
"""

from __future__ import annotations

import re
import smtplib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from newsletter.bounces.receive import BounceWriter
from newsletter.config import Config, load_config
from newsletter.operations.inbound_mail import InboundServer
from newsletter.operations.smtp_sink import free_port
from newsletter.services import Services
from newsletter.store import Store
from newsletter.subscribe import Subscriptions
from tests.conftest import NOW, SmtpServer, write_config
from tests.security.test_bounce_oracle import ADA, BOUNCES, dsn
from tests.web.conftest import Clock, web_settings

STRANGER = "stranger@example.net"


@pytest.fixture
def config(tmp_path: Path, db_url: str, smtp_server: SmtpServer) -> Config:
    data = web_settings(db_url, smtp_server)
    data["inbound"] = {"address": "papers-request@papers.example.org", "port": free_port()}
    data["bounces"] = {"enabled": True}
    return load_config(write_config(tmp_path, data))


@pytest.fixture
def store(config: Config) -> Iterator[Store]:
    s = Store(config.database_url)
    s.upgrade()
    s.add_subscriber(ADA, topics=["gpu-kernels"], now=NOW)
    yield s
    s.close()


@pytest.fixture
def inbound(config: Config, store: Store) -> Iterator[InboundServer]:
    service = Subscriptions(Services(config, store, clock=Clock()))
    with InboundServer(service, config.settings.inbound) as server:
        yield server


def mail(server: InboundServer, data: bytes, timeout: float = 30) -> tuple[int, bytes]:
    with smtplib.SMTP(server.settings.host, server.settings.port, timeout=timeout) as conn:
        conn.ehlo()
        conn.mail("<>")
        conn.rcpt(BOUNCES)
        return conn.data(data)


def shape(statement: str) -> str:
    """A statement without its literal values (SQLite and PostgreSQL bind them anyway)."""
    return re.sub(r"\s+", " ", statement).strip()


def test_the_reply_path_sends_the_same_statements_for_a_subscriber_and_a_stranger(
    inbound: InboundServer, store: Store
) -> None:
    """Every statement the server sends before it answers, for a DSN naming a subscriber and
    one naming a stranger: the same list. (Before: the subscriber's look-up, then the
    INSERT into bounce_events; the stranger's two look-ups.) What the report does happens
    after, on the writer's own thread, and still happens: Ada's history holds it."""
    seen: list[tuple[str, str]] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append((threading.current_thread().name, shape(statement)))

    paths: dict[str, list[str]] = {}
    event.listen(store.engine, "before_cursor_execute", record)
    try:
        for who in (ADA, STRANGER, ADA, STRANGER):
            seen.clear()
            assert mail(inbound, dsn(who))[0] == 250
            inbound.handler.settle()  # the writer has done what it does for this one
            reply_path = [s for thread, s in seen if thread != BounceWriter.THREAD]
            paths.setdefault(who, reply_path)
            assert reply_path == paths[who]  # and the same again the second time
            assert reply_path, "the per-host count runs on the reply path"
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    assert paths[ADA] == paths[STRANGER]
    assert not any("bounce_events" in s or "subscribers" in s for s in paths[ADA])
    ada = store.get_subscriber(ADA)
    assert ada is not None and len(store.bounce_history(ada.id)) == 1  # one a day, unverified


def test_the_reply_does_not_wait_for_the_history_write(
    inbound: InboundServer, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The history write held until the reply has come: the ``250`` comes anyway (before,
    the server answered only after writing, and this test timed out), then the write goes
    through."""
    receiver = inbound.handler.bounces
    assert receiver is not None
    replied = threading.Event()
    writing = threading.Event()
    real = receiver.receive

    def held(*args: Any, **kwargs: Any) -> Any:
        writing.set()
        replied.wait(timeout=20)  # never longer: a stuck test must not hang the suite
        return real(*args, **kwargs)

    monkeypatch.setattr(receiver, "receive", held)
    code, _ = mail(inbound, dsn(ADA), timeout=5)
    replied.set()
    assert code == 250
    inbound.handler.settle()
    assert writing.is_set()
    ada = store.get_subscriber(ADA)
    assert ada is not None and len(store.bounce_history(ada.id)) == 1
