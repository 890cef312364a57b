"""Issue 27 item 9: two inputs that raised instead of being refused.

An SNS ``SigningCertURL`` whose port is not a number made ``urlsplit(...).port`` raise, and the
webhook answered 500 with a traceback; a command mail with 3,000 nested multiparts exhausted the
mail parser, and the inbound server answered ``500 Error: (RecursionError)`` with a traceback.
Each is now a refusal with the documented answer (403; ``554 5.6.0``) and one log line.
"""

from __future__ import annotations

import json
import logging
import smtplib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from newsletter.bounces.sns import aws_url
from newsletter.config import Config, load_config
from newsletter.operations.inbound_mail import MAX_MIME_DEPTH, InboundServer
from newsletter.operations.smtp_sink import free_port
from newsletter.store import Store
from newsletter.subscribe import Subscriptions
from newsletter.web import create_app
from tests.bounces.providers import TOPIC, SnsSigner, fixture, sns_notification
from tests.conftest import SmtpServer, base_config, write_config

REQUEST = "papers-request@papers.example.org"
BAD_PORTS = (
    "https://sns.us-east-1.amazonaws.com:abc/SimpleNotificationService-x.pem",
    "https://sns.us-east-1.amazonaws.com:99999/SimpleNotificationService-x.pem",
    "https://sns.us-east-1.amazonaws.com:-1/SimpleNotificationService-x.pem",
)


def no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    for record in caplog.records:
        assert record.exc_info is None and record.exc_text is None, record.getMessage()
        assert "Traceback" not in record.getMessage()


@pytest.fixture
def ses_client(tmp_path: Path) -> Iterator[TestClient]:
    """The app with SES webhooks on a configured topic and the real certificate URL check."""
    data = base_config(f"sqlite:///{tmp_path}/webhooks.db")
    data["web"] = {"secret_key": "a-test-secret-that-signs-links-0123456789"}
    data["bounces"] = {"webhooks": {"ses": {"topic_arns": [TOPIC]}}}
    config = load_config(write_config(tmp_path, data))
    store = Store(config.database_url)
    store.upgrade()
    with TestClient(create_app(config, store), raise_server_exceptions=False) as client:
        yield client
    store.close()


@pytest.mark.parametrize("cert_url", BAD_PORTS)
def test_an_sns_certificate_url_with_a_bad_port_is_refused_403_in_one_line(
    ses_client: TestClient, caplog: pytest.LogCaptureFixture, cert_url: str
) -> None:
    assert not aws_url(cert_url)
    signer = SnsSigner()
    message = signer.sign(
        sns_notification(fixture("ses-bounce-permanent.json"), datetime.now(UTC), cert_url)
    )
    caplog.set_level(logging.INFO)
    response = ses_client.post(
        "/webhooks/ses",
        content=json.dumps(message).encode(),
        headers={"Content-Type": "text/plain; charset=UTF-8", "x-amz-sns-topic-arn": TOPIC},
    )
    assert response.status_code == 403, response.text
    assert response.json() == {"detail": "forbidden"}
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert refusals == [
        "webhook ses refused (403): SigningCertURL is not on an Amazon SNS host; client testclient"
    ]
    no_traceback(caplog)


@pytest.fixture
def inbound(web_config: Config, service: Subscriptions) -> Iterator[InboundServer]:
    settings = web_config.settings.inbound.model_copy(update={"port": free_port()})
    with InboundServer(service, settings) as server:
        yield server


def nested(levels: int, sender: str = "reader@example.net") -> bytes:
    """A ``help`` command inside ``levels`` nested multipart/mixed parts."""
    lines = [f"From: {sender}", f"To: {REQUEST}", "Subject: help", "MIME-Version: 1.0"]
    for i in range(levels):
        lines += [f'Content-Type: multipart/mixed; boundary="b{i}"', "", f"--b{i}"]
    lines += ["Content-Type: text/plain", "", "help"]
    lines += [f"--b{i}--" for i in reversed(range(levels))]
    return ("\r\n".join(lines) + "\r\n").encode()


def send(server: InboundServer, data: bytes, sender: str = "reader@example.net") -> tuple[int, str]:
    settings = server.handler.settings
    with smtplib.SMTP(settings.host, settings.port, timeout=60) as conn:
        try:
            conn.sendmail(sender, [REQUEST], data)
        except smtplib.SMTPDataError as e:
            return e.smtp_code, e.smtp_error.decode()
    return 250, "OK"


@pytest.mark.parametrize("levels", [3000, MAX_MIME_DEPTH + 1])
def test_a_command_mail_nested_too_deeply_is_refused_554_in_one_line(
    inbound: InboundServer,
    smtp_server: SmtpServer,
    caplog: pytest.LogCaptureFixture,
    levels: int,
) -> None:
    data = nested(levels)
    assert len(data) < inbound.handler.settings.max_size  # not refused for its size
    caplog.set_level(logging.INFO)
    code, text = send(inbound, data)
    assert code == 554, text
    assert (
        text
        == f"5.6.0 cannot read this message as a command: MIME parts nested more than {MAX_MIME_DEPTH} deep"
    )
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [
        f"inbound: refused a message from 'reader@example.net' via 127.0.0.1: "
        f"MIME parts nested more than {MAX_MIME_DEPTH} deep"
    ]
    no_traceback(caplog)
    assert smtp_server.received == []  # nothing answered

    # A command nested as deep as allowed is still answered.
    code, _ = send(inbound, nested(MAX_MIME_DEPTH - 1))
    assert code == 250
    assert [r.message["Subject"] for r in smtp_server.received] == ["How to subscribe"]
