"""Issue 16 item 11: the ``mailto:`` of ``List-Unsubscribe`` reaches ``newsletter inbound``.

A digest sent through the real CLI to a real SMTP server carries ``mailto:`` the request address
(``inbound.address``), never the From address that the inbound server refuses; without a request
address there is no mailto at all. An ``unsubscribe`` mail to that mailto, sent through the real
inbound server, is accepted and answered with a working unsubscribe link.
"""

from __future__ import annotations

import re
import smtplib
from email.message import EmailMessage
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from newsletter.cli import cli
from newsletter.config import load_config
from newsletter.models import SubscriberStatus
from newsletter.operations.inbound_mail import InboundServer
from newsletter.operations.smtp_sink import free_port
from newsletter.services import Services
from newsletter.store import Store
from newsletter.subscribe import Subscriptions
from newsletter.web import create_app
from tests.conftest import SmtpServer, write_config
from tests.web.conftest import BASE, link_to, web_settings

READER = "kernels@example.org"


def send_digest(tmp_path: Path, db_url: str, smtp: SmtpServer, inbound: dict[str, Any]) -> Path:
    data = web_settings(db_url, smtp)
    data["inbound"] = inbound
    data["subscribers"] = [{"email": READER, "topics": ["gpu-kernels"]}]
    config = write_config(tmp_path, data)
    for args in (["db", "upgrade"], ["fetch"], ["send", "--now"]):
        result = CliRunner().invoke(cli, ["--config", str(config), *args])
        assert result.exit_code == 0, result.output
    return config


def list_unsubscribe(smtp: SmtpServer) -> list[str]:
    [digest] = smtp.messages_to(READER)
    header = " ".join(str(digest["List-Unsubscribe"]).split())
    return re.findall(r"<([^<>]+)>", header)


@pytest.mark.parametrize(
    "request_address",
    ["papers-request@papers.example.org", "papers-request@bücher.example"],
    ids=["ascii", "idn"],
)
def test_the_mailto_is_the_request_address_and_inbound_takes_it(
    request_address: str, tmp_path: Path, db_url: str, smtp_server: SmtpServer
) -> None:
    port = free_port()
    config_path = send_digest(
        tmp_path, db_url, smtp_server, {"address": request_address, "port": port}
    )
    https, mailto = list_unsubscribe(smtp_server)
    assert https.startswith(f"{BASE}/unsubscribe/")
    target = urlsplit(mailto)
    wire = request_address.replace("bücher", "xn--bcher-kva")
    assert (target.scheme, target.path) == ("mailto", wire)
    assert parse_qs(target.query) == {"subject": ["unsubscribe"]}

    # What a mail client does with that mailto, through the real inbound server.
    config = load_config(config_path)
    store = Store(config.database_url)
    try:
        service = Subscriptions(Services(config, store))
        with InboundServer(service, config.settings.inbound):
            msg = EmailMessage()
            msg["From"] = READER
            msg["To"] = target.path
            msg["Subject"] = parse_qs(target.query)["subject"][0]
            msg.set_content("\n")
            with smtplib.SMTP("127.0.0.1", port) as conn:
                refused = conn.send_message(msg, from_addr=READER, to_addrs=[target.path])
            assert refused == {}
        answer = smtp_server.messages_to(READER)[-1]
        assert answer["Subject"] != smtp_server.messages_to(READER)[0]["Subject"]
        with TestClient(create_app(config, store, None), base_url=BASE) as client:
            assert client.post(link_to(answer, "unsubscribe")).status_code == 200
        sub = store.get_subscriber(READER)
        assert sub is not None and sub.status is SubscriberStatus.UNSUBSCRIBED
    finally:
        store.close()


def test_no_request_address_means_no_mailto(
    tmp_path: Path, db_url: str, smtp_server: SmtpServer
) -> None:
    send_digest(tmp_path, db_url, smtp_server, {})
    [https] = list_unsubscribe(smtp_server)
    assert https.startswith(f"{BASE}/unsubscribe/")
    [digest] = smtp_server.messages_to(READER)
    assert "mailto" not in str(digest["List-Unsubscribe"])
    assert digest["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
