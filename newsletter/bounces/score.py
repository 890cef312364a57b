"""The bounce score, as Mailman keeps it: a pure function of the old score and one bounce.

A hard bounce adds ``hard_weight`` (1.0), a soft one ``soft_weight`` (0.5); a subscriber's
score grows at most once per day (a second bounce the same day, whatever its kind, adds
nothing: one dead mailbox bouncing every retry is one bad day); after ``stale_after_days``
without a counted bounce the score starts again from zero. At ``threshold`` the address is
suppressed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date


@dataclass(frozen=True, slots=True)
class ScoreState:
    """A subscriber's bounce score and the day a bounce last counted."""

    score: float
    last_bounce: date | None


def next_score(
    state: ScoreState | None, weight: float, day: date, stale_after_days: int
) -> tuple[ScoreState, float]:
    """The state after one bounce of ``weight`` on ``day``, and what it added (0 when none)."""
    if state is None or state.last_bounce is None:
        return ScoreState(weight, day), weight
    if (day - state.last_bounce).days >= stale_after_days:
        return ScoreState(weight, day), weight  # stale: Mailman starts over
    if day <= state.last_bounce:
        return state, 0.0  # counted at most once per day
    return ScoreState(state.score + weight, day), weight
