"""The ``bounces:`` config section: VERP, the bounce score, alert rates and the IMAP mailbox.

Kept apart from :mod:`newsletter.config` (which only adds the section to ``Settings``) so the
deliverability settings live beside the code that reads them.
"""

from __future__ import annotations

import os
import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

from newsletter.bounces.webhook_settings import WebhookSettings


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


_ADDRESS = re.compile(r"^[^\s@+<>\"]+@[^\s@<>]+\.[^\s@<>]+$")


class ImapSettings(_Strict):
    """``newsletter bounces poll``: a mailbox the relay delivers bounces to, read over IMAP."""

    host: str
    port: int = Field(default=993, ge=1, le=65535)
    security: str = Field(default="tls", pattern=r"^(tls|starttls|none)$")
    """``tls`` (IMAPS, port 993), ``starttls`` (port 143 then STARTTLS) or ``none`` (loopback
    only: the password would cross the network in the clear)."""
    username: str
    password_env: str = "NEWSLETTER_IMAP_PASSWORD"  # noqa: S105 - a variable name
    """Environment variable holding the IMAP password."""
    mailbox: str = "INBOX"
    processed_mailbox: str | None = None
    """Where processed messages are moved; unset: they are only flagged ``\\Seen`` and
    ``$NewsletterBounce`` (a later poll skips flagged messages either way)."""
    ca_file: str | None = None
    """A CA bundle (PEM) to verify the server with, relative to the config file."""

    def password(self) -> str | None:
        """The password from the environment, or ``None`` when the variable is unset."""
        return os.environ.get(self.password_env)


class BounceSettings(_Strict):
    """Deliverability: where bounces go and what they do to a subscriber."""

    enabled: bool = False
    """Off: digests go out with the From address as envelope sender, as before, and nothing
    processes bounces. On: the envelope sender is the bounce address (VERP-signed when
    ``verp`` is on) and ``newsletter inbound`` / ``bounces poll`` process what comes back."""
    address: str | None = None
    """The plain bounce address (default ``bounces@`` the From address's domain). With VERP
    each digest's envelope sender is ``LOCAL+TOKEN@DOMAIN`` of this address."""
    verp: bool = True
    """Sign the subscriber and edition into each digest's envelope sender."""
    threshold: float = Field(default=5.0, gt=0)
    """Bounce score at which an address is suppressed (Mailman's ``bounce_score_threshold``)."""
    hard_weight: float = Field(default=1.0, gt=0)
    soft_weight: float = Field(default=0.5, ge=0)
    stale_after_days: int = Field(default=7, ge=1)
    """Days without a bounce after which the score starts again from zero (Mailman's
    ``bounce_info_stale_after``)."""
    trust_unverified: bool = False
    """Count bounces that carry neither a valid VERP token nor the Message-ID of a digest sent
    to that address. Off by default: anyone can mail a forged bounce."""
    complaint_rate_alert: float = Field(default=0.001, ge=0, le=1)
    """Alert when complaints exceed this share of an edition (0.1%)."""
    hard_bounce_rate_alert: float = Field(default=0.02, ge=0, le=1)
    """Alert when hard bounces exceed this share of an edition (2%)."""
    per_host: int = Field(default=500, ge=1)
    """Messages to the bounce address one sending host (an IPv6 one by its /64; behind a
    trusted relay, the host its ``Received:`` header names, as for email commands) may hand
    ``newsletter inbound`` per ``per_host_window`` seconds; past it the message is refused
    with ``451 4.7.1`` (a real relay tries again later) and nothing of it is read."""
    per_host_window: int = Field(default=3600, ge=1)
    imap: ImapSettings | None = None
    webhooks: WebhookSettings = Field(default_factory=WebhookSettings)
    """The providers' webhooks (:mod:`newsletter.bounces.webhooks`)."""

    @field_validator("address")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not _ADDRESS.match(value):
            raise ValueError(
                f"{value!r} is not a plain bounce address (like bounces@example.org, no '+')"
            )
        return value.lower()

    def bounce_address(self, from_address: str) -> str:
        """The plain bounce address in force: configured, else ``bounces@`` the sender domain."""
        if self.address:
            return self.address
        return "bounces@" + from_address.rpartition("@")[2].lower()
