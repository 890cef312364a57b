"""Exactly one digest per subscriber through SIGKILLs, restarts and concurrent runs.

The crash test really runs ``newsletter send --now`` in a subprocess against a real SMTP server
(aiosmtpd, in this process), kills it with SIGKILL several times at different points of a
500-subscriber send, restarts it, and then counts what each recipient received.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from newsletter.clock import utcnow
from newsletter.config import Config, load_config
from newsletter.edition import SendReport
from newsletter.models import EditionStatus
from newsletter.runs.scheduler import due_filter
from newsletter.sources.ingest import run_fetch
from newsletter.store import Store
from tests.conftest import NOW, base_config, write_config
from tests.sends import send_step
from tests.smtpfaults import FaultServer, fault_server

SUBSCRIBERS = 500


@pytest.fixture
def sink() -> Iterator[FaultServer]:
    with fault_server() as server:
        yield server


def _setup(tmp_path: Path, db_url: str, sink: FaultServer, n: int, pool: int) -> tuple[Path, Store]:
    data = base_config(
        db_url,
        sink,  # type: ignore[arg-type]
        schedule={"no_listing": "send"},
        digest={"empty": "send"},
        web={"secret_key": "crash-test-secret-0123456789abcdef"},
    )
    data["smtp"].update(pool_size=pool, timeout=10)
    path = write_config(tmp_path, data)
    config = load_config(path)
    store = Store(config.database_url)
    store.upgrade()
    topics = (["gpu-kernels"], ["rendering"], ["gpu-kernels", "rendering"])
    for i in range(n):
        store.add_subscriber(f"reader{i:04d}@example.org", topics=topics[i % 3], now=NOW)
    run_fetch(config, store, utcnow() - timedelta(hours=1))
    return path, store


def _send(path: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "newsletter", "--config", str(path), "send", "--now"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )


@pytest.mark.parametrize("pool", [1, 3])
def test_sigkill_at_random_points_then_restart_sends_exactly_one_digest_each(
    tmp_path: Path, db_url: str, sink: FaultServer, pool: int
) -> None:
    path, store = _setup(tmp_path, db_url, sink, SUBSCRIBERS, pool)
    log = tmp_path / "send.log"
    rng = random.Random(20261124 + pool)
    # Kill points: once during start-up (before or around the first message), then three times
    # when the relay has accepted a random number of messages.
    points: list[tuple[str, float]] = [("seconds", rng.uniform(0.5, 2.0))]
    points += [("messages", m) for m in sorted(rng.sample(range(40, SUBSCRIBERS - 40), 3))]
    kills = 0
    try:
        for kind, at in points:
            proc = _send(path, log)
            deadline = time.monotonic() + 120
            if kind == "seconds":
                time.sleep(at)
            else:
                while len(sink.received) < at and proc.poll() is None:
                    assert time.monotonic() < deadline, log.read_text()
                    time.sleep(0.002)
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                kills += 1
            proc.wait(timeout=30)  # reaped: the restart sees its claims' owner is gone
        assert kills >= 3, "the send finished before it could be killed: make it bigger"
        final = _send(path, log)
        assert final.wait(timeout=300) == 0, log.read_text()
    finally:
        store.close()

    ids = sink.ids_by_rcpt()
    assert len(ids) == SUBSCRIBERS
    distinct = {rcpt: set(mids) for rcpt, mids in ids.items()}
    assert all(len(m) == 1 for m in distinct.values()), "a reader got two different digests"
    duplicates = sum(len(mids) - 1 for mids in ids.values())
    # Only a message the relay accepted just as the process died can arrive twice (same
    # Message-ID): one at most per open connection per kill (each connection's 250 is recorded
    # before it sends anything else).
    assert duplicates <= kills * pool, f"{duplicates} duplicates after {kills} kills"
    store = Store(load_config(path).database_url)
    try:
        dates = {r.edition_date for r in _all_editions(store)}
        [day] = dates
        rows = store.editions_on(day)
        assert len(rows) == SUBSCRIBERS
        assert {r.status for r in rows} == {EditionStatus.SENT}
        by_mail = {r.email: r.message_id for r in rows}
        assert all(by_mail[rcpt] in mids for rcpt, mids in distinct.items())
    finally:
        store.close()


def _all_editions(store: Store) -> list[object]:
    today = utcnow().date()
    out: list[object] = []
    for d in (today - timedelta(days=1), today, today + timedelta(days=1)):
        out.extend(store.editions_on(d))
    return out


def test_scheduler_and_manual_send_at_the_same_moment_send_one_digest_each(
    tmp_path: Path, db_url: str, sink: FaultServer
) -> None:
    path, store = _setup(tmp_path, db_url, sink, 40, pool=2)
    config: Config = load_config(path)
    stores = [Store(config.database_url), Store(config.database_url)]
    start = threading.Barrier(2)
    reports: list[SendReport] = []
    at_seven = NOW.replace(hour=7)  # schedule.send_hour: everyone is due

    def scheduled(s: Store) -> None:  # what the scheduler's tick runs
        start.wait()
        reports.append(
            send_step(config, s, at_seven, kind="scheduled", due=due_filter(config, at_seven))
        )

    def manual(s: Store) -> None:  # what 'newsletter send --now' runs
        start.wait()
        reports.append(send_step(config, s, at_seven))

    threads = [
        threading.Thread(target=scheduled, args=(stores[0],)),
        threading.Thread(target=manual, args=(stores[1],)),
    ]
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=120)
    finally:
        for s in stores:
            s.close()
        store.close()
    counts = sink.count_by_rcpt()
    assert len(counts) == 40 and set(counts.values()) == {1}
    assert len(reports) == 2 and sum(r.sent for r in reports) == 40
    assert sum(r.already for r in reports) == 40  # each subscriber: one run sent, one saw the claim
