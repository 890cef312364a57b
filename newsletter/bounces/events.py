"""The one shape every bounce, complaint and unsubscribe report takes, whatever it came from."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


class EventKind(StrEnum):
    """What a report says happened to a message."""

    HARD = "hard"
    """Permanent failure: 5.x.x, unknown user, the domain does not exist."""
    SOFT = "soft"
    """Temporary failure the relay gave up on: mailbox full, 4.x.x after expiry."""
    COMPLAINT = "complaint"
    """The reader marked the mail as spam (an ARF report or a provider's complaint event)."""
    UNSUBSCRIBE = "unsubscribe"
    """The reader asked for no more mail through the provider (e.g. a provider's own link)."""


class EventSource(StrEnum):
    """Which receiver produced an event."""

    DSN = "dsn"
    """A delivery status notification or other bounce mail (inbound server or IMAP)."""
    ARF = "arf"
    """An RFC 5965 abuse feedback report."""
    SES = "ses"
    MAILGUN = "mailgun"
    POSTMARK = "postmark"
    SENDGRID = "sendgrid"


@dataclass(frozen=True, slots=True)
class BounceEvent:
    """One bounce, complaint or unsubscribe request about one recipient address."""

    kind: EventKind
    address: str
    """The recipient the report is about, as the report gives it (not yet normalised)."""
    source: EventSource
    received_at: datetime
    """When we received the report (timezone-aware UTC)."""
    status: str | None = None
    """The enhanced status code when the report has one, e.g. ``5.1.1``."""
    diagnostic: str = ""
    """A short human-readable reason, already stripped of control characters."""
    message_id: str | None = None
    """The Message-ID of the digest the report is about, when the report names it."""
    edition: str | None = None
    """The edition date (ISO) when a verified VERP token or the Message-ID names it."""
    verified: bool = False
    """True when the report is authenticated: a valid signed VERP token, or a webhook whose
    signature the provider's documented scheme verified. What an unverified report may do is the
    deciding module's policy (docs/deliverability.md)."""
    provider_id: str | None = None
    """The provider's own event id, used to ignore replays of the same event."""
    subscriber_id: int | None = None
    """The subscriber a verified VERP token names (the report's own address may differ: a
    forwarded mailbox bounces under its final address)."""
