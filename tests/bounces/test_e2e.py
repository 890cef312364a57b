"""End to end: a digest goes out through the aiosmtpd relay with a VERP envelope sender; a DSN
to that sender, delivered over SMTP to the running ``newsletter inbound`` process, raises the
score and suppresses the address in the database (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import os
import smtplib
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from fastapi.testclient import TestClient

from newsletter.cli import cli
from newsletter.config import load_config
from newsletter.models import SubscriberStatus
from newsletter.operations.smtp_sink import free_port
from newsletter.store import Store
from newsletter.web import create_app
from tests.bounces.helpers import fixture
from tests.conftest import SmtpServer, base_config, write_config

READER = "reader@example.net"
OTHER = "other@example.net"


def run(config: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--config", str(config), *args], catch_exceptions=False)


@pytest.fixture
def config_path(tmp_path: Path, db_url: str, smtp_server: SmtpServer) -> Path:
    data = base_config(
        db_url,
        smtp_server,
        subscribers=[
            {"email": READER, "topics": ["gpu-kernels"]},
            {"email": OTHER, "topics": ["gpu-kernels"]},
        ],
        inbound={"address": "papers-request@papers.example.org", "port": free_port()},
        bounces={"enabled": True, "threshold": 2.0, "hard_weight": 2.0},
        alerts={"email": "ops@papers.example.org"},
        web={"secret_key": "a-test-secret-that-signs-links-0123456789"},
    )
    path = write_config(tmp_path, data)
    assert run(path, "db", "upgrade").exit_code == 0
    return path


@pytest.fixture
def inbound(config_path: Path) -> Iterator[int]:
    """``newsletter inbound`` as the operator runs it, in its own process; yields its port."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "newsletter",
            "--config",
            str(config_path),
            "inbound",
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if proc.poll() is not None:
                    out = proc.stdout.read().decode() if proc.stdout else ""
                    raise AssertionError(out) from None
                time.sleep(0.05)
        else:
            raise AssertionError("newsletter inbound did not start listening")
        yield port
    finally:
        proc.terminate()
        proc.communicate(timeout=10)  # reads and closes its output


def deliver(port: int, rcpt: str, data: bytes) -> None:
    with smtplib.SMTP("127.0.0.1", port) as conn:
        conn.sendmail("", [rcpt], data)  # bounces come with an empty MAIL FROM


def applied(db_url: str, check: Callable[[Store], bool], timeout: float = 60) -> None:
    """Wait until ``check`` holds: the inbound server applies a report just after answering it
    (the answer's timing must not tell who is subscribed, issue 42)."""
    store = Store(db_url)
    try:
        deadline = time.monotonic() + timeout
        while not check(store):
            assert time.monotonic() < deadline, "the reports were not applied"
            time.sleep(0.05)
    finally:
        store.close()


def status_of(store: Store, address: str) -> SubscriberStatus | None:
    sub = store.get_subscriber(address)
    return None if sub is None else sub.status


def test_a_bounce_to_the_digests_verp_sender_suppresses_the_reader(
    config_path: Path,
    smtp_server: SmtpServer,
    inbound: int,
    db_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert run(config_path, "fetch").exit_code == 0
    sent = run(config_path, "send", "--now")
    assert sent.exit_code == 0, sent.output
    by_rcpt = {m.rcpt_tos[0]: m for m in smtp_server.received}
    digest = by_rcpt[READER]
    local, _, domain = digest.mail_from.partition("@")
    assert local.startswith("bounces+") and domain == "papers.example.org"
    assert digest.mail_from != by_rcpt[OTHER].mail_from  # one signed sender per subscriber
    assert digest.message["From"] == "Trending Papers <digest@papers.example.org>"
    message_id = str(digest.message["Message-ID"])

    # A forged bounce about the other reader, to the plain bounce address: nothing happens.
    deliver(inbound, "bounces@papers.example.org", fixture("postfix-hard.eml", address=OTHER))
    # A malformed DSN is refused with a log line; the server goes on.
    deliver(inbound, digest.mail_from, fixture("malformed-dsn.eml"))
    # The real bounce, to the envelope sender the relay really saw.
    bounce = fixture("postfix-hard.eml", address=READER, message_id=message_id)
    deliver(inbound, digest.mail_from, bounce)
    deliver(inbound, digest.mail_from, bounce)  # delivered twice: counted once

    def all_applied(st: Store) -> bool:
        other = st.get_subscriber(OTHER)
        return (
            status_of(st, READER) is SubscriberStatus.SUPPRESSED
            and other is not None
            and bool(st.bounce_history(other.id))  # the forged one, kept unverified
            and bool(smtp_server.messages_to("ops@papers.example.org"))  # the alert
        )

    applied(db_url, all_applied)

    store = Store(db_url)
    try:
        reader = store.get_subscriber(READER)
        other = store.get_subscriber(OTHER)
        assert reader is not None and other is not None
        assert reader.status is SubscriberStatus.SUPPRESSED
        assert other.status is SubscriberStatus.ACTIVE
        score = store.bounce_score(reader.id)
        assert score is not None and score.score == 2.0
        assert "5.1.1" in (score.suppressed_reason or "")
        [event] = store.bounce_history(reader.id)
        assert event.verified and event.kind == "hard" and event.status == "5.1.1"
        assert event.edition is not None
        ledger = store.edition_for(reader.id, event.edition)
        assert ledger is not None and ledger.message_id == message_id
        assert store.bounce_score(other.id) is None
        [forged] = store.bounce_history(other.id)
        assert not forged.verified and not forged.counted
    finally:
        store.close()

    shown = run(config_path, "subscribers", "show", READER)
    assert shown.exit_code == 0, shown.output
    assert "bounce score: 2" in shown.output and "hard 5.1.1" in shown.output
    assert "stopped:" in shown.output and "reached bounces.threshold 2" in shown.output
    assert "UNVERIFIED" not in shown.output
    other_shown = run(config_path, "subscribers", "show", OTHER, "--json")
    [forged_json] = json.loads(other_shown.output)["bounces"]["events"]
    assert forged_json["verified"] is False and forged_json["counted"] == 0

    # 1 of 2 digests hard-bounced: over the 2% alert threshold. The inbound process mailed
    # the operator once (the second delivery of the same DSN counted nothing).
    [alert] = smtp_server.messages_to("ops@papers.example.org")
    assert alert["Subject"] == "[newsletter] bounce or complaint rate over its threshold"
    payload = alert.get_payload(decode=True)
    assert isinstance(payload, bytes)
    body = " ".join(payload.decode().split())
    assert "1 hard bounce(s) of 2 sent (50.00%) is over bounces.hard_bounce_rate_alert" in body
    status = json.loads(run(config_path, "status", "--json").output)["deliverability"]
    [edition] = status["editions"]
    assert (edition["sent"], edition["hard"], edition["hard_rate"]) == (2, 1, 0.5)
    assert len(status["alerts"]) == 1 and "hard bounce" in status["alerts"][0]
    text = " ".join(run(config_path, "status").output.split())
    assert "1 hard bounce(s) (50.00%)" in text and "deliverability alert:" in text

    config = load_config(config_path)
    store = Store(config.database_url)
    try:
        monkeypatch.setenv("NEWSLETTER_ADMIN_TOKEN", "an-admin-token-for-metrics-0123456789")
        with TestClient(create_app(config, store, None)) as client:
            auth = {"Authorization": "Bearer an-admin-token-for-metrics-0123456789"}
            metrics = client.get("/metrics", headers=auth).text
    finally:
        store.close()
    day = edition["edition"]
    assert f'newsletter_edition_hard_bounce_rate{{edition="{day}"}} 0.5' in metrics
    assert f'newsletter_edition_sent{{edition="{day}"}} 2.0' in metrics
    # the real one; the forged one is only in the named reader's history (issue 27)
    assert 'newsletter_bounce_events_today{kind="hard"} 1.0' in metrics


def test_a_complaint_through_inbound_suppresses_at_once(
    config_path: Path, smtp_server: SmtpServer, inbound: int, db_url: str
) -> None:
    assert run(config_path, "fetch").exit_code == 0
    assert run(config_path, "send", "--now").exit_code == 0
    [digest] = [m for m in smtp_server.received if m.rcpt_tos == [OTHER]]
    arf = fixture("arf-abuse.eml", address=OTHER).replace(
        b"Original-Mail-From: <bounces@papers.example.org>",
        f"Original-Mail-From: <{digest.mail_from}>".encode(),
    )
    deliver(inbound, "bounces@papers.example.org", arf)
    applied(db_url, lambda st: status_of(st, OTHER) is SubscriberStatus.SUPPRESSED)
    store = Store(db_url)
    try:
        other = store.get_subscriber(OTHER)
        assert other is not None and other.status is SubscriberStatus.SUPPRESSED
        score = store.bounce_score(other.id)
        assert score is not None and (score.suppressed_reason or "").startswith("complaint")
        reader = store.get_subscriber(READER)
        assert reader is not None and reader.status is SubscriberStatus.ACTIVE
    finally:
        store.close()
    status = run(config_path, "status", "--json")
    assert status.exit_code == 0, status.output


def test_with_bounces_off_the_from_address_stays_the_envelope_sender(
    tmp_path: Path, smtp_server: SmtpServer
) -> None:
    data = base_config(
        f"sqlite:///{tmp_path / 'n.db'}",
        smtp_server,
        subscribers=[{"email": READER, "topics": ["gpu-kernels"]}],
    )
    path = write_config(tmp_path, data)
    assert run(path, "db", "upgrade").exit_code == 0
    assert run(path, "fetch").exit_code == 0
    assert run(path, "send", "--now").exit_code == 0
    assert [m.mail_from for m in smtp_server.received] == ["digest@papers.example.org"]
