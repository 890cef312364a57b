"""The sender pool: relay connections as many as the relay takes, one pace, each outcome recorded.

The run loop (:func:`newsletter.edition.loop.send_editions`) ranks and renders on its own thread
and hands each claimed, built message to a :class:`SendPool` through a bounded queue (memory
stays flat). The pool has ``smtp.pool_size`` sender threads; each owns one reused relay
connection (a :class:`~newsletter.deliver.Mailer`) while it holds one of the
:class:`~newsletter.deliver.pace.Connections` slots: a run starts with a few connections and
adds more while the rate still rises with them, up to ``smtp.pool_size``, and gives one back
whenever the relay answers ``421 too many connections`` (the message goes out on another
connection, nothing fails). Per message, a sender:

1. waits for the shared :class:`~newsletter.deliver.pace.RateLimiter` (``rate_per_second``,
   ``rate_per_hour``, and the rate the relay's throttling replies cut and time raises again);
2. marks the edition ``sending`` in one compare-and-set that also checks the subscriber is still
   active and the claim still ours (suppression is checked at send time);
3. hands the message to the relay (MAIL, RCPT, DATA, the final dot) and posts its ``sent``
   mark, which the next ``begin`` on that connection (and its QUIT) waits for.

Every connection has a message in flight: the relay's answer time is hidden by concurrency, not
paid one message at a time. The price: a kill (SIGKILL; on PostgreSQL a power loss too, see
docs/delivery.md for SQLite's) may find, on each open connection, one message past its final
dot whose ``sent`` mark is not committed: at most one duplicate per open connection, re-sent
with its original Message-ID; nothing is lost. A refusal is turned into a step (retry after a
backoff, slow down, re-send once, give up, suppress) by
:func:`newsletter.deliver.retry.next_step`, which holds every such rule; the pool applies it.

A :class:`~newsletter.errors.RelayError` (relay unreachable, TLS failure, login refused) stops
the whole pool: messages not yet handed over are given back to the ledger, and the run reports
the one error. So does a relay that stalls (``smtp.max_timeouts`` replies in a row that did not
come within ``smtp.timeout``) and one that refuses every connection as too many
(``delivery.attempts`` times in a row while no other connection is open).

Stopping (``stop``, a SIGTERM): no new message starts, the ones in flight get their answer and
are recorded, the queued ones are given back; :attr:`StopRequest.at_once
<newsletter.deliver.stop_signals.StopRequest.at_once>` (a second signal) stops waiting for the relay.

The pool and its pace share one ordering guarantee (each ``250`` recorded before its
connection sends anything else, the claim's ``sending`` mark before the relay sees the
message), so the senders stay in one module.
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
from newsletter.deliver.ledger import LedgerWriter, PendingWrite
from newsletter.deliver.message import Envelope
from newsletter.deliver.pace import Connections, RateLimiter
from newsletter.deliver.retry import Refusal, RetryRules, Step, Then, Tries, backoff, next_step
from newsletter.deliver.smtp import Crowded, Mailer, MailerFactory
from newsletter.deliver.stop_signals import at_once
from newsletter.errors import DeliveryError, RelayError
from newsletter.models import EditionClaim, EditionStatus, LedgerOp, Outcome, Subscriber
from newsletter.store.protocol import SendStore
from newsletter.store.retry import database_away

log = logging.getLogger(__name__)

__all__ = ["Job", "RateLimiter", "SendPool"]

HINT_MESSAGES = 200
"""Messages a run sends before it may say what held its pace."""
HINT_BUSY = 0.8
"""Share of the run its connections spent waiting for the relay's answer to a final dot, at
``smtp.pool_size`` connections, that makes a run advise more connections."""


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
    layout: str | None = None
    """What the digest showed besides its papers, recorded with them (``editions.layout``)."""


RecordFn = Callable[[Outcome, Job, str | None], None]


class SendPool:
    """Sender threads behind a bounded queue, as many connected as the relay takes; see the
    module docstring."""

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
        self._closing = threading.Event()
        """Set by :meth:`close`: no more jobs come; senders finish what is queued and end."""
        self.relay_error: str | None = None
        self._timeouts = 0
        self._crowded_alone = 0
        self._mailers: set[Mailer] = set()
        """The senders' mailers (a connected one has a connection the relay greeted)."""
        self._local = threading.local()
        """Per sender: its last posted ``sent`` mark."""
        self.crash: BaseException | None = None
        self._probe_lock = threading.Lock()
        self._probed = threading.Event()
        smtp = config.settings.smtp
        self.connections = Connections(
            smtp.pool_size, initial=smtp.pool_start, fixed=not smtp.pool_adapt
        )
        """How many connections are open, and how many may be (see :mod:`.pace`)."""
        first = smtp.pool_start if smtp.pool_adapt else smtp.pool_size
        size = self.delivery.queue_size or max(8, 2 * first)
        self._queue: queue.Queue[Job] = queue.Queue(maxsize=size)
        self._again: deque[tuple[Job, Tries]] = deque()
        """Jobs a connection the relay refused as too many hands to the others."""
        hour = store.count_sent_since(clock() - timedelta(hours=1)) if smtp.rate_per_hour else 0
        self.limiter = RateLimiter(smtp.rate_per_second, smtp.rate_per_hour, already_this_hour=hour)
        self.ledger = LedgerWriter(store, clock, callers=1, linger=self.delivery.group_commit_wait)
        self.connections.on_change = self._connections_changed
        self._answers: list[tuple[int, float]] = []
        """Per closed mailer: (messages, seconds from their final dots to the relay's 250)."""
        self._started = time.monotonic()
        self._threads: list[threading.Thread] = []
        """Sender threads, started as the connection target grows (up to ``smtp.pool_size``)."""
        self._spawn_lock = threading.Lock()
        self._spawn(self.connections.target)

    def _spawn(self, upto: int) -> None:
        """Start sender threads until there are ``upto``."""
        with self._spawn_lock:
            while len(self._threads) < upto and not self._closing.is_set():
                th = threading.Thread(
                    target=self._run, name=f"smtp-sender-{len(self._threads)}", daemon=True
                )
                self._threads.append(th)
                th.start()

    def _connections_changed(self, active: int) -> None:
        # a batch of "sending" marks waits for as many calls as connections are open
        self.ledger.callers = max(1, active)

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
        self._closing.set()
        self.connections.wake()
        with self._spawn_lock:  # no thread starts once closing is set
            threads = list(self._threads)
        for th in threads:
            while th.is_alive() and not self.at_once.is_set():
                th.join(0.1)
        if self.at_once.is_set():
            self.abort.set()
        self._pace_hints()
        try:
            self.ledger.close()
        except BaseException as e:
            self.crash = self.crash or e
        while self._again:  # senders that died left jobs behind: give them back
            self._release(self._again.popleft()[0])
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            self._release(job)
        if self.crash is not None:
            raise self.crash

    def _pace_hints(self) -> None:
        """Say what set the run's pace, from what the relay did: its answer time, its limit
        on connections, its throttling. One line each, with what to change."""
        smtp = self.settings.smtp
        messages = sum(n for n, _ in self._answers)
        if messages < HINT_MESSAGES or self.abort.is_set():
            return
        conns = self.connections
        if conns.learned is not None:
            log.info(
                "the relay at %s:%d took %d connections at once and refused more as too many: "
                "the send kept to %d",
                smtp.host,
                smtp.port,
                conns.learned,
                conns.target,
            )
        if self.limiter.cuts:
            log.warning(
                "the relay at %s:%d asked to slow down %d times: the send ended at %.1f "
                "messages a second; setting smtp.rate_per_second: %.0f keeps under its limit "
                "from the start",
                smtp.host,
                smtp.port,
                self.limiter.cuts,
                self.limiter.rate or 0.0,
                self.limiter.rate or 1.0,
            )
        answer = sum(t for _, t in self._answers) / messages
        elapsed = time.monotonic() - self._started
        busy = sum(t for _, t in self._answers) / max(elapsed * max(conns.peak, 1), 1e-9)
        if conns.peak >= smtp.pool_size and conns.learned is None and busy >= HINT_BUSY:
            wanted = min(64, 2 * smtp.pool_size)
            log.warning(
                "the relay at %s:%d took %.0f ms to answer each message, and all %d connections "
                "(smtp.pool_size) spent %.0f%% of the send waiting for it: a higher "
                "smtp.pool_size (say %d) sends faster, if the relay allows that many connections",
                smtp.host,
                smtp.port,
                1000 * answer,
                smtp.pool_size,
                100 * busy,
                wanted,
            )

    def _aborted(self) -> bool:
        return self.abort.is_set() or self.stop.is_set()

    # ------------------------------------------------------------------ the senders

    def _next(self) -> tuple[Job, Tries] | None:
        """The next job to send (one handed back first), or None once the pool is closing and
        nothing is left (or after a short wait, to look at the slots again)."""
        try:
            return self._again.popleft()
        except IndexError:
            pass
        try:
            job = self._queue.get(timeout=0.2)
        except queue.Empty:
            return None
        claim = job.claim
        # an edition left unknown (or settled for a re-send) gets its one re-send now
        resent = claim.earlier in (EditionStatus.UNKNOWN, EditionStatus.RESEND)
        if resent:
            self._note(Outcome.RESENT, job, None)
        return job, Tries(resent=resent)

    def _done(self) -> bool:
        return self._closing.is_set() and not self._again and self._queue.empty()

    def _run(self) -> None:
        mailer: Mailer | None = None
        held = False
        try:
            while True:
                if not held:
                    if not self.connections.enter(lambda: self._done() or self._aborted()):
                        if self._aborted():
                            self._drain()
                        return
                    held = True
                item = self._next()
                if item is None:
                    if self._done():
                        return
                    continue
                job, tries = item
                if self._aborted():
                    self._release(job)
                    continue
                if mailer is None:
                    mailer = self.factory()
                    with self._record_lock:
                        self._mailers.add(mailer)
                first = False
                if not self._probed.is_set():
                    # The run's first message goes alone: if the relay is unreachable or refuses
                    # the login, that is one connection attempt and one error, not pool_size.
                    with self._probe_lock:
                        first = not self._probed.is_set()
                        if first:
                            try:
                                keep = self._handle(mailer, job, tries)
                            finally:
                                self._probed.set()
                if not first:
                    keep = self._handle(mailer, job, tries)
                if not keep or self.connections.over():
                    self._hang_up(mailer)
                    mailer = None
                    if keep:  # over(): the slot is given back already
                        held = False
                        continue
                    self.connections.leave()
                    held = False
        finally:
            if mailer is not None:
                self._hang_up(mailer)
            if held:
                self.connections.leave()

    def _drain(self) -> None:
        """An aborted pool: give back what is handed back (the queue is given back by close)."""
        while True:
            try:
                job, _ = self._again.popleft()
            except IndexError:
                return
            self._release(job)

    def _hang_up(self, mailer: Mailer) -> None:
        """QUIT, once this connection's last ``250`` is recorded: a kill now cannot re-send a
        message whose 250 came back."""
        unrecorded: PendingWrite | None = getattr(self._local, "unrecorded", None)
        if unrecorded is not None:
            self.ledger.wait(unrecorded)
            self._local.unrecorded = None
        with self._record_lock:
            self._mailers.discard(mailer)
        mailer.close()
        with self._record_lock:
            self._answers.append((mailer.answers, mailer.answer_seconds))
        mailer.answers, mailer.answer_seconds = 0, 0.0

    def _handle(self, mailer: Mailer, job: Job, tries: Tries) -> bool:
        """Send ``job``; False when this sender gives its connection up (the relay refused it
        as one too many: the job is handed to the other senders)."""
        if self._aborted():
            self._release(job)
            return True
        try:
            self._deliver(mailer, job, tries)
        except Crowded as e:
            return self._crowded(job, tries, e)
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
        return True

    def _crowded(self, job: Job, tries: Tries, e: Crowded) -> bool:
        """The relay refused this connection as one too many: the message goes back to
        ``claimed`` (the relay does not have it) and to another connection; this one is given
        up. Alone, the sender waits and tries again, and after ``delivery.attempts`` refusals
        in a row the relay counts as unusable."""
        claim, sub = job.claim, job.subscriber
        self.ledger.call(
            LedgerOp("mark", claim.id, sub.id, status=EditionStatus.CLAIMED, error=e.reply)
        )
        smtp = self.settings.smtp
        with self._record_lock:  # this one is closed: the relay refused it, or said 421 on it
            others = sum(m.connected for m in self._mailers)
        if self.connections.crowded(others):
            log.info(
                "the relay at %s:%d refused a connection as too many (%s): sending on %d",
                smtp.host,
                smtp.port,
                e.reply,
                self.connections.target,
            )
            with self._record_lock:
                self._crowded_alone = 0
            self._again.append((job, tries))
            return False
        with self._record_lock:
            self._crowded_alone += 1
            refusals = self._crowded_alone
        if refusals >= self.delivery.attempts:
            with self._record_lock:
                if self.relay_error is None:
                    self.relay_error = (
                        f"the relay at {smtp.host}:{smtp.port} refused every connection as too "
                        f"many, {refusals} times in a row with none other open ({e.reply}): "
                        "another program holds its connections; try again later"
                    )
            self.abort.set()
            self._release(job, e.reply)
            return True
        if self._wait(backoff(refusals, self.rules.retry_delay, self.rules.retry_max_delay)):
            self._release(job, e.reply)
            return True
        self._again.appendleft((job, tries))
        return True

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

    def _deliver(self, mailer: Mailer, job: Job, tries: Tries) -> None:
        """Send one job until :func:`~newsletter.deliver.retry.next_step` says stop."""
        claim, sub = job.claim, job.subscriber
        while True:
            ticket = self.limiter.acquire(self._aborted)
            if ticket is None or self._aborted():
                self._release(job)
                return
            began = self.ledger.call(LedgerOp("begin", claim.id, sub.id, self.owner))
            if began == "inactive":
                self._note(Outcome.UNSUBSCRIBED, job)
                return
            if began == "lost":
                self._note(Outcome.ALREADY, job)
                return
            step = self._send(mailer, job, tries)
            if step is None:
                self._note(Outcome.SENT, job)
                self.connections.delivered()
                if len(self._threads) < self.connections.target:
                    self._spawn(self.connections.target)
                self._crowded_alone = 0
                return
            if step.then is Then.SLOW_DOWN and self.limiter.throttled(ticket):
                log.info(
                    "the relay throttled (%s): all connections slow down to %.1f messages a second",
                    step.mark_error,
                    self.limiter.rate or 0.0,
                )
            if not self._apply(step, job):
                return
            tries = step.tries

    def _send(self, mailer: Mailer, job: Job, tries: Tries) -> Step | None:
        """Hand ``job`` to the relay and post what became of it: None once its ``sent`` mark is
        posted, else the step after the refusal (its mark committed)."""
        claim, sub = job.claim, job.subscriber
        try:
            mailer.send(job.envelope)
        except DeliveryError as e:
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
                        layout=job.layout if step.mark_papers else None,
                    )
                )
            return step
        self._stalled(None)
        # Not waited for here: the next transaction on this connection starts with a ``begin``
        # call, applied after this mark (in order, often in the same commit), and the
        # connection's QUIT waits for it (see _hang_up). A kill before that commit leaves this
        # message to be re-sent with its Message-ID: one per open connection at most.
        self._local.unrecorded = self.ledger.post(
            LedgerOp(
                "mark",
                claim.id,
                sub.id,
                status=EditionStatus.SENT,
                paper_ids=job.paper_ids,
                layout=job.layout,
            )
        )
        return None

    def _apply(self, step: Step, job: Job) -> bool:
        """Count ``step`` (its mark is written: :meth:`_send`) and wait as it says; True to send
        again."""
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
        if step.then in (Then.RETRY, Then.SLOW_DOWN) and self._wait(step.delay):
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
