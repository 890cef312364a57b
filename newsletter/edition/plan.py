"""The planner: who gets an edition now, and what each one's ledger answer leads to.

Pure functions over what the run already holds (the policy, subscribers, the time, the
ledger's answers): no database, no clock, no relay, so every rule of "send, skip or leave
alone" is tested without any of them (reader's ``Decider`` idea). The applier (:mod:`.loop`)
and the workers' enqueuer (:mod:`.workers`) both choose through :func:`choose`, so the edition
date, the topic filter and the due filter are decided in one place.

The pipeline, for each batch of active subscribers:

1. :func:`choose`: not following the run's topic (``other_topics``) or not due now
   (``not_due``) → left out; the rest get their edition date
   (:func:`newsletter.runs.due_dates.edition_date_for`).
2. The ledger answers (an effect, in the applier): a real run claims the editions, a dry run
   reads their statuses.
3. :func:`batch` turns the chosen subscribers and those answers into one intent each:
   :class:`Claimed` (build and send), :class:`Skip` (record ``skipped`` with the reason: no new
   listing since the last edition under ``schedule.no_listing: skip``), :class:`DryRun`
   (build and show) or :class:`AlreadySent` (sent, skipped or being sent elsewhere).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime

from newsletter.models import EditionClaim, EditionStatus, Subscriber
from newsletter.runs.due_dates import edition_date_for, listing_gap

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
    default_zone: str = "UTC",
) -> Choice:
    """The subscribers of ``batch`` whose edition this run makes, with their edition dates
    (in their own zone, else ``default_zone``: the config's ``schedule.timezone``)."""
    out = Choice()
    for sub in batch:
        if topic is not None and topic not in sub.topics:
            out.other_topics += 1
        elif due is not None and not due(sub):
            out.not_due += 1
        else:
            out.wanted.append((sub, edition_date_for(sub, now, default_zone)))
    return out


@dataclass(frozen=True, slots=True)
class Claimed:
    """The edition is this run's: build the digest and send it."""

    subscriber: Subscriber
    edition_date: date
    claim: EditionClaim


@dataclass(frozen=True, slots=True)
class Skip:
    """Record the edition as ``skipped`` with ``reason`` and send nothing."""

    subscriber: Subscriber
    edition_date: date
    claim: EditionClaim
    reason: str


@dataclass(frozen=True, slots=True)
class DryRun:
    """Build the digest to show it; claim and send nothing."""

    subscriber: Subscriber
    edition_date: date


@dataclass(frozen=True, slots=True)
class AlreadySent:
    """The edition is sent, skipped, or being sent by another run: leave it alone."""

    subscriber: Subscriber
    edition_date: date


Intent = Claimed | Skip | DryRun | AlreadySent


@dataclass(frozen=True, slots=True)
class Answers:
    """The ledger's answers for one batch: the claims of a real run (``None``: refused), or the
    statuses a dry run read."""

    claims: Mapping[int, EditionClaim | None] = field(default_factory=dict)
    statuses: Mapping[tuple[int, date], EditionStatus] = field(default_factory=dict)


def batch(
    wanted: Sequence[tuple[Subscriber, date]],
    answers: Answers,
    now: datetime,
    *,
    dry_run: bool = False,
    last_sent: Mapping[int, datetime] | None = None,
) -> list[Intent]:
    """One intent for each chosen subscriber of a batch, in order.

    ``last_sent`` is when each subscriber's previous edition went out, given only when quiet
    days are skipped (``schedule.no_listing: skip``) and the run is not forced."""
    out: list[Intent] = []
    for sub, day in wanted:
        if dry_run:
            # the claim a real run makes would be refused for a settled or held edition
            status = answers.statuses.get((sub.id, day))
            gone = is_settled(status) or is_in_flight(status)
            out.append(AlreadySent(sub, day) if gone else DryRun(sub, day))
            continue
        claim = answers.claims.get(sub.id)
        last = (last_sent or {}).get(sub.id)
        if claim is None:
            out.append(AlreadySent(sub, day))
        elif last is not None and (gap := listing_gap(now, last)) is not None:
            out.append(Skip(sub, day, claim, gap))
        else:
            out.append(Claimed(sub, day, claim))
    return out


def is_settled(status: EditionStatus | None) -> bool:
    """True when no run sends this edition again (the enqueuer leaves it out)."""
    return status in SETTLED


def is_in_flight(status: EditionStatus | None) -> bool:
    """True when some run holds this edition right now (a worker waits out its lease)."""
    return status in IN_FLIGHT
