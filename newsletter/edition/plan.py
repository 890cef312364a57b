"""The planner: who gets an edition now, and what to do once its ledger row is claimed.

Pure functions over what the run already holds (subscribers, the time, the ledger's answers):
no database, no clock, no relay, so every rule of "send, skip or leave alone" is tested
without any of them (reader's ``Decider`` idea). The run loop (:mod:`.loop`) and the workers'
enqueuer (:mod:`.workers`) both choose through :func:`choose`, so the edition date, the topic
filter and the due filter are decided in one place.

The decisions, in order:

1. :func:`choose`: not following the run's topic (``other_topics``) or not due now
   (``not_due``) → left out; the rest get their edition date (:func:`edition_date_for`).
2. The ledger claim (an effect, in :mod:`newsletter.store.ledger`): a row already sent,
   skipped or held by a live run → :class:`AlreadySent`.
3. :func:`after_claim`: no new listing since the last edition and ``schedule.no_listing:
   skip`` → :class:`Skip` with the reason; otherwise → :class:`Claimed` (build and send).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import date, datetime
from zoneinfo import ZoneInfo

from newsletter.models import EditionClaim, EditionStatus, Subscriber
from newsletter.schedule import listing_gap

SETTLED = frozenset(
    {
        EditionStatus.SENT,
        EditionStatus.SKIPPED,
        EditionStatus.FAILED,
        EditionStatus.HELD,
        EditionStatus.DROPPED,
        EditionStatus.RESEND_REFUSED,
    }
)
"""Ledger states no run acts on again (``unknown`` and ``resend`` are re-sent once)."""
IN_FLIGHT = frozenset({EditionStatus.CLAIMED, EditionStatus.SENDING})
"""Ledger states of an edition some run is working on."""


def edition_date_for(subscriber: Subscriber, now: datetime) -> date:
    """The edition date (the ledger's key): the subscriber's local calendar date at ``now``."""
    return now.astimezone(ZoneInfo(subscriber.timezone)).date()


@dataclass
class Choice:
    """The subscribers of one batch that get an edition now, and how many were left out why."""

    wanted: list[tuple[Subscriber, date]] = field(default_factory=list)
    """Each chosen subscriber with their edition date, in the batch's order."""
    other_topics: int = 0
    """Left out: they do not follow the run's topic."""
    not_due: int = 0
    """Left out: their edition is not due now (scheduled runs)."""


def choose(
    batch: Iterable[Subscriber],
    now: datetime,
    *,
    topic: str | None = None,
    due: Callable[[Subscriber], bool] | None = None,
) -> Choice:
    """The subscribers of ``batch`` whose edition this run makes, with their edition dates."""
    out = Choice()
    for sub in batch:
        if topic is not None and topic not in sub.topics:
            out.other_topics += 1
        elif due is not None and not due(sub):
            out.not_due += 1
        else:
            out.wanted.append((sub, edition_date_for(sub, now)))
    return out


@dataclass(frozen=True, slots=True)
class Claimed:
    """Build the digest and send it."""

    claim: EditionClaim


@dataclass(frozen=True, slots=True)
class Skip:
    """Record the edition as ``skipped`` with ``reason`` and send nothing."""

    claim: EditionClaim
    reason: str


@dataclass(frozen=True, slots=True)
class AlreadySent:
    """The edition is sent, skipped, or being sent by another run: leave it alone."""


Decision = Claimed | Skip | AlreadySent


def after_claim(
    claim: EditionClaim | None, now: datetime, last_sent: datetime | None = None
) -> Decision:
    """What to do with an edition once the ledger answered its claim.

    ``claim`` is ``None`` when the ledger refused it (the edition is someone else's or done).
    ``last_sent`` is when the subscriber's previous edition went out, given only when quiet days
    are skipped (``schedule.no_listing: skip``) and the run is not forced."""
    if claim is None:
        return AlreadySent()
    if last_sent is not None and (gap := listing_gap(now, last_sent)) is not None:
        return Skip(claim, gap)
    return Claimed(claim)


def is_settled(status: EditionStatus | None) -> bool:
    """True when no run sends this edition again (the enqueuer leaves it out)."""
    return status in SETTLED


def is_in_flight(status: EditionStatus | None) -> bool:
    """True when some run holds this edition right now (a worker waits out its lease)."""
    return status in IN_FLIGHT
