"""Due-edition logic with an injected clock, across DST transitions in both directions."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest

from newsletter.runs.due_dates import (
    Frequency,
    Preferences,
    announces_on,
    due_instant,
    due_now,
    last_announcement,
    listing_gap,
    local_instant,
    missed,
    next_due,
)

GRACE = timedelta(hours=6)


def editions_over(
    prefs: Preferences, start: datetime, days: int, tick: timedelta = timedelta(minutes=5)
) -> list[tuple[date, datetime]]:
    """Simulate a scheduler ticking every 5 minutes with a ledger: which editions get sent, when."""
    sent: dict[date, datetime] = {}
    now = start
    while now < start + timedelta(days=days):
        due = due_now(prefs, now, grace=GRACE)
        if due is not None and due.edition_date not in sent:
            sent[due.edition_date] = now
        now += tick
    return sorted(sent.items())


@pytest.mark.parametrize(
    ("tz", "spring", "fall"),
    [
        ("America/New_York", date(2026, 3, 8), date(2026, 11, 1)),
        ("Europe/Berlin", date(2026, 3, 29), date(2026, 10, 25)),
    ],
)
@pytest.mark.parametrize("hour", [2, 7])
def test_dst_transitions_neither_skip_nor_double(
    tz: str, spring: date, fall: date, hour: int
) -> None:
    prefs = Preferences(timezone=tz, hour=hour, minute=30)
    zone = ZoneInfo(tz)
    for transition in (spring, fall):
        start = datetime.combine(transition - timedelta(days=3), time(0), zone).astimezone(UTC)
        sent = editions_over(prefs, start, days=6)
        dates = [d for d, _ in sent]
        expected = [transition - timedelta(days=3) + timedelta(days=i) for i in range(6)]
        assert dates == expected, f"{tz} around {transition}: {dates}"
        for day, at in sent:
            local = at.astimezone(zone)
            assert local.date() == day
            if day != transition or hour != 2:
                # a normal day: sent at the first tick at or after hh:30 local
                assert (local.hour, local.minute) == (hour, 30)


def test_time_in_the_spring_gap_moves_to_the_end_of_the_gap() -> None:
    ny = ZoneInfo("America/New_York")
    at = local_instant(date(2026, 3, 8), time(2, 30), ny)  # 02:00-03:00 does not exist that day
    assert at == datetime(2026, 3, 8, 7, 0, tzinfo=UTC)  # 03:00 EDT
    assert at.astimezone(ny).hour == 3


def test_ambiguous_time_counts_once_at_its_first_occurrence() -> None:
    ny = ZoneInfo("America/New_York")
    at = local_instant(date(2026, 11, 1), time(1, 30), ny)  # 01:30 happens twice
    assert at == datetime(2026, 11, 1, 5, 30, tzinfo=UTC)  # the EDT one


def test_edition_date_is_the_subscriber_local_date() -> None:
    prefs = Preferences(timezone="Pacific/Auckland", hour=7)
    now = datetime(2026, 11, 22, 18, 30, tzinfo=UTC)  # 07:30 on Nov 23 in Auckland
    due = due_now(prefs, now, grace=GRACE)
    assert due is not None and due.edition_date == date(2026, 11, 23)


def test_not_due_before_the_hour_and_not_after_the_grace_window() -> None:
    prefs = Preferences(timezone="Europe/Berlin", hour=7)
    day = datetime(2026, 11, 23, tzinfo=UTC)
    assert due_now(prefs, day.replace(hour=5, minute=59), grace=GRACE) is None  # 06:59 Berlin
    due = due_now(prefs, day.replace(hour=6, minute=10), grace=GRACE)
    assert due is not None and due.late_by == timedelta(minutes=10)
    late = day.replace(hour=13, minute=1)  # 14:01 Berlin: 7 h late, grace is 6 h
    assert due_now(prefs, late, grace=GRACE) is None
    assert missed(prefs, late, grace=GRACE) == date(2026, 11, 23)


def test_weekly_editions_fall_on_the_chosen_weekday_only() -> None:
    prefs = Preferences(timezone="UTC", hour=8, frequency=Frequency.WEEKLY, weekday=0)
    start = datetime(2026, 11, 16, tzinfo=UTC)  # a Monday
    sent = editions_over(prefs, start, days=15, tick=timedelta(minutes=30))
    assert [d for d, _ in sent] == [date(2026, 11, 16), date(2026, 11, 23), date(2026, 11, 30)]
    assert due_instant(prefs, date(2026, 11, 17)) is None


def test_next_due() -> None:
    prefs = Preferences(timezone="Europe/Berlin", hour=7)
    now = datetime(2026, 11, 23, 6, 30, tzinfo=UTC)  # 07:30 Berlin: today's is past
    assert next_due(prefs, now) == datetime(2026, 11, 24, 6, 0, tzinfo=UTC)
    weekly = Preferences(timezone="UTC", hour=7, frequency=Frequency.WEEKLY, weekday=4)
    assert next_due(weekly, now) == datetime(2026, 11, 27, 7, 0, tzinfo=UTC)


def test_arxiv_announces_sunday_to_thursday() -> None:
    week = [date(2026, 11, 16) + timedelta(days=i) for i in range(7)]  # Mon..Sun
    assert [announces_on(d) for d in week] == [True, True, True, True, False, False, True]


def test_last_announcement_over_a_weekend() -> None:
    saturday_morning = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
    # Thursday Nov 19, 20:00 EST = Nov 20 01:00 UTC
    assert last_announcement(saturday_morning) == datetime(2026, 11, 20, 1, 0, tzinfo=UTC)


def test_listing_gap_explains_a_quiet_saturday() -> None:
    friday_edition = datetime(2026, 11, 20, 7, 0, tzinfo=UTC)
    saturday = datetime(2026, 11, 21, 7, 0, tzinfo=UTC)
    reason = listing_gap(saturday, friday_edition)
    assert (
        reason is not None
        and "Sunday to Thursday" in reason
        and "Saturday" not in reason.split("it is")[0]
    )
    monday = datetime(2026, 11, 23, 7, 0, tzinfo=UTC)  # Sunday evening announced
    assert listing_gap(monday, friday_edition) is None
    assert listing_gap(saturday, None) is None
