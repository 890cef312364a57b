"""The pace of a send, learned from the relay: how many connections, and how many messages a second.

Two feedback loops, shared by every sender of a :class:`~newsletter.deliver.pool.SendPool`:

- :class:`Connections` decides how many relay connections are open at once, as Postfix's queue
  manager does per destination (``qmgr_queue_unthrottle`` / ``qmgr_queue_throttle``): start
  with a few, add connections while the delivery rate still rises with them, stop at
  ``smtp.pool_size`` (the ceiling) or where more connections bring no more messages a second,
  and give one back whenever the relay says it has too many (``421 too many connections``,
  at the greeting or in the session). The limit a relay showed is kept in
  :attr:`Connections.learned`.
- :class:`RateLimiter` paces the messages of all connections: ``smtp.rate_per_second`` and
  ``rate_per_hour`` when set, and, when the relay throttles (``454``, ``451``/``421`` "rate
  exceeded"), an additive-increase, multiplicative-decrease rate (as TCP's congestion window):
  one cut by :data:`DECREASE` per window of messages sent after the last cut, then
  :data:`INCREASE` more messages a second every second, up to ``rate_per_second``.

Both are pure in their decisions (a clock is passed in); the pool only reports what happened.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

log = logging.getLogger(__name__)

DECREASE = 0.7
"""The factor a throttling reply cuts the shared rate by (CUBIC's beta, RFC 9438): the rate then
swings between 0.7 and 1 of the relay's quota, 0.85 of it on average, where halving (Reno's
0.5) gives 0.75."""
INCREASE = 0.05
"""Each second without a throttling reply raises a cut rate by this share of itself (at least
one message a second): back to the quota within about seven seconds."""
MIN_RATE = 1 / 60
"""The slowest pace throttling can bring a send to: one message a minute."""


class RateLimiter:
    """A shared pacing gate across threads: ``per_second`` and ``per_hour`` at most, and a rate
    that the relay's throttling replies lower (:meth:`throttled`) and time raises again.

    ``already_this_hour`` counts messages sent in the last hour by earlier runs (from the
    ledger), so a restarted or next-tick run does not start a fresh hour. :meth:`acquire`
    returns a ticket (the slot's time); a throttling reply to a message whose ticket is older
    than the last cut does not cut again: the relay answered traffic sent before that cut.
    """

    def __init__(
        self,
        per_second: float | None,
        per_hour: int | None,
        *,
        already_this_hour: int = 0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.sleep = sleep
        self.ceiling = per_second
        """The configured rate (``smtp.rate_per_second``), never exceeded."""
        self.rate = per_second
        """The current rate in messages a second (``None``: unpaced)."""
        self.per_hour = per_hour
        self.clock = clock
        self._lock = threading.Lock()
        now = clock()
        self._next = now
        self._raised = now
        self._cut = -1.0
        """When the rate was last cut (tickets before it do not cut it again)."""
        self.cuts = 0
        """Throttling replies that cut the rate."""
        self._recent: deque[float] = deque()
        """Slots handed out in the last second: the rate actually sent, when none is set."""
        # Earlier sends in the hour are counted as if made now: conservative, never too fast.
        seed = min(already_this_hour, per_hour or 0)
        self._hour: deque[float] = deque([now] * seed, maxlen=per_hour or 1)

    def acquire(self, aborted: Callable[[], bool]) -> float | None:
        """Wait for the next send slot and return its ticket; ``None`` when ``aborted()`` turned
        true while waiting."""
        with self._lock:
            now = self.clock()
            self._raise(now)
            slot = max(now, self._next)
            if self.per_hour and len(self._hour) >= self.per_hour:
                slot = max(slot, self._hour[0] + 3600.0)
            self._next = slot + (1.0 / self.rate if self.rate else 0.0)
            if self.per_hour:
                self._hour.append(slot)
            self._recent.append(slot)
            while self._recent and self._recent[0] < slot - 1.0:
                self._recent.popleft()
        while (left := slot - self.clock()) > 0:
            if aborted():
                return None
            self.sleep(min(left, 0.2))
        return None if aborted() else slot

    def _raise(self, now: float) -> None:
        """Additive increase, once a second since the last cut (or raise)."""
        if self.rate is None or self._cut < 0:
            self._raised = now
            return
        seconds = now - self._raised
        if seconds < 1.0:
            return
        self._raised = now
        step = max(1.0, INCREASE * self.rate) * seconds
        rate = self.rate + step
        if self.ceiling is not None:
            rate = min(rate, self.ceiling)
        self.rate = rate

    def throttled(self, ticket: float | None) -> bool:
        """The relay throttled the message sent at ``ticket``: cut the shared rate by
        :data:`DECREASE`, once per window (True when it did)."""
        with self._lock:
            if ticket is not None and ticket < self._cut:
                return False
            now = self.clock()
            sent: float | None = None  # the rate actually sent, when enough slots tell it
            if len(self._recent) >= 5:
                sent = len(self._recent) / max(0.1, min(1.0, now - self._recent[0]))
            if self.rate is None:
                base = sent if sent is not None else float(len(self._recent) or 1)
            else:
                base = self.rate if sent is None else min(self.rate, sent)
            self.rate = max(MIN_RATE, base * DECREASE)
            self._cut = now
            self._raised = now
            self.cuts += 1
            return True

    @property
    def per_second(self) -> float | None:
        """The current rate limit in messages per second, or ``None`` when unpaced."""
        return self.rate


INITIAL = 4
"""Connections a send opens first (Postfix's ``initial_destination_concurrency`` is 5; the pool
adds them one by one after a first message that goes alone)."""
GAIN = 0.5
"""A connection is worth adding while the rate grows by at least this share of the growth
the added connections would bring if each ran as fast as the others."""
WINDOW_MESSAGES = 8
"""Deliveries per connection in one measuring window (and :data:`WINDOW_SECONDS` at least)."""
WINDOW_SECONDS = 0.25
REPROBE_WINDOWS = 20
"""Windows at a plateau before one more connection is tried again (the relay may have sped up,
or taken more connections than it seemed when several were refused at once)."""


class Connections:
    """How many relay connections may be open at once (see the module docstring).

    A sender holds one of :attr:`target` slots while it has a connection (:meth:`enter`,
    :meth:`leave`); :meth:`delivered` is told of each message the relay took, and grows the
    target while the rate rises with it; :meth:`crowded` shrinks it when the relay refused a
    connection. ``fixed`` opens ``ceiling`` connections from the start and never measures.
    """

    def __init__(
        self,
        ceiling: int,
        *,
        initial: int = INITIAL,
        fixed: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ceiling = ceiling
        self.fixed = fixed
        self.target = ceiling if fixed else max(1, min(initial, ceiling))
        self.active = 0
        self.peak = 0
        """The most connections open at once."""
        self.learned: int | None = None
        """The most connections the relay allowed, once it said "too many"."""
        self.refusals = 0
        """Connections the relay refused as too many."""
        self.clock = clock
        self._cond = threading.Condition()
        self._window_start = clock()
        self._window_count = 0
        self._last: tuple[int, float] | None = None
        """(connections open, messages a second) of the last window before a change."""
        self._plateau = 0
        """Windows since the rate stopped rising (0: still growing)."""
        self.on_change: Callable[[int], None] | None = None
        """Told the new :attr:`active` count (the ledger writer's group commit waits for it)."""

    # ---------------------------------------------------------------- slots

    def enter(self, give_up: Callable[[], bool]) -> bool:
        """Wait for a free slot (``active < target``) and take it; False when ``give_up()``."""
        with self._cond:
            while self.active >= self.target:
                if give_up():
                    return False
                self._cond.wait(0.2)
            if give_up():
                return False
            self.active += 1
            self.peak = max(self.peak, self.active)
            self._changed()
            return True

    def leave(self) -> None:
        """Give a slot back (the sender closed its connection)."""
        with self._cond:
            self.active -= 1
            self._changed()
            self._cond.notify()

    def over(self) -> bool:
        """Whether one sender should close its connection (more are open than the target);
        True at most once per connection too many: that sender has left its slot."""
        with self._cond:
            if self.active <= self.target:
                return False
            self.active -= 1
            self._changed()
            return True

    def wake(self) -> None:
        """Wake every waiting sender (the pool is closing)."""
        with self._cond:
            self._cond.notify_all()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self.active)

    # ---------------------------------------------------------------- feedback

    def crowded(self, others: int) -> bool:
        """The relay refused a sender's connection as one too many while ``others`` connections
        of this send were open: the target drops to those, and that is the relay's limit as
        far as this run knows. False when no other is open (the caller waits and tries again)."""
        with self._cond:
            self.refusals += 1
            if others < 1:
                return False
            self.target = others
            self.learned = others if self.learned is None else min(self.learned, others)
            self._plateau = 1  # stay here; a re-probe may try one more later
            self._restart()
            return True

    def delivered(self) -> None:
        """The relay took a message: measure, and add connections while it pays."""
        if self.fixed:
            return
        with self._cond:
            self._window_count += 1
            now = self.clock()
            elapsed = now - self._window_start
            if (
                self._window_count < WINDOW_MESSAGES * max(1, self.active)
                or elapsed < WINDOW_SECONDS
            ):
                return
            rate = self._window_count / elapsed
            before = self.target
            self._decide(rate)
            if self.target != before:
                log.info(
                    "connections: %d -> %d (%.1f messages a second on %d)",
                    before,
                    self.target,
                    rate,
                    min(self.active, before),
                )
            self._restart()

    def _restart(self) -> None:
        self._window_start = self.clock()
        self._window_count = 0

    def _decide(self, rate: float) -> None:
        """One window's rate: grow, go back, hold or probe again."""
        if self.active < self.target:  # not all slots in use: the relay is not what limits
            return
        now = min(self.active, self.target)  # the connections this window ran on
        last = self._last
        if self._plateau:
            self._plateau += 1
            if self._plateau > REPROBE_WINDOWS and self.target < self.ceiling:
                self._last = (now, rate)
                self.target += 1
                self._plateau = 0
                self._cond.notify()
            return
        if last is not None and last[0] < now:
            gained = rate / last[1] - 1 if last[1] > 0 else 1.0
            ideal = now / last[0] - 1
            if gained < GAIN * ideal:  # the last connections brought too little: back to before
                self._plateau = 1
                self.target = max(last[0], 1)
                return
            if self.learned is not None and now > self.learned:
                self.learned = None  # a probe past the limit held: the relay takes more
        limit = self.ceiling if self.learned is None else min(self.ceiling, self.learned)
        self._last = (now, rate)
        if self.target >= limit:
            self._plateau = 1
            return
        self.target = min(limit, self.target + max(1, self.target // 2))
        self._cond.notify_all()
