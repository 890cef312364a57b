"""The bounce score, suppression, complaints, replays and the unverified-report policy, on
SQLite and PostgreSQL."""

from __future__ import annotations

import logging
from datetime import UTC, date, datetime, timedelta

import pytest

from newsletter.bounces.decide import BounceDecider, Outcome
from newsletter.bounces.events import BounceEvent, EventKind, EventSource
from newsletter.bounces.parse import parse_report
from newsletter.bounces.settings import BounceSettings
from newsletter.bounces.verp import Verp
from newsletter.models import Frequency, SubscriberStatus
from newsletter.store import Store
from tests.bounces.helpers import ADDRESS, BOUNCE_ADDRESS, MESSAGE_ID, SECRET, fixture

DAY0 = datetime(2026, 11, 17, 7, 0, tzinfo=UTC)
ON = BounceSettings(enabled=True)


def hard(sid: int | None, at: datetime, **kw: object) -> BounceEvent:
    values: dict[str, object] = {
        "kind": EventKind.HARD,
        "address": ADDRESS,
        "source": EventSource.DSN,
        "received_at": at,
        "status": "5.1.1",
        "diagnostic": "550 5.1.1 user unknown",
        "verified": sid is not None,
        "subscriber_id": sid,
        "edition": at.date().isoformat() if sid is not None else None,
    }
    values.update(kw)
    return BounceEvent(**values)  # type: ignore[arg-type]


@pytest.fixture
def reader(store: Store) -> int:
    sub, _ = store.add_subscriber(ADDRESS, topics=["rendering"], now=DAY0 - timedelta(days=30))
    store.add_subscriber("other@example.net", topics=["rendering"], now=DAY0)
    return sub.id


def status(store: Store, address: str = ADDRESS) -> SubscriberStatus:
    sub = store.get_subscriber(address)
    assert sub is not None
    return sub.status


def test_hard_bounces_on_five_days_suppress_with_the_reason_recorded(
    store: Store, reader: int
) -> None:
    decider = BounceDecider(store, ON)
    outcomes = [decider.apply_one(hard(reader, DAY0 + timedelta(days=d))) for d in range(5)]
    assert [d.score for d in outcomes] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert [d.suppressed for d in outcomes] == [False] * 4 + [True]
    assert status(store) is SubscriberStatus.SUPPRESSED
    assert status(store, "other@example.net") is SubscriberStatus.ACTIVE
    score = store.bounce_score(reader)
    assert score is not None and score.score == 5.0
    assert score.suppressed_reason is not None
    assert "bounce score 5 reached bounces.threshold 5" in score.suppressed_reason
    assert "5.1.1" in score.suppressed_reason
    history = store.bounce_history(reader)
    assert len(history) == 5 and all(h.kind == "hard" and h.counted == 1.0 for h in history)
    assert history[0].edition == date(2026, 11, 21)


def test_a_score_counts_once_a_day_soft_counts_half_and_goes_stale(
    store: Store, reader: int
) -> None:
    decider = BounceDecider(store, ON)
    first = decider.apply_one(hard(reader, DAY0))
    yesterdays = (DAY0 - timedelta(days=1)).date().isoformat()
    same_day = decider.apply_one(  # another digest's bounce, the same day
        hard(reader, DAY0 + timedelta(hours=3), kind=EventKind.SOFT, status="4.2.2",
             edition=yesterdays)
    )  # fmt: skip
    assert first.outcome is Outcome.COUNTED and same_day.outcome is Outcome.SAME_DAY
    assert same_day.score == 1.0
    # a second report about the first digest, days later, whatever it says: that digest
    # already bounced (so a leaked VERP token adds once at most)
    again = hard(reader, DAY0 + timedelta(days=3), status="5.1.2", edition=DAY0.date().isoformat())
    assert decider.apply_one(again).outcome is Outcome.REPLAY
    soft = decider.apply_one(
        hard(reader, DAY0 + timedelta(days=1), kind=EventKind.SOFT, status="4.2.2")
    )
    assert soft.score == 1.5
    stale = decider.apply_one(hard(reader, DAY0 + timedelta(days=1 + 7)))
    assert stale.outcome is Outcome.COUNTED and stale.score == 1.0  # 7 days quiet: start over
    assert status(store) is SubscriberStatus.ACTIVE


def test_the_threshold_and_weights_are_configurable(store: Store, reader: int) -> None:
    decider = BounceDecider(store, BounceSettings(enabled=True, threshold=1.0, soft_weight=1.0))
    d = decider.apply_one(hard(reader, DAY0, kind=EventKind.SOFT, status="4.2.2"))
    assert d.suppressed and status(store) is SubscriberStatus.SUPPRESSED


def test_a_replayed_report_counts_once(store: Store, reader: int) -> None:
    verp = Verp(SECRET, BOUNCE_ADDRESS)
    rcpt = verp.sender(reader, DAY0.date())
    decider = BounceDecider(store, ON)
    data = fixture("postfix-hard.eml")
    results = []
    for at in (DAY0, DAY0 + timedelta(days=1), DAY0 + timedelta(days=2)):  # the same DSN again
        parsed = parse_report(data, recipients=[rcpt], verp=verp, now=at)
        results.extend(decider.apply(parsed.events))
    assert [r.outcome for r in results] == [Outcome.COUNTED, Outcome.REPLAY, Outcome.REPLAY]
    assert len(store.bounce_history(reader)) == 1
    score = store.bounce_score(reader)
    assert score is not None and score.score == 1.0
    provider = hard(reader, DAY0 + timedelta(days=3), provider_id="evt-1", source=EventSource.SES)
    assert decider.apply_one(provider).outcome is Outcome.COUNTED
    again = hard(reader, DAY0 + timedelta(days=4), provider_id="evt-1", source=EventSource.SES)
    assert decider.apply_one(again).outcome is Outcome.REPLAY


def test_a_complaint_suppresses_at_once_and_nothing_but_a_confirmation_brings_it_back(
    store: Store, reader: int
) -> None:
    decider = BounceDecider(store, ON)
    complaint = hard(reader, DAY0, kind=EventKind.COMPLAINT, status=None, diagnostic="abuse")
    d = decider.apply_one(complaint)
    assert d.outcome is Outcome.STOPPED and d.suppressed
    assert status(store) is SubscriberStatus.SUPPRESSED
    score = store.bounce_score(reader)
    assert score is not None and (score.suppressed_reason or "").startswith("complaint")
    assert decider.apply_one(complaint).outcome is Outcome.REPLAY
    # the operator's and reader's change paths that are not a confirmation do nothing
    assert (
        store.update_preferences(
            reader,
            topics=["rendering"],
            send_hour=None,
            frequency=Frequency.DAILY,
            paused=False,
            now=DAY0,
        )
        is None
    )
    assert store.said_no(ADDRESS.upper())[0].id == reader
    assert status(store) is SubscriberStatus.SUPPRESSED
    # a later bounce never reactivates either
    decider.apply_one(hard(reader, DAY0 + timedelta(days=1)))
    assert status(store) is SubscriberStatus.SUPPRESSED


def test_an_unsubscribe_event_unsubscribes(store: Store, reader: int) -> None:
    d = BounceDecider(store, ON).apply_one(
        hard(reader, DAY0, kind=EventKind.UNSUBSCRIBE, status=None, source=EventSource.POSTMARK)
    )
    assert d.outcome is Outcome.STOPPED and status(store) is SubscriberStatus.UNSUBSCRIBED


def test_a_bounce_for_someone_not_subscribed_is_logged_and_ignored(
    store: Store, reader: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "newsletter.bounces")
    event = hard(None, DAY0, address="stranger@example.com", verified=True)
    assert BounceDecider(store, ON).apply_one(event).outcome is Outcome.NOT_SUBSCRIBER
    assert "stranger@example.com, who is not a subscriber; ignored" in caplog.text
    assert store.bounce_history(reader) == []


def test_forged_bounces_change_nothing(
    store: Store, reader: int, caplog: pytest.LogCaptureFixture
) -> None:
    """A bounce to the plain address, or with a bad token, naming a subscriber: stored as
    unverified, never counted, however many arrive."""
    verp = Verp(SECRET, BOUNCE_ADDRESS)
    decider = BounceDecider(store, BounceSettings(enabled=True, threshold=1.0))
    forged_token = (
        verp.sender(reader, DAY0.date())[:-25] + "x" + verp.sender(reader, DAY0.date())[-24:]
    )
    for day, rcpt in enumerate([BOUNCE_ADDRESS, forged_token, BOUNCE_ADDRESS]):
        data = fixture("ses-hard.eml", message_id=f"<forged-{day}@papers.example.org>")
        parsed = parse_report(data, recipients=[rcpt], verp=verp, now=DAY0 + timedelta(days=day))
        [d] = decider.apply(parsed.events)
        assert d.outcome is Outcome.UNVERIFIED
    complaint = hard(None, DAY0, kind=EventKind.COMPLAINT, status=None, verified=False)
    assert decider.apply_one(complaint).outcome is Outcome.UNVERIFIED
    assert status(store) is SubscriberStatus.ACTIVE
    assert store.bounce_score(reader) is None
    history = store.bounce_history(reader)
    assert len(history) == 4 and not any(h.verified or h.counted for h in history)
    assert "unverified hard report about reader@example.net" in caplog.text


def test_a_bounce_quoting_the_message_id_of_a_digest_sent_to_that_address_counts(
    store: Store, reader: int
) -> None:
    claim = store.claim_edition(reader, DAY0.date(), MESSAGE_ID, DAY0, owner="test")
    assert claim is not None
    other = store.get_subscriber("other@example.net")
    assert other is not None
    decider = BounceDecider(store, BounceSettings(enabled=True, threshold=1.0))
    # the right Message-ID but another subscriber's address: not counted
    wrong = parse_report(
        fixture("postfix-hard.eml", address="other@example.net"),
        recipients=[BOUNCE_ADDRESS],
        verp=None,
        now=DAY0,
    )
    assert [d.outcome for d in decider.apply(wrong.events)] == [Outcome.UNVERIFIED]
    parsed = parse_report(
        fixture("exim-hard.eml"), recipients=[BOUNCE_ADDRESS], verp=None, now=DAY0
    )
    [d] = decider.apply(parsed.events)
    assert d.outcome is Outcome.COUNTED and d.suppressed
    assert store.bounce_history(reader)[0].edition == DAY0.date()
    assert status(store, "other@example.net") is SubscriberStatus.ACTIVE


def test_trust_unverified_counts_bounces_without_proof(store: Store, reader: int) -> None:
    decider = BounceDecider(store, BounceSettings(enabled=True, trust_unverified=True))
    assert decider.apply_one(hard(None, DAY0)).outcome is Outcome.COUNTED


def test_confirming_again_starts_the_score_over(store: Store, reader: int) -> None:
    decider = BounceDecider(store, ON)
    for d in range(3):
        decider.apply_one(hard(reader, DAY0 + timedelta(days=d)))
    store.confirm_subscriber(
        ADDRESS,
        topics=["rendering"],
        timezone="UTC",
        send_hour=None,
        frequency=Frequency.DAILY,
        now=DAY0 + timedelta(days=4),
        consent={"how": "web"},
    )
    after = decider.apply_one(hard(reader, DAY0 + timedelta(days=5)))
    assert after.score == 1.0


def test_rates_per_edition(store: Store, reader: int) -> None:
    decider = BounceDecider(store, ON)
    decider.apply_one(hard(reader, DAY0))
    [rates] = store.edition_rates(DAY0.date() - timedelta(days=1))
    assert (rates.edition, rates.hard, rates.soft, rates.complaints) == (DAY0.date(), 1, 0, 0)
    per_day = store.events_per_day(DAY0 - timedelta(days=1))
    assert per_day == {DAY0.date(): {"hard": 1}}


def test_erasing_a_subscriber_erases_their_bounce_history(store: Store, reader: int) -> None:
    BounceDecider(store, ON).apply_one(hard(reader, DAY0))
    assert store.remove_subscriber(ADDRESS)
    assert store.bounce_history(reader) == [] and store.bounce_score(reader) is None


def test_a_flood_of_forgeries_stores_one_row_a_day(store: Store, reader: int) -> None:
    decider = BounceDecider(store, ON)
    outcomes = [
        decider.apply_one(
            hard(None, DAY0 + timedelta(minutes=i), message_id=f"<f{i}@x>", status=f"5.1.{i}")
        ).outcome
        for i in range(20)
    ]
    assert outcomes[0] is Outcome.UNVERIFIED and set(outcomes[1:]) == {Outcome.REPLAY}
    assert len(store.bounce_history(reader)) == 1
    assert status(store) is SubscriberStatus.ACTIVE
