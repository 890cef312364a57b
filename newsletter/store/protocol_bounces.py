"""The bounces part of the store's protocols (:mod:`newsletter.store.protocol` re-exports it):
bounce and complaint events, scores and suppression (:mod:`.bounces`)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, datetime, timedelta
from typing import Any, Protocol

from newsletter.bounces.score import ScoreState
from newsletter.models import (
    Subscriber,
    SubscriberStatus,
)
from newsletter.store.bounces import BounceRecord, BounceScore, EditionRates, ScoreChange


class Bounces(Protocol):
    """Bounce and complaint events, scores and suppression (:mod:`.bounces`)."""

    def subscriber_for_address(self, address: str) -> Subscriber | None:
        """The subscriber with this address (exactly, else but for letter case), or ``None``."""
        ...

    def edition_by_message_id(self, message_id: str) -> tuple[int, date] | None:
        """The ``(subscriber id, edition date)`` of the digest with this Message-ID, or None."""
        ...

    def reserve_webhook_token(
        self, token: str, digest: str, now: datetime, *, keep: timedelta
    ) -> bool:
        """Reserve a provider's one-time token for the body with this ``digest``, atomically:
        True when it is new, or held by the same body (a retry); False when another body holds
        it. Tokens reserved before ``now - keep`` are pruned."""
        ...

    def record_bounce_event(
        self,
        subscriber_id: int,
        row: dict[str, Any],
        *,
        score: Callable[[ScoreState | None, datetime | None], tuple[ScoreState, float]] | None,
        threshold: float,
        reason: Callable[[float], str],
        now: datetime,
    ) -> ScoreChange | None:
        """Store one event (``row``: the ``bounce_events`` columns but ids) and, when ``score`` is
        given, count it: ``score(old state, when the subscriber last confirmed)`` gives the new
        state and what it added. At ``threshold`` an active, paused or pending address is suppressed
        with ``reason(score)``. ``None`` when the event was already stored (a replay): nothing
        changes then."""
        ...

    def record_complaint(
        self,
        subscriber_id: int,
        row: dict[str, Any],
        *,
        status: SubscriberStatus,
        reason: str,
        now: datetime,
    ) -> bool | None:
        """Store a complaint or unsubscribe event and stop mail to the address at once (``status``:
        suppressed for a complaint, unsubscribed for a request). True when the status changed now;
        ``None`` for a replay."""
        ...

    def bounce_score(self, subscriber_id: int) -> BounceScore | None:
        """A subscriber's bounce score and suppression reason, or ``None`` (never bounced)."""
        ...

    def bounce_history(self, subscriber_id: int, limit: int = 100) -> list[BounceRecord]:
        """A subscriber's bounce, complaint and unsubscribe events, newest first."""
        ...

    def edition_rates(self, since: date) -> list[EditionRates]:
        """Per edition date from ``since``: digests sent, and the subscribers with a verified hard
        bounce, soft bounce or complaint about that edition (each counted once)."""
        ...

    def events_per_day(self, since: datetime) -> dict[date, dict[str, int]]:
        """Verified events received per UTC day since ``since``, by kind (unverified ones are
        only in the subscriber's history: counted, they would tell a subscriber from a
        stranger)."""
        ...
