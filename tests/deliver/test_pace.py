"""The pace's two feedback loops on a fake clock: the shared rate that throttling cuts and time
raises (AIMD), and the connection count that grows while the rate rises with it and shrinks when
the relay says it has too many (Postfix's per-destination concurrency feedback)."""

from __future__ import annotations

import pytest

from newsletter.deliver.pace import (
    DECREASE,
    INITIAL,
    WINDOW_MESSAGES,
    Connections,
    RateLimiter,
)


class FakeTime:
    def __init__(self) -> None:
        self.now = 1000.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def never() -> bool:
    return False


def test_a_throttle_cuts_the_configured_rate_once_per_window() -> None:
    t = FakeTime()
    limiter = RateLimiter(10, None, clock=t.clock, sleep=t.sleep)
    tickets = [limiter.acquire(never) for _ in range(5)]
    assert limiter.throttled(tickets[0])
    assert limiter.per_second == pytest.approx(10 * DECREASE)
    # replies to messages sent before the cut answer the old pace: no second cut
    assert not limiter.throttled(tickets[3])
    assert limiter.per_second == pytest.approx(10 * DECREASE)
    t.now += 0.01
    after = limiter.acquire(never)
    assert limiter.throttled(after)  # sent after the cut and still throttled: cut again
    assert limiter.per_second == pytest.approx(10 * DECREASE * DECREASE)
    assert limiter.cuts == 2


def test_an_unpaced_send_is_cut_from_the_rate_it_was_sending_at() -> None:
    t = FakeTime()
    limiter = RateLimiter(None, None, clock=t.clock, sleep=t.sleep)
    tickets = []
    for _ in range(50):  # 50 messages in half a second: 100 a second
        tickets.append(limiter.acquire(never))
        t.now += 0.01
    assert limiter.per_second is None
    assert limiter.throttled(tickets[-1])
    assert limiter.per_second == pytest.approx(100 * DECREASE, rel=0.05)


def test_the_rate_climbs_back_a_little_each_second_up_to_the_configured_one() -> None:
    t = FakeTime()
    limiter = RateLimiter(40, None, clock=t.clock, sleep=t.sleep)
    assert limiter.throttled(limiter.acquire(never))
    cut = limiter.per_second
    assert cut == pytest.approx(28)
    seen = []
    for _ in range(20):
        t.now += 1.0
        limiter.acquire(never)
        seen.append(limiter.per_second)
    assert seen == sorted(seen)  # additive increase: never down without a throttle
    assert seen[0] == pytest.approx(28 + max(1, 0.05 * 28))
    assert seen[-1] == pytest.approx(40)  # never above smtp.rate_per_second


def test_sends_are_spaced_at_the_cut_rate() -> None:
    t = FakeTime()
    limiter = RateLimiter(None, None, clock=t.clock, sleep=t.sleep)
    limiter.acquire(never)
    t.now += 0.1  # ten a second so far
    limiter.throttled(limiter.acquire(never))
    rate = limiter.per_second
    assert rate is not None
    first = limiter.acquire(never)
    second = limiter.acquire(never)
    assert first is not None and second is not None
    assert second - first == pytest.approx(1 / rate)


def run_windows(
    conns: Connections,
    t: FakeTime,
    rate_at: dict[int, float],
    windows: int,
    relay_limit: int | None = None,
) -> None:
    """Deliver at the rate the relay allows for the current target (every slot in use); a
    connection past ``relay_limit`` is refused as too many."""
    for _ in range(windows):
        while conns.active < conns.target:
            assert conns.enter(never)
            if relay_limit is not None and conns.active > relay_limit:
                conns.crowded(relay_limit)
                conns.leave()
        while conns.active > conns.target and conns.over():
            pass
        n = conns.active
        rate = rate_at.get(n, rate_at[max(k for k in rate_at if k <= n)])
        for _ in range(WINDOW_MESSAGES * n):
            t.now += 1 / rate
            conns.delivered()


def test_connections_grow_while_the_rate_rises_and_stop_at_the_ceiling() -> None:
    t = FakeTime()
    conns = Connections(20, clock=t.clock)
    assert conns.target == INITIAL
    # a relay 100 ms away: each connection adds 10 messages a second
    run_windows(conns, t, {n: 10.0 * n for n in range(1, 21)}, 12)
    assert conns.target == 20 and conns.peak == 20


def test_connections_stop_where_more_bring_no_more_messages() -> None:
    t = FakeTime()
    conns = Connections(20, clock=t.clock)
    # the sender's own CPU caps the send at 300 a second from 4 connections on
    run_windows(conns, t, {n: min(300.0, 100.0 * n) for n in range(1, 21)}, 8)
    assert conns.target == INITIAL  # tried more, found no gain, went back


def test_too_many_connections_brings_the_target_down_to_those_open() -> None:
    t = FakeTime()
    conns = Connections(20, clock=t.clock)
    run_windows(conns, t, {n: 10.0 * n for n in range(1, 21)}, 3)
    open_now = conns.active
    assert open_now > INITIAL
    assert conns.crowded(open_now - 1)  # one more than the relay takes
    assert conns.target == open_now - 1 and conns.learned == open_now - 1
    refused = conns.refusals
    run_windows(conns, t, {n: 10.0 * n for n in range(1, 21)}, 45, relay_limit=open_now - 1)
    assert conns.target == open_now - 1  # it tried one more now and then, and kept the limit
    assert 1 <= conns.refusals - refused <= 3, "a probe every 20 windows at most"


def test_a_limit_found_too_low_grows_when_a_probe_holds() -> None:
    """Several connections refused at once may make the limit look lower than it is: a
    probe past it that the relay takes raises it."""
    t = FakeTime()
    conns = Connections(20, clock=t.clock)
    run_windows(conns, t, {n: 10.0 * n for n in range(1, 21)}, 1)
    assert conns.crowded(conns.active - 2)  # looked like 4, the relay takes 8
    run_windows(conns, t, {n: 10.0 * n for n in range(1, 21)}, 100, relay_limit=8)
    assert conns.target == 8 and conns.learned == 8


def test_a_lone_connection_refused_as_too_many_keeps_its_slot() -> None:
    conns = Connections(4, clock=FakeTime().clock)
    assert conns.enter(never)
    assert not conns.crowded(0)  # nothing to give back: the caller waits and tries again
    assert conns.target == INITIAL


def test_a_fixed_pool_opens_them_all_and_never_measures() -> None:
    t = FakeTime()
    conns = Connections(6, fixed=True, clock=t.clock)
    assert conns.target == 6
    run_windows(conns, t, {1: 5.0}, 5)
    assert conns.target == 6
