"""The inbound server with bounces on: mail to the bounce address is a report, not a command;
a report it cannot count is answered 451 (the MTA retries), one it cannot store yet is tried
again after the answer, and the server goes on."""

from __future__ import annotations

import logging
import smtplib
import time
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest
from sqlalchemy import text

from newsletter.bounces.verp import Verp
from newsletter.clock import utcnow
from newsletter.config import Config, load_config
from newsletter.operations.inbound_mail import InboundServer
from newsletter.operations.smtp_sink import free_port
from newsletter.services import Services
from newsletter.store import Store
from newsletter.subscribe import Subscriptions
from tests.bounces.helpers import fixture
from tests.conftest import SmtpServer, base_config, write_config

SECRET = "a-test-secret-that-signs-links-0123456789"
READER = "reader@example.net"


@pytest.fixture
def config(tmp_path: Path, smtp_server: SmtpServer) -> Config:
    data = base_config(
        f"sqlite:///{tmp_path / 'n.db'}",
        smtp_server,
        inbound={"address": "papers-request@papers.example.org", "port": free_port()},
        bounces={"enabled": True, "threshold": 1.0},
        web={"secret_key": SECRET},
    )
    return load_config(write_config(tmp_path, data))


@pytest.fixture
def server(config: Config) -> Iterator[tuple[InboundServer, Store]]:
    store = Store(config.database_url)
    store.upgrade()
    store.add_subscriber(READER, topics=["rendering"], now=utcnow())
    with InboundServer(Subscriptions(Services(config, store)), config.settings.inbound) as srv:
        yield srv, store
    store.close()


def test_other_recipients_are_still_refused_and_commands_still_answered(
    server: tuple[InboundServer, Store], smtp_server: SmtpServer
) -> None:
    srv, _ = server
    settings = srv.settings
    with smtplib.SMTP(settings.host, settings.port) as conn:
        with pytest.raises(smtplib.SMTPRecipientsRefused):
            conn.sendmail("", ["postmaster@papers.example.org"], fixture("postfix-hard.eml"))
        conn.sendmail(
            "ada@example.org",
            ["papers-request@papers.example.org"],
            b"From: ada@example.org\r\nTo: papers-request@papers.example.org\r\n"
            b"Subject: help\r\n\r\nhelp\r\n",
        )
    assert smtp_server.messages_to("ada@example.org")  # the command was answered


def test_a_database_that_cannot_count_the_host_is_451_and_the_server_goes_on(
    server: tuple[InboundServer, Store],
) -> None:
    """The per-host count runs before the answer: when the database cannot take it, the
    report is refused with 451 (the MTA retries), and the retry counts."""
    srv, store = server
    reader = store.get_subscriber(READER)
    assert reader is not None
    rcpt = Verp(SECRET, "bounces@papers.example.org").sender(reader.id, date(2026, 11, 17))
    with store.engine.begin() as conn:
        conn.execute(text("ALTER TABLE rate_events RENAME TO rate_events_away"))
    settings = srv.settings
    with smtplib.SMTP(settings.host, settings.port) as conn:
        with pytest.raises(smtplib.SMTPDataError) as refused:
            conn.sendmail("", [rcpt], fixture("postfix-hard.eml"))
        assert refused.value.smtp_code == 451
    with store.engine.begin() as conn:
        conn.execute(text("ALTER TABLE rate_events_away RENAME TO rate_events"))
    with smtplib.SMTP(settings.host, settings.port) as conn:  # the MTA retries: now it counts
        conn.sendmail("", [rcpt], fixture("postfix-hard.eml"))
    srv.handler.settle()
    score = store.bounce_score(reader.id)
    assert score is not None and score.suppressed_reason is not None


def test_a_report_the_database_cannot_take_yet_is_applied_when_it_can(
    server: tuple[InboundServer, Store], caplog: pytest.LogCaptureFixture
) -> None:
    """A report is applied after the answer (its timing must not tell who is subscribed):
    when the database refuses it then, the writer tries again, and the report counts once
    the database takes it."""
    srv, store = server
    assert srv.handler.writer is not None
    srv.handler.writer.retry_delays = (0.2,) * 50
    reader = store.get_subscriber(READER)
    assert reader is not None
    rcpt = Verp(SECRET, "bounces@papers.example.org").sender(reader.id, date(2026, 11, 17))
    with store.engine.begin() as conn:
        conn.execute(text("ALTER TABLE bounce_events RENAME TO bounce_events_away"))
    settings = srv.settings
    caplog.set_level(logging.WARNING, logger="newsletter.bounces")
    with smtplib.SMTP(settings.host, settings.port) as conn:
        conn.sendmail("", [rcpt], fixture("postfix-hard.eml"))  # taken: 250
    deadline = time.monotonic() + 20
    while not any("could not record a report" in r.getMessage() for r in caplog.records):
        assert time.monotonic() < deadline, "the writer never tried"
        time.sleep(0.05)
    with store.engine.begin() as conn:
        conn.execute(text("ALTER TABLE bounce_events_away RENAME TO bounce_events"))
    srv.handler.settle()
    score = store.bounce_score(reader.id)
    assert score is not None and score.suppressed_reason is not None
