"""What to do after the relay refused a message: the retry policy, in one pure function.

The relay's answer arrives as data (:class:`Refusal`: the code, the stage, and what the code
means: temporary, a throttle, an ambiguous drop after the final dot), as Mailman's ``refused``
dictionary carries it. :func:`next_step` turns that answer and the tries so far into one
:class:`Step`: the ledger mark to write, what to count, and whether to re-send now, slow down,
wait and retry, or give up. The sender pool (:mod:`newsletter.deliver.pool`) only applies steps;
every rule of "retry, slow down, give up, count as delivered, suppress" is here, and its tests
call :func:`next_step` directly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from enum import Enum

from newsletter.config import DeliverySettings
from newsletter.errors import DeliveryError
from newsletter.models import EditionStatus, Outcome

_RNG = random.Random()


THROTTLE_WAIT = 0.5
"""Seconds a throttled message waits before its first new try (doubling with each further
throttle of it); the whole pool slows down through the shared rate, not through this wait."""


def backoff(attempt: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Seconds to wait after failed try number ``attempt`` (1-based): doubling, capped, jittered
    by ``rng`` (a pool's own; pass a seeded one for a reproducible run)."""
    delay: float = min(cap, base * 2 ** (attempt - 1))
    return delay * (rng or _RNG).uniform(0.75, 1.0)  # jitter, not security


@dataclass(frozen=True, slots=True)
class Refusal:
    """The relay's answer to one message that it did not take (or may not have taken)."""

    reason: str
    """The reply (``452 4.2.2 mailbox full``) or what happened to the line."""
    code: int | None = None
    """The SMTP reply code; ``None`` for a dropped connection."""
    stage: str = ""
    """The command that failed: ``MAIL``, ``RCPT`` or ``DATA``."""
    temporary: bool = False
    """A later try may succeed (4xx, 552, a drop before the end of DATA)."""
    throttled: bool = False
    """The relay asked us to slow down."""
    ambiguous: bool = False
    """The line dropped after the final dot with no reply: the relay may have the message."""
    timed_out: bool = False
    """The relay did not answer within ``smtp.timeout``."""

    @classmethod
    def of(cls, error: DeliveryError) -> Refusal:
        """The data of a :class:`~newsletter.errors.DeliveryError`."""
        return cls(
            error.reason,
            error.code,
            error.stage,
            error.temporary,
            error.throttled,
            error.ambiguous,
            error.timed_out,
        )


@dataclass(frozen=True, slots=True)
class RetryRules:
    """The ``delivery:`` settings the policy reads, fixed for a run (defaults: the config's)."""

    attempts: int = 4
    throttle_retries: int = 20
    retry_delay: float = 5.0
    retry_max_delay: float = 120.0
    resend_unknown: bool = True
    """``delivery.on_unknown: resend``: an ambiguous drop is re-sent once, at once."""

    @classmethod
    def of(cls, delivery: DeliverySettings) -> RetryRules:
        """The rules of the ``delivery:`` settings."""
        return cls(
            attempts=delivery.attempts,
            throttle_retries=delivery.throttle_retries,
            retry_delay=delivery.retry_delay,
            retry_max_delay=delivery.retry_max_delay,
            resend_unknown=delivery.on_unknown == "resend",
        )


@dataclass(frozen=True, slots=True)
class Tries:
    """One message's tries so far."""

    attempt: int = 0
    """Failed tries counted against ``delivery.attempts``."""
    throttles: int = 0
    """Throttling replies answered by slowing down."""
    resent: bool = False
    """The message is a re-send of one that may have arrived (once at most)."""


class Then(Enum):
    """What the sender does after a :class:`Step`."""

    RESEND = "resend"
    """Send again at once (the one re-send of an ambiguous drop)."""
    SLOW_DOWN = "slow_down"
    """Cut the pool's shared rate (:meth:`~newsletter.deliver.pace.RateLimiter.throttled`),
    wait ``delay`` seconds, then send again."""
    RETRY = "retry"
    """Wait ``delay`` seconds (unless the run stops), then send again."""
    STOP = "stop"
    """Done with this message."""


@dataclass(frozen=True, slots=True)
class Step:
    """The sender's next step after a refusal."""

    then: Then
    outcome: Outcome
    """Counted in the report (for ``FAILED``: ``SUPPRESSED`` instead when the permanent-failure
    count suppressed the address)."""
    error: str
    """The line the report and the log carry."""
    tries: Tries
    mark: EditionStatus | None = None
    """Written to the ledger first (with :attr:`mark_error`)."""
    mark_error: str | None = None
    mark_papers: bool = False
    """The mark carries the digest's papers (the reader may have them)."""
    permanent_failure: bool = False
    """Count a permanent failure of the address (suppressed at ``delivery.suppress_after``)."""
    delay: float = 0.0


def next_step(
    refusal: Refusal,
    tries: Tries,
    rules: RetryRules,
    *,
    may_have_arrived: bool = False,
    aborted: bool = False,
    address: str = "",
    rng: random.Random | None = None,
) -> Step:
    """What to do after ``refusal``, given the ``tries`` so far.

    - An ambiguous drop is marked ``unknown`` (``held`` after its one re-send) and re-sent once
      at once (``delivery.on_unknown: resend``), unless the relay timed out (the next run
      re-sends it instead of waiting as long again) or the run is stopping.
    - A temporary refusal is marked back to ``claimed`` before any wait: the relay does not
      have the message, and a kill during the wait must not make it look like it may have
      arrived. A throttle slows the pool down and waits :data:`THROTTLE_WAIT` (doubling)
      before the message's next try (``delivery.throttle_retries`` times); other temporary
      refusals are retried after a backoff (``delivery.attempts`` tries in all).
    - Giving up: ``failed`` (a permanent 5xx at RCPT counts towards suppression), or
      ``resend_refused`` when an earlier attempt with the same Message-ID may have arrived:
      a refused re-send says nothing about that one, so it counts as delivered.
    """
    r = refusal
    if r.ambiguous:
        status = EditionStatus.HELD if tries.resent else EditionStatus.UNKNOWN
        reason = r.reason
        if tries.resent:
            reason += (
                "; still unknown after its one re-send: settle it with "
                "'newsletter send --settle-unknown resend' (or drop)"
            )
        if rules.resend_unknown and not tries.resent and not r.timed_out and not aborted:
            return Step(
                Then.RESEND, Outcome.RESENT, r.reason, replace(tries, resent=True), status, reason
            )
        return Step(Then.STOP, Outcome.UNKNOWN, f"{address}: {r.reason}", tries, status, reason)
    back = EditionStatus.CLAIMED if r.temporary else None
    if r.throttled and tries.throttles < rules.throttle_retries:
        throttles = tries.throttles + 1
        return Step(
            Then.SLOW_DOWN,
            Outcome.THROTTLED,
            f"{address}: {r.reason}",
            replace(tries, throttles=throttles),
            back,
            r.reason,
            delay=backoff(throttles, THROTTLE_WAIT, rules.retry_max_delay, rng),
        )
    attempt = tries.attempt + 1
    now = replace(tries, attempt=attempt)
    if r.temporary and attempt < rules.attempts:
        return Step(
            Then.RETRY,
            Outcome.RETRIED,
            f"{address}: {r.reason}",
            now,
            back,
            r.reason,
            delay=backoff(attempt, rules.retry_delay, rules.retry_max_delay, rng),
        )
    error = f"{r.stage or 'SMTP'}: {r.reason}" + (
        f" (after {attempt} tries)" if attempt > 1 else ""
    )
    at_rcpt = not r.temporary and r.stage == "RCPT"
    if may_have_arrived and not r.temporary:
        error = (
            f"re-send refused ({error}); an earlier attempt with the same "
            "Message-ID may have been delivered: counted as delivered"
        )
        return Step(
            Then.STOP,
            Outcome.RESEND_REFUSED,
            f"{address}: {error}",
            now,
            EditionStatus.RESEND_REFUSED,
            error,
            mark_papers=True,
            permanent_failure=at_rcpt,
        )
    return Step(
        Then.STOP,
        Outcome.FAILED,
        f"{address}: {error}",
        now,
        EditionStatus.FAILED,
        error,
        permanent_failure=at_rcpt,
    )
