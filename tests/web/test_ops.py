"""Operations endpoints: /healthz, and the token-protected /metrics and admin send trigger."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from newsletter.config import Config
from newsletter.sources.ingest import run_fetch
from newsletter.store import Store
from tests.conftest import NOW, SmtpServer


def test_healthz(client: TestClient) -> None:
    r = client.get("/healthz")
    assert r.status_code == 200 and r.json()["status"] == "ok"


METRICS_TOKEN = "a-metrics-test-admin-token-0123456789"


@pytest.fixture
def admin(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The admin token set; the header that carries it (GET /metrics needs it)."""
    monkeypatch.setenv("NEWSLETTER_ADMIN_TOKEN", METRICS_TOKEN)
    return {"Authorization": f"Bearer {METRICS_TOKEN}"}


def test_metrics_in_prometheus_text_format(
    client: TestClient, web_config: Config, web_store: Store, admin: dict[str, str]
) -> None:
    web_store.add_subscriber("a@example.org", topics=["gpu-kernels"], now=NOW)
    web_store.add_subscriber("b@example.org", topics=["gpu-kernels"], now=NOW)
    run_fetch(web_config, web_store, NOW)
    r = client.get("/metrics", headers=admin)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert 'newsletter_subscribers{status="active"} 2.0' in text
    assert re.search(r"^newsletter_papers 30.0$", text, re.M)
    for line in text.splitlines():  # every sample line is `name{labels} value`
        if not line.startswith("#"):
            assert re.match(r'^[a-z_]+(\{[a-z_]+="[^"]*"\})? -?[0-9.e+]+$', line), line


def test_metrics_count_runs_whose_process_is_gone(
    client: TestClient, web_store: Store, admin: dict[str, str]
) -> None:
    import os

    from newsletter.clock import utcnow
    from newsletter.deliver.ledger import HOST, run_owner

    # a run of an earlier incarnation of this pid (a killed process), and one alive (this one)
    web_store.start_run("send", utcnow(), owner=f"{HOST}:{os.getpid()}:0dead000.run")
    web_store.start_run("send", utcnow(), owner=run_owner())
    text = client.get("/metrics", headers=admin).text
    assert re.search(r"^newsletter_runs_interrupted 1.0$", text, re.M), text


def test_admin_send_is_off_without_a_token(client: TestClient) -> None:
    assert client.post("/admin/send", json={}).status_code == 404


def test_admin_send_needs_the_token_and_sends_once(
    client: TestClient,
    web_config: Config,
    web_store: Store,
    smtp_server: SmtpServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NEWSLETTER_ADMIN_TOKEN", "s3cret-admin-token-for-the-tests-0123456789")
    web_store.add_subscriber("kernels@example.org", topics=["gpu-kernels"], now=NOW)
    run_fetch(web_config, web_store, NOW)
    assert client.post("/admin/send", json={}).status_code == 401
    assert (
        client.post("/admin/send", json={}, headers={"Authorization": "Bearer wrong"}).status_code
        == 401
    )
    auth = {"Authorization": "Bearer s3cret-admin-token-for-the-tests-0123456789"}
    dry = client.post("/admin/send", json={"dry_run": True}, headers=auth)
    assert dry.status_code == 200 and dry.json()["would_send"][0]["to"] == "kernels@example.org"
    assert smtp_server.received == []
    real = client.post("/admin/send", json={}, headers=auth)
    assert real.status_code == 200 and real.json()["sent"] == 1
    again = client.post("/admin/send", json={}, headers=auth)
    assert again.json()["sent"] == 0 and again.json()["already"] == 1
    forced = client.post(
        "/admin/send", json={"to": "kernels@example.org", "force": True}, headers=auth
    )
    assert forced.json()["sent"] == 1
    assert len(smtp_server.received) == 2
    first, second = (r.message for r in smtp_server.received)
    assert first["Message-ID"] != second["Message-ID"]  # a forced re-send is a new message
    assert client.post("/admin/send", json={"force": True}, headers=auth).status_code == 422
