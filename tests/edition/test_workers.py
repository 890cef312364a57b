"""Scale-out with Celery workers on the real Redis and PostgreSQL of this machine.

The end-to-end test starts two ``newsletter worker`` processes, queues an edition for 800
subscribers (2,000 with ``-m long``) with ``newsletter send --now``, SIGKILLs one worker in the
middle of a chunk, and checks that every subscriber got exactly one digest (one Message-ID; the
single message in flight at the kill may arrive twice with the same Message-ID).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import select

from newsletter.clock import utcnow
from newsletter.config import Config, load_config
from newsletter.edition import SendRequest, Services
from newsletter.edition.workers import enqueue_edition, ping_worker, send_chunk
from newsletter.errors import ConfigError
from newsletter.models import EditionStatus
from newsletter.operations.smtp_sink import free_port
from newsletter.sources.ingest import run_fetch
from newsletter.store import Store
from newsletter.store import tables as t
from tests.conftest import SmtpServer, base_config, write_config

# Slow: `newsletter worker` processes on the real Redis and RabbitMQ, killed mid-chunk.
pytestmark = pytest.mark.slow

REDIS_URL = os.environ.get("NEWSLETTER_TEST_REDIS", "redis://127.0.0.1:6379/0")
ROOT = Path(__file__).resolve().parents[2]


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
    # one connection per worker (any pool leaves at most one message accepted by the relay and
    # not yet recorded when a worker is killed: the final-dot gate)
    data["smtp"]["pool_size"] = 1
    data["delivery"] = {"claim_lease": 3}
    data["workers"] = {
        "broker_url": REDIS_URL,
        "queue": queue,
        "chunk_size": 50,
        "visibility_timeout": 6,
        "retry_delay": 2,
        **workers,
    }
    data["web"] = {"secret_key": "workers-test-secret-0123456789abcdef"}
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


def sent_by(store: Store, owner: str) -> int:
    with store.engine.connect() as conn:
        return len(
            conn.execute(
                select(t.editions.c.id).where(
                    t.editions.c.owner.contains(owner),
                    t.editions.c.status == EditionStatus.SENT.value,
                )
            ).all()
        )


def owners(store: Store) -> dict[int, str]:
    with store.engine.connect() as conn:
        return dict(conn.execute(select(t.editions.c.subscriber_id, t.editions.c.owner)).all())


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.parametrize("readers", [800, pytest.param(2000, marks=pytest.mark.long)])
def test_two_workers_one_killed_mid_chunk_every_subscriber_gets_exactly_one_digest(
    tmp_path: Path, pg_schema_url: str, smtp_server: SmtpServer, queue: str, readers: int
) -> None:
    """800 readers (16 chunks) in ``make test``: the kill comes after the victim's second chunk,
    so the survivor still has chunks to take over; 2,000 with ``-m long``."""
    config_path = workers_config(tmp_path, pg_schema_url, smtp_server, queue)
    config, store, ids = prepared(config_path, readers)
    names = {"victim": f"victim-{queue}@%h", "survivor": f"survivor-{queue}@%h"}
    victim = start_worker(config_path, names["victim"], tmp_path / "victim.log")
    survivor = start_worker(config_path, names["survivor"], tmp_path / "survivor.log")
    try:
        ready = time.monotonic() + 40
        while not all(ping_worker(config, n, timeout=1) for n in names.values()):
            assert time.monotonic() < ready, (tmp_path / "victim.log").read_text()[-2000:]
        send = subprocess.Popen(
            [sys.executable, "-m", "newsletter", "--config", str(config_path), "send", "--now"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        # kill the victim well inside a chunk (it has finished some of the chunk's editions and
        # not others) once it has done a couple of chunks
        victim_owner = f":{victim.pid}:"
        deadline = time.monotonic() + 90
        killed_at = None
        while time.monotonic() < deadline:
            mine = sent_by(store, victim_owner)  # claims come 50 at a time; sends one by one
            if mine >= 100 and 10 <= mine % 50 <= 40:
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
        ping = subprocess.run(
            [
                sys.executable,
                "-m",
                "newsletter",
                "--config",
                str(config_path),
                "worker",
                "--ping",
                "--name",
                names["survivor"],
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        assert ping.returncode == 0 and "answered" in ping.stdout, ping.stdout + ping.stderr
        assert not ping_worker(config, names["victim"], timeout=1)
    finally:
        for p in (victim, survivor):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in (victim, survivor):
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
    assert killed_at < readers  # the kill happened mid-run

    # every subscriber: exactly one distinct Message-ID; at most one message delivered twice
    by_address: dict[str, set[str]] = defaultdict(set)
    copies: Counter[str] = Counter()
    for r in smtp_server.received:
        mid = r.message["Message-ID"]
        copies[mid] += 1
        for rcpt in r.rcpt_tos:
            by_address[rcpt].add(mid)
    assert len(by_address) == readers
    assert all(len(mids) == 1 for mids in by_address.values())
    assert sum(n - 1 for n in copies.values()) <= 1, [m for m, n in copies.items() if n > 1]

    # the ledger: every edition sent; the victim's interrupted chunk was finished by the survivor
    with store.engine.connect() as conn:
        statuses = Counter(s for (s,) in conn.execute(select(t.editions.c.status)))
    assert statuses == {EditionStatus.SENT.value: readers}
    owner_of = owners(store)
    chunks = [ids[i : i + 50] for i in range(0, len(ids), 50)]
    mixed = [
        c
        for c in chunks
        if len({"victim" if victim_owner in owner_of[i] else "other" for i in c}) == 2
    ]
    assert mixed, (
        "no chunk was split between the killed worker and the survivor: "
        + str([sum(victim_owner in owner_of[i] for i in c) for c in chunks])
        + (tmp_path / "survivor.log").read_text()[-3000:]
    )
    assert str(readers) in output and "sent" in output
    store.close()


# ---------------------------------------------------------------------------- the chunk task


@pytest.fixture
def chunk_setup(
    tmp_path: Path, pg_schema_url: str, smtp_server: SmtpServer
) -> Iterator[tuple[Config, Store, list[int]]]:
    path = workers_config(tmp_path, pg_schema_url, smtp_server, "unused")
    config, store, ids = prepared(path, 60)
    yield config, store, ids
    store.close()


def message_ids(smtp: SmtpServer) -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for r in smtp.received:
        for rcpt in r.rcpt_tos:
            found[rcpt].append(r.message["Message-ID"])
    return found


@pytest.mark.postgres
def test_a_duplicated_chunk_running_twice_at_once_sends_each_digest_once(
    chunk_setup: tuple[Config, Store, list[int]], smtp_server: SmtpServer
) -> None:
    config, store, ids = chunk_setup
    now = utcnow()
    second = Store(config.database_url)  # another worker: its own connections
    outcomes: list[Any] = []

    def run(s: Store) -> None:
        outcomes.append(send_chunk(Services(config, s), ids, now))

    threads = [threading.Thread(target=run, args=(s,)) for s in (store, second)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    second.close()
    got = message_ids(smtp_server)
    assert len(got) == 60 and all(len(m) == 1 for m in got.values())
    assert sum(o.result["sent"] for o in outcomes) == 60
    # whichever lost a race saw the edition claimed elsewhere and asks to look again later;
    # by now those editions are sent, so the retry finds them done and sends nothing
    retry = [i for o in outcomes for i in o.retry_ids]
    again = send_chunk(Services(config, store), retry or ids, now)
    assert again.result["sent"] == 0 and again.retry_ids == []
    assert len(smtp_server.received) == 60

    # a redelivered chunk (the same task again, later) sends nothing either
    redelivered = send_chunk(Services(config, store), ids, now)
    assert redelivered.result["sent"] == 0 and redelivered.result["already"] == 60
    assert len(smtp_server.received) == 60


@pytest.mark.postgres
def test_a_dead_workers_claim_is_taken_over_after_the_lease_keeping_its_message_id(
    chunk_setup: tuple[Config, Store, list[int]], smtp_server: SmtpServer
) -> None:
    config, store, ids = chunk_setup
    now = utcnow()
    dead, alive = ids[0], ids[1]
    store.claim_edition(dead, now.date(), "<dead@x>", now - timedelta(seconds=30), owner="dead")
    store.claim_edition(alive, now.date(), "<alive@x>", utcnow(), owner="alive")
    outcome = send_chunk(Services(config, store), ids[:5], now)
    assert outcome.retry_ids == [alive] and outcome.busy  # retried once the lease runs out
    assert outcome.result["sent"] == 4 and outcome.result["considered"] == 4
    assert message_ids(smtp_server)["s00000@example.org"] == ["<dead@x>"]
    assert "s00001@example.org" not in message_ids(smtp_server)


@pytest.mark.postgres
def test_relay_down_gives_back_the_chunk_to_retry(
    tmp_path: Path, pg_schema_url: str, smtp_server: SmtpServer
) -> None:
    path = workers_config(tmp_path, pg_schema_url, smtp_server, "unused")
    config, store, ids = prepared(path, 5)
    down = config.settings.model_copy(
        update={"smtp": config.settings.smtp.model_copy(update={"port": free_port()})}
    )
    outcome = send_chunk(Services(replace(config, settings=down), store), ids, utcnow())
    assert outcome.retry_ids == ids and not outcome.busy
    assert outcome.result["relay_error"]
    with store.engine.connect() as conn:
        held = conn.execute(
            select(t.editions.c.id).where(
                t.editions.c.status.in_([EditionStatus.CLAIMED.value, EditionStatus.SENDING.value])
            )
        ).all()
    assert held == []  # no claim left behind: the retry (or any run) may take them
    store.close()


@pytest.mark.postgres
def test_enqueue_cuts_chunks_and_leaves_out_settled_editions(
    tmp_path: Path, pg_schema_url: str, smtp_server: SmtpServer, queue: str
) -> None:
    import json

    import redis

    from newsletter.edition.workers import make_app

    path = workers_config(tmp_path, pg_schema_url, smtp_server, queue)
    config, store, ids = prepared(path, 120)
    now = utcnow()
    claim = store.claim_edition(ids[0], now.date(), "<a@x>", now, owner="earlier")
    assert claim is not None
    store.mark_edition(claim.id, EditionStatus.SENT, now)
    deferred = store.claim_edition(ids[1], now.date(), "<b@x>", now, owner="earlier")
    assert deferred is not None
    store.mark_edition(deferred.id, EditionStatus.DEFERRED, now, error="451 try later")

    enqueued = enqueue_edition(Services(config, store), now, SendRequest(), make_app(config))
    assert enqueued.subscribers == 119 and enqueued.settled == 1
    assert len(enqueued.results) == 3
    client = redis.Redis.from_url(REDIS_URL)
    bodies = [json.loads(m) for m in client.lrange(queue, 0, -1)]
    chunks = []
    for b in bodies:
        import base64

        args, kwargs, _ = json.loads(base64.b64decode(b["body"]))
        assert args[1] == now.isoformat() and kwargs == {"topic": None}
        chunks.append(args[0])
    # the deferred edition is queued again (a temporary failure is retried); the sent one is not
    assert sorted(i for c in chunks for i in c) == ids[1:]
    assert sorted(len(c) for c in chunks) == [19, 50, 50]
    store.close()


# ---------------------------------------------------------------------------- config and CLI


def test_workers_refuse_sqlite_naming_the_file_and_line(tmp_path: Path) -> None:
    data = base_config(f"sqlite:///{tmp_path / 'x.db'}")
    data["workers"] = {"queue": "q"}
    path = write_config(tmp_path, data)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    line = path.read_text().splitlines().index("workers:") + 1
    assert f"{path}:{line}: workers: " in str(e.value)
    assert "PostgreSQL" in str(e.value) and "SQLite" in str(e.value)


def test_database_url_from_the_environment_counts_for_the_sqlite_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = base_config(f"sqlite:///{tmp_path / 'x.db'}")
    data["workers"] = {}
    path = write_config(tmp_path, data)
    monkeypatch.setenv("NEWSLETTER_DATABASE_URL", "postgresql+psycopg://u@db/newsletter")
    monkeypatch.setenv("NEWSLETTER_BROKER_URL", "amqp://guest:guest@rabbit//")
    config = load_config(path)
    assert config.settings.workers is not None
    assert config.settings.workers.broker() == "amqp://guest:guest@rabbit//"
    assert config.settings.workers.backend() == "rpc://"  # RabbitMQ: results over AMQP


@pytest.mark.parametrize(
    ("workers", "problem"),
    [
        ({"broker_url": "localhost:6379"}, "workers.broker_url: 'localhost:6379' is not a broker"),
        ({"chunk_size": 0}, "workers.chunk_size: Input should be greater than or equal to 1"),
        ({"queue": "no spaces"}, "workers.queue: 'no spaces': use letters"),
        (
            {"visibility_timeout": 300},
            "workers.visibility_timeout: 300 s must be longer than delivery.claim_lease (600 s)",
        ),
        ({"brokr": "redis://x"}, "workers.brokr: unknown key"),
    ],
)
def test_bad_workers_settings_are_named(workers: dict[str, Any], problem: str) -> None:
    import yaml

    from newsletter.config import parse_config

    text = yaml.safe_dump({"workers": workers})
    with pytest.raises(ConfigError) as e:
        parse_config(text, "n.yaml")
    assert problem in str(e.value)
    assert "n.yaml:2: " in str(e.value)


def test_worker_without_a_workers_section_says_what_to_add(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from newsletter.cli import cli

    path = write_config(tmp_path, base_config(f"sqlite:///{tmp_path / 'x.db'}"))
    result = CliRunner().invoke(cli, ["--config", str(path), "worker"])
    assert result.exit_code == 1
    assert "no workers: section" in result.output


# ---------------------------------------------------------------------------- send and scheduler


@pytest.mark.postgres
def test_send_no_wait_queues_the_chunks_and_records_the_run(
    tmp_path: Path, pg_schema_url: str, smtp_server: SmtpServer, queue: str
) -> None:
    import redis
    from click.testing import CliRunner

    from newsletter.cli import cli

    path = workers_config(tmp_path, pg_schema_url, smtp_server, queue)
    _, store, _ = prepared(path, 120)
    result = CliRunner().invoke(cli, ["--config", str(path), "send", "--now", "--no-wait"])
    assert result.exit_code == 0, result.output
    assert f"Queued 120 editions in 3 chunks on queue {queue}" in result.output
    assert redis.Redis.from_url(REDIS_URL).llen(queue) == 3
    [run] = store.last_runs(1)
    assert run.kind == "send" and run.status == "enqueued"
    assert run.counts["enqueued"] == 120 and run.counts["chunks"] == 3
    assert smtp_server.received == []  # nothing is sent by the enqueuing process
    store.close()


@pytest.mark.postgres
@pytest.mark.slow
def test_the_scheduler_tick_queues_due_editions_for_a_worker(
    tmp_path: Path, pg_schema_url: str, smtp_server: SmtpServer, queue: str
) -> None:
    from newsletter.operations.serve import make_jobs

    path = workers_config(tmp_path, pg_schema_url, smtp_server, queue)
    config, store, ids = prepared(path, 30)
    now = utcnow()
    with store.engine.begin() as conn:  # ten are due now, the others at another hour
        conn.execute(
            t.subscribers.update()
            .where(t.subscribers.c.id.in_(ids[:10]))
            .values(send_hour=now.hour)
        )
        conn.execute(
            t.subscribers.update()
            .where(t.subscribers.c.id.in_(ids[10:]))
            .values(send_hour=(now.hour + 12) % 24)
        )
    name = f"tick-{queue}@%h"
    worker = start_worker(path, name, tmp_path / "worker.log")
    try:
        ready = time.monotonic() + 40
        while not ping_worker(config, name, timeout=1):
            assert time.monotonic() < ready, (tmp_path / "worker.log").read_text()[-2000:]
        jobs = make_jobs(Services(config, store), threading.Event())
        jobs.send_due(now)  # enqueues the due chunk and waits for the worker
        got = message_ids(smtp_server)
        assert sorted(got) == [f"s{i:05d}@example.org" for i in range(10)]
        [run] = store.last_runs(1)
        assert run.kind == "scheduled" and run.status == "ok"
        assert run.counts["sent"] == 10 and run.counts["not_due"] == 20
        jobs.send_due(utcnow())  # the next tick: everything due is settled, nothing is queued
        [run] = store.last_runs(1)
        assert run.counts.get("sent", 0) == 0 and run.counts["already"] == 10
        assert len(smtp_server.received) == 10
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(20)
        store.close()


@pytest.mark.postgres
def test_send_with_the_broker_down_says_so_and_records_the_failed_run(
    tmp_path: Path, pg_schema_url: str, smtp_server: SmtpServer
) -> None:
    from click.testing import CliRunner

    from newsletter.cli import cli

    path = workers_config(tmp_path, pg_schema_url, smtp_server, "q")
    data = yaml.safe_load(path.read_text())
    data["workers"]["broker_url"] = f"redis://:secret@127.0.0.1:{free_port()}/0"
    path.write_text(yaml.safe_dump(data))
    _, store, _ = prepared(path, 3)
    result = CliRunner().invoke(cli, ["--config", str(path), "send", "--now"])
    assert result.exit_code == 1
    assert "cannot queue the edition: the broker at redis://***@127.0.0.1:" in result.output
    assert "secret" not in result.output
    [run] = store.last_runs(1)
    assert run.status == "failed" and "could not enqueue" in (run.error or "")
    assert smtp_server.received == []
    store.close()


# ---------------------------------------------------------------------------- RabbitMQ

RABBIT_URL = os.environ.get("NEWSLETTER_TEST_RABBITMQ", "amqp://guest:guest@127.0.0.1:5672//")


def _rabbit_reason() -> str | None:
    try:
        from kombu import Connection

        with Connection(RABBIT_URL, connect_timeout=3) as conn:
            conn.ensure_connection(max_retries=1)
        return None
    except Exception as e:  # the server is absent or refuses us
        return f"RabbitMQ not reachable at {RABBIT_URL}: {type(e).__name__}: {e}"


@pytest.mark.postgres
@pytest.mark.slow
def test_a_worker_on_rabbitmq_sends_each_digest_once(
    tmp_path: Path, pg_schema_url: str, smtp_server: SmtpServer
) -> None:
    """The same edition through RabbitMQ (results over ``rpc://``): one digest per subscriber."""
    reason = _rabbit_reason()
    if reason:
        pytest.skip(reason)
    name = f"test-{uuid.uuid4().hex[:10]}"
    path = workers_config(tmp_path, pg_schema_url, smtp_server, name, broker_url=RABBIT_URL)
    config, store, _ = prepared(path, 120)
    assert config.settings.workers is not None and config.settings.workers.backend() == "rpc://"
    worker = start_worker(path, f"rabbit-{name}@%h", tmp_path / "worker.log")
    try:
        ready = time.monotonic() + 40
        # `worker --ping` in its own process, as a container healthcheck runs it (kombu's AMQP
        # producer pool keeps a socket open in the process that pings)
        ping = [sys.executable, "-m", "newsletter", "--config", str(path), "worker", "--ping"]
        while subprocess.run([*ping, "--name", f"rabbit-{name}@%h"], cwd=ROOT).returncode != 0:
            assert time.monotonic() < ready, (tmp_path / "worker.log").read_text()[-2000:]
        sent = subprocess.run(
            [sys.executable, "-m", "newsletter", "--config", str(path), "send", "--now"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
        assert sent.returncode == 0, sent.stdout + sent.stderr
        ids_by_rcpt = message_ids(smtp_server)
        assert len(ids_by_rcpt) == 120
        assert all(len(set(v)) == 1 and len(v) == 1 for v in ids_by_rcpt.values())
        editions = store.editions_on(utcnow().date())
        assert len(editions) == 120 and {e.status.value for e in editions} == {"sent"}
    finally:
        worker.terminate()
        worker.wait(20)
        store.close()
        from kombu import Connection

        with Connection(RABBIT_URL) as conn:  # leave no queue behind
            conn.default_channel.queue_delete(name)


# ------------------------------------------------- the same report and alerts in both modes


def _faulty_relay_plan() -> Any:
    """The same faults for the same readers whichever mode sends: s00001 and s00011 get a 451
    once (retried), s00002 a line dropped after the final dot once (re-sent with the same
    Message-ID), s00003 one throttling reply, s00004 and s00014 a 550 every time."""
    from tests.smtpfaults import Fault

    seen: Counter[str] = Counter()

    def plan(stage: str, rcpt: str | None) -> Fault | None:
        if rcpt is None:
            return None
        i = int(rcpt[1:6])
        if i % 10 == 4:
            return Fault("550 5.1.1 no such user") if stage == "RCPT" else None
        if stage == "RCPT":
            seen[rcpt] += 1
        if seen[rcpt] > 1:
            return None
        if i % 10 == 1 and stage == "RCPT":
            return Fault("451 4.3.0 try again later")
        if i == 2 and stage == "DATA":
            return Fault(None, close=True, keep=True)
        if i == 3 and stage == "RCPT":
            return Fault("454 4.7.0 too many messages, slow down")
        return None

    return plan


def _in_process_twin(path: Path, tmp_path: Path, smtp_port: int) -> Config:
    """The same install without workers (and on its own SQLite database)."""
    data = yaml.safe_load(path.read_text())
    del data["workers"]
    data["database"]["url"] = f"sqlite:///{tmp_path / 'in-process.db'}"
    data["smtp"]["port"] = smtp_port
    twin = tmp_path / "in-process"
    twin.mkdir()
    return load_config(write_config(twin, data))


REPORTED = (
    "considered",
    "sent",
    "already",
    "failed",
    "suppressed",
    "unknown",
    "resent",
    "retried",
    "throttled",
    "unsubscribed",
    "released",
)


def _counts(report: Any) -> dict[str, int]:
    return {k: getattr(report, k) for k in REPORTED}


@pytest.mark.postgres
def test_worker_mode_reports_the_same_counts_as_in_process_through_a_faulty_relay(
    tmp_path: Path, pg_schema_url: str, smtp_server: SmtpServer, queue: str
) -> None:
    from newsletter.edition.workers import send_with_workers
    from tests.sends import send_step
    from tests.smtpfaults import fault_server

    n = 20
    with (
        fault_server(_faulty_relay_plan()) as in_relay,
        fault_server(_faulty_relay_plan()) as relay,
    ):
        path = workers_config(tmp_path, pg_schema_url, relay, queue, retry_delay=1)  # type: ignore[arg-type]
        config, store, _ = prepared(path, n)
        twin = _in_process_twin(path, tmp_path, in_relay.port)
        twin_store = Store(twin.database_url)
        twin_store.upgrade()
        run_fetch(twin, twin_store, utcnow())
        add_subscribers(twin_store, n)
        in_process = send_step(twin, twin_store, utcnow())
        twin_store.close()

        worker = start_worker(path, f"w-{queue}", tmp_path / "worker.log")
        try:
            _, by_workers = send_with_workers(Services(config, store), utcnow(), SendRequest())
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=60)
        [run] = store.last_runs(1)
        store.close()
    assert by_workers is not None
    expected = _counts(in_process)
    assert expected["sent"] == n - 2 and expected["failed"] == 2
    assert expected["retried"] >= 2 and expected["resent"] == 1 and expected["throttled"] == 1
    assert _counts(by_workers) == expected
    # the run record carries the same serialization in both modes
    assert {k: run.counts[k] for k in expected} == expected


@pytest.mark.postgres
def test_worker_mode_alerts_when_the_relay_cannot_be_used_as_in_process(
    tmp_path: Path,
    pg_schema_url: str,
    smtp_server: SmtpServer,
    queue: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    import logging

    from newsletter.edition.workers import send_with_workers
    from tests.faults.harness import TcpProxy
    from tests.sends import send_step

    # the relay is dead for the first connection of each mode, then answers
    dead_twice = TcpProxy((smtp_server.host, smtp_server.port), reject=1)
    path = workers_config(tmp_path, pg_schema_url, smtp_server, queue, retry_delay=1)
    data = yaml.safe_load(path.read_text())
    data["smtp"]["port"] = dead_twice.port
    path.write_text(yaml.safe_dump(data))
    config, store, _ = prepared(path, 10)
    twin = _in_process_twin(path, tmp_path, dead_twice.port)
    twin_store = Store(twin.database_url)
    twin_store.upgrade()
    run_fetch(twin, twin_store, utcnow())
    add_subscribers(twin_store, 10)
    try:
        with caplog.at_level(logging.ERROR, logger="newsletter.alerts"):
            in_process = send_step(twin, twin_store, utcnow())
            alerted_in_process = [r for r in caplog.records if r.name == "newsletter.alerts"]
            caplog.clear()
            dead_twice.reject = 1
            worker = start_worker(path, f"w-{queue}", tmp_path / "worker.log")
            try:
                _, by_workers = send_with_workers(Services(config, store), utcnow(), SendRequest())
            finally:
                worker.send_signal(signal.SIGTERM)
                worker.wait(timeout=60)
            alerted_by_workers = [r for r in caplog.records if r.name == "newsletter.alerts"]
        [run] = store.last_runs(1)
    finally:
        dead_twice.down()
        twin_store.close()
        store.close()
    assert in_process.relay_error and alerted_in_process
    assert by_workers is not None and by_workers.relay_error
    assert "sent no SMTP greeting" in by_workers.relay_error
    assert [r.getMessage() for r in alerted_by_workers] == [
        r.getMessage() for r in alerted_in_process
    ]
    assert run.status == "failed" and run.error == by_workers.relay_error
    # the workers retried the chunk once the relay answered: nothing was left behind
    assert by_workers.sent == 10
