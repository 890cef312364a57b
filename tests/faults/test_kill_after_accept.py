"""SIGKILL right after the relay's ``250``: no message whose ``250`` came back is sent twice.

Each ``250`` is recorded before that connection sends anything else: the next transaction
starts with a ledger write applied after it, and QUIT waits for it. The relay here proves the
``250`` came back by the client's next command (QUIT, after the last message), holds it, and the
test kills the sending process with SIGKILL right then. To make the window visible, the
database is kept busy for a moment just as the last ``250`` goes out (a write lock held by the
test), so the ``sent`` mark waits; before the fix, QUIT went out before the mark was
committed, and the resumed run sent that message again.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path

from sqlalchemy import create_engine, text

from tests.faults.sendrun import populate, start_send
from tests.smtpfaults import Fault, fault_server

SUBSCRIBERS = 5


class KillAtQuit:
    """Relay hooks: at the last message's DATA, lock the ledger for ``hold`` seconds; at QUIT,
    tell the test and hold the command until the test has killed the client."""

    def __init__(self, url: str, hold: float = 1.0) -> None:
        self.url = url
        self.hold = hold
        self.messages = 0
        self.reached = threading.Event()
        self.killed = threading.Event()

    def plan(self, stage: str, rcpt: str | None) -> Fault | None:
        if stage == "DATA":
            self.messages += 1
            if self.messages == SUBSCRIBERS:
                self._lock_ledger()
        return None

    def _lock_ledger(self) -> None:
        engine = create_engine(self.url)
        conn = engine.connect()
        if engine.dialect.name == "sqlite":
            conn.exec_driver_sql("BEGIN IMMEDIATE")  # the sender's next write waits for it
        else:
            conn.begin()
            conn.execute(text("LOCK TABLE editions IN EXCLUSIVE MODE"))

        def release() -> None:
            conn.rollback()
            conn.close()
            engine.dispose()

        threading.Timer(self.hold, release).start()

    def quit(self) -> None:
        if not self.reached.is_set():
            self.reached.set()
            self.killed.wait(30)


def test_no_message_whose_250_came_back_is_sent_again_after_a_kill(
    tmp_path: Path, db_url: str
) -> None:
    with fault_server() as relay:
        setup = populate(tmp_path, db_url, relay, SUBSCRIBERS, smtp={"pool_size": 1})
        point = KillAtQuit(setup.url)
        relay.handler.plan = point.plan
        relay.handler.on_quit = point.quit
        log = tmp_path / "send.log"
        proc = start_send(setup, log)
        assert point.reached.wait(60), log.read_text()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        point.killed.set()
        answered = relay.count_by_rcpt()  # every 250 the client had read before the kill
        assert set(answered) == set(setup.emails)

        resumed = start_send(setup, log)
        assert resumed.wait(timeout=120) == 0, log.read_text()
        counts = relay.count_by_rcpt()
        again = sorted(r for r in answered if counts[r] > 1)
        assert again == [], f"sent twice although their 250 had come back: {again}"
