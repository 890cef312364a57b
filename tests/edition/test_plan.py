"""The planner decides without a database, a clock or a relay: each rule tested on its own."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from newsletter.edition.plan import (
    AlreadySent,
    Answers,
    Claimed,
    DryRun,
    Skip,
    batch,
    choose,
    is_in_flight,
    is_settled,
)
from newsletter.models import EditionClaim, EditionStatus, Subscriber, SubscriberStatus
from newsletter.runs.due_dates import edition_date_for

# Wednesday 2026-11-18 03:30 UTC: still Tuesday evening in Los Angeles, Wednesday in Tokyo.
NOW = datetime(2026, 11, 18, 3, 30, tzinfo=UTC)


def sub(i: int, *, topics: tuple[str, ...] = ("moe",), tz: str = "UTC") -> Subscriber:
    return Subscriber(
        id=i,
        email=f"r{i}@example.org",
        name="",
        status=SubscriberStatus.ACTIVE,
        topics=topics,
        timezone=tz,
        created=NOW - timedelta(days=30),
    )


def claim(i: int) -> EditionClaim:
    return EditionClaim(i, i, NOW.date(), f"<{i}@papers.example.org>", resumed=False)


def test_the_edition_date_is_the_subscribers_local_date() -> None:
    assert edition_date_for(sub(1, tz="America/Los_Angeles"), NOW, "UTC") == date(2026, 11, 17)
    assert edition_date_for(sub(2, tz="Asia/Tokyo"), NOW, "UTC") == date(2026, 11, 18)
    assert edition_date_for(sub(3), NOW, "UTC") == date(2026, 11, 18)


@pytest.mark.parametrize("zone", ["", "Mars/Olympus_Mons"])
def test_a_subscriber_without_a_zone_gets_the_default_zones_date(zone: str, tmp_path: Path) -> None:
    """No zone (or one this machine does not know): the configured default, for the planner
    and the scheduler alike (they used to differ: the planner raised)."""
    from newsletter.config import load_config
    from newsletter.runs.due_dates import edition_date
    from newsletter.runs.scheduler import preferences
    from tests.conftest import base_config, write_config

    data = base_config(f"sqlite:///{tmp_path}/n.db")
    data["schedule"] = {"timezone": "America/Los_Angeles"}

    nobody = sub(1, tz=zone)
    assert edition_date_for(nobody, NOW, "America/Los_Angeles") == date(2026, 11, 17)
    assert edition_date_for(nobody, NOW, "Asia/Tokyo") == date(2026, 11, 18)
    choice = choose([nobody], NOW, default_zone="America/Los_Angeles")
    assert choice.wanted == [(nobody, date(2026, 11, 17))]
    config = load_config(write_config(tmp_path, data))
    assert edition_date(preferences(nobody, config), NOW) == date(2026, 11, 17)


def test_choose_leaves_out_other_topics_then_those_not_due_and_keeps_the_order() -> None:
    batch = [
        sub(1, topics=("moe", "rl")),
        sub(2, topics=("rl",)),
        sub(3, topics=("moe",), tz="America/Los_Angeles"),
        sub(4, topics=("moe",)),
    ]
    choice = choose(batch, NOW, topic="moe", due=lambda s: s.id != 4)
    assert [(s.id, d) for s, d in choice.wanted] == [
        (1, date(2026, 11, 18)),
        (3, date(2026, 11, 17)),
    ]
    assert (choice.other_topics, choice.not_due) == (1, 1)


def test_choose_without_filters_takes_everyone() -> None:
    choice = choose([sub(1), sub(2, topics=("rl",))], NOW)
    assert [s.id for s, _ in choice.wanted] == [1, 2]
    assert (choice.other_topics, choice.not_due) == (0, 0)


def test_a_refused_claim_is_already_sent() -> None:
    wanted = [(sub(1), NOW.date())]
    assert batch(wanted, Answers(claims={1: None}), NOW) == [AlreadySent(sub(1), NOW.date())]
    last = {1: NOW - timedelta(hours=1)}
    assert batch(wanted, Answers(claims={}), NOW, last_sent=last) == [
        AlreadySent(sub(1), NOW.date())
    ]


def test_a_claim_is_sent_when_there_was_a_listing_since_the_last_edition() -> None:
    c, day = claim(1), NOW.date()
    wanted = [(sub(1), day)]
    assert batch(wanted, Answers(claims={1: c}), NOW) == [Claimed(sub(1), day, c)]
    # the last edition went out Monday morning; arXiv announced Monday and Tuesday evening
    last = {1: NOW - timedelta(days=2)}
    assert batch(wanted, Answers(claims={1: c}), NOW, last_sent=last) == [Claimed(sub(1), day, c)]


def test_a_quiet_day_is_skipped_with_the_reason() -> None:
    saturday = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
    c = claim(1)
    last = {1: saturday - timedelta(hours=20)}
    [intent] = batch([(sub(1), saturday.date())], Answers(claims={1: c}), saturday, last_sent=last)
    assert isinstance(intent, Skip) and intent.claim == c
    assert "no new arXiv listing since the last edition" in intent.reason
    assert "Saturday" in intent.reason


def test_a_dry_run_shows_what_a_real_run_would_send_and_leaves_the_rest() -> None:
    day = NOW.date()
    wanted = [(sub(i), day) for i in (1, 2, 3, 4)]
    statuses = {
        (1, day): EditionStatus.SENT,
        (2, day): EditionStatus.SENDING,
        (3, day): EditionStatus.UNKNOWN,  # re-sent once by a real run: shown
    }
    intents = batch(wanted, Answers(statuses=statuses), NOW, dry_run=True)
    assert intents == [
        AlreadySent(sub(1), day),
        AlreadySent(sub(2), day),
        DryRun(sub(3), day),
        DryRun(sub(4), day),
    ]


def test_one_intent_per_subscriber_in_the_batchs_order() -> None:
    saturday = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
    day = saturday.date()
    wanted = [(sub(i), day) for i in (3, 1, 2)]
    claims = {3: claim(3), 1: None, 2: claim(2)}
    last = {2: saturday - timedelta(hours=20)}
    intents = batch(wanted, Answers(claims=claims), saturday, last_sent=last)
    assert [type(i) for i in intents] == [Claimed, AlreadySent, Skip]
    assert [i.subscriber.id for i in intents] == [3, 1, 2]


@pytest.mark.parametrize(
    ("status", "settled", "in_flight"),
    [
        (None, False, False),
        (EditionStatus.CLAIMED, False, True),
        (EditionStatus.SENDING, False, True),
        (EditionStatus.SENT, True, False),
        (EditionStatus.SKIPPED, True, False),
        (EditionStatus.FAILED, True, False),
        (EditionStatus.HELD, True, False),
        (EditionStatus.DROPPED, True, False),
        (EditionStatus.RESEND_REFUSED, True, False),
        (EditionStatus.UNKNOWN, False, False),  # re-sent once
        (EditionStatus.RESEND, False, False),
        (EditionStatus.DEFERRED, False, False),  # the relay said 4xx: tried again later
    ],
)
def test_ledger_states(status: EditionStatus | None, settled: bool, in_flight: bool) -> None:
    assert is_settled(status) is settled
    assert is_in_flight(status) is in_flight


def test_every_ledger_state_is_classified() -> None:
    """A new ledger state must be put on one side: settled, in flight, or tried again later
    (``deferred`` after a 4xx; ``unknown`` and ``resend`` re-sent once)."""
    later = {EditionStatus.DEFERRED, EditionStatus.UNKNOWN, EditionStatus.RESEND}
    for status in EditionStatus:
        assert [is_settled(status), is_in_flight(status), status in later].count(True) == 1, status
