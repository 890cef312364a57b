"""Issue 42, item 4: a help reply must not echo what the sender wrote.

A forged ``From: target@...`` with ``Subject: subscribe SECURITY-NOTICE... https://evil.example/
verify ...`` made the service mail the target "unknown topic security-notice...,
verify-within-24h-at-https://evil.example/verify..." from its own domain (DKIM-signed when
``dkim:`` is set). The reply says "unknown topic" and lists the real topics, nothing else of the
message. A real aiosmtpd receiver, the reply caught by a real SMTP server, SQLite and PostgreSQL.
"""

from __future__ import annotations

import smtplib
from collections.abc import Iterator
from email.message import EmailMessage

import pytest

from newsletter.config import Config
from newsletter.operations.inbound_mail import InboundServer
from newsletter.operations.smtp_sink import free_port
from newsletter.subscribe import Subscriptions
from tests.conftest import SmtpServer
from tests.web.conftest import body_text

REQUEST = "papers-request@papers.example.org"
TARGET = "target@example.net"
PHISH = (
    "subscribe SECURITY-NOTICE: your papers account will be closed, "
    "verify-within-24h-at-https://evil.example/verify?id=7 or call +1-555-0100"
)


@pytest.fixture
def inbound(web_config: Config, service: Subscriptions) -> Iterator[InboundServer]:
    settings = web_config.settings.inbound.model_copy(update={"port": free_port()})
    with InboundServer(service, settings) as server:
        yield server


def ask(server: InboundServer, sender: str, subject: str, body: str = "\n") -> None:
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = REQUEST
    msg["Subject"] = subject
    msg.set_content(body)
    with smtplib.SMTP(server.settings.host, server.settings.port) as conn:
        conn.send_message(msg, from_addr=sender, to_addrs=[REQUEST])


def words(text: str) -> set[str]:
    return {w.strip(",;:.?").lower() for w in text.split()}


@pytest.mark.parametrize("where", ["subject", "body"])
def test_an_unknown_topic_reply_holds_none_of_the_senders_text(
    inbound: InboundServer, smtp_server: SmtpServer, web_config: Config, where: str
) -> None:
    if where == "subject":
        ask(inbound, TARGET, PHISH)
    else:
        ask(inbound, TARGET, "hello", PHISH + "\nthanks\n")
    [reply] = smtp_server.messages_to(TARGET)
    text = body_text(reply)
    lowered = text.lower()
    for planted in ("security-notice", "evil.example", "https://evil", "24h", "555-0100", "closed"):
        assert planted not in lowered, planted
    assert str(reply["Subject"]) == "How to subscribe"
    # Not one word of the request but those any "unknown topic" reply has anyway.
    ask(inbound, "plain@example.net", "subscribe astrology")
    baseline = words(body_text(smtp_server.messages_to("plain@example.net")[0]))
    assert (words(PHISH) & words(text)) - baseline == set()
    # It says what was wrong, and lists the real topics.
    assert "unknown topic" in lowered
    for topic in web_config.settings.topics:
        assert topic.name in text


def test_the_reply_is_the_same_whatever_unknown_topic_was_asked_for(
    inbound: InboundServer, smtp_server: SmtpServer
) -> None:
    ask(inbound, "a@example.net", PHISH)
    ask(inbound, "b@example.net", "subscribe astrology")
    ask(inbound, "c@example.net", "subscribe gpu-kernels <script>alert(1)</script>")
    bodies = {body_text(smtp_server.messages_to(f"{x}@example.net")[0]) for x in "abc"}
    assert len(bodies) == 1
