"""SIGTERM and SIGINT during ``newsletter send --now`` drain the run; a second signal stops it.

The review's case: SIGTERM killed the process at once (-15), leaving 30 ``claimed`` and 4
``sending`` rows and the run ``running``, and the next run sent 2 duplicates. Here the real CLI
runs in a subprocess against a slow relay (every message takes a moment before its ``250``).
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from newsletter.errors import ExitStatus
from newsletter.models import EditionStatus
from tests.faults.sendrun import ledger, populate, start_send
from tests.smtpfaults import fault_server

SUBSCRIBERS = 40


def _wait_for(
    condition: Callable[[], bool], proc: subprocess.Popen[bytes], log: Path, seconds: float = 60
) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.005)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_drains_the_run_and_the_next_run_sends_no_duplicate(
    tmp_path: Path, db_url: str, signum: signal.Signals
) -> None:
    with fault_server(delay=0.05) as relay:
        setup = populate(tmp_path, db_url, relay, SUBSCRIBERS, smtp={"pool_size": 4})
        log = tmp_path / "send.log"
        proc = start_send(setup, log)
        _wait_for(lambda: len(relay.received) >= 8, proc, log)
        proc.send_signal(signum)
        status = proc.wait(timeout=60)
        output = log.read_text()
        assert status == ExitStatus.STOPPED, output
        assert "Traceback" not in output
        assert "stopped" in output.lower() and "sent" in output  # the summary was printed
        received = relay.count_by_rcpt()
        store = setup.store()
        try:
            rows = ledger(store)
            states = {r.status for r in rows}
            # In flight finished and recorded; queued given back (deleted or deferred).
            assert not states & {EditionStatus.CLAIMED, EditionStatus.SENDING}, states
            assert states <= {EditionStatus.SENT, EditionStatus.DEFERRED}, states
            sent = {r.email for r in rows if r.status is EditionStatus.SENT}
            assert sent == set(received), "every message the relay took is recorded as sent"
            assert len(sent) < SUBSCRIBERS, "the signal came too late to test a drain"
            [run] = store.last_runs(1)
            assert run.status == "stopped" and run.finished is not None
            assert run.counts["sent"] == len(sent)
        finally:
            store.close()

        again = start_send(setup, log)
        assert again.wait(timeout=60) == 0, log.read_text()
        counts = relay.count_by_rcpt()
        assert set(counts) == set(setup.emails)
        assert set(counts.values()) == {1}, "no reader got a second copy"


def test_a_second_signal_stops_at_once_and_leaves_a_consistent_ledger(
    tmp_path: Path, db_url: str
) -> None:
    with fault_server() as relay:
        release = threading.Event()
        release.set()
        relay.handler.hold = release  # cleared: every DATA waits, the messages stay in flight
        setup = populate(tmp_path, db_url, relay, 12, smtp={"pool_size": 2, "timeout": 120})
        log = tmp_path / "send.log"
        proc = start_send(setup, log)
        store = setup.store()
        try:
            _wait_for(lambda: len(relay.received) >= 1, proc, log)  # the first goes alone
            release.clear()

            def in_flight() -> bool:
                return sum(r.status is EditionStatus.SENDING for r in ledger(store)) == 2

            _wait_for(in_flight, proc, log)
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.3)
            assert proc.poll() is None, "the first signal waits for the messages in flight"
            proc.send_signal(signal.SIGTERM)
            status = proc.wait(timeout=30)  # the relay still holds both messages
            assert not release.is_set()
            output = log.read_text()
            assert status == ExitStatus.STOPPED, output
            assert "Traceback" not in output
            rows = ledger(store)
            states = {r.status for r in rows}
            assert EditionStatus.CLAIMED not in states, states
            assert sum(r.status is EditionStatus.SENDING for r in rows) <= 2
            # issue 43: the summary said "Stopped on request after the message in flight"
            left = sum(r.status is EditionStatus.SENDING for r in rows)
            said = " ".join(output.split())
            assert "after the message" not in said, output
            assert "Stopped at once on a second signal, without waiting for the relay's " in said
            assert f"{left} messages left in flight, recorded as sending" in said, output
            [run] = store.last_runs(1)
            assert run.status == "stopped" and run.finished is not None
        finally:
            release.set()
            store.close()
        before = len(log.read_text())
        again = start_send(setup, log)
        assert again.wait(timeout=60) == 0, log.read_text()
        said = " ".join(log.read_text()[before:].split())
        assert f"resumed from an interrupted run │ {left}" in said, said  # it was, this time
        ids = relay.ids_by_rcpt()
        assert set(ids) == set(setup.emails)
        assert all(len(set(m)) == 1 for m in ids.values()), "duplicates keep their Message-ID"
        assert sum(len(m) - 1 for m in ids.values()) <= 2, "at most the two in flight"
