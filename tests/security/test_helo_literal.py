"""Issue 42, item 3: a HELO literal must not be taken for the sending host.

Postfix writes the top ``Received:`` line as ``from HELO (rdns [REAL-IP]) by ...``: the first
``[ip]`` on it is whatever the client said in HELO. With ``HELO [10.0.0.N]`` each message
counted as a new host: 15 of 15 replies went out where ``web.rate_limit.per_ip`` allowed 10,
and six bounce reports were taken where ``bounces.per_host: 3`` allowed three. The host is the
address the MTA recorded itself: the bracketed one in its parenthesised comment, or the
``ADDR`` of an XFORWARD / XCLIENT command from a trusted relay. A real aiosmtpd receiver
(``newsletter inbound``, SMTP and LMTP), answers to a real SMTP server, SQLite and PostgreSQL.
"""

from __future__ import annotations

import smtplib
from collections.abc import Iterator
from email import message_from_bytes
from email.message import EmailMessage
from email.policy import SMTP, default
from pathlib import Path
from typing import Any

import pytest

from newsletter.config import Config, load_config
from newsletter.operations.inbound_mail import InboundServer, sending_host
from newsletter.operations.smtp_sink import free_port
from newsletter.services import Services
from newsletter.store import Store
from newsletter.subscribe import Outcome, Subscriptions
from tests.conftest import SmtpServer, write_config
from tests.security.test_bounce_oracle import BOUNCES, dsn
from tests.web.conftest import Clock, web_settings

REQUEST = "papers-request@papers.example.org"
REAL = "203.0.113.5"


def postfix_hop(helo: str, client: str = f"mail.example [{REAL}]", n: int = 0) -> str:
    """The ``Received:`` line Postfix puts on top: the client's HELO, then its own comment."""
    return (
        f"from {helo} ({client})\r\n\tby mx.papers.example.org (Postfix) with ESMTP id 4Q{n:04X}"
        f"\r\n\tfor <{REQUEST}>; Tue, 17 Nov 2026 06:00:{n % 60:02d} +0000 (UTC)"
    )


def config_for(tmp_path: Path, db_url: str, smtp: SmtpServer, **inbound: Any) -> Config:
    data = web_settings(db_url, smtp)
    data["inbound"] = {"address": REQUEST, "port": free_port(), **inbound}
    data["bounces"] = {"enabled": True, "per_host": 3}
    return load_config(write_config(tmp_path, data))


@pytest.fixture
def config(tmp_path: Path, db_url: str, smtp_server: SmtpServer) -> Config:
    return config_for(tmp_path, db_url, smtp_server)


@pytest.fixture
def store(config: Config) -> Iterator[Store]:
    s = Store(config.database_url)
    s.upgrade()
    yield s
    s.close()


def serve(config: Config, store: Store) -> InboundServer:
    service = Subscriptions(Services(config, store, clock=Clock()))
    return InboundServer(service, config.settings.inbound)


def command(sender: str, received: str | None, subject: str = "help") -> bytes:
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = REQUEST
    msg["Subject"] = subject
    msg.set_content("\n")
    hop = f"Received: {received}\r\n".encode() if received else b""
    return hop + msg.as_bytes(policy=SMTP)


def replies(smtp: SmtpServer) -> int:
    return sum(1 for r in smtp.received if r.message["Subject"] == "How to subscribe")


def test_fifteen_helo_literals_through_our_mta_are_one_host(
    config: Config, store: Store, smtp_server: SmtpServer
) -> None:
    """The review's reproduction: 15 help mails, each with another ``HELO [10.0.0.N]``, all
    from the one client Postfix recorded: 10 answered (``per_ip``), 5 dropped."""
    with serve(config, store) as server, smtplib.SMTP("127.0.0.1", server.settings.port) as c:
        for n in range(1, 16):
            sender = f"reader{n}@example.net"  # another mailbox each time: per_address stays out
            data = command(sender, postfix_hop(f"[10.0.0.{n}]", n=n))
            c.sendmail(sender, [REQUEST], data)
        outcomes = list(server.handler.outcomes)
    per_ip = config.settings.web.rate_limit.per_ip
    assert per_ip == 10
    assert replies(smtp_server) == per_ip
    assert outcomes == [Outcome.REPLY_SENT] * per_ip + [Outcome.LIMITED] * (15 - per_ip)


def test_six_bounces_with_helo_literals_are_one_host_for_bounces_per_host(
    config: Config, store: Store
) -> None:
    """``bounces.per_host: 3``: the fourth to sixth report from the same client are refused
    with 451 whatever each one said in HELO, and nothing of them is stored."""
    readers = [f"reader{i}@example.org" for i in range(6)]
    for address in readers:
        store.add_subscriber(address, topics=["gpu-kernels"], now=Clock()())
    codes = []
    with serve(config, store) as server, smtplib.SMTP("127.0.0.1", server.settings.port) as c:
        for n, address in enumerate(readers, start=1):
            hop = f"Received: {postfix_hop(f'[10.0.0.{n}]', n=n)}\r\n".encode()
            try:
                c.sendmail("<>", [BOUNCES], hop + dsn(address))
                codes.append(250)
            except smtplib.SMTPDataError as e:
                codes.append(e.smtp_code)
    assert codes == [250, 250, 250, 451, 451, 451]
    stored = []
    for address in readers:
        sub = store.get_subscriber(address)
        assert sub is not None
        stored.append(len(store.bounce_history(sub.id)))
    assert stored == [1, 1, 1, 0, 0, 0]


TRUSTED = ["127.0.0.1", "::1"]


@pytest.mark.parametrize(
    ("received", "host"),
    [
        # The review's case, and the other spellings Postfix uses.
        (postfix_hop("[10.0.0.7]"), REAL),
        (postfix_hop("[IPv6:2001:db8::7]", "unknown [IPv6:2001:db8:5::5]"), "2001:db8:5::5"),
        (postfix_hop("mail.example"), REAL),
        (postfix_hop("[203.0.113.99]", f"unknown [{REAL}]"), REAL),
        (
            f"from [10.0.0.7] (mail.example [{REAL}])\r\n\t(using TLSv1.3 with cipher "
            "TLS_AES_256_GCM_SHA384 (256/256 bits)\r\n\t key-exchange X25519)\r\n\t"
            "(No client certificate requested)\r\n\tby mx.papers.example.org (Postfix) "
            "with ESMTPS id 4QABCD; Tue, 17 Nov 2026 06:00:00 +0000 (UTC)",
            REAL,
        ),
        # A HELO that imitates the MTA's comment: two candidates, so the relay itself counts
        # (one shared bucket), never a host the client chose.
        (postfix_hop("x (spoof.example [198.51.100.9])"), "127.0.0.1"),
        (postfix_hop("x (spoof.example [198.51.100.9]) by mx.papers.example.org"), "127.0.0.1"),
        # No comment with an address (mail our MTA made itself): the relay.
        (
            "by mx.papers.example.org (Postfix, from userid 1000) id 4QABCD; Tue, 17 Nov 2026",
            "127.0.0.1",
        ),
        ("from [198.51.100.9] by mx.papers.example.org; Tue, 17 Nov 2026", "127.0.0.1"),
    ],
    ids=[
        "helo-literal",
        "ipv6",
        "helo-name",
        "helo-other-literal",
        "tls-comments",
        "fake-comment",
        "fake-comment-and-by",
        "no-from",
        "bare-literal",
    ],
)
def test_the_host_is_the_address_in_the_mtas_own_comment(received: str, host: str) -> None:
    msg = message_from_bytes(command("reader@example.net", received), policy=default)
    assert isinstance(msg, EmailMessage)
    assert sending_host(msg, "127.0.0.1", TRUSTED) == host
    # An untrusted peer is counted itself, whatever its mail says.
    assert sending_host(msg, "192.0.2.1", TRUSTED) == "192.0.2.1"


def _conversation(server: InboundServer, lmtp: bool) -> smtplib.SMTP:
    cls = smtplib.LMTP if lmtp else smtplib.SMTP
    conn = cls("127.0.0.1", server.settings.port)
    conn.ehlo()
    return conn


@pytest.mark.parametrize("lmtp", [False, True], ids=["smtp", "lmtp"])
def test_xforward_from_our_mta_names_the_host(
    tmp_path: Path, db_url: str, smtp_server: SmtpServer, store: Store, lmtp: bool
) -> None:
    """Postfix's ``lmtp_send_xforward_command = yes``: the ADDR it forwards is the host, per
    transaction, whatever the HELO literal and whatever a forged ``Received:`` says."""
    config = config_for(tmp_path, db_url, smtp_server, lmtp=lmtp)
    with serve(config, store) as server:
        conn = _conversation(server, lmtp)
        try:
            assert conn.has_extn("xforward")
            for n in range(1, 16):
                code, _ = conn.docmd("XFORWARD", f"NAME=mail.example ADDR={REAL} PORT=4{n:04d}")
                assert code == 250
                code, _ = conn.docmd("XFORWARD", f"HELO=[10.0.0.{n}] PROTO=ESMTP SOURCE=REMOTE")
                assert code == 250
                sender = f"reader{n}@example.net"
                forged = postfix_hop(f"[10.0.0.{n}]", f"forged.example [10.0.0.{n}]", n)
                conn.sendmail(sender, [REQUEST], command(sender, forged))
        finally:
            conn.quit()
        outcomes = list(server.handler.outcomes)
    assert replies(smtp_server) == 10
    assert outcomes == [Outcome.REPLY_SENT] * 10 + [Outcome.LIMITED] * 5


def test_xforward_is_per_transaction_and_unavailable_falls_back(
    config: Config, store: Store, smtp_server: SmtpServer
) -> None:
    with serve(config, store) as server:
        conn = _conversation(server, False)
        try:
            # Host one: forwarded; host two: the next mail without XFORWARD, Postfix's comment.
            assert conn.docmd("XFORWARD", "ADDR=198.51.100.1")[0] == 250
            conn.sendmail("a@example.net", [REQUEST], command("a@example.net", None))
            other = postfix_hop("[10.0.0.1]", "mail.example [198.51.100.2]")
            conn.sendmail("b@example.net", [REQUEST], command("b@example.net", other))
            # [UNAVAILABLE] (xtext-encoded or not): the Received line again.
            assert conn.docmd("XFORWARD", "ADDR=[UNAVAILABLE] NAME=[UNAVAILABLE]")[0] == 250
            conn.sendmail("c@example.net", [REQUEST], command("c@example.net", other))
            # Not while a transaction is open, and not with attributes it does not know.
            conn.mail("d@example.net")
            assert conn.docmd("XFORWARD", "ADDR=198.51.100.3")[0] == 503
            conn.rset()
            assert conn.docmd("XFORWARD", "ADDR=not-an-address")[0] == 501
            assert conn.docmd("XFORWARD", "COLOUR=blue")[0] == 501
        finally:
            conn.quit()
        hosts = list(server.handler.hosts)
    assert hosts == ["198.51.100.1", "198.51.100.2", "198.51.100.2"]


def test_xclient_from_our_mta_names_the_host_for_the_session(
    config: Config, store: Store, smtp_server: SmtpServer
) -> None:
    with serve(config, store) as server:
        conn = _conversation(server, False)
        try:
            assert conn.has_extn("xclient")
            code, _ = conn.docmd("XCLIENT", f"NAME=mail.example ADDR={REAL} HELO=[10.0.0.1]")
            assert code == 220  # a new greeting: the client says EHLO again
            conn.ehlo_resp = None
            conn.ehlo()
            for n in range(1, 4):
                sender = f"reader{n}@example.net"
                forged = postfix_hop(f"[10.0.0.{n}]", f"forged.example [10.0.0.{n}]", n)
                conn.sendmail(sender, [REQUEST], command(sender, forged))
        finally:
            conn.quit()
        hosts = list(server.handler.hosts)
    assert hosts == [REAL] * 3


@pytest.mark.parametrize("verb", ["XFORWARD", "XCLIENT"])
def test_a_peer_that_is_not_a_trusted_relay_cannot_name_its_host(
    tmp_path: Path, db_url: str, smtp_server: SmtpServer, store: Store, verb: str
) -> None:
    config = config_for(tmp_path, db_url, smtp_server, trusted_relays=["192.0.2.25"])
    with serve(config, store) as server:
        conn = _conversation(server, False)
        try:
            assert not conn.has_extn(verb.lower())
            assert conn.docmd(verb, f"ADDR={REAL}")[0] == 550
            conn.sendmail("a@example.net", [REQUEST], command("a@example.net", postfix_hop("x")))
        finally:
            conn.quit()
        hosts = list(server.handler.hosts)
    assert hosts == ["127.0.0.1"]
