"""Bounce and complaint reports as real MTAs write them → events (golden facts per fixture)."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from newsletter.bounces.events import EventKind, EventSource
from newsletter.bounces.parse import classify, parse_report
from newsletter.bounces.verp import Verp
from tests.bounces.helpers import ADDRESS, BOUNCE_ADDRESS, MESSAGE_ID, SECRET, fixture

NOW = datetime(2026, 11, 17, 9, 0, tzinfo=UTC)
VERP = Verp(SECRET, BOUNCE_ADDRESS)


@pytest.mark.parametrize(
    ("name", "kind", "status", "diagnostic"),
    [
        ("postfix-hard.eml", EventKind.HARD, "5.1.1", "User unknown in virtual"),
        ("postfix-soft.eml", EventKind.SOFT, "4.2.2", "Mailbox full"),
        ("exim-hard.eml", EventKind.HARD, "5.1.1", "Recipient address rejected"),
        ("exchange-hard.eml", EventKind.HARD, "5.1.10", "RESOLVER.ADR.RecipientNotFound"),
        ("gmail-hard.eml", EventKind.HARD, "5.1.1", "does not exist"),
        ("ses-hard.eml", EventKind.HARD, "5.1.1", "user unknown"),
    ],
)
def test_each_mta_bounce_gives_one_event_with_status_and_original_message_id(
    name: str, kind: EventKind, status: str, diagnostic: str
) -> None:
    parsed = parse_report(fixture(name), recipients=[BOUNCE_ADDRESS], verp=VERP, now=NOW)
    assert parsed.refusal is None
    [event] = parsed.events
    assert (event.kind, event.address, event.status) == (kind, ADDRESS, status)
    assert event.source is EventSource.DSN
    assert diagnostic in event.diagnostic
    assert "\n" not in event.diagnostic and "\r" not in event.diagnostic
    assert event.message_id == MESSAGE_ID
    assert event.received_at == NOW
    assert not event.verified and event.subscriber_id is None  # the plain address: no token


def test_a_verp_token_in_the_recipient_verifies_the_event_and_names_the_subscriber() -> None:
    rcpt = VERP.sender(42, date(2026, 11, 17))
    for recipient in (rcpt, rcpt.upper()):  # an MTA that changes the case changes nothing
        parsed = parse_report(
            fixture("postfix-hard.eml"), recipients=[recipient], verp=VERP, now=NOW
        )
        [event] = parsed.events
        assert event.verified and event.subscriber_id == 42 and event.edition == "2026-11-17"


def test_a_forged_token_is_flagged_and_verifies_nothing() -> None:
    good = VERP.sender(42, date(2026, 11, 17))
    local, _, domain = good.partition("@")
    forged = local[:-4] + ("aaaa" if not local.endswith("aaaa") else "bbbb") + "@" + domain
    other_key = Verp(SECRET + "x", BOUNCE_ADDRESS).sender(43, date(2026, 11, 17))
    for recipient in (forged, other_key, "bounces+notatoken@papers.example.org"):
        parsed = parse_report(
            fixture("postfix-hard.eml"), recipients=[recipient], verp=VERP, now=NOW
        )
        assert parsed.forged and parsed.token is None
        [event] = parsed.events
        assert not event.verified and event.subscriber_id is None


def test_an_arf_report_is_a_complaint_about_the_original_recipient() -> None:
    parsed = parse_report(fixture("arf-abuse.eml"), recipients=[BOUNCE_ADDRESS], verp=VERP, now=NOW)
    assert parsed.refusal is None
    [event] = parsed.events
    assert (event.kind, event.source, event.address) == (
        EventKind.COMPLAINT,
        EventSource.ARF,
        ADDRESS,
    )
    assert event.message_id == MESSAGE_ID and "abuse" in event.diagnostic
    assert not event.verified


def test_an_arf_report_is_verified_by_the_token_in_the_originals_return_path() -> None:
    sender = VERP.sender(7, date(2026, 11, 16))
    data = fixture("arf-abuse.eml").replace(
        b"Return-Path: <bounces@papers.example.org>\r\nReceived: from mail",
        f"Return-Path: <{sender}>\r\nReceived: from mail".encode(),
    )
    [event] = parse_report(data, recipients=["abuse@papers.example.org"], verp=VERP, now=NOW).events
    assert event.verified and event.subscriber_id == 7 and event.edition == "2026-11-16"


def test_an_arf_report_without_recipient_falls_back_to_the_originals_to() -> None:
    data = fixture("arf-abuse.eml").replace(b"Original-Rcpt-To: <reader@example.net>\r\n", b"")
    [event] = parse_report(data, recipients=[BOUNCE_ADDRESS], verp=VERP, now=NOW).events
    assert event.address == ADDRESS and event.kind is EventKind.COMPLAINT


def test_not_spam_feedback_is_no_complaint() -> None:
    data = fixture("arf-abuse.eml").replace(b"Feedback-Type: abuse", b"Feedback-Type: not-spam")
    parsed = parse_report(data, recipients=[BOUNCE_ADDRESS], verp=VERP, now=NOW)
    assert parsed.events == () and "not-spam" in (parsed.refusal or "")


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("malformed-dsn.eml", "malformed DSN"),
        ("postfix-delayed.eml", "delay warning"),
        ("autoreply.eml", "not a bounce"),
    ],
)
def test_what_is_no_bounce_gives_a_one_line_refusal_and_no_event(name: str, why: str) -> None:
    parsed = parse_report(fixture(name), recipients=[BOUNCE_ADDRESS], verp=VERP, now=NOW)
    assert parsed.events == ()
    assert parsed.refusal is not None and why in parsed.refusal and "\n" not in parsed.refusal


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xff\xfe\x00garbage\r\n\r\n\x00",
        b"Content-Type: multipart/report; report-type=delivery-status; boundary=x\r\n\r\n--x\r\n",
        b"Content-Type: multipart/report; report-type=feedback-report; boundary=x\r\n\r\n--x\r\n"
        b"Content-Type: message/feedback-report\r\n\r\n",
        b"Content-Type: message/delivery-status\r\n\r\nFinal-Recipient: rfc822; a@b.c\r\n",
    ],
)
def test_garbage_never_raises(data: bytes) -> None:
    parsed = parse_report(data, recipients=[BOUNCE_ADDRESS], verp=VERP, now=NOW)
    assert parsed.refusal is not None or parsed.events


def test_classify_tells_hard_from_soft() -> None:
    assert classify("failed", "5.1.1", "") is EventKind.HARD
    assert classify("failed", "5.2.2", "mailbox full") is EventKind.SOFT
    assert classify("failed", "5.7.1", "rejected by policy") is EventKind.SOFT
    assert classify("failed", "4.4.7", "expired") is EventKind.SOFT
    assert classify("failed", None, "550 no such user") is EventKind.HARD
    assert classify("failed", None, "452 try later") is EventKind.SOFT
    assert classify("delayed", "4.4.1", "") is None
    assert classify("delivered", "2.0.0", "") is None
