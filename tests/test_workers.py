"""Scale-out with Celery workers on the real Redis and PostgreSQL of this machine.

The end-to-end test starts two ``newsletter worker`` processes, queues an edition for 2,000
subscribers with ``newsletter send --now``, SIGKILLs one worker in the middle of a chunk, and
checks that every subscriber got exactly one digest (one Message-ID; the single message in flight
at the kill may arrive twice with the same Message-ID).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from newsletter.clock import utcnow
from newsletter.config import Config, load_config
from newsletter.ingest import run_fetch
from newsletter.models import EditionStatus
from newsletter.store import Store
from newsletter.store import tables as t
from tests.conftest import SmtpServer, base_config, write_config

REDIS_URL = os.environ.get("NEWSLETTER_TEST_REDIS", "redis://127.0.0.1:6379/0")
ROOT = Path(__file__).resolve().parent.parent


def _redis_reason() -> str | None:
    try:
        import redis

        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3).ping()
        return None
    except Exception as e:  # the server is absent or refuses us
        return f"Redis not reachable at {REDIS_URL}: {type(e).__name__}: {e}"


@pytest.fixture
def queue() -> Iterator[str]:
    """A queue name of this test's own on the real Redis, removed afterwards."""
    reason = _redis_reason()
    if reason:
        pytest.skip(reason)
    import redis

    name = f"test-{uuid.uuid4().hex[:10]}"
    yield name
    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter(f"{name}*"):
        client.delete(key)


def workers_config(
    tmp_path: Path, db_url: str, smtp: SmtpServer, queue: str, **workers: Any
) -> Path:
    data = base_config(db_url, smtp)
    data["smtp"]["timeout"] = 2
    data["workers"] = {
        "broker_url": REDIS_URL,
        "queue": queue,
        "chunk_size": 50,
        "visibility_timeout": 6,
        "claim_lease": 3,
        "retry_delay": 2,
        **workers,
    }
    data["web"] = {"secret_key": "k" * 40}
    return write_config(tmp_path, data)


def add_subscribers(store: Store, n: int) -> list[int]:
    now = utcnow()
    rows = [
        {
            "email": f"s{i:05d}@example.org",
            "name": "",
            "status": "active",
            "timezone": "UTC",
            "created": now,
            "status_changed": now,
            "confirmed": now,
            "frequency": "daily",
        }
        for i in range(n)
    ]
    with store.engine.begin() as conn:
        conn.execute(t.subscribers.insert(), rows)
        ids = [r.id for r in conn.execute(select(t.subscribers.c.id).order_by(t.subscribers.c.id))]
        conn.execute(
            t.subscriptions.insert(),
            [{"subscriber_id": i, "topic": ("gpu-kernels", "rendering")[i % 2]} for i in ids],
        )
    return ids


def prepared(config_path: Path, subscribers: int) -> tuple[Config, Store, list[int]]:
    config = load_config(config_path)
    store = Store(config.database_url)
    store.upgrade()
    run_fetch(config, store, utcnow())
    return config, store, add_subscribers(store, subscribers)


def start_worker(config_path: Path, name: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "newsletter",
                "--config",
                str(config_path),
                "worker",
                "--pool",
                "solo",
                "--name",
                name,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )


def owners(store: Store) -> dict[int, str]:
    with store.engine.connect() as conn:
        return dict(conn.execute(select(t.editions.c.subscriber_id, t.editions.c.owner)).all())


@pytest.mark.postgres
@pytest.mark.slow
def test_two_workers_one_killed_mid_chunk_every_subscriber_gets_exactly_one_digest(
    tmp_path: Path, pg_schema_url: str, smtp_server: SmtpServer, queue: str
) -> None:
    config_path = workers_config(tmp_path, pg_schema_url, smtp_server, queue)
    _config, store, ids = prepared(config_path, 2000)
    victim = start_worker(config_path, f"victim-{queue}@test", tmp_path / "victim.log")
    survivor = start_worker(config_path, f"survivor-{queue}@test", tmp_path / "survivor.log")
    try:
        send = subprocess.Popen(
            [sys.executable, "-m", "newsletter", "--config", str(config_path), "send", "--now"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        # kill the victim once it is inside a chunk: it owns a number of editions that is not a
        # multiple of the chunk size (and it has done at least a few chunks' worth)
        victim_owner = f":{victim.pid}:"
        deadline = time.monotonic() + 90
        killed_at = None
        while time.monotonic() < deadline:
            mine = sum(1 for o in owners(store).values() if victim_owner in o)
            if mine >= 100 and mine % 50 not in (0, 49):
                victim.send_signal(signal.SIGKILL)
                killed_at = len(smtp_server.received)
                break
            time.sleep(0.05)
        assert killed_at is not None, (
            "the victim never got to work: " + (tmp_path / "victim.log").read_text()[-2000:]
        )
        assert victim.wait(10) == -signal.SIGKILL
        out, _ = send.communicate(timeout=150)
        output = out.decode()
        assert send.returncode == 0, output
    finally:
        for p in (victim, survivor):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in (victim, survivor):
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
    assert killed_at < 2000  # the kill happened mid-run

    # every subscriber: exactly one distinct Message-ID; at most one message delivered twice
    by_address: dict[str, set[str]] = defaultdict(set)
    copies: Counter[str] = Counter()
    for r in smtp_server.received:
        mid = r.message["Message-ID"]
        copies[mid] += 1
        for rcpt in r.rcpt_tos:
            by_address[rcpt].add(mid)
    assert len(by_address) == 2000
    assert all(len(mids) == 1 for mids in by_address.values())
    assert sum(n - 1 for n in copies.values()) <= 1, [m for m, n in copies.items() if n > 1]

    # the ledger: every edition sent; the victim's interrupted chunk was finished by the survivor
    with store.engine.connect() as conn:
        statuses = Counter(s for (s,) in conn.execute(select(t.editions.c.status)))
    assert statuses == {EditionStatus.SENT.value: 2000}
    owner_of = owners(store)
    chunks = [ids[i : i + 50] for i in range(0, len(ids), 50)]
    mixed = [
        c
        for c in chunks
        if len({"victim" if victim_owner in owner_of[i] else "other" for i in c}) == 2
    ]
    assert mixed, "no chunk was split between the killed worker and the survivor"
    assert "2000" in output and "sent" in output
    store.close()
