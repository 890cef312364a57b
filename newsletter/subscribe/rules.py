"""The checks every subscription entry point applies, and the words its answers use.

What a request may ask for (:class:`Choices`, :func:`check_timezone`, :func:`parse_address`),
how requests are counted for the rate limits (:func:`mailbox`, :func:`client_network`), and
who the operator may not add (:func:`consent_block`: an address that unsubscribed, was
suppressed or erased); :class:`Outcome` and the errors name what a request did.
"""

from __future__ import annotations

import functools
import hmac
import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from newsletter.addresses import InvalidAddress, address_key, normalize_address
from newsletter.config import Config
from newsletter.config.time_zones import not_a_zone
from newsletter.errors import SubscriberError
from newsletter.models import Frequency, SubscriberStatus
from newsletter.services.link_tokens import TokenError, signing_key
from newsletter.store import Store


class InvalidRequest(SubscriberError):
    """A subscription request with a bad field; ``field`` names it (``email``, ``topics``...)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.reason = message


class Outcome(StrEnum):
    """What a request did. Never shown to the requester (no enumeration); for logs and tests."""

    CONFIRM_SENT = "confirm_sent"
    MANAGE_SENT = "manage_sent"
    UNSUBSCRIBE_SENT = "unsubscribe_sent"
    NOT_SUBSCRIBED_SENT = "not_subscribed_sent"
    REPLY_SENT = "reply_sent"
    OWN_TOPIC_SENT = "own_topic_sent"
    """A ``topic add``/``topic remove`` command was answered with a confirmation link."""
    NOT_SUBSCRIBED = "not_subscribed"
    """Nothing was sent: the address does not get the digest (no links to mail)."""
    LIMITED = "limited"
    """The address (or the sending host) had too many requests recently: nothing was sent."""


LIVE = (SubscriberStatus.ACTIVE, SubscriberStatus.PAUSED)
"""The statuses that get (or, paused, will get) digests."""


class LinkUsed(TokenError):
    """A confirmation link that was used already, or was issued before the address's
    subscription last changed (it unsubscribed, was suppressed or erased since): it confirms
    nothing. ``subscribed`` says whether the address is subscribed now."""

    def __init__(self, message: str, *, subscribed: bool) -> None:
        super().__init__(message)
        self.subscribed = subscribed


@dataclass(frozen=True, slots=True)
class Choices:
    """What a person asks for: topics, timezone, preferred local hour, frequency."""

    topics: tuple[str, ...]
    timezone: str
    send_hour: int | None = None
    frequency: Frequency = Frequency.DAILY


@dataclass(frozen=True, slots=True)
class Links:
    manage: str
    unsubscribe: str


Clock = Callable[[], datetime]


@functools.lru_cache(maxsize=1024)
def check_timezone(value: str) -> str:
    """``value`` when it names a time zone; raises :class:`InvalidRequest` otherwise."""
    if why := not_a_zone(value):
        raise InvalidRequest("timezone", why)
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise InvalidRequest("timezone", f"unknown timezone {value!r}") from e
    return value


def parse_address(value: str) -> str:
    """``value`` as a normalized address; raises :class:`InvalidRequest` (field ``email``) when it
    is not one."""
    if len(value) > 320:
        raise InvalidRequest("email", "an address is at most 320 characters")
    try:
        return normalize_address(value)
    except InvalidAddress as e:
        raise InvalidRequest("email", str(e)) from e


DOTLESS_DOMAINS = {"gmail.com": "gmail.com", "googlemail.com": "gmail.com"}
"""Providers that ignore dots in the local part (``v.ictim`` is ``victim``), each with the
domain its mailboxes are counted under (``googlemail.com`` is ``gmail.com``)."""


def mailbox(address: str) -> str:
    """The mailbox an address reaches, for per-mailbox rate limits: its
    :func:`~newsletter.addresses.address_key` (case-folded) without the ``+tag``, and for the
    providers that ignore dots (:data:`DOTLESS_DOMAINS`) without dots and under one domain
    (``Bomb+1@Example.org`` and ``bomb+2@example.org`` are one mailbox, and so are
    ``v.ictim@gmail.com`` and ``victim+x@googlemail.com``)."""
    local, _, domain = address_key(address).rpartition("@")
    local = local.split("+", 1)[0] or local
    if domain in DOTLESS_DOMAINS:
        local, domain = local.replace(".", "") or local, DOTLESS_DOMAINS[domain]
    return f"{local}@{domain}"


def client_network(client: str) -> str:
    """The network a client address is counted under: an IPv6 address by its /64 (one
    subscriber line or host gets a whole /64), an IPv4 one (or IPv4-mapped IPv6) by itself."""
    try:
        ip = ipaddress.ip_address(client.strip().split("%", 1)[0])
    except ValueError:
        return client
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def forgotten_key(secret: str, address: str) -> str:
    """The keyed hash an erased address leaves in the store (letter case ignored: made of the
    :func:`~newsletter.addresses.address_key`, which for a normalized address is the
    ``address.casefold()`` the hashes stored before migration 0012 were made of)."""
    return hmac.new(
        secret.encode(), b"forgotten:" + address_key(address).encode(), "sha256"
    ).hexdigest()


def consent_block(
    config: Config, store: Store, address: str, key: Callable[[str], str] | None = None
) -> str | None:
    """Why the operator (``subscribers add``, ``import``, the config's ``subscribers:``) may
    not make ``address`` a subscriber: it unsubscribed, was suppressed or erased, and only a
    fresh confirmation by email from it can change that. ``None`` when nothing stands in the
    way. The message names the address, since when, and what to do.

    ``key`` makes the erased-address hash (default: from the config's secret key, read only
    when some address was ever erased).
    """
    reason = None
    for sub in store.said_no(address):
        since = f" on {sub.status_changed:%Y-%m-%d}" if sub.status_changed else ""
        reason = f"{sub.email}: {sub.status.value}{since}; stays {sub.status.value}"
        break
    if reason is None and store.any_forgotten():
        hashed = key(address) if key else forgotten_key(signing_key(config), address)
        erased = store.forgotten_at(hashed)
        if erased is not None:
            reason = f"{address}: erased (--forget) on {erased:%Y-%m-%d}; not added back"
    return None if reason is None else blocked_message(config, address, reason)


def blocked_message(config: Config, address: str, reason: str) -> str:
    """The refusal for an address that said no: ``reason`` (who, what, since when), and how
    only the address itself can change it."""
    base = config.settings.sender.base_url
    return (
        f"{reason} until they confirm by email (they subscribe again at {base}/subscribe, or "
        f"mail them a link: newsletter subscribers invite {address} --topic NAME)"
    )


def consent_history(consent: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Every consent event of a record (the record itself when it has no history)."""
    if not consent:
        return []
    history = consent.get("history")
    return [h for h in history if isinstance(h, dict)] if isinstance(history, list) else [consent]
