"""Subscribing: the logic the web pages, the JSON API, email commands and the CLI share.

Double opt-in without pending rows: a request stores nothing about the address except a keyed
hash for the rate limit; the person's choices travel inside the signed, expiring confirmation
link, and only a confirmation creates (or reactivates) the subscriber, with a consent record
(when, how, from where, for both the request and the confirmation). Every request gets the same
answer whatever the address's state; the mail decides: a confirmation link for someone not
subscribed, a "manage your subscription" mail for someone who is.

Effects are passed in: the store, a mailer factory (``newsletter.deliver.Mailer``) and the clock.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from email import policy
from email.message import EmailMessage
from email.utils import format_datetime, parseaddr
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from newsletter.addresses import (
    InvalidAddress,
    envelope_address,
    format_address,
    normalize_address,
)
from newsletter.clock import utcnow
from newsletter.config import Config
from newsletter.deliver import Envelope, MailerFactory, SmtpMailer, header_safe, make_message_id
from newsletter.errors import SubscriberError
from newsletter.mime import header_address
from newsletter.models import Frequency, Subscriber, SubscriberStatus
from newsletter.render import make_environment
from newsletter.signing import DkimSigner, maybe_sign
from newsletter.store import Store
from newsletter.tokens import Purpose, TokenError, Tokens

log = logging.getLogger(__name__)


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
    LIMITED = "limited"
    """The address had too many mails recently: nothing was sent."""


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


def check_timezone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise InvalidRequest("timezone", f"unknown timezone {value!r}") from e
    return value


def parse_address(value: str) -> str:
    if len(value) > 320:
        raise InvalidRequest("email", "an address is at most 320 characters")
    try:
        return normalize_address(value)
    except InvalidAddress as e:
        raise InvalidRequest("email", str(e)) from e


# ---------------------------------------------------------------------------- email commands

COMMANDS = ("subscribe", "unsubscribe", "topics", "help")


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    args: tuple[str, ...] = ()


def parse_command(subject: str, body: str) -> Command | None:
    """The command in a request mail: the subject, else the first non-empty line of the body.

    ``Re:``/``Fwd:`` prefixes and a leading ``-``/``/`` are ignored; words are case-insensitive.
    """
    candidates = [subject]
    for line in body.splitlines():
        if line.strip():
            candidates.append(line)
            break
    for text in candidates:
        text = re.sub(r"^\s*((re|fwd?|aw|wg)\s*:\s*)+", "", text, flags=re.IGNORECASE)
        words = text.strip().lstrip("-/").split()
        if words and words[0].lower() in COMMANDS:
            args = tuple(w.strip(",;").lower() for w in words[1:] if w.strip(",;"))
            return Command(words[0].lower(), args)
    return None


# ---------------------------------------------------------------------------- the service


class Subscriptions:
    """Subscription requests, confirmations, changes and unsubscriptions, for one config."""

    def __init__(
        self,
        config: Config,
        store: Store,
        mailer_factory: MailerFactory | None = None,
        now: Clock = utcnow,
    ) -> None:
        self.config = config
        self.settings = config.settings
        self.store = store
        self.now = now
        self.mailer_factory: MailerFactory = mailer_factory or (
            lambda: SmtpMailer(config.settings.smtp)
        )
        self.secret = config.secret_key()
        self.tokens = Tokens(self.secret, now)
        self.env = make_environment(config.templates_dir())
        self.signer = DkimSigner.from_config(config)

    # ------------------------------------------------------------ validation

    @property
    def topic_names(self) -> list[str]:
        return [t.name for t in self.settings.topics]

    def choices(
        self,
        topics: Sequence[str],
        timezone: str | None = None,
        send_hour: int | None = None,
        frequency: str | Frequency = Frequency.DAILY,
    ) -> Choices:
        """Validate what a person asked for; raises :class:`InvalidRequest` naming the field."""
        known = self.topic_names
        chosen = tuple(dict.fromkeys(topics))
        if not chosen:
            raise InvalidRequest("topics", f"choose at least one topic ({', '.join(known)})")
        unknown = [t for t in chosen if t not in known]
        if unknown:
            raise InvalidRequest(
                "topics", f"unknown topic {', '.join(unknown)} (topics: {', '.join(known)})"
            )
        tz = check_timezone(timezone or self.settings.schedule.timezone)
        if send_hour is not None and not 0 <= send_hour <= 23:
            raise InvalidRequest("send_hour", "an hour from 0 to 23")
        try:
            freq = Frequency(frequency)
        except ValueError as e:
            raise InvalidRequest("frequency", "daily or weekly") from e
        ordered = tuple(t for t in known if t in chosen)
        return Choices(ordered, tz, send_hour, freq)

    # ------------------------------------------------------------ rate limits

    def _address_key(self, address: str) -> str:
        digest = hmac.new(self.secret.encode(), address.lower().encode(), hashlib.sha256)
        return "addr:" + digest.hexdigest()[:40]

    def allow_client(self, client: str) -> bool:
        """Count one subscription request from a client address (IP); False when over the limit."""
        rl = self.settings.web.rate_limit
        return self.store.hit_rate(
            f"ip:{client}"[:120],
            self.now(),
            window=timedelta(seconds=rl.per_ip_window),
            limit=rl.per_ip,
        )

    def _allow_mail(self, address: str) -> bool:
        rl = self.settings.web.rate_limit
        return self.store.hit_rate(
            self._address_key(address),
            self.now(),
            window=timedelta(seconds=rl.per_address_window),
            limit=rl.per_address,
        )

    # ------------------------------------------------------------ links

    def links(self, subscriber: Subscriber) -> Links:
        base = self.settings.sender.base_url
        payload = {"s": subscriber.id, "e": subscriber.email}
        return Links(
            manage=f"{base}/manage/{self.tokens.make(Purpose.MANAGE, payload)}",
            unsubscribe=f"{base}/unsubscribe/{self.tokens.make(Purpose.UNSUBSCRIBE, payload)}",
        )

    def subscriber_for(self, purpose: Purpose, token: str) -> Subscriber | None:
        """The subscriber a manage or unsubscribe token names; ``None`` if they were erased.

        Raises :class:`TokenError` for a tampered, foreign or expired token.
        """
        data = self.tokens.read(purpose, token)
        if not isinstance(data, dict) or not isinstance(data.get("s"), int):
            raise TokenError("this link is not valid")
        sub = self.store.subscriber_by_id(data["s"])
        if sub is None or sub.email != data.get("e"):
            return None  # erased, or the id now belongs to someone else
        return sub

    # ------------------------------------------------------------ requests

    def request(
        self, email: str, choices: Choices, *, via: str, origin: str, reply: bool = False
    ) -> Outcome:
        """Someone asks to subscribe ``email``: mail a confirmation link, or a manage link.

        Nothing about the address is stored (only a keyed hash for the per-address limit).
        Raises :class:`InvalidRequest` for a bad address, ``DeliveryError``/``RelayError`` when
        the mail cannot be handed over.
        """
        address = parse_address(email)
        if not self._allow_mail(address):
            log.info("subscription request for an address over its limit; nothing sent")
            return Outcome.LIMITED
        now = self.now()
        existing = self.store.get_subscriber(address)
        if existing is not None and existing.status in (
            SubscriberStatus.ACTIVE,
            SubscriberStatus.PAUSED,
        ):
            self._send(
                address,
                "Your subscription",
                "web/mail/manage.txt",
                {"links": self.links(existing), "subscriber": existing},
                reply=reply,
            )
            return Outcome.MANAGE_SENT
        payload = {
            "e": address,
            "t": list(choices.topics),
            "z": choices.timezone,
            "h": choices.send_hour,
            "f": choices.frequency.value,
            "r": now.isoformat(),
            "v": via,
            "o": origin[:200],
        }
        link = (
            f"{self.settings.sender.base_url}/confirm/{self.tokens.make(Purpose.CONFIRM, payload)}"
        )
        titles = [self.settings.topic(t).label for t in choices.topics]
        self._send(
            address,
            "Confirm your subscription",
            "web/mail/confirm.txt",
            {"link": link, "topics": titles, "days": self.settings.web.confirm_days},
            reply=reply,
        )
        return Outcome.CONFIRM_SENT

    def confirm(self, token: str, *, origin: str) -> Subscriber:
        """Follow a confirmation link: the subscriber becomes active with what they chose.

        Idempotent: confirming twice, or after changing things on the manage page, changes
        nothing. Raises :class:`TokenError` for a bad or expired link.
        """
        data = self.tokens.read(
            Purpose.CONFIRM, token, max_age=timedelta(days=self.settings.web.confirm_days)
        )
        try:
            address = parse_address(str(data["e"]))
            requested = datetime.fromisoformat(str(data["r"]))
            known = [t for t in data["t"] if t in self.topic_names] or self.topic_names
            choices = self.choices(known, data["z"], data["h"], data["f"])
        except (KeyError, TypeError, ValueError, InvalidRequest) as e:
            raise TokenError("this link is not valid") from e
        existing = self.store.get_subscriber(address)
        if (
            existing is not None
            and existing.status in (SubscriberStatus.ACTIVE, SubscriberStatus.PAUSED)
            and existing.confirmed is not None
            and existing.confirmed >= requested
        ):
            return existing
        now = self.now()
        consent = {
            "how": str(data.get("v", "web")),
            "when": now.isoformat(),
            "requested": requested.isoformat(),
            "requested_from": str(data.get("o", "")),
            "confirmed": now.isoformat(),
            "confirmed_from": origin[:200],
            "topics": list(choices.topics),
        }
        sub, _ = self.store.confirm_subscriber(
            address,
            topics=choices.topics,
            timezone=choices.timezone,
            send_hour=choices.send_hour,
            frequency=choices.frequency,
            now=now,
            consent=consent,
        )
        log.info("subscriber %s confirmed (%s)", sub.id, consent["how"])
        return sub

    def update(self, subscriber: Subscriber, choices: Choices, *, paused: bool) -> Subscriber:
        """Save the manage page's form. Raises :class:`SubscriberError` if they unsubscribed."""
        got = self.store.update_preferences(
            subscriber.id,
            topics=choices.topics,
            send_hour=choices.send_hour,
            frequency=choices.frequency,
            paused=paused,
            now=self.now(),
        )
        if got is None:
            raise SubscriberError(
                f"{subscriber.email} is {subscriber.status.value}; subscribe again to get digests"
            )
        return got

    def unsubscribe(self, token: str) -> Subscriber | None:
        """One-click unsubscribe by token; idempotent. ``None`` when the person was erased."""
        sub = self.subscriber_for(Purpose.UNSUBSCRIBE, token)
        if sub is None:
            return None
        if self.store.unsubscribe_id(sub.id, self.now()):
            log.info("subscriber %s unsubscribed", sub.id)
        return self.store.subscriber_by_id(sub.id)

    def request_unsubscribe(self, email: str, *, reply: bool = True) -> Outcome:
        """An ``unsubscribe`` mail command: answer with a one-button unsubscribe link.

        The From address of a mail can be forged, so the mail command never unsubscribes by
        itself; the link goes to the address's owner.
        """
        address = parse_address(email)
        if not self._allow_mail(address):
            return Outcome.LIMITED
        sub = self.store.get_subscriber(address)
        if sub is None or sub.status in (
            SubscriberStatus.UNSUBSCRIBED,
            SubscriberStatus.PENDING,
        ):
            self._send(
                address, "You are not subscribed", "web/mail/not_subscribed.txt", {}, reply=reply
            )
            return Outcome.NOT_SUBSCRIBED_SENT
        self._send(
            address,
            "Unsubscribe",
            "web/mail/unsubscribe.txt",
            {"links": self.links(sub)},
            reply=reply,
        )
        return Outcome.UNSUBSCRIBE_SENT

    def reply_info(self, email: str, command: str, problem: str | None = None) -> Outcome:
        """Answer ``topics``/``help`` (or a command we could not use) with the topics and commands."""
        address = parse_address(email)
        if not self._allow_mail(address):
            return Outcome.LIMITED
        subject = "Topics" if command == "topics" else "How to subscribe"
        self._send(address, subject, "web/mail/help.txt", {"problem": problem}, reply=True)
        return Outcome.REPLY_SENT

    def forget(self, email: str) -> bool:
        """Erase a person: their subscriber row, history, and rate-limit entries."""
        address = parse_address(email)
        self.store.forget_rate(self._address_key(address))
        return self.store.remove_subscriber(address)

    # ------------------------------------------------------------ mail

    def message(
        self, to: str, subject: str, template: str, context: dict[str, Any], *, reply: bool
    ) -> Envelope:
        """A short text/plain mail from the sender identity, serialized with CRLF."""
        sender = self.settings.sender
        ctx = {
            "sender": sender,
            "topics_all": self.settings.topics,
            "base_url": sender.base_url,
            "request_address": self.settings.inbound.address,
            **context,
        }
        body = self.env.get_template(template).render(ctx)
        msg = EmailMessage()
        msg["Subject"] = header_safe(subject)
        msg["From"] = format_address(sender.from_name, sender.from_address)
        # The To: the digests write: an IDN domain as xn--, never an encoded-word in an address.
        msg["To"] = header_address(to)
        if sender.reply_to:
            msg["Reply-To"] = format_address(*parseaddr(sender.reply_to))
        msg["Date"] = format_datetime(self.now())
        msg["Message-ID"] = make_message_id(sender.message_domain)
        msg["Auto-Submitted"] = "auto-replied" if reply else "auto-generated"
        msg["X-Auto-Response-Suppress"] = "All"
        msg.set_content(body, cte="quoted-printable")
        recipient = self.settings.smtp.dev_recipient or to
        # A non-ASCII local part has no ASCII form: UTF-8 headers (RFC 6532), sent with SMTPUTF8.
        utf8 = envelope_address(to)[1]
        data = msg.as_bytes(policy=policy.SMTPUTF8 if utf8 else policy.SMTP)
        envelope = Envelope(sender.from_address, recipient, data, str(msg["Message-ID"]))
        return maybe_sign(self.signer, envelope)

    def _send(
        self, to: str, subject: str, template: str, context: dict[str, Any], *, reply: bool
    ) -> None:
        envelope = self.message(to, subject, template, context, reply=reply)
        mailer = self.mailer_factory()
        try:
            mailer.send(envelope)
        finally:
            mailer.close()
