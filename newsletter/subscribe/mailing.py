"""The mail a subscription sends, the links in it and the limits on it.

:class:`Mailing` holds the process's effects (relay, signer, link tokens, clock: one
:class:`~newsletter.services.Services`, passed in) and does the mailing jobs that need no
double opt-in rule: the per-address and per-client rate limits, the signed manage and
unsubscribe links and the pages reached by them, "mail me my links", and the answers to the
``unsubscribe``, ``topics`` and ``help`` email commands (:func:`parse_command` reads them).

One address has three mail budgets per ``web.rate_limit.per_address_window``, so that a stranger
spending one cannot silence the others: ``per_address`` for what anyone may ask (subscribe
requests, ``help``/``topics`` replies), ``links_per_address`` for "Email me a link", asked with
the reader's own digest token, and ``unsubscribe_per_address`` for the answers to the
``unsubscribe`` email command.
:class:`~newsletter.subscribe.service.Subscriptions` adds the rules on top.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from email import policy
from email.message import EmailMessage
from email.utils import format_datetime, parseaddr
from enum import StrEnum
from typing import Any

from newsletter.addresses import envelope_address, format_address
from newsletter.deliver import Envelope, MailerFactory, header_safe, make_message_id
from newsletter.deliver.dkim import maybe_sign
from newsletter.deliver.mime import header_address
from newsletter.digest.render import make_environment
from newsletter.models import Subscriber, SubscriberStatus
from newsletter.services import Services
from newsletter.services.link_tokens import MAX_AGE, Purpose, TokenError
from newsletter.subscribe.own_mail import add_command, remove_command
from newsletter.subscribe.own_topics import OwnTopicEditor, OwnTopicRefused, own_topics_on
from newsletter.subscribe.rules import (
    LIVE,
    Links,
    Outcome,
    client_network,
    forgotten_key,
    mailbox,
    parse_address,
)
from newsletter.subscribe.votes import digest_reader

log = logging.getLogger(__name__)


COMMANDS = ("subscribe", "unsubscribe", "topics", "help")


class Problem(StrEnum):
    """Why a command mail could not be used, in the reply's own fixed words. A reply never
    quotes the mail: its From can be anyone's, so quoted text would be the forger's message to
    them, sent from our domain (and DKIM-signed)."""

    NO_COMMAND = "no command found in it"
    UNKNOWN_TOPIC = "unknown topic"
    OWN_TOPIC = "your own topic could not be used"


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


class Mailing:
    """A subscription's mail, links and rate limits, on the process's ``services``."""

    def __init__(self, services: Services) -> None:
        self.services = services
        """The relay, signer, link tokens and clock (shared with the process's sends)."""
        self.config = services.config
        self.settings = services.config.settings
        self.store = services.store
        self.now = services.clock
        self.mailer_factory: MailerFactory = services.mailer_factory
        self.secret = services.secret
        self.tokens = services.tokens
        self.env = make_environment(services.config.templates_dir())
        self.signer = services.signer

    # ------------------------------------------------------------ rate limits

    def _keyed(self, kind: str, value: str) -> str:
        digest = hmac.new(self.secret.encode(), value.encode(), hashlib.sha256)
        return f"{kind}:" + digest.hexdigest()[:40]

    def _address_key(self, address: str) -> str:
        return self._keyed("addr", mailbox(address))

    def _confirm_key(self, address: str) -> str:
        return self._keyed("confirm", mailbox(address))

    def _links_key(self, address: str) -> str:
        return self._keyed("links", mailbox(address))

    def _unsubscribe_key(self, address: str) -> str:
        return self._keyed("unsub", mailbox(address))

    def _address_keys(self, address: str) -> tuple[str, ...]:
        """Every rate-limit key an address has (an erased address leaves none of them)."""
        return (
            self._address_key(address),
            self._confirm_key(address),
            self._links_key(address),
            self._unsubscribe_key(address),
        )

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
        """The anonymous budget: requests anyone can make naming ``address``."""
        rl = self.settings.web.rate_limit
        return self.store.hit_rate(
            self._address_key(address),
            self.now(),
            window=timedelta(seconds=rl.per_address_window),
            limit=rl.per_address,
        )

    def _allow_links(self, address: str) -> bool:
        """The reader's own budget: "Email me a link", asked with a valid token."""
        rl = self.settings.web.rate_limit
        return self.store.hit_rate(
            self._links_key(address),
            self.now(),
            window=timedelta(seconds=rl.per_address_window),
            limit=rl.links_per_address,
        )

    def _allow_unsubscribe_mail(self, address: str) -> bool:
        """The unsubscribe budget: answers to the ``unsubscribe`` email command."""
        rl = self.settings.web.rate_limit
        return self.store.hit_rate(
            self._unsubscribe_key(address),
            self.now(),
            window=timedelta(seconds=rl.per_address_window),
            limit=rl.unsubscribe_per_address,
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
        from a page whose links are too old to hand out, :meth:`links_as_of`). The page was
        opened by the reader's own token, so this counts against ``links_per_address``, which
        anonymous requests naming the address do not spend. Raises
        ``DeliveryError``/``RelayError``."""
        if subscriber.status not in LIVE:
            return Outcome.NOT_SUBSCRIBED
        if not self._allow_links(subscriber.email):
            return Outcome.LIMITED
        self._send_links(subscriber)
        return Outcome.MANAGE_SENT

    def request_unsubscribe(self, email: str, *, reply: bool = True) -> Outcome:
        """An ``unsubscribe`` mail command: answer with a one-button unsubscribe link.

        The From address of a mail can be forged, so the mail command never unsubscribes by
        itself; the link goes to the address's owner. Counts against
        ``unsubscribe_per_address``, not the budget subscribe requests and ``help`` spend: a
        stranger's requests naming the address do not keep its owner from leaving.
        """
        address = parse_address(email)
        if not self._allow_unsubscribe_mail(address):
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

    def reply_info(
        self, email: str, command: str, problem: Problem | None = None, detail: str = ""
    ) -> Outcome:
        """Answer ``topics``/``help`` (or a command we could not use, ``problem``, with a
        ``detail`` in our own words) with the topics and commands; nothing of the request is
        quoted."""
        address = parse_address(email)
        if not self._allow_mail(address):
            return Outcome.LIMITED
        subject = "Topics" if command == "topics" else "How to subscribe"
        said = Problem(problem).value if problem else None
        context = {"problem": f"{said} ({detail})" if said and detail else said}
        self._send(address, subject, "web/mail/help.txt", context, reply=True)
        return Outcome.REPLY_SENT

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
            "own_on": own_topics_on(self.config),
            "own_limits": self.settings.own_topics,
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

    def request_own_topic(self, email: str, action: str, rest: str) -> Outcome:
        """A ``topic add: <sentence>`` or ``topic remove: <n>`` mail command: answer the
        address's owner with a link that confirms it (:mod:`.own_mail`); nothing changes
        until it is pressed. The anonymous budget (``per_address``) counts it; an address
        that does not get the digest gets the "not subscribed" mail; a sentence that cannot be
        used gets the help text with the reason, never the sentence."""
        address = parse_address(email)
        sub = self.store.get_subscriber(address)
        editor = OwnTopicEditor(self.config, self.store, self.now)
        if sub is None or sub.status not in LIVE:
            if not self._allow_mail(address):
                return Outcome.LIMITED
            self._send(
                address, "You are not subscribed", "web/mail/not_subscribed.txt", {}, reply=True
            )
            return Outcome.NOT_SUBSCRIBED_SENT
        try:
            if action == "add":
                command = add_command(editor, sub, rest)
            else:
                command = remove_command(editor, sub, rest)
        except OwnTopicRefused as e:
            return self.reply_info(address, "help", Problem.OWN_TOPIC, e.reason)
        if not self._allow_mail(address):
            return Outcome.LIMITED
        payload = command.payload(sub, self.tokens.binding(sub.email))
        token = self.tokens.make(Purpose.OWN_TOPIC, payload)
        link = f"{self.settings.sender.base_url}/own-topic/{token}"
        subject = "Confirm your own topic" if action == "add" else "Confirm removing your topic"
        context = {"command": command, "link": link}
        self._send(address, subject, "web/mail/own_topic.txt", context, reply=True)
        return Outcome.OWN_TOPIC_SENT

    def _send(
        self, to: str, subject: str, template: str, context: dict[str, Any], *, reply: bool
    ) -> None:
        envelope = self.message(to, subject, template, context, reply=reply)
        mailer = self.mailer_factory()
        try:
            mailer.send(envelope)
        finally:
            mailer.close()
