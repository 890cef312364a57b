"""``POST /admin/send`` with ``workers:``: the edition is queued for the workers, like `send`.

On the real PostgreSQL and Redis of this machine, with a real ``newsletter worker`` process and
a real aiosmtpd sink; they skip, saying why, only when the servers are truly absent.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import redis
import yaml
from fastapi.testclient import TestClient

from newsletter.clock import utcnow
from newsletter.config import Config
from newsletter.operations.serve import make_jobs
from newsletter.operations.smtp_sink import free_port
from newsletter.services import Services
from newsletter.store import Store
from newsletter.web import create_app
from tests.conftest import SmtpServer
from tests.edition.test_workers import (
    REDIS_URL,
    message_ids,
    prepared,
    start_worker,
    workers_config,
)
from tests.edition.test_workers import queue as queue  # the fixture: a queue of this test's own

TOKEN = "s3cret-admin-token-for-the-tests-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def admin_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEWSLETTER_ADMIN_TOKEN", TOKEN)


def serve(config: Config, store: Store) -> tuple[TestClient, threading.Lock]:
    """The app as `newsletter serve` builds it, with the scheduler's jobs (and their lock)."""
    app = create_app(config, store)
    app.state.jobs = make_jobs(Services(config, store), threading.Event())
    return TestClient(app, base_url="https://papers.example.org"), app.state.jobs.lock


@pytest.fixture
def worker_path(tmp_path: Path, pg_schema_url: str, smtp_server: SmtpServer, queue: str) -> Path:
    return workers_config(tmp_path, pg_schema_url, smtp_server, queue)


@pytest.mark.postgres
@pytest.mark.slow
def test_admin_send_queues_the_chunks_and_a_worker_sends_each_digest_once(
    tmp_path: Path, worker_path: Path, smtp_server: SmtpServer, queue: str, admin_token: None
) -> None:
    config, store, _ = prepared(worker_path, 120)
    client, lock = serve(config, store)
    broker = redis.Redis.from_url(REDIS_URL)
    worker = None
    try:
        # a dry run, or one address, still runs in the web process: nothing is queued
        dry = client.post("/admin/send", json={"dry_run": True}, headers=AUTH)
        assert dry.status_code == 200 and len(dry.json()["would_send"]) == 120
        assert broker.llen(queue) == 0 and smtp_server.received == []

        started = time.monotonic()
        r = client.post("/admin/send", json={}, headers=AUTH)
        assert time.monotonic() - started < 10  # answered once queued, without a worker
        assert r.status_code == 202, r.text
        body = r.json()
        assert body["status"] == "enqueued" and body["queue"] == queue
        assert body["chunks"] == 3 and len(body["task_ids"]) == 3  # chunk_size 50
        assert body["subscribers"] == 120 and body["already"] == 0 and body["topic"] is None
        assert "newsletter status" in body["progress"]
        assert not lock.locked()  # held while queuing only
        assert broker.llen(queue) == 3
        assert smtp_server.received == []  # nothing is sent by the web process
        [run] = store.last_runs(1)
        assert run.id == body["run_id"] and run.kind == "admin" and run.status == "enqueued"
        assert run.counts["enqueued"] == 120 and run.counts["chunks"] == 3

        worker = start_worker(worker_path, f"admin-{queue}@%h", tmp_path / "worker.log")
        deadline = time.monotonic() + 90
        while len(smtp_server.received) < 120:
            assert time.monotonic() < deadline, (tmp_path / "worker.log").read_text()[-3000:]
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
            time.sleep(0.2)
        time.sleep(1)  # nothing more arrives
        got = message_ids(smtp_server)
        assert sorted(got) == [f"s{i:05d}@example.org" for i in range(120)]
        assert all(len(mids) == 1 for mids in got.values())
        assert len(smtp_server.received) == 120

        # again: every edition is settled, so nothing is queued and nothing more is sent
        again = client.post("/admin/send", json={}, headers=AUTH)
        assert again.status_code == 202
        assert again.json()["chunks"] == 0 and again.json()["already"] == 120
        assert broker.llen(queue) == 0 and len(smtp_server.received) == 120
        editions = store.editions_on(utcnow().date())
        assert len(editions) == 120 and {e.status.value for e in editions} == {"sent"}
    finally:
        if worker is not None:
            worker.terminate()
            worker.wait(20)
        client.close()
        store.close()


@pytest.mark.postgres
def test_admin_send_with_the_broker_down_answers_503_naming_it(
    tmp_path: Path, pg_schema_url: str, smtp_server: SmtpServer, admin_token: None
) -> None:
    path = workers_config(tmp_path, pg_schema_url, smtp_server, "q")
    data = yaml.safe_load(path.read_text())
    data["workers"]["broker_url"] = f"redis://:secret@127.0.0.1:{free_port()}/0"
    path.write_text(yaml.safe_dump(data))
    config, store, _ = prepared(path, 3)
    client, lock = serve(config, store)
    try:
        r = client.post("/admin/send", json={}, headers=AUTH)
        assert r.status_code == 503, r.text
        detail = r.json()["detail"]
        assert "cannot queue the edition: the broker at redis://***@127.0.0.1:" in detail
        assert "workers.broker_url / $NEWSLETTER_BROKER_URL" in detail
        assert "POST again" in detail
        assert "secret" not in r.text
        assert not lock.locked()
        [run] = store.last_runs(1)
        assert run.kind == "admin" and run.status == "failed"
        assert "could not enqueue" in (run.error or "")
        # one address still goes out from the web process, broker or not
        one = client.post("/admin/send", json={"to": "s00000@example.org"}, headers=AUTH)
        assert one.status_code == 200 and one.json()["sent"] == 1
        assert [rcpt for r in smtp_server.received for rcpt in r.rcpt_tos] == ["s00000@example.org"]
    finally:
        client.close()
        store.close()
