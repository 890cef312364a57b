"""Provider webhooks: each request authenticated as its provider documents, then read as events.

One function per provider takes the raw request (:class:`WebhookRequest`) and returns what it
said (:class:`Accepted`) or raises :class:`Refused` with the HTTP status it deserves:

- **Amazon SES** through SNS: the SNS signature (:mod:`newsletter.bounces.sns`), a configured
  ``TopicArn``, a recent ``Timestamp``; a ``SubscriptionConfirmation`` is confirmed only for a
  configured topic.
- **Mailgun**: HMAC-SHA256 of ``timestamp + token`` with the webhook signing key; a recent
  timestamp; each token reserved for one body (:class:`Nonces`, in the database) before anything
  is applied, since the signature does not cover the body.
- **Postmark**: the HTTP Basic credentials configured on the webhook; optionally a client IP
  allowlist.
- **SendGrid**: the Signed Event Webhook, ECDSA P-256 over ``timestamp + body`` with the
  verification key; a recent timestamp.

Only authenticated requests yield events, and every event they yield has ``verified=True`` and
the provider's own event id as ``provider_id``. The functions do no I/O except through what is
passed in (the SNS certificate source); the clock is ``now``. The settings live here, not in
``newsletter.config``, and ``bounces.webhooks`` in the config file holds them.

This module is long because four providers' formats are; each has one section below.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from newsletter.bounces import sns
from newsletter.bounces.events import BounceEvent, EventKind, EventSource
from newsletter.bounces.webhook_settings import (
    MailgunWebhook,
    PostmarkWebhook,
    SendgridWebhook,
    SesWebhook,
    sendgrid_key,
)
from newsletter.errors import NewsletterError
from newsletter.text import one_line_text

MAX_DIAGNOSTIC = 300
"""Characters of a provider's reason kept in an event (they can quote a whole SMTP dialogue)."""


# --- requests and answers -----------------------------------------------------------------------


@dataclass(frozen=True)
class WebhookRequest:
    """What a webhook route received: the raw body, headers by lower-case name, the client IP."""

    body: bytes
    headers: Mapping[str, str]
    client: str = "unknown"


class Refused(NewsletterError):
    """A request that is not authenticated, too old, reused or malformed.

    ``status`` is the HTTP answer (400 malformed, 401 no credentials, 403 wrong or stale ones,
    503 we could not check, so the provider tries again); ``reason`` is one line for the log
    only, never for the answer (at most an SNS topic ARN, cleaned of controls, is quoted).
    """

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Accepted:
    """An authenticated request: its events, how many records it held that are not ours to act
    on (deliveries, opens, delays), and for SNS the subscription URL to visit, if any."""

    events: tuple[BounceEvent, ...] = ()
    ignored: int = 0
    confirm_url: str | None = None
    note: str = ""
    """One line for the log when the request carried no event (a subscription, a test)."""


class Nonces(Protocol):
    """Where one-time values (Mailgun's signing tokens) are reserved: the database
    (:meth:`newsletter.store.Store.reserve_webhook_token`), which every web process shares and
    which a restart does not forget."""

    def reserve_webhook_token(
        self, token: str, digest: str, now: datetime, *, keep: timedelta
    ) -> bool:
        """Reserve ``token`` for the body with this ``digest``, atomically: True when it is new,
        or held by the same body (a retry); False when another body holds it. Kept ``keep``."""


class CertificateSource(Protocol):
    """Where SNS signing keys come from (:class:`newsletter.bounces.sns.Certificates`)."""

    def key_for(self, url: object) -> rsa.RSAPublicKey:
        """The public key of the signing certificate at ``url``."""


# --- helpers ------------------------------------------------------------------------------------


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (
        UnicodeDecodeError,
        ValueError,
        RecursionError,
    ) as e:  # nesting deeper than Python's stack
        raise Refused(400, "the body is not JSON") from e


def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: object, limit: int = MAX_DIAGNOSTIC) -> str:
    if value is None:
        return ""
    return one_line_text(str(value))[:limit]


def _address(value: object) -> str | None:
    """A recipient address as a report gives it, or ``None`` when it is not one."""
    if not isinstance(value, str):
        return None
    text = one_line_text(value)
    if "<" in text and text.endswith(">"):  # "Name <a@b>" as SES may give it
        text = text[text.rindex("<") + 1 : -1]
    if len(text) > 320 or text.count("@") < 1 or " " in text:
        return None
    return text


def _message_id(value: object) -> str | None:
    """A Message-ID in the form we send it, ``<...>``, or ``None``."""
    if not isinstance(value, str):
        return None
    text = one_line_text(value).strip()
    if not text or len(text) > 250 or " " in text:
        return None
    return text if text.startswith("<") else f"<{text.strip('<>')}>"


_STATUS = re.compile(r"\b([245])\.(\d{1,3})\.(\d{1,3})\b")


def _status(*values: object) -> str | None:
    """The first enhanced status code (``5.1.1``) found in ``values``."""
    for value in values:
        if isinstance(value, str):
            m = _STATUS.search(value)
            if m:
                return m.group(0)
    return None


def _fresh(moment: datetime, now: datetime, max_age: int) -> bool:
    return abs((now - moment).total_seconds()) <= max_age


def _unix(value: object) -> datetime | None:
    try:
        seconds = int(str(value).strip())
    except ValueError:
        return None
    if not 0 < seconds < 2**33:
        return None
    return datetime.fromtimestamp(seconds, UTC)


def _header(request: WebhookRequest, name: str) -> str | None:
    value = request.headers.get(name.lower())
    return value.strip() if value else None


# --- Amazon SES through SNS ---------------------------------------------------------------------


def ses(
    request: WebhookRequest, settings: SesWebhook, now: datetime, certificates: CertificateSource
) -> Accepted:
    """An SNS message: verified, from a configured topic, recent; its SES bounces and complaints."""
    message = _json(request.body)
    if not isinstance(message, dict):
        raise Refused(400, "the body is not an SNS message")
    try:
        sns.signing_string(message)  # the shape first: no network work for a malformed body
    except sns.SnsError as e:
        raise Refused(e.status, e.reason) from e
    if not message.get("Signature"):
        raise Refused(401, "the SNS message is not signed")
    # A foreign topic's message is refused before its certificate is fetched.
    topic = message.get("TopicArn")
    if topic not in settings.topic_arns:
        named = repr(_text(topic, 160)) if isinstance(topic, str) else "no topic"
        raise Refused(403, f"the SNS topic ({named}) is not in bounces.webhooks.ses.topic_arns")
    try:
        sent = datetime.fromisoformat(str(message["Timestamp"]).replace("Z", "+00:00"))
    except ValueError as e:
        raise Refused(400, "the SNS Timestamp is not a date") from e
    if sent.tzinfo is None or not _fresh(sent, now, settings.max_age):
        raise Refused(403, "the SNS message is too old (replayed?)")
    try:
        sns.verify(message, certificates.key_for(message.get("SigningCertURL")))
    except sns.SnsError as e:
        raise Refused(e.status, e.reason) from e
    kind = message["Type"]
    if kind == "SubscriptionConfirmation":
        return Accepted(confirm_url=str(message["SubscribeURL"]), note="subscription confirmed")
    if kind == "UnsubscribeConfirmation":
        return Accepted(note="the SNS subscription was removed")
    try:
        notification = json.loads(str(message["Message"]))
    except (ValueError, RecursionError):
        # e.g. "Successfully validated SNS topic for Amazon SES event publishing."
        return Accepted(ignored=1, note="an SNS notification that is not SES JSON")
    if not isinstance(notification, dict):
        return Accepted(ignored=1, note="an SNS notification that is not SES JSON")
    events = tuple(ses_events(notification, now, str(message["MessageId"])))
    return Accepted(events=events, ignored=0 if events else 1)


def ses_events(
    notification: Mapping[str, Any], now: datetime, fallback_id: str
) -> Iterator[BounceEvent]:
    """The events of an SES notification (``notificationType``) or event (``eventType``)."""
    kind = notification.get("notificationType") or notification.get("eventType")
    mail = _dict(notification.get("mail"))
    common = _dict(mail.get("commonHeaders"))
    message_id = _message_id(common.get("messageId"))
    if kind == "Bounce" and isinstance(notification.get("bounce"), dict):
        bounce = notification["bounce"]
        hard = bounce.get("bounceType") == "Permanent"
        feedback = _text(bounce.get("feedbackId"), 200) or fallback_id
        detail = _text(f"{bounce.get('bounceType', '')}/{bounce.get('bounceSubType', '')}", 80)
        for recipient in bounce.get("bouncedRecipients") or ():
            if not isinstance(recipient, dict):
                continue
            address = _address(recipient.get("emailAddress"))
            if address is None:
                continue
            diagnostic = _text(recipient.get("diagnosticCode")) or detail
            yield BounceEvent(
                kind=EventKind.HARD if hard else EventKind.SOFT,
                address=address,
                source=EventSource.SES,
                received_at=now,
                status=_status(recipient.get("status"), diagnostic),
                diagnostic=diagnostic,
                message_id=message_id,
                verified=True,
                provider_id=f"{feedback}:{address.lower()}",
            )
    elif kind == "Complaint" and isinstance(notification.get("complaint"), dict):
        complaint = notification["complaint"]
        feedback_type = _text(complaint.get("complaintFeedbackType"), 40)
        if feedback_type == "not-spam":  # the reader said the opposite
            return
        feedback = _text(complaint.get("feedbackId"), 200) or fallback_id
        for recipient in complaint.get("complainedRecipients") or ():
            if not isinstance(recipient, dict):
                continue
            address = _address(recipient.get("emailAddress"))
            if address is None:
                continue
            yield BounceEvent(
                kind=EventKind.COMPLAINT,
                address=address,
                source=EventSource.SES,
                received_at=now,
                diagnostic=f"complaint ({feedback_type or 'no feedback type'})",
                message_id=message_id,
                verified=True,
                provider_id=f"{feedback}:{address.lower()}",
            )


# --- Mailgun ------------------------------------------------------------------------------------


def mailgun(
    request: WebhookRequest, settings: MailgunWebhook, now: datetime, nonces: Nonces
) -> Accepted:
    """A Mailgun webhook: signature, fresh timestamp, unused token; then its one event."""
    key = settings.key()
    if key is None:
        raise Refused(503, f"no Mailgun signing key: set ${settings.signing_key_env}")
    payload = _json(request.body)
    if not isinstance(payload, dict):
        raise Refused(400, "the body is not a Mailgun webhook")
    signature = payload.get("signature")
    if not isinstance(signature, dict) or not signature.get("signature"):
        raise Refused(401, "the request carries no Mailgun signature")
    timestamp, token, given = (signature.get(k) for k in ("timestamp", "token", "signature"))
    if not isinstance(token, str) or not isinstance(given, str) or not token or len(token) > 200:
        raise Refused(400, "the Mailgun signature is incomplete")
    moment = _unix(timestamp)
    if moment is None:
        raise Refused(400, "the Mailgun timestamp is not a number")
    expected = hmac.new(key.encode(), f"{timestamp}{token}".encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, given.strip().lower()):
        raise Refused(403, "bad Mailgun signature")
    if not _fresh(moment, now, settings.max_age):
        raise Refused(403, "the Mailgun timestamp is too old (replayed?)")
    data = payload.get("event-data")
    if not isinstance(data, dict):
        raise Refused(400, "the Mailgun webhook has no event-data")
    event = mailgun_event(data, now)
    # The signature does not cover the body: the token is reserved for this body before any of
    # it is applied, so of concurrent requests with one captured signature one body gets in.
    # The same body again is the provider's retry (its event is stored once anyway).
    digest = hashlib.sha256(request.body).hexdigest()
    keep = timedelta(seconds=2 * settings.max_age)  # past that its timestamp is stale
    try:
        fresh = nonces.reserve_webhook_token(token, digest, now, keep=keep)
    except NewsletterError as e:  # the database: the provider delivers it again later
        raise Refused(503, f"could not reserve the Mailgun token: {e}") from e
    if not fresh:
        raise Refused(403, "signing token reused with another body")
    return Accepted(events=(event,) if event else (), ignored=0 if event else 1)


_MAILGUN_SUPPRESSED = {
    "suppress-bounce": EventKind.HARD,
    "suppress-complaint": EventKind.COMPLAINT,
    "suppress-unsubscribe": EventKind.UNSUBSCRIBE,
    "old": EventKind.SOFT,  # retried until it expired: a soft bounce given up on
}


def mailgun_event(data: Mapping[str, Any], now: datetime) -> BounceEvent | None:
    """The event of a Mailgun ``event-data``, or ``None`` for one that is not ours to act on.

    ``failed`` with severity ``temporary`` is not final (Mailgun retries) and is ignored.
    """
    name = data.get("event")
    address = _address(data.get("recipient"))
    if address is None:
        return None
    status_info = _dict(data.get("delivery-status"))
    diagnostic = _text(
        status_info.get("description") or status_info.get("message") or data.get("reason")
    )
    if name == "failed":
        if data.get("severity") != "permanent":
            return None
        kind = _MAILGUN_SUPPRESSED.get(str(data.get("reason")), EventKind.HARD)
    elif name == "complained":
        kind, diagnostic = EventKind.COMPLAINT, "complaint"
    elif name == "unsubscribed":
        kind, diagnostic = EventKind.UNSUBSCRIBE, "unsubscribed through Mailgun"
    else:
        return None
    event_id = data.get("id")
    if not isinstance(event_id, str) or not event_id:
        raise Refused(400, "the Mailgun event has no id")
    message = _dict(data.get("message"))
    headers = _dict(message.get("headers"))
    code = status_info.get("code")
    return BounceEvent(
        kind=kind,
        address=address,
        source=EventSource.MAILGUN,
        received_at=now,
        status=_status(status_info.get("enhanced-code"), diagnostic, status_info.get("message"))
        or (f"{str(code)[0]}.0.0" if str(code)[:1] in ("4", "5") and str(code).isdigit() else None),
        diagnostic=diagnostic,
        message_id=_message_id(headers.get("message-id")),
        verified=True,
        provider_id=_text(event_id, 200),
    )


# --- Postmark -----------------------------------------------------------------------------------


def postmark(request: WebhookRequest, settings: PostmarkWebhook, now: datetime) -> Accepted:
    """A Postmark webhook: the configured Basic credentials (and client IP); then its record."""
    password = settings.secret()
    if password is None:
        raise Refused(503, f"no Postmark webhook password: set ${settings.password_env}")
    if not settings.allows(request.client):
        raise Refused(403, "the client is not in bounces.webhooks.postmark.allowed_ips")
    header = _header(request, "authorization")
    if not header or not header.lower().startswith("basic "):
        raise Refused(401, "the request carries no Basic credentials")
    try:
        user, _, given = base64.b64decode(header[6:].strip(), validate=True).decode().partition(":")
    except (binascii.Error, ValueError) as e:
        raise Refused(401, "the Basic credentials are not base64") from e
    ok_user = hmac.compare_digest(user.encode(), settings.username.encode())
    ok_password = hmac.compare_digest(given.encode(), password.encode())
    if not (ok_user and ok_password):
        raise Refused(403, "wrong Postmark webhook credentials")
    record = _json(request.body)
    if not isinstance(record, dict) or not isinstance(record.get("RecordType"), str):
        raise Refused(400, "the body is not a Postmark webhook record")
    event = postmark_event(record, now)
    return Accepted(events=(event,) if event else (), ignored=0 if event else 1)


_POSTMARK_BOUNCES = {
    "HardBounce": EventKind.HARD,
    "BadEmailAddress": EventKind.HARD,
    "SoftBounce": EventKind.SOFT,
    "DnsError": EventKind.SOFT,
    "Blocked": EventKind.SOFT,
    "SpamComplaint": EventKind.COMPLAINT,
    "Unsubscribe": EventKind.UNSUBSCRIBE,
}
"""Postmark bounce ``Type``s we act on; the rest (auto-replies, delays, challenges...) are not
bounces of the address."""

_POSTMARK_SUPPRESSIONS = {
    "HardBounce": EventKind.HARD,
    "SpamComplaint": EventKind.COMPLAINT,
    "ManualSuppression": EventKind.UNSUBSCRIBE,
}


def postmark_event(record: Mapping[str, Any], now: datetime) -> BounceEvent | None:
    """The event of a Postmark record (``Bounce``, ``SpamComplaint``, ``SubscriptionChange``).

    A subscription change that *lifts* a suppression is ignored: only a fresh confirmation from
    the reader makes an address active again.
    """
    record_type = record["RecordType"]
    if record_type in ("Bounce", "SpamComplaint"):
        kind = _POSTMARK_BOUNCES.get(str(record.get("Type")))
        address = _address(record.get("Email"))
        if kind is None or address is None:
            return None
        if record.get("ID") is None:
            raise Refused(400, "the Postmark record has no ID")
        diagnostic = _text(record.get("Details")) or _text(record.get("Description"))
        return BounceEvent(
            kind=kind,
            address=address,
            source=EventSource.POSTMARK,
            received_at=now,
            status=_status(record.get("Details"), record.get("Content")),
            diagnostic=diagnostic or _text(record.get("Name")),
            verified=True,
            provider_id=f"bounce:{_text(record.get('ID'), 40)}",
        )
    if record_type == "SubscriptionChange":
        address = _address(record.get("Recipient"))
        kind = _POSTMARK_SUPPRESSIONS.get(str(record.get("SuppressionReason")))
        if record.get("SuppressSending") is not True or kind is None or address is None:
            return None
        changed = _text(record.get("ChangedAt"), 40)
        return BounceEvent(
            kind=kind,
            address=address,
            source=EventSource.POSTMARK,
            received_at=now,
            diagnostic=_text(
                f"Postmark suppression: {record.get('SuppressionReason')} "
                f"(by {record.get('Origin', 'unknown')})"
            ),
            verified=True,
            provider_id=f"change:{_text(record.get('MessageID'), 80)}:{address.lower()}:{changed}",
        )
    return None


# --- SendGrid -----------------------------------------------------------------------------------

SENDGRID_SIGNATURE = "X-Twilio-Email-Event-Webhook-Signature"
SENDGRID_TIMESTAMP = "X-Twilio-Email-Event-Webhook-Timestamp"


def sendgrid(request: WebhookRequest, settings: SendgridWebhook, now: datetime) -> Accepted:
    """A SendGrid event batch: ECDSA signature over timestamp + body, fresh; then its events."""
    signature = _header(request, SENDGRID_SIGNATURE)
    timestamp = _header(request, SENDGRID_TIMESTAMP)
    if not signature or not timestamp:
        raise Refused(401, "the request carries no SendGrid signature")
    moment = _unix(timestamp)
    if moment is None:
        raise Refused(400, "the SendGrid timestamp is not a number")
    try:
        raw = base64.b64decode(signature, validate=True)
        sendgrid_key(settings.public_key).verify(
            raw, timestamp.encode() + request.body, ec.ECDSA(hashes.SHA256())
        )
    except (binascii.Error, ValueError, InvalidSignature) as e:
        raise Refused(403, "bad SendGrid signature") from e
    if not _fresh(moment, now, settings.max_age):
        raise Refused(403, "the SendGrid timestamp is too old (replayed?)")
    batch = _json(request.body)
    if not isinstance(batch, list):
        raise Refused(400, "the body is not a SendGrid event batch")
    events: list[BounceEvent] = []
    for item in batch:
        event = sendgrid_event(item, now) if isinstance(item, dict) else None
        if event is not None:
            events.append(event)
    return Accepted(events=tuple(events), ignored=len(batch) - len(events))


_SENDGRID_DROPPED = {
    "Bounced Address": EventKind.HARD,
    "Invalid": EventKind.HARD,
    "Spam Reporting Address": EventKind.COMPLAINT,
    "Unsubscribed Address": EventKind.UNSUBSCRIBE,
}
"""``dropped`` reasons that say something about the address (others: message size, content)."""


def sendgrid_event(item: Mapping[str, Any], now: datetime) -> BounceEvent | None:
    """The event of one SendGrid record, or ``None`` for one that is not ours to act on."""
    name = item.get("event")
    reason = _text(item.get("reason"))
    if name == "bounce":
        kind = EventKind.SOFT if item.get("type") == "blocked" else EventKind.HARD
    elif name == "dropped":
        found = _SENDGRID_DROPPED.get(reason)
        if found is None:
            return None
        kind = found
    elif name == "spamreport":
        kind, reason = EventKind.COMPLAINT, "complaint"
    elif name in ("unsubscribe", "group_unsubscribe"):
        kind, reason = EventKind.UNSUBSCRIBE, f"{name} through SendGrid"
    else:
        return None
    address = _address(item.get("email"))
    if address is None:
        return None
    event_id = item.get("sg_event_id")
    if not isinstance(event_id, str) or not event_id:
        raise Refused(400, "a SendGrid event has no sg_event_id")
    return BounceEvent(
        kind=kind,
        address=address,
        source=EventSource.SENDGRID,
        received_at=now,
        status=_status(item.get("status"), reason),
        diagnostic=reason,
        message_id=_message_id(item.get("smtp-id")),
        verified=True,
        provider_id=_text(event_id, 200),
    )


@dataclass
class RecentEvents:
    """Provider event ids already applied in this process (at most ``capacity``), for when the
    store cannot tell a replayed event from a new one."""

    capacity: int = 100_000
    _ids: OrderedDict[tuple[str, str], None] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def new(self, events: tuple[BounceEvent, ...]) -> tuple[BounceEvent, ...]:
        """The events not applied before (events without an id always count as new)."""
        with self._lock:
            return tuple(
                e
                for e in events
                if e.provider_id is None or (e.source, e.provider_id) not in self._ids
            )

    def applied(self, events: tuple[BounceEvent, ...]) -> None:
        """Remember ``events`` as applied."""
        with self._lock:
            for e in events:
                if e.provider_id is not None:
                    self._ids[(e.source, e.provider_id)] = None
                    self._ids.move_to_end((e.source, e.provider_id))
            while len(self._ids) > self.capacity:
                self._ids.popitem(last=False)
