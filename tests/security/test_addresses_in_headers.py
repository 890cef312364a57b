"""Issue 16 item 10: the To: of confirmation, manage, help and unsubscribe mails is the address
the envelope carries (an IDN domain as ``xn--``, never an encoded-word), and an address holding
an encoded-word (``=?utf-8?q?x?=@example.org``) is refused wherever addresses come in.
"""

from __future__ import annotations

from collections.abc import Callable
from email import message_from_bytes, policy
from email.headerregistry import Address
from email.message import EmailMessage
from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from newsletter.addresses import InvalidAddress, normalize_address
from newsletter.cli import cli
from newsletter.subscribe import Choices, InvalidRequest, Outcome, Subscriptions
from tests.conftest import Received, SmtpServer, base_config, write_config
from tests.web.conftest import link_to

IDN = "reader@bücher.example"
WIRE = "reader@xn--bcher-kva.example"


def to_header(received: Received) -> tuple[str, list[Address]]:
    """The raw To: line and the addresses a standard parser reads in it."""
    head = received.data.split(b"\r\n\r\n", 1)[0].replace(b"\r\n ", b" ")
    [raw] = [line for line in head.split(b"\r\n") if line.lower().startswith(b"to:")]
    msg = message_from_bytes(received.data, policy=policy.default)
    assert isinstance(msg, EmailMessage)
    return raw.decode(), list(msg["To"].addresses)


def assert_to_is_envelope(received: Received) -> None:
    raw, addresses = to_header(received)
    assert "=?" not in raw, raw  # no encoded-word inside an address
    assert [a.addr_spec for a in addresses] == received.rcpt_tos == [WIRE]


@pytest.mark.parametrize(
    "mail",
    ["confirm", "manage", "help", "unsubscribe"],
)
def test_service_mails_carry_the_envelope_address_in_to(
    mail: str, service: Subscriptions, smtp_server: SmtpServer, client: TestClient
) -> None:
    choices = Choices(("rendering",), "UTC")
    sends: dict[str, Callable[[], Outcome]] = {
        "confirm": lambda: service.request(IDN, choices, via="web", origin="test"),
        "help": lambda: service.reply_info(IDN, "help"),
        "unsubscribe": lambda: service.request_unsubscribe(IDN),
    }
    if mail == "manage":
        service.request(IDN, choices, via="web", origin="test")
        confirm = smtp_server.received.pop()
        assert client.post(link_to(confirm.message, "confirm")).status_code == 200
        sends["manage"] = lambda: service.request(IDN, choices, via="web", origin="test")
    outcome = sends[mail]()
    assert outcome is not Outcome.LIMITED
    [received] = smtp_server.received
    assert_to_is_envelope(received)


def test_a_non_ascii_local_part_is_written_as_utf8_not_encoded(service: Subscriptions) -> None:
    envelope = service.message(
        "zoë@bücher.example", "Hi", "web/mail/help.txt", {"problem": None}, reply=True
    )
    head = envelope.data.split(b"\r\n\r\n", 1)[0]
    assert b"To: zo\xc3\xab@xn--bcher-kva.example" in head.split(b"\r\n")
    assert b"=?" not in head.split(b"To:", 1)[1].split(b"\r\n", 1)[0]


ENCODED = [
    "=?utf-8?q?x?=@example.org",
    "=?utf-8?b?dmljdGlt?=@example.org",
    "a=?utf-8?q?x?=b@example.org",
    "=?UTF-8?Q?x?=@example.org",
]


@pytest.mark.parametrize("address", ENCODED)
def test_encoded_words_in_addresses_are_refused(address: str) -> None:
    with pytest.raises(InvalidAddress, match="encoded-word"):
        normalize_address(address)


def test_encoded_word_addresses_are_refused_by_the_form_api_and_cli(
    client: TestClient, service: Subscriptions, smtp_server: SmtpServer, tmp_path: Path, db_url: str
) -> None:
    address = ENCODED[0]
    with pytest.raises(InvalidRequest, match="encoded-word"):
        service.request(address, Choices(("rendering",), "UTC"), via="web", origin="test")
    r = client.post("/api/subscribe", json={"email": address, "topics": ["rendering"]})
    assert r.status_code == 400 and r.json()["field"] == "email"
    assert "encoded-word" in r.text
    assert smtp_server.received == []

    config = write_config(tmp_path, base_config(db_url), name="cli.yaml")
    assert CliRunner().invoke(cli, ["--config", str(config), "db", "upgrade"]).exit_code == 0
    added = CliRunner().invoke(
        cli, ["--config", str(config), "subscribers", "add", address, "--topic", "rendering"]
    )
    assert added.exit_code == 1 and "encoded-word" in added.output
    listed = base_config(db_url, subscribers=[{"email": address, "topics": ["rendering"]}])
    bad = write_config(tmp_path, listed, name="bad.yaml")
    shown = CliRunner().invoke(cli, ["--config", str(bad), "subscribers", "list"])
    assert shown.exit_code != 0 and "encoded-word" in shown.output
