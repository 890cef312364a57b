"""Issue 16, item 8: per-client limits count an IPv6 client by its /64, per-address limits count
``bomb+1@``, ``Bomb+2@`` ... as the one mailbox they reach. Through the real app (the JSON API
and the form), a real SMTP server, SQLite and PostgreSQL."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.testclient import TestClient

from newsletter.config import Config
from newsletter.subscribe import client_network, mailbox
from tests.conftest import SmtpServer
from tests.web.conftest import BASE


def ask(app: FastAPI, client: str, email: str) -> int:
    with TestClient(app, base_url=BASE, client=(client, 40000)) as c:
        r = c.post("/api/subscribe", json={"email": email, "topics": ["gpu-kernels"]})
        return r.status_code


def test_twelve_addresses_of_one_ipv6_64_share_one_limit(
    app: FastAPI, web_config: Config, smtp_server: SmtpServer
) -> None:
    per_ip = web_config.settings.web.rate_limit.per_ip
    answers = [ask(app, f"2001:db8:1:2::{i + 1:x}", f"r{i}@example.org") for i in range(12)]
    assert answers == [202] * per_ip + [429] * (12 - per_ip)
    assert len(smtp_server.received) == per_ip
    assert ask(app, "2001:db8:1:3::1", "other@example.org") == 202  # the next /64 is another
    assert ask(app, "::ffff:192.0.2.7", "v4@example.org") == 202
    assert client_network("::ffff:192.0.2.7") == "192.0.2.7"
    assert client_network("2001:db8:1:2:aaaa:bbbb:cccc:dddd") == "2001:db8:1:2::/64"


def test_plus_tags_and_letter_case_do_not_multiply_the_mails_to_one_mailbox(
    app: FastAPI, web_config: Config, smtp_server: SmtpServer
) -> None:
    per_address = web_config.settings.web.rate_limit.per_address
    bombs = ["bomb+1@example.org", "bomb+2@example.org", "Bomb+3@example.org", "BOMB@example.org"]
    bombs += [f"bomb+{i}@example.org" for i in range(4, 9)]
    for i, email in enumerate(bombs):  # each from another network: only the mailbox limits
        assert ask(app, f"198.51.100.{i + 1}", email) == 202  # the same answer for all
    to_bomb = [r for r in smtp_server.received if mailbox(r.rcpt_tos[0]) == "bomb@example.org"]
    assert len(to_bomb) == per_address == 3
    assert ask(app, "198.51.100.99", "bombe@example.org") == 202
    assert len(smtp_server.received) == per_address + 1


def test_dots_at_gmail_do_not_multiply_the_mails_to_one_mailbox(
    app: FastAPI, web_config: Config, smtp_server: SmtpServer
) -> None:
    """Issue 27, item 8: Gmail ignores dots in the local part, and googlemail.com is gmail.com:
    ``v.ictim@gmail.com``, ``vi.ctim@gmail.com``, ... each got their own three mails."""
    per_address = web_config.settings.web.rate_limit.per_address
    dotted = [
        "v.ictim@gmail.com",
        "vi.ctim@gmail.com",
        "vic.tim@gmail.com",
        "V.I.C.T.I.M@Gmail.com",
    ]
    dotted += ["victim+x@googlemail.com", "v.i.ctim@googlemail.com", "victim@gmail.com"]
    for i, email in enumerate(dotted):  # each from another network: only the mailbox limits
        assert ask(app, f"198.51.100.{i + 1}", email) == 202  # the same answer for all
    assert len(smtp_server.received) == per_address == 3
    assert {mailbox(r.rcpt_tos[0]) for r in smtp_server.received} == {"victim@gmail.com"}
    # Elsewhere a dot makes another mailbox.
    assert ask(app, "198.51.100.98", "v.ictim@example.org") == 202
    assert ask(app, "198.51.100.99", "vi.ctim@example.org") == 202
    assert len(smtp_server.received) == per_address + 2
