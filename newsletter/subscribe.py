"""Subscribing: the logic the web pages, the JSON API, email commands and the CLI share.

Double opt-in without pending rows: a request stores nothing about the address except a keyed
hash for the rate limit; the person's choices travel inside the signed, expiring confirmation
link, and only a confirmation creates (or reactivates) the subscriber, with a consent record
(when, how, from where, for both the request and the confirmation). Every request gets the same
answer whatever the address's state; the mail decides: a confirmation link for someone not
subscribed, a "manage your subscription" mail for someone who is.

Effects are passed in: the store, a mailer factory (``newsletter.deliver.Mailer``) and the clock.

Why one module of this length: :class:`Subscriptions` is the one place the double opt-in rules
live (request, confirm, change, unsubscribe, forget, the rate limits and the mails they send),
and every entry point calls it; the functions above it are the checks it applies. Split, one set
of rules would be spread over several modules.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import ipaddress
import logging
import re
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from email import policy
from email.message import EmailMessage
from email.utils import format_datetime, parseaddr
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from newsletter.addresses import (
    InvalidAddress,
    address_key,
    envelope_address,
    format_address,
    normalize_address,
)
from newsletter.clock import utcnow
from newsletter.config import Config
from newsletter.deliver import Envelope, MailerFactory, header_safe, make_message_id
from newsletter.deliver.dkim import maybe_sign
from newsletter.deliver.mime import header_address
from newsletter.errors import SubscriberError
from newsletter.feedback import digest_reader
from newsletter.models import Frequency, Subscriber, SubscriberStatus
from newsletter.render import make_environment
from newsletter.services import Services
from newsletter.store import Store
from newsletter.tokens import MAX_AGE, Purpose, TokenError, signing_key

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


def _history(consent: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Every consent event of a record (the record itself when it has no history)."""
    if not consent:
        return []
    history = consent.get("history")
    return [h for h in history if isinstance(h, dict)] if isinstance(history, list) else [consent]


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
        *,
        services: Services | None = None,
    ) -> None:
        self.config = config
        self.settings = config.settings
        self.store = store
        self.now = now
        self.services = services or Services(config, store, clock=now, relay=mailer_factory)
        """The relay, signer and link tokens (shared with the process's sends when given)."""
        self.mailer_factory: MailerFactory = self.services.mailer_factory
        self.secret = self.services.secret
        self.tokens = self.services.tokens
        self.env = make_environment(config.templates_dir())
        self.signer = self.services.signer

    # ------------------------------------------------------------ validation

    @functools.cached_property
    def topic_names(self) -> list[str]:
        """The configured topics' names, in the config's order."""
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

    def _keyed(self, kind: str, value: str) -> str:
        digest = hmac.new(self.secret.encode(), value.encode(), hashlib.sha256)
        return f"{kind}:" + digest.hexdigest()[:40]

    def _address_key(self, address: str) -> str:
        return self._keyed("addr", mailbox(address))

    def _confirm_key(self, address: str) -> str:
        return self._keyed("confirm", mailbox(address))

    def forgotten_key(self, address: str) -> str:
        """The keyed hash an erased address leaves in the store (letter case ignored)."""
        return forgotten_key(self.secret, address)

    def allow_client(self, client: str) -> bool:
        """Count one subscription request from a client address (IP; IPv6 by /64); False when
        over ``web.rate_limit.per_ip`` per ``per_ip_window``."""
        rl = self.settings.web.rate_limit
        return self.store.hit_rate(
            f"ip:{client_network(client)}"[:120],
            self.now(),
            window=timedelta(seconds=rl.per_ip_window),
            limit=rl.per_ip,
        )

    def allow_inbound(self, per_hour: int | None = None) -> bool:
        """Count one answered email command, from anyone; False when over ``per_hour``
        (default ``inbound.max_per_hour``)."""
        return self.store.hit_rate(
            "inbound:all",
            self.now(),
            window=timedelta(hours=1),
            limit=per_hour or self.settings.inbound.max_per_hour,
        )

    def _allow_mail(self, address: str) -> bool:
        rl = self.settings.web.rate_limit
        return self.store.hit_rate(
            self._address_key(address),
            self.now(),
            window=timedelta(seconds=rl.per_address_window),
            limit=rl.per_address,
        )

    def _allow_email_confirmation(self, address: str) -> bool:
        rl = self.settings.web.rate_limit
        return self.store.hit_rate(
            self._confirm_key(address),
            self.now(),
            window=timedelta(seconds=rl.per_address_window),
            limit=rl.email_confirmations_per_address,
        )

    # ------------------------------------------------------------ links

    def links(self, subscriber: Subscriber, signed_at: datetime | None = None) -> Links:
        """The subscriber's manage and unsubscribe links (signed now, or as of ``signed_at``:
        see :meth:`links_as_of`)."""
        base = self.settings.sender.base_url
        payload = {"s": subscriber.id, "h": self.tokens.binding(subscriber.email)}
        manage = self.tokens.make(Purpose.MANAGE, payload, signed_at)
        unsubscribe = self.tokens.make(Purpose.UNSUBSCRIBE, payload, signed_at)
        return Links(
            manage=f"{base}/manage/{manage}", unsubscribe=f"{base}/unsubscribe/{unsubscribe}"
        )

    def links_as_of(self, subscriber: Subscriber, signed_at: datetime) -> Links | None:
        """The manage and unsubscribe links a page reached by a view or feedback link signed at
        ``signed_at`` may show: signed as of then, so they expire when the ones mailed with it
        did; ``None`` once those have expired (the page offers to mail fresh ones instead).

        View and feedback links live a year, manage links 90 days: a page must not turn an old
        link of one purpose into a new link of a stronger one.
        """
        now = self.now()
        if any(signed_at + MAX_AGE[p] <= now for p in (Purpose.MANAGE, Purpose.UNSUBSCRIBE)):
            return None
        return self.links(subscriber, signed_at)

    def subscriber_for(self, purpose: Purpose, token: str) -> Subscriber | None:
        """The subscriber a manage or unsubscribe token names; ``None`` if they were erased.

        Raises :class:`TokenError` for a tampered, foreign or expired token.
        """
        data = self.tokens.read(purpose, token)
        if not isinstance(data, dict) or not isinstance(data.get("s"), int):
            raise TokenError("this link is not valid")
        sub = self.store.subscriber_by_id(data["s"])
        if sub is None or not self.tokens.made_for(data, sub.email):
            return None  # erased, or the id now belongs to someone else
        return sub

    def view_for(self, token: str) -> tuple[Subscriber | None, date, datetime]:
        """The subscriber and day a "view in browser" token names, and when it was signed;
        ``None`` when the address it was made for is no longer that subscriber's (erased; the
        id is someone else's).

        Raises :class:`TokenError` for a tampered, foreign or expired token.
        """
        got = digest_reader(self.tokens, self.store, token)
        return got.subscriber, got.edition_date, got.signed

    # ------------------------------------------------------------ requests

    def request(
        self,
        email: str,
        choices: Choices,
        *,
        via: str,
        origin: str,
        reply: bool = False,
        by_email: bool = False,
    ) -> Outcome:
        """Someone asks to subscribe ``email``: mail a confirmation link, or a manage link.

        Nothing about the address is stored (only keyed hashes for the per-address limits).
        ``by_email``: an email command, whose From can be forged: at most
        ``email_confirmations_per_address`` confirmation mails per address per window.
        Raises :class:`InvalidRequest` for a bad address, ``DeliveryError``/``RelayError`` when
        the mail cannot be handed over.
        """
        address = parse_address(email)
        existing = self.store.get_subscriber(address)
        live = existing is not None and existing.status in LIVE
        if by_email and not live and not self._allow_email_confirmation(address):
            log.warning("email command: a confirmation for this address was sent already; dropped")
            return Outcome.LIMITED
        if not self._allow_mail(address):
            log.info("subscription request for an address over its limit; nothing sent")
            return Outcome.LIMITED
        now = self.now()
        if existing is not None and live:
            self._send_links(existing, reply=reply)
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
            "n": secrets.token_urlsafe(9),  # this link's id: it confirms once
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

    def _send_links(self, subscriber: Subscriber, *, reply: bool = False) -> None:
        self._send(
            subscriber.email,
            "Your subscription",
            "web/mail/manage.txt",
            {"links": self.links(subscriber), "subscriber": subscriber},
            reply=reply,
        )

    def mail_links(self, subscriber: Subscriber) -> Outcome:
        """Mail fresh manage and unsubscribe links to a live subscriber's own address (asked
        from a page whose links are too old to hand out, :meth:`links_as_of`); counts against
        ``per_address`` like any request. Raises ``DeliveryError``/``RelayError``."""
        if subscriber.status not in LIVE:
            return Outcome.NOT_SUBSCRIBED
        if not self._allow_mail(subscriber.email):
            return Outcome.LIMITED
        self._send_links(subscriber)
        return Outcome.MANAGE_SENT

    def check_confirmation(self, token: str) -> dict[str, Any]:
        """Read a confirmation link without using it; raises :class:`TokenError` for a bad or
        expired link and :class:`LinkUsed` for one that can confirm nothing any more."""
        data = self.tokens.read(
            Purpose.CONFIRM, token, max_age=timedelta(days=self.settings.web.confirm_days)
        )
        if not isinstance(data, dict):
            raise TokenError("this link is not valid")
        try:
            address = parse_address(str(data["e"]))
            requested = datetime.fromisoformat(str(data["r"]))
        except (KeyError, TypeError, ValueError, InvalidRequest) as e:
            raise TokenError("this link is not valid") from e
        nonce = data.get("n")
        existing = self.store.get_subscriber(address)
        if existing is not None:
            subscribed = existing.status in LIVE
            history = _history(self.store.consent_record(existing.id))
            if nonce is not None and any(h.get("link") == nonce for h in history):
                raise LinkUsed("this link was used already", subscribed=subscribed)
            changed = existing.status_changed
            if changed is not None and changed > requested:
                raise LinkUsed(
                    "this link was sent before the subscription last changed", subscribed=subscribed
                )
        else:
            erased = self.store.forgotten_at(self.forgotten_key(address))
            if erased is not None and erased > requested:
                raise LinkUsed("this link was sent before the address was erased", subscribed=False)
        return data

    def confirm(self, token: str, *, origin: str) -> Subscriber:
        """Follow a confirmation link: the subscriber becomes active with what they chose.

        A link confirms once: using it again, or after the address unsubscribed, was
        suppressed or erased, raises :class:`LinkUsed` and changes nothing. Raises
        :class:`TokenError` for a bad or expired link.
        """
        data = self.check_confirmation(token)
        try:
            address = parse_address(str(data["e"]))
            requested = datetime.fromisoformat(str(data["r"]))
            known = [t for t in data["t"] if t in self.topic_names] or self.topic_names
            choices = self.choices(known, data["z"], data["h"], data["f"])
        except (KeyError, TypeError, ValueError, InvalidRequest) as e:
            raise TokenError("this link is not valid") from e
        now = self.now()
        consent = {
            "how": str(data.get("v", "web")),
            "when": now.isoformat(),
            "requested": requested.isoformat(),
            "requested_from": str(data.get("o", "")),
            "confirmed": now.isoformat(),
            "confirmed_from": origin[:200],
            "topics": list(choices.topics),
            "link": str(data.get("n", "")),
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
        self.store.unforget(self.forgotten_key(address))
        log.info("subscriber %s confirmed (%s)", sub.id, consent["how"])
        return sub

    def update(
        self, subscriber: Subscriber, choices: Choices, *, paused: bool, name: str | None = None
    ) -> Subscriber:
        """Save every preference: topics, timezone, hour, frequency, pause (and the display
        name, unless ``None``). Raises :class:`SubscriberError` if they unsubscribed."""
        got = self.store.update_preferences(
            subscriber.id,
            topics=choices.topics,
            send_hour=choices.send_hour,
            frequency=choices.frequency,
            paused=paused,
            now=self.now(),
            timezone=choices.timezone,
            name=name,
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
        """Erase a person: their subscriber row, history, and rate-limit entries.

        What stays is a keyed hash of the address and the time (``forgotten``): the operator's
        CLI, an import or the config cannot add the address back; only a confirmation by email
        from the address can (it drops the hash again).
        """
        address = parse_address(email)
        self.store.forget_rate(self._address_key(address))
        self.store.forget_rate(self._confirm_key(address))
        return self.store.remove_subscriber(
            address, forgotten=(self.forgotten_key(address), self.now())
        )

    def blocked(self, address: str) -> str | None:
        """See :func:`consent_block`."""
        return consent_block(self.config, self.store, address, self.forgotten_key)

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
