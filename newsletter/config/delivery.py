"""How mail leaves: the ``sender:``, ``smtp:``, ``delivery:``, ``dkim:`` and ``alerts:`` sections.

The sender's addresses and links, the relay and its limits, the ledger's retry and suppression
rules, DKIM signing, and where the operator's alerts go.
"""

from __future__ import annotations

import os
import re
from email.utils import parseaddr
from typing import Literal

from pydantic import Field, field_validator

from newsletter.config.base import _check_address, _Strict


class SenderSettings(_Strict):
    from_: str = Field(default="Trending Papers <digest@localhost>", alias="from")
    reply_to: str | None = None
    domain: str | None = None
    """Domain for Message-IDs; defaults to the From address's domain."""
    postal_address: str = ""
    list_id: str | None = None
    base_url: str = "http://localhost:8000"
    """Public URL of the web app: unsubscribe, manage and archive links point here."""
    contact: str | None = None
    """Operator contact (email or URL) named in the fetcher's User-Agent."""

    @field_validator("from_", "reply_to")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if "\r" in value or "\n" in value:
            raise ValueError("must be on one line")
        _, addr = parseaddr(value)
        if "@" not in addr:
            raise ValueError(f"{value!r} is not an address like 'Name <digest@example.org>'")
        _check_address(addr)
        return value

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"{value!r} is not an http(s) URL")
        return value.rstrip("/")

    @property
    def from_address(self) -> str:
        """The address part of ``from``."""
        return parseaddr(self.from_)[1]

    @property
    def from_name(self) -> str:
        """The display name part of ``from`` (empty when there is none)."""
        return parseaddr(self.from_)[0]

    @property
    def message_domain(self) -> str:
        """The domain of Message-IDs: ``domain``, else that of the ``from`` address."""
        return self.domain or self.from_address.rpartition("@")[2]


class SmtpSettings(_Strict):
    host: str = "localhost"
    port: int = Field(default=25, ge=1, le=65535)
    security: Literal["none", "starttls", "tls"] = "none"
    username: str | None = None
    password_env: str = "NEWSLETTER_SMTP_PASSWORD"  # noqa: S105 - the variable's name, not a secret
    timeout: float = Field(default=30.0, gt=0)
    max_timeouts: int = Field(default=3, ge=1, le=1000)
    """Consecutive replies that did not come within ``timeout`` (a relay that stalls) after
    which the relay counts as unusable: the run stops (exit 2) and alerts the operator."""
    pool_size: int = Field(default=20, ge=1, le=64)
    """The most relay connections a send opens at once (Postfix's default per destination
    is 20). A send starts with ``pool_start`` and adds connections while its rate still rises,
    and keeps one fewer whenever the relay answers "421 too many connections"."""
    pool_start: int = Field(default=4, ge=1, le=64)
    """Connections a send opens first (at most ``pool_size``)."""
    pool_adapt: bool = True
    """``false``: open ``pool_size`` connections from the start, never more or fewer (a relay
    refusing one as too many still gets one fewer)."""
    messages_per_connection: int = Field(default=0, ge=0, le=1_000_000)
    """Messages sent over one connection before it is closed (QUIT) and a new one opened, for
    relays that cap messages per session; 0: no cap (the connection is reused to the end)."""
    rate_per_second: float | None = Field(default=None, gt=0)
    rate_per_hour: int | None = Field(default=None, gt=0)
    dev_recipient: str | None = None
    """Send every message to this one address instead of the subscriber (for trying things out)."""

    @field_validator("dev_recipient")
    @classmethod
    def _dev(cls, value: str | None) -> str | None:
        return None if value is None else _check_address(value)

    def password(self) -> str | None:
        """The relay password from the environment variable ``password_env``, or ``None``."""
        return os.environ.get(self.password_env)


class DeliverySettings(_Strict):
    """How the ledger treats relay answers: retries, the RFC 1047 window, suppression, leases."""

    attempts: int = Field(default=4, ge=1, le=20)
    """Tries per message in one run for temporary failures (4xx, 552, dropped connections)."""
    retry_delay: float = Field(default=5.0, ge=0)
    """Seconds before the second try; each further try waits twice as long (with jitter)."""
    retry_max_delay: float = Field(default=120.0, ge=0)
    """No single wait between tries is longer than this."""
    throttle_retries: int = Field(default=20, ge=0, le=1000)
    """Throttling replies (454, "too many", "rate limit") per message that slow the sender down
    instead of counting as failures; beyond this they count as temporary failures."""
    on_unknown: Literal["resend", "hold"] = "resend"
    """Connection lost after the final dot with no reply: ``resend`` once with the same
    Message-ID (mail clients fold the pair), or ``hold`` (leave it ``unknown`` for the operator)."""
    suppress_after: int = Field(default=3, ge=1, le=100)
    """Permanent failures (5xx to RCPT) after which the address is suppressed."""
    claim_lease: float = Field(default=600.0, gt=0)
    """Seconds a run's claim on an edition is respected by other runs. A claim whose owner
    process is gone (same host) is taken over at once; one from another host after this."""
    queue_size: int = Field(default=0, ge=0, le=10000)
    """Rendered messages waiting for a connection (0: twice the connections a send opens
    first, ``smtp.pool_start``, and at least 8); bounds memory."""
    crash_duplicates: str | None = Field(default=None, json_schema_extra={"removed": True})
    """Removed (the final-dot gate is gone): kept only so that a config that still sets it
    is told what replaced it, with its file and line."""
    group_commit_wait: float = Field(default=0.005, ge=0, le=0.1)
    """Seconds a connection's "sending" mark waits for the other connections' marks, to be
    committed with them in one transaction (0: each at once). Fewer commits per digest (a third
    less database CPU on PostgreSQL); a message leaves at most this much later."""

    @field_validator("crash_duplicates")
    @classmethod
    def _removed(cls, value: str | None) -> None:
        if value is not None:
            raise ValueError(
                "was removed: a send now keeps a message in flight on every connection (a "
                "crash may leave one duplicate per open connection, with its original "
                "Message-ID; docs/delivery.md); delete this line"
            )
        return None


class AlertSettings(_Strict):
    email: str | None = None
    """Operator address for alerts: a failed run, or a weekday fetch that found no papers."""
    on_empty_weekday_fetch: bool = True

    @field_validator("email")
    @classmethod
    def _addr(cls, value: str | None) -> str | None:
        return None if value is None else _check_address(value)


DKIM_HEADERS = (
    "From",
    "To",
    "Subject",
    "Date",
    "Message-ID",
    "Reply-To",
    "List-Id",
    "List-Unsubscribe",
    "List-Unsubscribe-Post",
    "MIME-Version",
    "Content-Type",
)


class DkimSettings(_Strict):
    """DKIM signing of every message sent (digests, confirmations, alerts)."""

    selector: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    """The selector: the public key is published as TXT at ``SELECTOR._domainkey.DOMAIN``."""
    domain: str | None = None
    """Signing domain (``d=``); defaults to the sender's domain."""
    private_key_file: str | None = None
    """PEM private key (RSA), relative to this config file."""
    private_key_env: str = "NEWSLETTER_DKIM_KEY"
    """Environment variable holding the PEM key; it wins over ``private_key_file``."""
    headers: list[str] = Field(default_factory=lambda: list(DKIM_HEADERS))

    @field_validator("domain")
    @classmethod
    def _domain(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^[^\s@/]+\.[^\s@/]+$", value):
            raise ValueError(f"{value!r} is not a domain name")
        return value

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: list[str]) -> list[str]:
        if not any(h.lower() == "from" for h in value):
            raise ValueError("DKIM must sign the From header (RFC 6376 5.4)")
        for h in value:
            if not re.match(r"^[!-9;-~]+$", h):
                raise ValueError(f"{h!r} is not a header name")
        return value
