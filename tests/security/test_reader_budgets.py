"""Issue 42, item 5: a stranger cannot spend a reader's budget.

Subscribe requests, "Email me a link", the ``unsubscribe`` mail command and help replies drew on
one per-address budget (``web.rate_limit.per_address``, 3 a day): three anonymous
``POST /api/subscribe`` naming a reader made her own "Email me a link" answer 429, and her mailed
``unsubscribe`` was accepted (250) and never answered. Requests that prove the reader (a valid
token: "Email me a link") and unsubscribe confirmations now draw on budgets of their own, which
anonymous requests do not touch. Real digest through a real SMTP server, the real app, a real
aiosmtpd receiver for the mail command, SQLite and PostgreSQL.
"""

from __future__ import annotations

import smtplib
from collections.abc import Iterator
from email.message import EmailMessage

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from newsletter.config import Config
from newsletter.operations.inbound_mail import InboundServer
from newsletter.operations.smtp_sink import free_port
from newsletter.subscribe import Outcome, Subscriptions
from tests.conftest import SmtpServer
from tests.security.helpers import ADA
from tests.web.conftest import BASE, Clock, csrf_of, link_to

REQUEST = "papers-request@papers.example.org"


@pytest.fixture
def inbound(web_config: Config, service: Subscriptions) -> Iterator[InboundServer]:
    settings = web_config.settings.inbound.model_copy(update={"port": free_port()})
    with InboundServer(service, settings) as server:
        yield server


def stranger_asks(app: FastAPI, n: int, email: str) -> int:
    """An anonymous ``POST /api/subscribe`` naming ``email``, from the ``n``-th network."""
    with TestClient(app, base_url=BASE, client=(f"198.51.100.{n}", 40000)) as c:
        r = c.post("/api/subscribe", json={"email": email, "topics": ["gpu-kernels"]})
        return r.status_code


def mail_command(server: InboundServer, sender: str, subject: str) -> None:
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = REQUEST
    msg["Subject"] = subject
    msg.set_content("\n")
    settings = server.handler.settings
    with smtplib.SMTP(settings.host, settings.port) as conn:
        conn.send_message(msg, from_addr=sender, to_addrs=[REQUEST])


def subjects(smtp: SmtpServer, email: str) -> list[str]:
    return [str(m["Subject"]) for m in smtp.messages_to(email) if not m["List-Id"]]


def test_anonymous_requests_do_not_spend_the_readers_own_budgets(
    app: FastAPI,
    client: TestClient,
    web_config: Config,
    inbound: InboundServer,
    smtp_server: SmtpServer,
    clock: Clock,
    mailed: dict[str, str],
) -> None:
    rl = web_config.settings.web.rate_limit
    clock.advance(days=200)  # the digest's own manage links are too old: "Email me a link"
    ask = f"{mailed['archive/view']}/links"

    # Three strangers name Ada on the API: the anonymous budget is spent (each got its mail,
    # a "your subscription" one since Ada is subscribed), and a fourth is not mailed.
    assert [stranger_asks(app, n, ADA) for n in range(1, 5)] == [202] * 4
    assert (
        subjects(smtp_server, ADA)
        == ["Your subscription"] * rl.per_address
        == ["Your subscription"] * 3
    )
    # A forged "help" from her address is anonymous too: not answered any more.
    mail_command(inbound, ADA, "help")
    assert inbound.handler.outcomes[-1] is Outcome.LIMITED
    assert len(subjects(smtp_server, ADA)) == 3

    # Her own "Email me a link", proven by the token of her digest's view link: still mailed.
    form = client.get(ask)
    sent = client.post(ask, data={"csrf": csrf_of(form.text)})
    assert sent.status_code == 200 and "Check your inbox" in sent.text
    assert (
        subjects(smtp_server, ADA)[-1] == "Your subscription"
        and len(subjects(smtp_server, ADA)) == 4
    )
    fresh = client.get(link_to(smtp_server.messages_to(ADA)[-1], "manage"))
    assert fresh.status_code == 200 and 'name="topics"' in fresh.text

    # Her mailed "unsubscribe": still answered with the one-button unsubscribe link.
    mail_command(inbound, ADA, "unsubscribe")
    assert inbound.handler.outcomes[-1] is Outcome.UNSUBSCRIBE_SENT
    assert subjects(smtp_server, ADA)[-1] == "Unsubscribe"
    unsubscribe = link_to(smtp_server.messages_to(ADA)[-1], "unsubscribe")
    assert client.post(unsubscribe).status_code == 200

    # More strangers change nothing for her, and her own budgets have their own limits.
    assert [stranger_asks(app, n, ADA) for n in range(5, 9)] == [202] * 4
    assert len(subjects(smtp_server, ADA)) == 5


def test_the_proven_and_unsubscribe_budgets_have_limits_of_their_own(
    client: TestClient,
    web_config: Config,
    inbound: InboundServer,
    smtp_server: SmtpServer,
    clock: Clock,
    mailed: dict[str, str],
) -> None:
    """Anyone holding a forwarded digest has its token, and anyone can forge a From: each budget
    still ends, and the anonymous one is untouched by them."""
    rl = web_config.settings.web.rate_limit
    clock.advance(days=200)
    ask = f"{mailed['archive/view']}/links"
    form = client.get(ask)
    answers = [
        client.post(ask, data={"csrf": csrf_of(form.text)}).status_code
        for _ in range(rl.links_per_address + 1)
    ]
    assert answers == [200] * rl.links_per_address + [429]
    for _ in range(rl.unsubscribe_per_address + 1):
        mail_command(inbound, ADA, "unsubscribe")
    assert inbound.handler.outcomes == [Outcome.UNSUBSCRIBE_SENT] * rl.unsubscribe_per_address + [
        Outcome.LIMITED
    ]
    # The anonymous budget is whole: a help reply and two subscribe requests get through.
    mail_command(inbound, ADA, "help")
    assert inbound.handler.outcomes[-1] is Outcome.REPLY_SENT
    expected = rl.links_per_address + rl.unsubscribe_per_address + 1
    assert len(subjects(smtp_server, ADA)) == expected
