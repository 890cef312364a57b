"""The planner decides without a database, a clock or a relay: each rule tested on its own."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from newsletter.edition.plan import (
    AlreadySent,
    Claimed,
    Skip,
    after_claim,
    choose,
    edition_date_for,
    is_in_flight,
    is_settled,
)
from newsletter.models import EditionClaim, EditionStatus, Subscriber, SubscriberStatus

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
    assert edition_date_for(sub(1, tz="America/Los_Angeles"), NOW) == date(2026, 11, 17)
    assert edition_date_for(sub(2, tz="Asia/Tokyo"), NOW) == date(2026, 11, 18)
    assert edition_date_for(sub(3), NOW) == date(2026, 11, 18)


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
    assert after_claim(None, NOW) == AlreadySent()
    assert after_claim(None, NOW, last_sent=NOW - timedelta(hours=1)) == AlreadySent()


def test_a_claim_is_sent_when_there_was_a_listing_since_the_last_edition() -> None:
    c = claim(1)
    assert after_claim(c, NOW) == Claimed(c)  # no earlier edition
    # the last edition went out Monday morning; arXiv announced Monday and Tuesday evening
    assert after_claim(c, NOW, last_sent=NOW - timedelta(days=2)) == Claimed(c)


def test_a_quiet_day_is_skipped_with_the_reason() -> None:
    saturday = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
    c = claim(1)
    decision = after_claim(c, saturday, last_sent=saturday - timedelta(hours=20))
    assert isinstance(decision, Skip) and decision.claim == c
    assert "no new arXiv listing since the last edition" in decision.reason
    assert "Saturday" in decision.reason


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
