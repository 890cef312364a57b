"""The sender pool: N relay connections, a rate limit, and each outcome in the ledger.

The run loop (:func:`newsletter.edition.loop.send_editions`) ranks and renders on its own thread
and hands each claimed, built message to a :class:`SendPool` through a bounded queue (memory
stays flat). Each of the pool's ``smtp.pool_size`` threads owns one reused relay connection (a
:class:`~newsletter.deliver.Mailer`) and, per message:

1. waits for the shared :class:`RateLimiter` (per second and per hour; slowed down further when
   the relay throttles);
2. marks the edition ``sending`` in one compare-and-set that also checks the subscriber is still
   active and the claim still ours (suppression is checked at send time);
3. hands the message to the relay (MAIL, RCPT, DATA) and, right before the final dot, takes
   the pool's :class:`FinalDotGate`; it keeps it until the message's ``sent`` mark is committed
   (or its ``unknown`` mark, when the line dropped after the dot; a refusal opens it at once).
   One message of the pool at a time is thus past its final dot and not recorded: a kill
   (SIGKILL; on PostgreSQL a power loss too, see docs/delivery.md for SQLite's) leaves at most
   one duplicate, whatever ``smtp.pool_size``. The cost: the relay's reply to the dot and that
   commit are serialised across the connections (the commit skips the group-commit wait);
   everything before the dot runs on all of them at once.
   A refusal is turned into a step (retry after a backoff, slow down, re-send once, give up,
   suppress) by :func:`newsletter.deliver.retry.next_step`, which holds every such rule; the
   pool applies it.

A :class:`~newsletter.errors.RelayError` (relay unreachable, TLS failure, login refused) stops
the whole pool: messages not yet handed over (those waiting at the gate included: no final dot
is written once the pool is aborted) are given back to the ledger, nothing is marked sent, and
the run reports the one error. So does a relay that stalls: ``smtp.max_timeouts`` replies in a
row that did not come within ``smtp.timeout`` (one stall at a time, as the gate is held while
the reply is awaited).

Stopping (``stop``, a SIGTERM): no new message starts, the ones in flight get their answer and
are recorded, the queued ones are given back; :attr:`StopRequest.at_once
<newsletter.stopping.StopRequest.at_once>` (a second signal) stops waiting for the relay, and
the senders waiting at the gate give their messages back.

The pool and the rate limiter share one ordering guarantee (each ``250`` recorded before its
connection sends anything else, the claim's ``sending`` mark before the relay sees the
message), so they stay in one module.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from newsletter.config import Config
from newsletter.deliver.ledger import LedgerWriter, PendingWrite, Signal
from newsletter.deliver.message import Envelope
from newsletter.deliver.retry import Refusal, RetryRules, Step, Then, Tries, next_step
from newsletter.deliver.smtp import Mailer, MailerFactory, Withheld
from newsletter.errors import DeliveryError, RelayError
from newsletter.models import EditionClaim, EditionStatus, LedgerOp, Outcome, Subscriber
from newsletter.stopping import at_once
from newsletter.store.protocol import SendStore
from newsletter.store.retry import database_away

log = logging.getLogger(__name__)


class RateLimiter:
    """A shared pacing gate: at most ``per_second`` and ``per_hour`` messages, across threads.

    ``already_this_hour`` counts messages sent in the last hour by earlier runs (from the
    ledger), so a restarted or next-tick run does not start a fresh hour. When the relay
    throttles, :meth:`slow_down` halves the pace (or sets one, if none was configured) and
    pauses every sender for a moment; the slower pace holds for the rest of the run.
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
        self.interval = 1.0 / per_second if per_second else 0.0
        self.per_hour = per_hour
        self.clock = clock
        self._lock = threading.Lock()
        self._next = clock()
        self._paused_until = 0.0
        now = clock()
        # Earlier sends in the hour are counted as if made now: conservative, never too fast.
        seed = min(already_this_hour, per_hour or 0)
        self._hour: deque[float] = deque([now] * seed, maxlen=per_hour or 1)

    def acquire(self, aborted: Callable[[], bool]) -> bool:
        """Wait for the next send slot; False when ``aborted()`` turned true while waiting."""
        with self._lock:
            now = self.clock()
            slot = max(now, self._next, self._paused_until)
            if self.per_hour and len(self._hour) >= self.per_hour:
                slot = max(slot, self._hour[0] + 3600.0)
            self._next = slot + self.interval
            if self.per_hour:
                self._hour.append(slot)
        while (left := slot - self.clock()) > 0:
            if aborted():
                return False
            self.sleep(min(left, 0.2))
        return not aborted()

    def slow_down(self, pause: float) -> None:
        """Halve the rate (down to one message a minute) and pause for ``pause`` seconds: the relay
        throttled."""
        with self._lock:
            self.interval = min(60.0, self.interval * 2 if self.interval else 0.1)
            self._paused_until = max(self._paused_until, self.clock() + pause)

    @property
    def per_second(self) -> float | None:
        """The current rate limit in messages per second, or ``None`` when unlimited."""
        return 1.0 / self.interval if self.interval else None


class FinalDotGate:
    """One message of the whole pool at a time between its final dot and its committed mark.

    A sender takes it (:meth:`enter`) right before it writes a message's final dot (the mailer's
    ``before_final_dot``) and opens it (:meth:`leave`) once the relay refused the message, or the
    message's outcome (``sent``, or ``unknown`` after a line lost past the dot) is committed in
    the ledger. So a kill finds at most one message that the relay may have taken and the
    ledger does not say so. The rate limit, ``begin``, MAIL, RCPT and DATA stay outside: the
    other connections carry on with those.
    """

    def __init__(self, give_up: Callable[[], bool]) -> None:
        self._lock = threading.Lock()
        self._holder = threading.local()
        self._give_up = give_up
        self.taken = 0
        """Messages that went through the gate."""
        self.held_for = 0.0
        """Seconds it was shut, all messages together."""
        self.first: float | None = None
        """When it was first taken (``time.monotonic``)."""
        self._since = 0.0

    @property
    def held(self) -> bool:
        """Whether the calling thread holds the gate."""
        return bool(getattr(self._holder, "held", False))

    def enter(self) -> bool:
        """Wait for the gate; False, not taken, when ``give_up()`` is true (checked every 0.2 s
        while waiting, and once taken): the message is then withheld."""
        if self.held:
            return True
        while not self._lock.acquire(timeout=0.2):
            if self._give_up():
                return False
        if self._give_up():
            self._lock.release()
            return False
        self._holder.held = True
        self._since = time.monotonic()  # written holding the gate: one sender at a time
        self.first = self.first or self._since
        self.taken += 1
        return True

    def leave(self) -> None:
        """Open the gate, if the calling thread holds it (so it may be called on any way out)."""
        if self.held:
            self._holder.held = False
            self._open()

    def _open(self) -> None:
        self.held_for += time.monotonic() - self._since
        self._lock.release()

    def pass_on(self) -> Callable[[], None]:
        """Hand the held gate over to whoever commits the message's outcome: the calling
        thread no longer holds it (it may go on with its next transaction, up to that
        message's final dot), and the returned function opens it, once."""
        assert self.held
        self._holder.held = False
        opened = Signal()

        def open_gate() -> None:
            if not opened.is_set():
                opened.set()
                self._open()

        return open_gate


GATE_HINT_MESSAGES = 1000
"""Messages through the final-dot gate before a run may say it held the senders back."""
GATE_HINT_SHARE = 0.75
"""Share of the run (from the gate's first use) the gate was shut that makes it say so."""


@dataclass(frozen=True, slots=True)
class Job:
    """One claimed, built message waiting for a connection."""

    claim: EditionClaim
    subscriber: Subscriber
    envelope: Envelope
    paper_ids: tuple[int, ...]
    keep: object = None
    """What the caller wants back with the outcome (the report keeps the rendered digest of
    some sent editions); the pool does not look at it."""


RecordFn = Callable[[Outcome, Job, str | None], None]


class SendPool:
    """``smtp.pool_size`` sender threads behind a bounded queue; see the module docstring."""

    def __init__(
        self,
        config: Config,
        store: SendStore,
        *,
        owner: str,
        clock: Callable[[], datetime],
        mailer_factory: MailerFactory,
        record: RecordFn,
        stop: threading.Event | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = config.settings
        self.rng = rng or random.Random()
        """Jitter for the backoff between retries (seed it for a reproducible run)."""
        self.delivery = config.settings.delivery
        self.rules = RetryRules.of(self.delivery)
        self.store = store
        self.owner = owner
        self.clock = clock
        self.factory = mailer_factory
        self._record = record
        self._record_lock = threading.Lock()
        self.stop = stop or threading.Event()
        self.at_once = at_once(stop)
        """Set by a second signal: :meth:`close` stops waiting for the messages in flight."""
        self.abort = threading.Event()
        """Set when the relay is unusable, a sender crashed, or ``stop`` was set."""
        self.gate = FinalDotGate(lambda: self.abort.is_set() or self.at_once.is_set())
        self.one_at_a_time = self.delivery.crash_duplicates == "one"
        """Whether senders take :attr:`gate` (``delivery.crash_duplicates``)."""
        """Held from a final dot to its mark's commit; an aborted run writes no more final dots."""
        self.relay_error: str | None = None
        self._timeouts = 0
        self._local = threading.local()
        """Per sender: its last posted ``sent`` mark (``crash_duplicates: per_connection``)."""
        self.crash: BaseException | None = None
        self._probe_lock = threading.Lock()
        self._probed = threading.Event()
        smtp = config.settings.smtp
        size = self.delivery.queue_size or 2 * smtp.pool_size
        self._queue: queue.Queue[Job | None] = queue.Queue(maxsize=size)
        hour = store.count_sent_since(clock() - timedelta(hours=1)) if smtp.rate_per_hour else 0
        self.limiter = RateLimiter(smtp.rate_per_second, smtp.rate_per_hour, already_this_hour=hour)
        self.ledger = LedgerWriter(
            store, clock, callers=smtp.pool_size, linger=self.delivery.group_commit_wait
        )
        self._threads = [
            threading.Thread(target=self._run, name=f"smtp-sender-{i}", daemon=True)
            for i in range(smtp.pool_size)
        ]
        for th in self._threads:
            th.start()

    # ------------------------------------------------------------------ the producer's side

    def submit(self, job: Job) -> bool:
        """Queue a job (blocks while the queue is full). False, job released, when aborted."""
        while not self._aborted():
            try:
                self._queue.put(job, timeout=0.2)
                return True
            except queue.Full:
                continue
        self._release(job)
        return False

    def close(self) -> None:
        """Let the senders finish what is queued (or give it back, if aborted), then join.

        When :attr:`at_once` is set (a second signal), the messages in flight are not waited
        for: they stay ``sending``, and the next run resumes them at once (their owner process
        is gone) with the same Message-ID. What is queued is given back either way.
        """
        for _ in self._threads:
            while not self.at_once.is_set():
                try:
                    self._queue.put(None, timeout=0.2)
                    break
                except queue.Full:
                    if not any(th.is_alive() for th in self._threads):
                        break
        for th in self._threads:
            while th.is_alive() and not self.at_once.is_set():
                th.join(0.1)
        self._gate_hint()
        if self.at_once.is_set():
            self.abort.set()
        try:
            self.ledger.close()
        except BaseException as e:
            self.crash = self.crash or e
        while True:  # senders that died left jobs behind: give them back
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                self._release(job)
        if self.crash is not None:
            raise self.crash

    def _gate_hint(self) -> None:
        """Say so when the final-dot gate held the senders back most of the run: the relay is
        slow to answer the final dot, and ``crash_duplicates: per_connection`` would overlap."""
        gate = self.gate
        if not self.one_at_a_time or gate.taken < GATE_HINT_MESSAGES or gate.first is None:
            return
        elapsed = time.monotonic() - gate.first
        if elapsed <= 0 or gate.held_for / elapsed < GATE_HINT_SHARE:
            return
        log.warning(
            "one message at a time went from its final dot to its recorded answer %.0f%% of "
            "the time (%d messages): the relay's answer to the final dot set the pace, not the "
            "%d connections. That keeps a crash to one duplicate; with a relay slow to answer, "
            "delivery.crash_duplicates: per_connection sends faster (a crash may then leave "
            "one duplicate per connection)",
            100 * gate.held_for / elapsed,
            gate.taken,
            len(self._threads),
        )

    def _aborted(self) -> bool:
        return self.abort.is_set() or self.stop.is_set()

    # ------------------------------------------------------------------ the senders

    def _run(self) -> None:
        mailer: Mailer | None = None
        try:
            while True:
                job = self._queue.get()
                if job is None:
                    return
                if self._aborted():
                    self._release(job)
                    continue
                if mailer is None:
                    mailer = self.factory()
                if not self._probed.is_set():
                    # The run's first message goes alone: if the relay is unreachable or refuses
                    # the login, that is one connection attempt and one error, not pool_size.
                    with self._probe_lock:
                        if not self._probed.is_set():
                            try:
                                self._handle(mailer, job)
                            finally:
                                self._probed.set()
                            continue
                self._handle(mailer, job)
        finally:
            # Without the gate, the last 250 on this connection is recorded before the
            # connection says anything more (QUIT): a kill now cannot re-send a message whose
            # 250 came back. With it, each outcome is committed already (see _send).
            unrecorded: PendingWrite | None = getattr(self._local, "unrecorded", None)
            if unrecorded is not None:
                self.ledger.wait(unrecorded)
            if mailer is not None:
                mailer.close()

    def _handle(self, mailer: Mailer, job: Job) -> None:
        if self._aborted():
            self._release(job)
            return
        try:
            self._deliver(mailer, job)
        except RelayError as e:
            with self._record_lock:
                if self.relay_error is None:
                    self.relay_error = str(e)
            self.abort.set()
            self._release(job, str(e))
        except BaseException as e:  # a bug: stop the run, re-raised by close()
            log.error(
                "sender stopped on the edition for %s: %s",
                job.subscriber.email,
                e,
                exc_info=not database_away(e),
            )
            with self._record_lock:
                self.crash = self.crash or e
            self.abort.set()
            self._release(job, f"internal error: {e}")

    def _note(self, outcome: Outcome, job: Job, error: str | None = None) -> None:
        with self._record_lock:
            self._record(outcome, job, error)

    def _release(self, job: Job, error: str | None = None) -> None:
        try:
            self.store.release_edition(
                job.claim.id, error=error or "the run stopped before sending"
            )
        except Exception as e:  # the database is failing too: the claim's lease will free it
            log.error(
                "could not give back the edition for %s: %s",
                job.subscriber.email,
                e,
                exc_info=not database_away(e),
            )
        self._note(Outcome.RELEASED, job, error)

    def _stalled(self, e: DeliveryError | None) -> None:
        """Count consecutive timeouts (any answer from the relay resets the count); after
        ``smtp.max_timeouts`` of them the relay is unusable and the run stops."""
        smtp = self.settings.smtp
        with self._record_lock:
            if e is None or not e.timed_out:
                self._timeouts = 0
                return
            self._timeouts += 1
            if self._timeouts < smtp.max_timeouts or self.relay_error is not None:
                return
            self.relay_error = (
                f"the relay at {smtp.host}:{smtp.port} did not answer within smtp.timeout "
                f"({smtp.timeout:g} s) {self._timeouts} times in a row: it is stalled or "
                "overloaded; check the relay (or raise smtp.timeout or smtp.max_timeouts)"
            )
        self.abort.set()

    def _deliver(self, mailer: Mailer, job: Job) -> None:
        """Send one job until :func:`~newsletter.deliver.retry.next_step` says stop."""
        claim, sub = job.claim, job.subscriber
        # an edition left unknown (or settled for a re-send) gets its one re-send now
        tries = Tries(resent=claim.earlier in (EditionStatus.UNKNOWN, EditionStatus.RESEND))
        if tries.resent:
            self._note(Outcome.RESENT, job, None)
        while True:
            if not self.limiter.acquire(self._aborted) or self._aborted():
                self._release(job)
                return
            began = self.ledger.call(LedgerOp("begin", claim.id, sub.id, self.owner))
            if began == "inactive":
                self._note(Outcome.UNSUBSCRIBED, job)
                return
            if began == "lost":
                self._note(Outcome.ALREADY, job)
                return
            try:
                step = self._send(mailer, job, tries)
            except Withheld:  # the run was aborted before the final dot: the relay has nothing
                self._release(job)
                return
            finally:
                self.gate.leave()  # on every way out, a crash included
            if step is None:
                self._note(Outcome.SENT, job)
                return
            if not self._apply(step, job):
                return
            tries = step.tries

    def _send(self, mailer: Mailer, job: Job, tries: Tries) -> Step | None:
        """Hand ``job`` to the relay and commit what became of it: None once its ``sent`` mark is
        committed, else the step after the refusal (its mark committed too).

        The pool's :attr:`gate` is taken right before the final dot (the mailer waits for it),
        so from there to the commit of the mark this is the only message of the pool: a kill
        leaves at most one message the relay may have that the ledger does not call ``sent``
        or ``unknown``. A clean refusal opens the gate as soon as it is read (the relay said
        no); the caller opens it on every other way out. The mark, written holding the gate,
        is committed without the group-commit wait (the other senders cannot join it).
        """
        claim, sub = job.claim, job.subscriber
        try:
            mailer.send(job.envelope, self.gate.enter if self.one_at_a_time else None)
        except DeliveryError as e:
            if not e.ambiguous:
                self.gate.leave()
            self._stalled(e)
            step = next_step(
                Refusal.of(e),
                tries,
                self.rules,
                may_have_arrived=claim.may_have_arrived,
                aborted=self._aborted(),
                address=sub.email,
                rng=self.rng,
            )
            if step.mark is not None:
                papers = job.paper_ids if step.mark_papers else ()
                self.ledger.call(
                    LedgerOp(
                        "mark",
                        claim.id,
                        sub.id,
                        status=step.mark,
                        error=step.mark_error,
                        paper_ids=papers,
                    ),
                    urgent=self.gate.held,
                )
            return step
        self._stalled(None)
        mark = LedgerOp(
            "mark", claim.id, sub.id, status=EditionStatus.SENT, paper_ids=job.paper_ids
        )
        # Not waited for here: the next transaction on this connection starts with a ``begin``
        # call, applied after this mark (in order, often in the same commit), and the
        # connection's QUIT waits for it (see _run). Holding the gate, the mark is committed at
        # once and the writer opens the gate after the commit: no other final dot goes out
        # before this 250 is recorded, while this connection starts its next message.
        if self.gate.held:
            open_gate = self.gate.pass_on()

            def committed() -> None:
                if self.ledger.failed is not None:  # not recorded: no other final dot may go
                    self.abort.set()
                open_gate()

            self._local.unrecorded = self.ledger.post(mark, urgent=True, then=committed)
        else:  # crash_duplicates: per_connection
            self._local.unrecorded = self.ledger.post(mark)
        return None

    def _apply(self, step: Step, job: Job) -> bool:
        """Count ``step`` (its mark is written: :meth:`_send`) and wait or slow down as it says;
        True to send again."""
        claim, sub = job.claim, job.subscriber
        suppressed = step.permanent_failure and bool(
            self.ledger.call(
                LedgerOp(
                    "permanent_failure",
                    subscriber_id=sub.id,
                    limit=self.delivery.suppress_after,
                )
            )
        )
        outcome = step.outcome
        if outcome is Outcome.FAILED and suppressed:
            outcome = Outcome.SUPPRESSED
        self._note(outcome, job, step.error)
        if step.then is Then.SLOW_DOWN:
            self.limiter.slow_down(step.delay)
        elif step.then is Then.RETRY and self._wait(step.delay):
            self.store.release_edition(claim.id, error=step.mark_error)
            self._note(Outcome.RELEASED, job, step.mark_error)
            return False
        return step.then is not Then.STOP

    def _wait(self, seconds: float) -> bool:
        """Sleep ``seconds`` unless the run is stopped or aborted; True if it was."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self.abort.wait(min(left, 0.2)) or self.stop.is_set():
                return True
        return self._aborted()
