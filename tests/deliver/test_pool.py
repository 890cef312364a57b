"""The sender pool's pure parts: rate limit, backoff, throttle, crowding and temporary
classification, and telling a dead claim owner from a live one."""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys

import pytest

from newsletter.deliver import is_temporary, is_throttle
from newsletter.deliver.ledger import owner_gone, run_owner
from newsletter.deliver.pool import RateLimiter
from newsletter.deliver.retry import backoff
from newsletter.deliver.smtp import is_crowded


class FakeTime:
    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def never() -> bool:
    return False


def send_times(limiter: RateLimiter, t: FakeTime, n: int) -> list[float]:
    out = []
    for _ in range(n):
        assert limiter.acquire(never)
        out.append(t.now)
    return out


def test_per_second_rate_spaces_sends() -> None:
    t = FakeTime()
    limiter = RateLimiter(4, None, clock=t.clock, sleep=t.sleep)
    times = send_times(limiter, t, 5)
    assert [round(b - a, 3) for a, b in itertools.pairwise(times)] == [0.25] * 4


def test_per_hour_rate_waits_for_the_hour_window() -> None:
    t = FakeTime()
    limiter = RateLimiter(None, 3, clock=t.clock, sleep=t.sleep)
    times = send_times(limiter, t, 4)
    assert times[:3] == [1000.0] * 3  # no per-second limit: a burst of three
    assert times[3] == pytest.approx(1000.0 + 3600)  # the fourth waits for the hour


def test_per_hour_counts_what_earlier_runs_sent() -> None:
    t = FakeTime()
    limiter = RateLimiter(None, 3, already_this_hour=3, clock=t.clock, sleep=t.sleep)
    [first] = send_times(limiter, t, 1)
    assert first == pytest.approx(1000.0 + 3600)


def test_acquire_gives_up_when_the_run_stops() -> None:
    t = FakeTime()
    limiter = RateLimiter(None, 1, clock=t.clock, sleep=t.sleep)
    assert limiter.acquire(never)
    assert not limiter.acquire(lambda: True)


def test_backoff_doubles_up_to_the_cap_with_jitter() -> None:
    for attempt, full in ((1, 2.0), (2, 4.0), (3, 8.0), (6, 30.0)):
        d = backoff(attempt, 2.0, 30.0)
        assert 0.75 * full <= d <= full


@pytest.mark.parametrize(
    ("code", "text", "throttle"),
    [
        (454, "4.7.0 TLS not available", True),
        (421, "4.7.0 Too many connections from your host", False),  # fewer connections
        (421, "4.7.0 Try again later, closing connection", False),
        (451, "4.7.0 too many messages, slow down", True),
        (451, "4.7.1 rate limit exceeded, slow down", True),
        (450, "4.2.0 greylisted, try again later", False),
        (451, "4.3.0 mailbox busy", False),
        (550, "5.7.1 too many recipients", False),  # a 5xx is never a throttle
    ],
)
def test_throttle_replies(code: int, text: str, throttle: bool) -> None:
    assert is_throttle(code, text) is throttle


@pytest.mark.parametrize(
    ("code", "text", "crowded"),
    [
        (421, "4.7.0 Too many connections from your host", True),
        (421, "4.3.2 too many concurrent SMTP connections; please try again later", True),
        (421, "4.7.0 connection limit reached", True),
        (421, "4.7.0 Try again later, closing connection", False),
        (454, "4.7.0 too many connections", False),  # only a 421 closes the session
        (451, "4.7.1 rate limit exceeded", False),
    ],
)
def test_crowded_replies(code: int, text: str, crowded: bool) -> None:
    assert is_crowded(code, text) is crowded


def test_temporary_codes() -> None:
    assert is_temporary(421) and is_temporary(452) and is_temporary(552)
    assert not is_temporary(550) and not is_temporary(553) and not is_temporary(554)


def test_owner_gone_only_for_a_dead_process_on_this_host() -> None:
    host = socket.gethostname()
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # reaped: the pid no longer exists
    assert owner_gone(f"{host}:{proc.pid}:abcd1234")
    assert not owner_gone(run_owner())  # this very process
    # same host and pid, another incarnation (a restarted container): gone
    assert owner_gone(f"{host}:{os.getpid()}:0000ffff.abcd1234")
    assert not owner_gone(f"{host}:1:abcd1234")  # alive (init)
    assert not owner_gone(f"other-host.example:{proc.pid}:abcd1234")  # cannot know: lease
    assert not owner_gone("garbage")
