"""When editions are due: pure functions of a subscriber's preferences and ``now``.

The scheduler ticks every few minutes and asks, for each active subscriber, whether an edition
is due; the ledger (one row per subscriber and edition date) makes each tick idempotent. That
design is DST-proof by construction: a local send hour that does not exist on a spring-forward
day is moved to the first instant after the gap, and one that occurs twice on a fall-back day
counts only at its first occurrence, so no edition is skipped or doubled.

The arXiv calendar: new listings are announced Sunday to Thursday at 20:00 US Eastern; Friday
and Saturday bring nothing. :func:`listing_gap` says why an edition date has no fresh listing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from newsletter.models import Frequency, Subscriber

ARXIV_TZ = ZoneInfo("America/New_York")
ARXIV_ANNOUNCE = time(20, 0)
#: Weekdays (Monday=0) on whose evening arXiv announces new listings: Sunday to Thursday.
ARXIV_ANNOUNCE_DAYS = frozenset({6, 0, 1, 2, 3})


@dataclass(frozen=True, slots=True)
class Preferences:
    timezone: str
    hour: int = 7
    minute: int = 0
    frequency: Frequency = Frequency.DAILY
    weekday: int = 0
    """For weekly editions: Monday=0 … Sunday=6."""


def local_instant(day: date, at: time, tz: ZoneInfo) -> datetime:
    """The UTC instant of wall-clock time ``at`` on ``day`` in ``tz``.

    A time inside a spring-forward gap maps to the first valid instant after the gap; an
    ambiguous time (fall back) maps to its first occurrence (fold=0).
    """
    naive = datetime.combine(day, at)
    candidate = naive.replace(tzinfo=tz, fold=0)
    as_utc = candidate.astimezone(UTC)
    if as_utc.astimezone(tz).replace(tzinfo=None) != naive:
        # In a gap: wall time jumps over `at`; the gap ends when the offset changes.
        after = naive.replace(tzinfo=tz, fold=1).astimezone(UTC)
        before = as_utc
        gap_end = min(after, before)
        # Walk to the exact transition: the earliest instant whose local time is past `naive`.
        lo, hi = gap_end - timedelta(hours=3), gap_end + timedelta(hours=3)
        while hi - lo > timedelta(seconds=1):
            mid = lo + (hi - lo) / 2
            if mid.astimezone(tz).replace(tzinfo=None) >= naive:
                hi = mid
            else:
                lo = mid
        return hi.replace(microsecond=0)
    return as_utc


def zone_name(timezone: str | None, default: str) -> str:
    """A subscriber's zone: their own, or ``default`` (``schedule.timezone``) when they have none
    or it is not a zone this machine knows (an old import, a removed zone)."""
    if timezone:
        try:
            ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError):
            return default
        return timezone
    return default


def local_date(timezone: str, now: datetime) -> date:
    """The calendar date in ``timezone`` at ``now``: the date an edition is filed under."""
    return now.astimezone(ZoneInfo(timezone)).date()


def edition_date_for(subscriber: Subscriber, now: datetime, default_zone: str) -> date:
    """The edition date (the ledger's key) of ``subscriber`` at ``now``: their local calendar
    date, in the zone :func:`zone_name` gives. The planner, the workers' enqueuer, the preview
    and the scheduler (through :class:`Preferences`) all take it from here."""
    return local_date(zone_name(subscriber.timezone, default_zone), now)


def edition_date(prefs: Preferences, now: datetime) -> date:
    """The subscriber's local calendar date at ``now`` (``prefs`` has the zone resolved)."""
    return local_date(prefs.timezone, now)


def due_instant(prefs: Preferences, day: date) -> datetime | None:
    """When the edition for local date ``day`` is due, or None if that day has no edition."""
    if prefs.frequency is Frequency.WEEKLY and day.weekday() != prefs.weekday:
        return None
    return local_instant(day, time(prefs.hour, prefs.minute), ZoneInfo(prefs.timezone))


@dataclass(frozen=True, slots=True)
class Due:
    edition_date: date
    due: datetime
    late_by: timedelta


def due_now(prefs: Preferences, now: datetime, *, grace: timedelta) -> Due | None:
    """The edition due at ``now``, if any: its time has come and the grace window is open.

    Outside the grace window (the machine was down too long) the edition is not due: a late
    digest is worse than none, and the run report says it was missed.
    """
    day = edition_date(prefs, now)
    at = due_instant(prefs, day)
    if at is None or now < at:
        return None
    late = now - at
    if late > grace:
        return None
    return Due(day, at, late)


def missed(prefs: Preferences, now: datetime, *, grace: timedelta) -> date | None:
    """Today's edition date if its time passed longer ago than ``grace`` (for the run report)."""
    day = edition_date(prefs, now)
    at = due_instant(prefs, day)
    if at is not None and now - at > grace:
        return day
    return None


def next_due(prefs: Preferences, now: datetime) -> datetime:
    """The next instant an edition falls due strictly after ``now`` (for `newsletter status`)."""
    day = edition_date(prefs, now)
    for offset in range(0, 9):
        at = due_instant(prefs, day + timedelta(days=offset))
        if at is not None and at > now:
            return at
    raise AssertionError("a weekly schedule always falls due within 8 days")


def announces_on(day: date) -> bool:
    """Whether arXiv announces new listings on the evening of ``day`` (US Eastern)."""
    return day.weekday() in ARXIV_ANNOUNCE_DAYS


def last_announcement(now: datetime) -> datetime:
    """The most recent arXiv announcement instant at or before ``now``."""
    day = now.astimezone(ARXIV_TZ).date()
    for offset in range(0, 8):
        d = day - timedelta(days=offset)
        if announces_on(d):
            at = local_instant(d, ARXIV_ANNOUNCE, ARXIV_TZ)
            if at <= now:
                return at
    raise AssertionError("arXiv announces at least five days a week")


def listing_gap(now: datetime, previous_edition: datetime | None) -> str | None:
    """Why there is no fresh arXiv listing for an edition sent at ``now``, or None if there is.

    ``previous_edition`` is when the subscriber's last edition went out. If arXiv has not
    announced since then, the reason names the day (e.g. Friday and Saturday evenings bring
    nothing), so the run report can say so instead of sending nothing in silence.
    """
    if previous_edition is None:
        return None
    latest = last_announcement(now)
    if latest > previous_edition:
        return None
    eastern = now.astimezone(ARXIV_TZ)
    return (
        f"no new arXiv listing since the last edition (arXiv announces Sunday to Thursday at "
        f"20:00 US Eastern; it is {eastern:%A %H:%M} there)"
    )
