"""Subscribing: the double opt-in rules the web pages, the JSON API, email commands and the CLI
share.

Double opt-in without pending rows: a request stores nothing about the address except a keyed
hash for the rate limit; the person's choices travel inside the signed, expiring confirmation
link, and only a confirmation creates (or reactivates) the subscriber, with a consent record
(when, how, from where, for both the request and the confirmation). Every request gets the same
answer whatever the address's state; the mail decides: a confirmation link for someone not
subscribed, a "manage your subscription" mail for someone who is.

:class:`Subscriptions` is the one place these rules live (request, confirm, change,
unsubscribe, forget); the mail they send, the links and the rate limits are its base,
:class:`~newsletter.subscribe.mailing.Mailing`, and the checks are in
:mod:`newsletter.subscribe.rules`.
"""

from __future__ import annotations

import functools
import logging
import secrets
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from newsletter.errors import SubscriberError
from newsletter.models import Frequency, Subscriber
from newsletter.services.link_tokens import Purpose, TokenError
from newsletter.subscribe.mailing import Mailing
from newsletter.subscribe.rules import (
    LIVE,
    Choices,
    InvalidRequest,
    LinkUsed,
    Outcome,
    check_timezone,
    consent_block,
    consent_history,
    parse_address,
)

log = logging.getLogger(__name__)


class Subscriptions(Mailing):
    """Subscription requests, confirmations, changes and unsubscriptions, on the process's
    :class:`~newsletter.services.Services` (``Subscriptions(services)``)."""

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
            history = consent_history(self.store.consent_record(existing.id))
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

    def forget(self, email: str) -> bool:
        """Erase a person: their subscriber row, history, and rate-limit entries.

        What stays is a keyed hash of the address and the time (``forgotten``): the operator's
        CLI, an import or the config cannot add the address back; only a confirmation by email
        from the address can (it drops the hash again).
        """
        address = parse_address(email)
        for key in self._address_keys(address):
            self.store.forget_rate(key)
        return self.store.remove_subscriber(
            address, forgotten=(self.forgotten_key(address), self.now())
        )

    def blocked(self, address: str) -> str | None:
        """See :func:`consent_block`."""
        return consent_block(self.config, self.store, address, self.forgotten_key)
