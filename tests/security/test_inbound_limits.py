"""Issue 16, item 3: email commands are rate limited like the web form: per sending host, per
address (``+tag`` ignored, one confirmation per window), and in all per hour; what is dropped is
logged. A real aiosmtpd receiver, answers to a real SMTP server, SQLite and PostgreSQL."""

from __future__ import annotations

import logging
import smtplib
from collections.abc import Iterator
from email.message import EmailMessage

import pytest

from newsletter.config import Config
from newsletter.operations.inbound_mail import InboundServer, sending_host
from newsletter.operations.smtp_sink import free_port
from newsletter.subscribe import Outcome, Subscriptions, client_network
from tests.conftest import SmtpServer

REQUEST = "papers-request@papers.example.org"


@pytest.fixture
def inbound(web_config: Config, service: Subscriptions) -> Iterator[InboundServer]:
    settings = web_config.settings.inbound.model_copy(update={"port": free_port()})
    with InboundServer(service, settings) as server:
        yield server


def forged(sender: str, subject: str = "subscribe", received: str | None = None) -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = REQUEST
    msg["Subject"] = subject
    if received:
        msg["Received"] = received
    msg.set_content("\n")
    return msg


def confirmations(smtp: SmtpServer) -> list[str]:
    return [
        r.rcpt_tos[0] for r in smtp.received if r.message["Subject"] == "Confirm your subscription"
    ]


def test_25_forged_subscribe_mails_over_one_connection_do_not_make_25_confirmations(
    inbound: InboundServer,
    smtp_server: SmtpServer,
    web_config: Config,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = inbound.handler.settings
    caplog.set_level(logging.WARNING, logger="newsletter.operations.inbound_mail")
    with smtplib.SMTP(settings.host, settings.port) as conn:
        for i in range(25):
            victim = f"victim{i}@example.net"
            conn.send_message(forged(victim), from_addr=victim, to_addrs=[REQUEST])
    per_host = web_config.settings.web.rate_limit.per_ip
    assert len(confirmations(smtp_server)) == per_host == 10
    assert inbound.handler.outcomes.count(Outcome.LIMITED) == 25 - per_host
    dropped = [r for r in caplog.records if "over its limit" in r.getMessage()]
    assert len(dropped) == 25 - per_host and "127.0.0.1" in dropped[0].getMessage()


def test_one_confirmation_per_address_and_tags_count_as_one_mailbox(
    inbound: InboundServer, smtp_server: SmtpServer
) -> None:
    settings = inbound.handler.settings
    senders = ["bomb@example.net", "bomb+1@example.net", "Bomb+2@Example.net", "bomb@example.net"]
    with smtplib.SMTP(settings.host, settings.port) as conn:
        for i, sender in enumerate(senders):  # each from another host, through our MTA
            hop = f"from mx{i}.example.net (mx{i}.example.net [198.51.100.{i + 1}]) by us"
            conn.send_message(forged(sender, received=hop), from_addr=sender, to_addrs=[REQUEST])
    assert len(confirmations(smtp_server)) == 1
    assert inbound.handler.outcomes == [Outcome.CONFIRM_SENT] + [Outcome.LIMITED] * 3


def test_overall_hourly_limit_and_the_sending_host_behind_our_mta(
    web_config: Config, service: Subscriptions, smtp_server: SmtpServer
) -> None:
    settings = web_config.settings.inbound.model_copy(
        update={"port": free_port(), "max_per_hour": 4}
    )
    hosts = [f"2001:db8:{i}::1" for i in range(6)]  # six different /64s: each under per_ip
    with (
        InboundServer(service, settings) as server,
        smtplib.SMTP(settings.host, settings.port) as conn,
    ):
        for i, host in enumerate(hosts):
            sender = f"reader{i}@example.net"
            hop = f"from client.example.net (client.example.net [IPv6:{host}]) by mx.papers.example.org"
            conn.send_message(forged(sender, "help", hop), from_addr=sender, to_addrs=[REQUEST])
        outcomes = server.handler.outcomes
    assert outcomes == [Outcome.REPLY_SENT] * 4 + [Outcome.LIMITED] * 2
    assert len(smtp_server.received) == 4
    origin_hosts = {r.rcpt_tos[0] for r in smtp_server.received}
    assert origin_hosts == {f"reader{i}@example.net" for i in range(4)}


def test_the_sending_host_comes_from_our_mta_only() -> None:
    msg = forged(
        "reader@example.net",
        received="from evil.example (evil.example [IPv6:2001:db8:7:7::9]) by mx.papers.example.org",
    )
    trusted = ["127.0.0.1", "::1"]
    assert sending_host(msg, "127.0.0.1", trusted) == "2001:db8:7:7::9"
    assert client_network(sending_host(msg, "127.0.0.1", trusted)) == "2001:db8:7:7::/64"
    # A client talking to us directly cannot choose the host it is counted as.
    assert sending_host(msg, "203.0.113.9", trusted) == "203.0.113.9"
    assert sending_host(forged("reader@example.net"), "127.0.0.1", trusted) == "127.0.0.1"
