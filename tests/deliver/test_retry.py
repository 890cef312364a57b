"""The retry policy, rule by rule: :func:`newsletter.deliver.retry.next_step` called directly.

The pool applies steps; what each refusal leads to (re-send once, slow down, retry after a
backoff, give up, count as delivered, suppress) is decided here, without a relay or a ledger.
The end-to-end behaviour (a real aiosmtpd relay saying these things) is in tests/faults and
tests/edition.
"""

from __future__ import annotations

import random

import pytest

from newsletter.deliver.retry import Refusal, RetryRules, Then, Tries, backoff, next_step
from newsletter.deliver.smtp import classify
from newsletter.errors import DeliveryError
from newsletter.models import EditionStatus, Outcome

RULES = RetryRules(attempts=3, throttle_retries=2, retry_delay=1.0, retry_max_delay=8.0)
FULL = Refusal("452 4.2.2 mailbox full", 452, "RCPT", temporary=True)
UNKNOWN_USER = Refusal("550 5.1.1 no such user", 550, "RCPT")
REJECTED = Refusal("554 5.7.1 spam", 554, "DATA")
SLOW = Refusal("421 4.7.0 too many messages, slow down", 421, "MAIL", True, throttled=True)
DROPPED = Refusal("connection lost after the final '.'", None, "DATA", True, ambiguous=True)


def test_the_refusals_data_is_the_errors() -> None:
    e = DeliveryError("a@x.org", "452 full", code=452, temporary=True, stage="RCPT")
    assert Refusal.of(e) == Refusal("452 full", 452, "RCPT", temporary=True)


def test_a_temporary_refusal_is_retried_after_a_backoff_then_given_up() -> None:
    rng = random.Random(1)
    first = next_step(FULL, Tries(), RULES, address="a@x.org", rng=rng)
    assert first.then is Then.RETRY and first.outcome is Outcome.RETRIED
    # marked back to claimed before the wait: the relay does not have it
    assert first.mark is EditionStatus.CLAIMED
    assert 0.75 <= first.delay <= 1.0 and first.tries.attempt == 1
    second = next_step(FULL, first.tries, RULES, rng=rng)
    assert second.then is Then.RETRY and 1.5 <= second.delay <= 2.0
    last = next_step(FULL, second.tries, RULES, address="a@x.org")
    assert last.then is Then.STOP and last.outcome is Outcome.FAILED
    assert last.mark is EditionStatus.FAILED
    assert last.mark_error == "RCPT: 452 4.2.2 mailbox full (after 3 tries)"
    assert last.error == "a@x.org: RCPT: 452 4.2.2 mailbox full (after 3 tries)"
    assert not last.permanent_failure  # a full mailbox does not count towards suppression


def test_a_permanent_refusal_at_rcpt_gives_up_at_once_and_counts_towards_suppression() -> None:
    step = next_step(UNKNOWN_USER, Tries(), RULES)
    assert (step.then, step.outcome, step.mark) == (Then.STOP, Outcome.FAILED, EditionStatus.FAILED)
    assert step.permanent_failure and step.mark_error == "RCPT: 550 5.1.1 no such user"
    rejected = next_step(REJECTED, Tries(), RULES)
    assert rejected.outcome is Outcome.FAILED and not rejected.permanent_failure  # not the address


def test_a_throttle_slows_down_a_few_times_then_counts_as_a_try() -> None:
    one = next_step(SLOW, Tries(), RULES)
    assert one.then is Then.SLOW_DOWN and one.outcome is Outcome.THROTTLED
    assert one.mark is EditionStatus.CLAIMED and one.tries == Tries(throttles=1)
    two = next_step(SLOW, one.tries, RULES)
    assert two.then is Then.SLOW_DOWN and two.tries == Tries(throttles=2)
    three = next_step(SLOW, two.tries, RULES)  # throttle_retries used up: an ordinary retry
    assert three.then is Then.RETRY and three.tries == Tries(attempt=1, throttles=2)


def test_an_ambiguous_drop_is_resent_once_then_held() -> None:
    first = next_step(DROPPED, Tries(), RULES, address="a@x.org")
    assert first.then is Then.RESEND and first.outcome is Outcome.RESENT
    assert first.mark is EditionStatus.UNKNOWN and first.tries.resent
    again = next_step(DROPPED, first.tries, RULES, address="a@x.org")
    assert again.then is Then.STOP and again.outcome is Outcome.UNKNOWN
    assert again.mark is EditionStatus.HELD
    assert again.mark_error is not None and "--settle-unknown" in again.mark_error


@pytest.mark.parametrize(
    ("refusal", "rules", "aborted"),
    [
        (Refusal("timed out", None, "DATA", True, ambiguous=True, timed_out=True), RULES, False),
        (DROPPED, RetryRules(resend_unknown=False), False),
        (DROPPED, RULES, True),
    ],
    ids=["relay-stalled", "on_unknown-hold", "run-stopping"],
)
def test_an_ambiguous_drop_is_left_unknown_for_the_next_run(
    refusal: Refusal, rules: RetryRules, aborted: bool
) -> None:
    step = next_step(refusal, Tries(), rules, aborted=aborted)
    assert (step.then, step.outcome, step.mark) == (
        Then.STOP,
        Outcome.UNKNOWN,
        EditionStatus.UNKNOWN,
    )


def test_a_refused_resend_of_what_may_have_arrived_counts_as_delivered() -> None:
    step = next_step(UNKNOWN_USER, Tries(resent=True), RULES, may_have_arrived=True)
    assert step.outcome is Outcome.RESEND_REFUSED and step.mark is EditionStatus.RESEND_REFUSED
    assert step.mark_papers  # the reader may have these papers
    assert step.permanent_failure  # the 550 at RCPT still says something about the address
    assert step.mark_error is not None and "counted as delivered" in step.mark_error
    # a temporary refusal of such a re-send is retried like any other
    assert next_step(FULL, Tries(), RULES, may_have_arrived=True).then is Then.RETRY


def test_backoff_doubles_up_to_the_cap_with_jitter() -> None:
    rng = random.Random(7)
    delays = [backoff(n, 1.0, 8.0, rng) for n in range(1, 7)]
    for n, d in enumerate(delays, start=1):
        full = min(8.0, 2 ** (n - 1))
        assert 0.75 * full <= d <= full


@pytest.mark.parametrize(
    ("code", "text", "stage", "temporary", "throttled"),
    [
        (452, "4.2.2 mailbox full", "RCPT", True, False),
        (552, "5.2.2 mailbox full", "DATA", True, False),  # RFC 5321: may be temporary
        (550, "5.1.1 no such user", "RCPT", False, False),
        (454, "4.7.0 TLS not available", "MAIL", True, True),
        (451, "4.7.1 too many messages, slow down", "MAIL", True, True),
        (554, "5.7.1 rate limit policy", "DATA", False, False),  # a 5xx is never a throttle
    ],
)
def test_the_relays_refusal_is_classified_as_data(
    code: int, text: str, stage: str, temporary: bool, throttled: bool
) -> None:
    refusal = classify(code, text, stage)
    assert refusal == Refusal(f"{code} {text}", code, stage, temporary, throttled)
