"""Email commands through a real aiosmtpd receiver; answers arrive at the real SMTP server."""

from __future__ import annotations

import smtplib
from collections.abc import Iterator
from email.message import EmailMessage

import pytest
from fastapi.testclient import TestClient

from newsletter.config import Config
from newsletter.models import SubscriberStatus
from newsletter.operations.inbound_mail import InboundServer
from newsletter.operations.smtp_sink import free_port
from newsletter.subscribe import Command, Subscriptions, parse_command
from tests.conftest import SmtpServer
from tests.web.conftest import body_text, link_to

REQUEST = "papers-request@papers.example.org"


@pytest.fixture(params=[False, True], ids=["smtp", "lmtp"])
def inbound(
    request: pytest.FixtureRequest, web_config: Config, service: Subscriptions
) -> Iterator[InboundServer]:
    settings = web_config.settings.inbound.model_copy(
        update={"port": free_port(), "lmtp": request.param}
    )
    with InboundServer(service, settings) as server:
        yield server


def send(
    server: InboundServer,
    subject: str,
    body: str = "",
    sender: str = "ada@example.org",
    **headers: str,
) -> None:
    msg = EmailMessage()
    msg["From"] = f"Ada <{sender}>"
    msg["To"] = REQUEST
    msg["Subject"] = subject
    for k, v in headers.items():
        msg[k.replace("_", "-")] = v
    msg.set_content(body or "\n")
    settings = server.handler.settings
    cls = smtplib.LMTP if settings.lmtp else smtplib.SMTP
    with cls(settings.host, settings.port) as conn:
        conn.send_message(msg, from_addr=sender, to_addrs=[REQUEST])


def test_parse_command() -> None:
    assert parse_command("subscribe gpu-kernels rendering", "") == Command(
        "subscribe", ("gpu-kernels", "rendering")
    )
    assert parse_command("Re: Unsubscribe", "") == Command("unsubscribe")
    assert parse_command("hello", "\n\n  HELP me\nsubscribe") == Command("help", ("me",))
    assert parse_command("what is this", "I'd like papers") is None


def test_subscribe_by_mail_is_double_opt_in(
    inbound: InboundServer, smtp_server: SmtpServer, client: TestClient, service: Subscriptions
) -> None:
    send(inbound, "subscribe rendering")
    assert service.store.get_subscriber("ada@example.org") is None  # a forged From changes nothing
    [reply] = smtp_server.messages_to("ada@example.org")
    assert reply["Auto-Submitted"] == "auto-replied"
    assert client.post(link_to(reply, "confirm")).status_code == 200
    sub = service.store.get_subscriber("ada@example.org")
    assert (
        sub is not None and sub.topics == ("rendering",) and sub.status is SubscriberStatus.ACTIVE
    )
    consent = service.store.consent_record(sub.id)
    assert consent is not None and consent["how"] == "email"

    send(inbound, "unsubscribe")
    unsub = smtp_server.messages_to("ada@example.org")[-1]
    assert service.store.get_subscriber("ada@example.org").status is SubscriberStatus.ACTIVE  # type: ignore[union-attr]
    assert client.post(link_to(unsub, "unsubscribe")).status_code == 200
    assert service.store.get_subscriber("ada@example.org").status is SubscriberStatus.UNSUBSCRIBED  # type: ignore[union-attr]


def test_topics_help_and_unknown_topics_are_answered(
    inbound: InboundServer, smtp_server: SmtpServer
) -> None:
    send(inbound, "topics", sender="bob@example.org")
    send(inbound, "subscribe astrology", sender="cy@example.org")
    [topics] = smtp_server.messages_to("bob@example.org")
    assert "gpu-kernels (GPU kernels)" in body_text(topics)
    unknown = body_text(smtp_server.messages_to("cy@example.org")[0])
    assert "unknown topic." in unknown and "astrology" not in unknown  # never quoted back
    assert "gpu-kernels (GPU kernels)" in unknown


def test_robots_and_strangers_get_no_answer(
    inbound: InboundServer, smtp_server: SmtpServer
) -> None:
    send(inbound, "subscribe", Auto_Submitted="auto-replied")
    send(inbound, "help", Precedence="bulk")
    settings = inbound.handler.settings
    with pytest.raises(smtplib.SMTPRecipientsRefused):
        cls = smtplib.LMTP if settings.lmtp else smtplib.SMTP
        with cls(settings.host, settings.port) as conn:
            conn.sendmail(
                "ada@example.org", ["someone-else@papers.example.org"], b"Subject: help\r\n\r\n"
            )
    assert smtp_server.received == []
