"""Issue 27, item 3: one bounce message must not tie up the database.

A DSN may carry any number of ``Final-Recipient`` blocks, and each named address is a subscriber
look-up: a report is read for its first ``MAX_RECIPIENTS`` (10) recipients only, the rest
dropped with one log line, and the bounce address takes at most ``bounces.per_host`` messages
per sending host per window (``451 4.7.1`` past it, nothing read or stored). A real aiosmtpd
receiver (``newsletter inbound``), SQLite and PostgreSQL.
"""

from __future__ import annotations

import logging
import smtplib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from newsletter.bounces.parse import MAX_RECIPIENTS
from newsletter.config import Config, load_config
from newsletter.operations.inbound_mail import InboundServer
from newsletter.operations.smtp_sink import free_port
from newsletter.services import Services
from newsletter.store import Store
from newsletter.subscribe import Subscriptions
from tests.conftest import NOW, SmtpServer, write_config
from tests.security.test_bounce_oracle import BOUNCES, dsn, mail
from tests.web.conftest import Clock, web_settings


def make_config(tmp_path: Path, db_url: str, smtp: SmtpServer, **bounces: Any) -> Config:
    data = web_settings(db_url, smtp)
    data["inbound"] = {"address": "papers-request@papers.example.org", "port": free_port()}
    data["bounces"] = {"enabled": True, **bounces}
    return load_config(write_config(tmp_path, data))


@pytest.fixture
def store(tmp_path: Path, db_url: str, smtp_server: SmtpServer) -> Iterator[Store]:
    s = Store(make_config(tmp_path, db_url, smtp_server).database_url)
    s.upgrade()
    yield s
    s.close()


def serve(config: Config, store: Store) -> InboundServer:
    return InboundServer(
        Subscriptions(Services(config, store, clock=Clock())), config.settings.inbound
    )


def send(server: InboundServer, data: bytes) -> tuple[int, bytes]:
    """Hand one message to the bounce address; the server's reply to DATA, refusals included."""
    try:
        return mail(server, data)
    except smtplib.SMTPDataError as e:
        return e.smtp_code, e.smtp_error


def stored(store: Store, addresses: list[str]) -> dict[str, int]:
    """How many events each of ``addresses`` has in its history."""
    out = {}
    for address in addresses:
        s = store.get_subscriber(address)
        assert s is not None
        out[address] = len(store.bounce_history(s.id))
    return out


@pytest.mark.parametrize("trust", [False, True], ids=["default", "trust_unverified"])
def test_a_dsn_with_1000_recipients_makes_at_most_10_lookups(
    tmp_path: Path,
    db_url: str,
    smtp_server: SmtpServer,
    store: Store,
    trust: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = make_config(tmp_path, db_url, smtp_server, trust_unverified=trust)
    readers = [f"reader{i}@example.org" for i in range(20)]
    for address in readers:
        store.add_subscriber(address, topics=["gpu-kernels"], now=NOW)
    # The 20 subscribers first, then 980 strangers: 1,000 blocks, about 100 KB.
    names = readers + [f"stranger{i}@example.net" for i in range(980)]
    message = dsn(*names)
    assert message.count(b"Final-Recipient:") == 1000

    lookups: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "subscribers.email" in statement:  # by address, exactly or in any letter case
            lookups.append(statement)

    caplog.set_level(logging.WARNING, logger="newsletter.bounces")
    event.listen(store.engine, "before_cursor_execute", count)
    try:
        with serve(config, store) as server:
            code, _ = send(server, message)
    finally:
        event.remove(store.engine, "before_cursor_execute", count)
    assert code == 250
    # subscriber_for_address: one exact look-up, and one in any letter case when that fails
    assert 0 < len(lookups) <= 20, len(lookups)
    history = stored(store, readers)
    assert all(history[a] == 1 for a in readers[:10])  # the first ten are read
    assert all(history[a] == 0 for a in readers[10:])  # the 11th and later get no event
    [line] = [r.getMessage() for r in caplog.records if "dropped unread" in r.getMessage()]
    assert "990 more dropped" in line


def test_a_host_over_its_limit_is_refused_and_nothing_is_stored(
    tmp_path: Path, db_url: str, smtp_server: SmtpServer, store: Store
) -> None:
    config = make_config(tmp_path, db_url, smtp_server, per_host=3)
    readers = [f"reader{i}@example.org" for i in range(5)]
    for address in readers:
        store.add_subscriber(address, topics=["gpu-kernels"], now=NOW)
    with serve(config, store) as server:
        answers = [send(server, dsn(a))[0] for a in readers[:4]]
        # Another host, through our MTA (a trusted relay): counted on its own.
        hop = "Received: from mx.example.com (mx.example.com [198.51.100.7]) by us; "
        other = send(server, hop.encode() + b"Tue, 17 Nov 2026\r\n" + dsn(readers[4]))[0]
    assert answers == [250, 250, 250, 451]
    assert other == 250
    assert stored(store, readers) == {
        readers[0]: 1,
        readers[1]: 1,
        readers[2]: 1,
        readers[3]: 0,  # refused: not read, nothing stored
        readers[4]: 1,
    }


def test_the_per_host_limit_defaults() -> None:
    from newsletter.bounces.settings import BounceSettings

    settings = BounceSettings()
    assert (settings.per_host, settings.per_host_window, MAX_RECIPIENTS) == (500, 3600, 10)


def test_every_report_format_is_read_for_10_recipients() -> None:
    """The cap holds for the other two formats too: an abuse report (ARF) listing many
    Original-Rcpt-To, and a plain-text bounce that flufl.bounce reads addresses from."""
    from newsletter.bounces.parse import parse_report
    from tests.bounces.helpers import fixture as bounce_fixture

    many = [f"r{i}@example.net" for i in range(300)]
    arf = (
        bounce_fixture("arf-abuse.eml")
        .replace(b"\r\n", b"\n")
        .replace(
            b"Original-Rcpt-To: <reader@example.net>\n",
            b"".join(f"Original-Rcpt-To: <{a}>\n".encode() for a in many),
        )
    )
    parsed = parse_report(arf, recipients=[BOUNCES], verp=None, now=NOW)
    assert [e.address for e in parsed.events] == many[:10] and parsed.dropped == 290

    text = (
        b"From: MAILER-DAEMON@mx.example.net\nTo: bounces@papers.example.org\n"
        b"Subject: Mail delivery failed: returning message to sender\n\n"
        b"This message was created automatically by mail delivery software.\n\n"
        b"A message that you sent could not be delivered to one or more of its\n"
        b"recipients. This is a permanent error. The following address(es) failed:\n\n"
        + b"".join(f"  {a}\n    550 5.1.1 User unknown\n".encode() for a in many)
    )
    parsed = parse_report(text, recipients=[BOUNCES], verp=None, now=NOW)
    assert len(parsed.events) == 10 and parsed.dropped == 290
