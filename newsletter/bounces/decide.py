"""What each bounce, complaint or unsubscribe event does to a subscriber.

* A **hard** bounce adds ``bounces.hard_weight`` (1.0) to the subscriber's bounce score, a
  **soft** one ``bounces.soft_weight`` (0.5); the score grows at most once per day and starts
  over after ``bounces.stale_after_days`` (7) days without a bounce, or when the subscriber
  confirms again (see :mod:`newsletter.bounces.score`). At ``bounces.threshold`` (5.0) the
  address is suppressed, with the reason recorded.
* A **complaint** suppresses the address at once; an **unsubscribe** event unsubscribes it.
  Either way only a fresh confirmation from the address itself brings it back.
* A **replay** (the same provider event id, another report about a digest that already
  bounced) is stored once and counts once (see :func:`event_key`).
* An event about an address that is not a subscriber is logged and ignored.

Policy for unverified events (the one this module owns; docs/deliverability.md explains it):
an event counts only when it is *authenticated*: it carries a valid signed VERP token
(``verified``), or it names the Message-ID of a digest the ledger says went to that very
subscriber (which only that mailbox and the relays on the way ever saw). Anything else,
such as a bounce mailed straight to the plain bounce address naming someone else, is stored
in the subscriber's history as unverified and changes nothing, unless the operator sets
``bounces.trust_unverified`` (for relays that return neither). A forged bounce therefore
cannot unsubscribe anyone. Nor does it show anywhere but that history: only a subscriber has
one to store it in, so every count (``/metrics``, ``status``, the rate alerts) leaves
unverified events out, or it would tell a subscriber's address from a stranger's.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from datetime import date, datetime
from enum import StrEnum
from typing import Any

from newsletter.bounces.events import BounceEvent, EventKind
from newsletter.bounces.score import ScoreState, next_score
from newsletter.bounces.settings import BounceSettings
from newsletter.models import Subscriber, SubscriberStatus
from newsletter.store import Store

log = logging.getLogger(__name__)


class Outcome(StrEnum):
    """What one event did."""

    COUNTED = "counted"
    """A bounce added to the score (and may have suppressed the address: see ``suppressed``)."""
    SAME_DAY = "same-day"
    """A bounce on a day one already counted: stored, the score unchanged."""
    STOPPED = "stopped"
    """A complaint or unsubscribe request: mail to the address stopped."""
    ALREADY_STOPPED = "already-stopped"
    """A complaint or unsubscribe about an address already not receiving mail."""
    REPLAY = "replay"
    """The same event again: nothing changed."""
    UNVERIFIED = "unverified"
    """Not authenticated: stored in the history, nothing changed."""
    NOT_SUBSCRIBER = "not-subscriber"
    """About an address that is not a subscriber: logged, ignored."""


@dataclass(frozen=True, slots=True)
class Decision:
    """One event and what it did."""

    event: BounceEvent
    outcome: Outcome
    subscriber_id: int | None = None
    score: float | None = None
    suppressed: bool = False
    """True when this event stopped mail to the address (suppressed or unsubscribed it)."""


def event_key(event: BounceEvent, subscriber_id: int, *, trusted: bool, about: str | None) -> str:
    """What makes two reports the same event (a hash, 64 hex digits).

    The provider's event id when there is one. Else, for an authenticated report, the digest
    it is about (``about``: the edition date, else the returned Message-ID): one digest bounces
    once, however many DSNs about it arrive or whatever status each one gives, so a leaked
    VERP token can add to the score once at most. An unauthenticated report is keyed by its
    day: at most one is stored per subscriber, kind and source a day, so a flood of forgeries
    cannot fill the database.
    """
    group = "bounce" if event.kind in (EventKind.HARD, EventKind.SOFT) else event.kind.value
    if event.provider_id:
        basis = f"{event.source}|{event.provider_id}"
    elif trusted and about:
        basis = f"{event.source}|v|{subscriber_id}|{about}|{group}"
    else:
        day = event.received_at.date().isoformat()
        basis = f"{event.source}|u|{subscriber_id}|{group}|{event.kind}|{day}"
    return hashlib.sha256(basis.encode()).hexdigest()


class BounceDecider:
    """Applies events to subscribers in one store, by the ``bounces:`` settings."""

    def __init__(self, store: Store, settings: BounceSettings) -> None:
        self.store = store
        self.settings = settings

    def apply(self, events: tuple[BounceEvent, ...] | list[BounceEvent]) -> list[Decision]:
        """Apply each event in turn (a database error propagates: the caller retries)."""
        return [self.apply_one(event) for event in events]

    def _subscriber(self, event: BounceEvent) -> Subscriber | None:
        if event.subscriber_id is not None:
            return self.store.subscriber_by_id(event.subscriber_id)
        if not event.address:
            return None
        return self.store.subscriber_for_address(event.address)

    def _authenticated(self, event: BounceEvent, subscriber: Subscriber) -> tuple[bool, str | None]:
        """Whether the event may act, and the edition it is about (ISO date) if known."""
        if event.verified:
            return True, event.edition
        if event.message_id:
            found = self.store.edition_by_message_id(event.message_id)
            if found is not None and found[0] == subscriber.id:
                return True, found[1].isoformat()
        return self.settings.trust_unverified, event.edition

    def apply_one(self, event: BounceEvent) -> Decision:
        """Apply one event (see the module's docstring for the rules)."""
        subscriber = self._subscriber(event)
        if subscriber is None:
            log.info(
                "bounces: %s report (%s) about %s, who is not a subscriber; ignored",
                event.kind,
                event.source,
                event.address or "no address",
            )
            return Decision(event, Outcome.NOT_SUBSCRIBER)
        trusted, edition = self._authenticated(event, subscriber)
        about = edition or event.message_id
        key = event_key(event, subscriber.id, trusted=trusted, about=about)
        row = _row(event, key, edition, verified=trusted)
        now = event.received_at
        if not trusted:
            stored = self.store.record_bounce_event(
                subscriber.id, row, score=None, threshold=0, reason=str, now=now
            )
            log.warning(
                "bounces: unverified %s report about %s (%s) stored, not counted "
                "(no valid VERP token, no Message-ID of a digest sent to it)",
                event.kind,
                subscriber.email,
                event.source,
            )
            outcome = Outcome.REPLAY if stored is None else Outcome.UNVERIFIED
            return Decision(event, outcome, subscriber.id)
        if event.kind in (EventKind.COMPLAINT, EventKind.UNSUBSCRIBE):
            return self._stop(event, subscriber, row, now)
        weight = (
            self.settings.hard_weight if event.kind is EventKind.HARD else self.settings.soft_weight
        )
        day = now.date()
        stale = self.settings.stale_after_days

        def score(state: ScoreState | None, confirmed: datetime | None) -> tuple[ScoreState, float]:
            if (
                state is not None
                and state.last_bounce is not None
                and confirmed is not None
                and confirmed.date() > state.last_bounce
            ):
                state = None  # confirmed again since: a fresh start
            return next_score(state, weight, day, stale)

        def reason(total: float) -> str:
            what = f"{event.kind} bounce"
            detail = " ".join(x for x in (event.status or "", event.diagnostic) if x)[:200]
            return (
                f"bounce score {total:g} reached bounces.threshold {self.settings.threshold:g} "
                f"(last: {what}{': ' + detail if detail else ''})"
            )

        change = self.store.record_bounce_event(
            subscriber.id,
            row,
            score=score,
            threshold=self.settings.threshold,
            reason=reason,
            now=now,
        )
        if change is None:
            log.info(
                "bounces: %s bounce for %s already counted (replay)", event.kind, subscriber.email
            )
            return Decision(event, Outcome.REPLAY, subscriber.id)
        if change.suppressed:
            log.warning("bounces: %s suppressed: %s", subscriber.email, reason(change.score))
        outcome = Outcome.COUNTED if change.added else Outcome.SAME_DAY
        log.info(
            "bounces: %s bounce for %s (%s): score %g",
            event.kind,
            subscriber.email,
            event.status or "no status",
            change.score,
        )
        return Decision(event, outcome, subscriber.id, change.score, change.suppressed)

    def _stop(
        self, event: BounceEvent, subscriber: Subscriber, row: dict[str, Any], now: datetime
    ) -> Decision:
        complaint = event.kind is EventKind.COMPLAINT
        status = SubscriberStatus.SUPPRESSED if complaint else SubscriberStatus.UNSUBSCRIBED
        reason = (
            f"complaint ({event.source}{': ' + event.diagnostic if event.diagnostic else ''})"
            if complaint
            else f"unsubscribe request through {event.source}"
        )
        changed = self.store.record_complaint(
            subscriber.id, row, status=status, reason=reason[:300], now=now
        )
        if changed is None:
            return Decision(event, Outcome.REPLAY, subscriber.id)
        if changed:
            log.warning("bounces: %s %s: %s", subscriber.email, status.value, reason)
            return Decision(event, Outcome.STOPPED, subscriber.id, suppressed=True)
        return Decision(event, Outcome.ALREADY_STOPPED, subscriber.id)


def _row(event: BounceEvent, key: str, edition: str | None, *, verified: bool) -> dict[str, Any]:
    day: date | None = None
    if edition:
        try:
            day = date.fromisoformat(edition)
        except ValueError:
            day = None
    return {
        "kind": event.kind.value,
        "source": event.source.value,
        "status": (event.status or None) and event.status[:16],
        "diagnostic": event.diagnostic[:1000],
        "edition": day,
        "message_id": (event.message_id or None) and event.message_id[:255],
        "provider_id": (event.provider_id or None) and event.provider_id[:255],
        "event_key": key,
        "verified": verified,
        "received_at": event.received_at,
    }
