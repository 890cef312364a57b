"""One received bounce message, from the inbound server or the IMAP poller: parse, then decide.

Never raises for what the message says: a malformed or unrelated message is logged with a
one-line reason and dropped. Only the database failing is an error: the IMAP poller leaves the
message for its next round; the inbound server, which answers before applying a report (so its
answer's timing says nothing about who is subscribed), has :class:`BounceWriter` try again.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from newsletter.bounces.decide import BounceDecider, Decision, Outcome
from newsletter.bounces.parse import MAX_RECIPIENTS, Parsed, clean, parse_report
from newsletter.bounces.report import RATE_DAYS, alerts_for
from newsletter.bounces.settings import BounceSettings
from newsletter.bounces.verp import Verp, is_bounce_address
from newsletter.clock import utcnow
from newsletter.errors import NewsletterError
from newsletter.runs.alerts import alert
from newsletter.services import Services
from newsletter.store import Store
from newsletter.subscribe import client_network

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Received:
    """What one message was and did."""

    parsed: Parsed
    decisions: tuple[Decision, ...]


class BounceReceiver:
    """Takes messages sent to the bounce address (plain or VERP) and applies what they report."""

    def __init__(
        self,
        store: Store,
        settings: BounceSettings,
        verp: Verp,
        now: Callable[[], datetime] = utcnow,
        alert: Callable[[str, str], object] | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.verp = verp
        self.decider = BounceDecider(store, settings)
        self.now = now
        self.alert = alert
        """Called with (subject, body) when an edition's rates pass an alert threshold."""
        self._alerted: set[str] = set()

    @classmethod
    def from_config(cls, services: Services) -> BounceReceiver | None:
        """The receiver for the process's ``services`` (config, store, key, clock), or ``None``
        when ``bounces.enabled`` is off; alerts go out through ``services``."""
        config, now = services.config, services.clock
        settings = config.settings.bounces
        if not settings.enabled:
            return None
        address = settings.bounce_address(config.settings.sender.from_address)
        verp = Verp(services.secret, address, signed=settings.verp)

        def mail_alert(subject: str, body: str) -> None:
            alert(config, subject, body, now(), services=services)

        return cls(services.store, settings, verp, now, mail_alert)

    @property
    def address(self) -> str:
        """The plain bounce address."""
        return self.verp.address

    def accepts(self, recipient: str) -> bool:
        """Whether mail to ``recipient`` is a bounce for us (the address or its VERP form)."""
        return is_bounce_address(recipient, self.verp.address)

    def allow_host(self, host: str) -> bool:
        """Count one message from ``host`` (the sending host; IPv6 by its /64); False when it
        is over ``bounces.per_host`` per ``per_host_window`` (then nothing is counted)."""
        return self.store.hit_rate(
            f"bounce-host:{client_network(host)}"[:120],
            self.now(),
            window=timedelta(seconds=self.settings.per_host_window),
            limit=self.settings.per_host,
        )

    def receive(self, data: bytes, recipients: Sequence[str], origin: str = "") -> Received:
        """Parse one message and apply its events. ``origin``: for log lines (peer, mailbox)."""
        parsed = parse_report(data, recipients=recipients, verp=self.verp, now=self.now())
        if parsed.forged:
            log.warning(
                "bounces: message%s to a VERP address with an invalid token (forged?)",
                f" from {clean(origin, 120)}" if origin else "",
            )
        if parsed.dropped:
            log.warning(
                "bounces: message%s names more than %d recipients; %d more dropped unread",
                f" from {clean(origin, 120)}" if origin else "",
                MAX_RECIPIENTS,
                parsed.dropped,
            )
        if parsed.refusal:
            log.warning(
                "bounces: message%s not taken: %s",
                f" from {clean(origin, 120)}" if origin else "",
                parsed.refusal,
            )
        decisions = tuple(self.decider.apply(parsed.events))
        if any(d.outcome in (Outcome.COUNTED, Outcome.STOPPED) for d in decisions):
            self.check_rates()
        return Received(parsed, decisions)

    def check_rates(self) -> list[str]:
        """Alert (once per process and line) about recent editions whose complaint or
        hard-bounce rate passed its threshold; the lines over it."""
        since = self.now().date() - timedelta(days=RATE_DAYS)
        over = alerts_for(self.store.edition_rates(since), self.settings)
        for line in over:
            if line in self._alerted:
                continue
            self._alerted.add(line)
            if self.alert is not None:
                self.alert(
                    "bounce or complaint rate over its threshold",
                    line + "\n\nSee docs/deliverability.md (thresholds) and "
                    "'newsletter status' for the rates per edition.",
                )
        return over


class BounceWriter:
    """Applies the reports the inbound server took, one at a time, on a thread of its own.

    The server answers a report before it is applied, after the same work for every report
    (the per-host count): what it does to a subscriber's history cannot show in how long the
    answer took, so the answer's timing does not tell a subscriber from a stranger. A report
    the database cannot take is tried again (``retry_delays``, seconds), then logged and
    dropped; one still queued when the process is killed is lost (a real relay's next report
    about the next digest counts instead). :meth:`close` applies what is queued first.
    """

    THREAD = "bounce-writer"
    """The name of the writer's thread."""

    def __init__(
        self,
        receiver: BounceReceiver,
        *,
        capacity: int = 256,
        retry_delays: Sequence[float] = (1.0, 5.0, 30.0),
    ) -> None:
        self.receiver = receiver
        self.retry_delays = tuple(retry_delays)
        self._queue: queue.Queue[tuple[bytes, tuple[str, ...], str] | None] = queue.Queue(
            maxsize=capacity
        )
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def put(self, data: bytes, recipients: Sequence[str], origin: str = "") -> bool:
        """Queue one message for :meth:`BounceReceiver.receive`; False when the queue is full
        (the server then asks the relay to try again later)."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.THREAD, daemon=True)
                self._thread.start()
        try:
            self._queue.put_nowait((data, tuple(recipients), origin))
        except queue.Full:
            return False
        return True

    def settle(self) -> None:
        """Wait until every report queued so far has been applied (or given up on)."""
        self._queue.join()

    def close(self) -> None:
        """Apply what is queued (without waiting between retries), then stop the thread."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is None:
            return
        self._closing.set()
        self._queue.put(None)
        thread.join()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                self._apply(*item)
            finally:
                self._queue.task_done()

    def _apply(self, data: bytes, recipients: tuple[str, ...], origin: str) -> None:
        where = f" from {clean(origin, 120)}" if origin else ""
        for attempt, delay in enumerate((0.0, *self.retry_delays)):
            if attempt:
                self._closing.wait(delay)  # closing: no more waiting
            try:
                self.receiver.receive(data, recipients, origin)
                return
            except NewsletterError as e:  # the database (a StoreError), not the mail
                log.warning(
                    "bounces: could not record a report%s (try %d of %d): %s",
                    where,
                    attempt + 1,
                    len(self.retry_delays) + 1,
                    " ".join(str(e).split()),
                )
                if self._closing.is_set() and attempt:
                    break
            except Exception:  # a bug must not stop the writer
                log.exception("bounces: could not apply a report%s", where)
                return
        log.error("bounces: a report%s was not recorded; dropped", where)
