"""`newsletter serve` as a real process: a scheduled edition reaches the relay; SIGTERM in the
middle of a send finishes the message in flight and leaves the ledger consistent; a restart
finishes the edition with exactly one digest per subscriber."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiosmtpd.controller import Controller
from sqlalchemy import text

from newsletter.config import load_config
from newsletter.operations.smtp_sink import free_port
from newsletter.store import Store
from tests.conftest import Received, base_config, write_config

SUBSCRIBERS = 40


class SlowHandler:
    """Accepts every message, slowly, so a SIGTERM lands in the middle of a send."""

    def __init__(self) -> None:
        self.received: list[Received] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        await asyncio.sleep(0.15)
        self.received.append(
            Received(envelope.mail_from, list(envelope.rcpt_tos), envelope.content)
        )
        return "250 OK"


@pytest.fixture
def slow_smtp() -> Iterator[tuple[int, SlowHandler]]:
    handler = SlowHandler()
    port = free_port()
    controller = Controller(handler, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield port, handler
    finally:
        controller.stop()
        asyncio.set_event_loop(None)


def timezone_at_noon(now: datetime) -> str:
    """An Etc/GMT zone where it is around noon now, so an 11:00 edition is due (and not late)."""
    offset = 12 - now.hour
    return (
        "Etc/GMT" if offset == 0 else (f"Etc/GMT-{offset}" if offset > 0 else f"Etc/GMT+{-offset}")
    )


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def start(config: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "NEWSLETTER_LOG_FORMAT": "json"}
    with log.open("ab") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "newsletter",
                "--config",
                str(config),
                "serve",
                "--port",
                str(port),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )


@pytest.mark.slow
def test_scheduled_edition_sigterm_mid_send_and_restart(
    tmp_path: Path, slow_smtp: tuple[int, SlowHandler]
) -> None:
    smtp_port, handler = slow_smtp
    now = datetime.now(UTC)
    tz = timezone_at_noon(now)
    data = base_config(f"sqlite:///{tmp_path / 'n.db'}")
    data["smtp"] = {"host": "127.0.0.1", "port": smtp_port}
    data["schedule"] = {"timezone": tz, "send_hour": 11, "tick_minutes": 1, "fetch": []}
    data["web"] = {"secret_key": "serve-test-secret-0123456789abcdef"}
    data["subscribers"] = [
        {"email": f"reader{i:02d}@example.org", "topics": ["gpu-kernels"]}
        for i in range(SUBSCRIBERS)
    ]
    config_path = write_config(tmp_path, data)
    config = load_config(config_path)
    store = Store(config.database_url)
    try:
        _run(config, config_path, store, now, handler)
    finally:
        store.close()


def _run(config: Any, config_path: Path, store: Store, now: datetime, handler: SlowHandler) -> None:
    tmp_path = config_path.parent
    store.upgrade()
    from newsletter.sources.ingest import run_fetch
    from newsletter.subscriber_lists.from_config import seed_subscribers

    seed_subscribers(config, store)
    run_fetch(config, store, now)
    web_port = free_port()
    log = tmp_path / "serve.log"

    proc = start(config_path, web_port, log)
    try:
        wait_for(lambda: _get(web_port, "/healthz") == 200, 20, "the web app")
        wait_for(lambda: len(handler.received) >= 5, 60, "the first scheduled digests")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    received_at_stop = len(handler.received)
    assert 5 <= received_at_stop < SUBSCRIBERS, "SIGTERM should land in the middle of the send"
    with store.engine.connect() as conn:
        statuses = Counter(r[0] for r in conn.execute(text("select status from editions")))
    # The message in flight was finished and recorded; nothing is left half-sent.
    assert statuses == {"sent": received_at_stop}, statuses
    assert "stopped cleanly" in log.read_text()

    proc = start(config_path, web_port, log)
    try:
        wait_for(lambda: len(handler.received) >= SUBSCRIBERS, 60, "the rest of the edition")
        time.sleep(1.5)  # a further tick must not send anything more
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    per_reader = Counter(r for m in handler.received for r in m.rcpt_tos)
    assert len(per_reader) == SUBSCRIBERS and set(per_reader.values()) == {1}
    with store.engine.connect() as conn:
        sent = conn.execute(text("select count(*) from editions where status = 'sent'")).scalar()
        runs = [tuple(r) for r in conn.execute(text("select kind, status from runs order by id"))]
    assert sent == SUBSCRIBERS
    assert ("scheduled", "stopped") in runs and ("scheduled", "ok") in runs


def _get(port: int, path: str) -> int:
    try:
        return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=2).status_code
    except httpx.HTTPError:
        return 0
