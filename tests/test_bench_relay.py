"""The relay simulator behind ``python -m bench relay`` (bench/relay_sim.py) is the relay it
claims to be: it greets one connection too many with 421, answers a MAIL beyond its quota with
454, holds each final dot's answer for its delay, and counts what it took."""

from __future__ import annotations

import smtplib
import time
from pathlib import Path

import pytest

from bench.bench_relay import Relay, raw_smtplib

pytestmark = pytest.mark.slow  # a relay in a subprocess

MESSAGE = b"Subject: hi\r\n\r\nhello\r\n"


def test_a_connection_beyond_the_limit_is_greeted_with_421(tmp_path: Path) -> None:
    relay = Relay(tmp_path, "limit", dot=0, connections=1)
    try:
        first = smtplib.SMTP("127.0.0.1", relay.port, timeout=10)
        with pytest.raises(smtplib.SMTPConnectError) as refused:
            smtplib.SMTP("127.0.0.1", relay.port, timeout=10)
        assert (
            refused.value.smtp_code == 421 and b"Too many connections" in refused.value.smtp_error
        )
        first.sendmail("a@example.org", ["b@example.org"], MESSAGE)
        first.quit()
    finally:
        got = relay.stop()
    assert got["messages"] == 1 and got["refused_connections"] == 1
    assert got["peak_connections"] == 1


def test_a_mail_beyond_the_quota_is_throttled_with_454(tmp_path: Path) -> None:
    relay = Relay(tmp_path, "quota", dot=0, connections=0, quota=2)
    try:
        conn = smtplib.SMTP("127.0.0.1", relay.port, timeout=10)
        for i in range(2):
            conn.sendmail("a@example.org", [f"r{i}@example.org"], MESSAGE)
        with pytest.raises(smtplib.SMTPSenderRefused) as throttled:
            conn.sendmail("a@example.org", ["r2@example.org"], MESSAGE)
        assert throttled.value.smtp_code == 454
        conn.quit()
    finally:
        got = relay.stop()
    assert got["messages"] == 2 and got["throttled"] == 1 and got["duplicates"] == 0


def test_each_final_dot_waits_for_the_delay_while_the_connections_overlap(tmp_path: Path) -> None:
    """Four connections against a 200 ms relay: the relay holds each answer (five answer times
    per connection at least) and has four messages waiting for their answer at once."""
    relay = Relay(tmp_path, "delay", dot=200, connections=4)
    try:
        started = time.perf_counter()
        raw_smtplib(relay.port, 20, MESSAGE, 4)
        took = time.perf_counter() - started
    finally:
        got = relay.stop()
    assert got["messages"] == 20 and got["recipients"] == 20
    assert took >= 5 * 0.2  # a floor the relay sets: each connection waited five answers
    assert got["peak_awaiting"] == 4
