"""Issue 27, item 2: a forged bounce must not tell whether an address is subscribed, and the
metrics are not public.

A DSN mailed straight to the bounce address (no VERP token, no Message-ID of a digest sent to
the address) is unverified: it is kept in the named subscriber's history for the operator and
changes nothing, and every number an outsider can read (``/metrics``) counts only verified
events. ``GET /metrics`` needs the admin token; ``web.metrics_listen`` serves them on loopback.
A real aiosmtpd receiver (``newsletter inbound``), the real app, SQLite and PostgreSQL.
"""

from __future__ import annotations

import re
import smtplib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from newsletter.config import Config, load_config
from newsletter.errors import ConfigError
from newsletter.models import SubscriberStatus
from newsletter.operations.inbound_mail import InboundServer
from newsletter.operations.smtp_sink import free_port
from newsletter.services import Services
from newsletter.store import Store
from newsletter.subscribe import Subscriptions
from newsletter.web import create_app
from newsletter.web.metrics import listener
from tests.bounces.helpers import fixture
from tests.conftest import NOW, SmtpServer, base_config, write_config
from tests.web.conftest import BASE, Clock, web_settings

TOKEN = "an-admin-token-for-the-metrics-0123456789"
BOUNCES = "bounces@papers.example.org"
ADA = "ada@example.org"
BLOCK = (
    "Final-Recipient: rfc822; {0}\n"
    "Action: failed\n"
    "Status: 5.1.1\n"
    "Diagnostic-Code: smtp; 550 5.1.1 <{0}>: User unknown\n"
)


def dsn(*addresses: str) -> bytes:
    """A Postfix DSN naming ``addresses`` (one delivery-status block each), no VERP token,
    no returned Message-ID: what anyone can mail to the plain bounce address."""
    data = fixture("postfix-hard.eml").decode().replace("\r\n", "\n")
    start = data.index("Final-Recipient:")
    end = data.index("\n--", start)
    blocks = "\n".join(BLOCK.format(a) for a in addresses)
    data = data[:start] + blocks + data[end:]
    data = re.sub(r"(?m)^Message-ID: <[^>]*>\n", "", data)  # the returned digest's id
    return data.replace("\n", "\r\n").encode()


@pytest.fixture
def config(tmp_path: Path, db_url: str, smtp_server: SmtpServer) -> Config:
    data = web_settings(db_url, smtp_server)
    data["inbound"] = {"address": "papers-request@papers.example.org", "port": free_port()}
    data["bounces"] = {"enabled": True}
    data["web"]["metrics_listen"] = f"127.0.0.1:{free_port()}"
    return load_config(write_config(tmp_path, data))


@pytest.fixture
def inbound(config: Config, store: Store) -> Iterator[InboundServer]:
    service = Subscriptions(Services(config, store, clock=Clock()))
    with InboundServer(service, config.settings.inbound) as server:
        yield server


@pytest.fixture
def client(config: Config, store: Store, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("NEWSLETTER_ADMIN_TOKEN", TOKEN)
    with TestClient(create_app(config, store, None, now=Clock()), base_url=BASE) as c:
        yield c


def metrics(client: TestClient) -> str:
    r = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200, r.text
    return r.text


def mail(server: InboundServer, data: bytes) -> tuple[int, bytes]:
    """Hand one message to the bounce address; the server's reply to DATA."""
    settings = server.settings
    with smtplib.SMTP(settings.host, settings.port) as conn:
        conn.ehlo()
        conn.mail("<>")
        conn.rcpt(BOUNCES)
        return conn.data(data)


def test_a_forged_dsn_moves_no_metric_whether_it_names_a_subscriber_or_not(
    inbound: InboundServer, store: Store, client: TestClient
) -> None:
    """The review's reproduction: one DSN naming x1, ada, x2 moved
    newsletter_bounce_events_today{kind="hard"} by the number of subscribed addresses."""
    store.add_subscriber(ADA, topics=["gpu-kernels"], now=NOW)
    before = metrics(client)
    assert 'newsletter_bounce_events_today{kind="hard"} 0.0' in before

    strangers = mail(inbound, dsn("x1@example.net", "x3@example.net", "x2@example.net"))
    inbound.handler.settle()  # reports are applied after the answer
    after_strangers = metrics(client)
    with_ada = mail(inbound, dsn("x1@example.net", ADA, "x2@example.net"))
    inbound.handler.settle()
    after_ada = metrics(client)

    assert strangers == with_ada and strangers[0] == 250  # the same answer
    assert before == after_strangers == after_ada  # not one number moved

    # What is stored is the operator's: ada's history keeps the report, marked unverified
    # and counted for nothing; her status and score are untouched.
    ada = store.get_subscriber(ADA)
    assert ada is not None and ada.status is SubscriberStatus.ACTIVE
    [event] = store.bounce_history(ada.id)
    assert (event.verified, event.counted, event.kind) == (False, 0.0, "hard")
    assert store.bounce_score(ada.id) is None
    day = NOW.replace(hour=0, minute=0, second=0, microsecond=0)
    assert store.events_per_day(day) == {}
    assert all(r.hard == 0 for r in store.edition_rates(NOW.date()))


def test_metrics_need_the_admin_token(
    config: Config, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = create_app(config, store, None, now=Clock())
    with TestClient(app, base_url=BASE) as c:
        monkeypatch.delenv("NEWSLETTER_ADMIN_TOKEN", raising=False)
        off = c.get("/metrics")
        assert off.status_code == 404 and "newsletter_" not in off.text
        assert "web.metrics_listen" in off.json()["detail"]

        monkeypatch.setenv("NEWSLETTER_ADMIN_TOKEN", TOKEN)
        assert c.get("/metrics").status_code == 401
        wrong = c.get("/metrics", headers={"Authorization": "Bearer not-the-token"})
        assert wrong.status_code == 401 and "newsletter_" not in wrong.text
        ok = c.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200
        assert ok.headers["content-type"].startswith("text/plain; version=0.0.4")
        assert 'newsletter_subscribers{status="active"} 0.0' in ok.text


def test_the_separate_listener_serves_the_metrics_on_loopback_only(
    config: Config, store: Store, tmp_path: Path, db_url: str, smtp_server: SmtpServer
) -> None:
    store.add_subscriber(ADA, topics=["gpu-kernels"], now=NOW)
    metrics_listener = listener(config, store, Clock())
    assert metrics_listener is not None
    with metrics_listener as served:
        assert served.listen.host == "127.0.0.1"
        r = httpx.get(f"http://127.0.0.1:{served.listen.port}/metrics")
        assert r.status_code == 200
        assert 'newsletter_subscribers{status="active"} 1.0' in r.text
        assert 'newsletter_bounce_events_today{kind="hard"} 0.0' in r.text

    for public in ("0.0.0.0:9464", "192.0.2.10:9464", "[::]:9464", "metrics.example.org:9464"):
        data = web_settings(db_url, smtp_server)
        data["web"]["metrics_listen"] = public
        with pytest.raises(ConfigError, match="metrics_listen"):
            load_config(write_config(tmp_path, data, name="public.yaml"))


@pytest.mark.slow
def test_newsletter_serve_keeps_metrics_off_the_public_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real process: no token set, the web port answers 404 for /metrics; the loopback
    listener of ``web.metrics_listen`` serves them."""
    from tests.operations.test_serve import start, wait_for

    monkeypatch.delenv("NEWSLETTER_ADMIN_TOKEN", raising=False)
    metrics_port, web_port = free_port(), free_port()
    data = base_config(f"sqlite:///{tmp_path / 'n.db'}")
    data["schedule"] = {"fetch": []}
    data["web"] = {
        "secret_key": "a-test-secret-that-signs-links-0123456789",
        "metrics_listen": f"127.0.0.1:{metrics_port}",
    }
    path = write_config(tmp_path, data)
    migrated = Store(load_config(path).database_url)
    migrated.upgrade()
    migrated.close()
    proc = start(path, web_port, tmp_path / "serve.log")

    def status(port: int, path: str = "/metrics") -> int:
        try:
            return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=2).status_code
        except httpx.HTTPError:
            return 0

    try:
        wait_for(lambda: status(web_port, "/healthz") == 200, 30, "newsletter serve")
        assert status(web_port) == 404
        r = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5)
        assert r.status_code == 200 and "newsletter_subscribers" in r.text
    finally:
        proc.terminate()
        proc.wait(timeout=30)
