"""Received mail → :class:`BounceEvent` values: delivery status notifications and ARF reports.

Three formats come back to a bounce address:

* RFC 3464 delivery status notifications (Postfix, Exim with DSNs on, Exchange, Gmail, Amazon
  SES): a ``multipart/report; report-type=delivery-status`` whose ``message/delivery-status``
  part has one block per recipient (``Final-Recipient``, ``Action``, ``Status``,
  ``Diagnostic-Code``). Those blocks are read here, since the status code tells a hard bounce
  (``5.1.1`` no such user) from a soft one (``4.x.x`` given up on, ``5.2.2`` mailbox full).
* Everything else a mail server writes when delivery failed: Exim's and qmail's plain-text
  bounces, old Exchange and Lotus formats... ``flufl.bounce`` (Mailman's detectors) finds the
  failed addresses in those; the status code, when the text has one, is taken from the body.
* RFC 5965 abuse reports (``multipart/report; report-type=feedback-report``) from mailbox
  providers' feedback loops: a complaint about the original message, whose recipient is in
  ``Original-Rcpt-To`` or the original's ``To``.

A signed VERP token in the address the report was sent to (or, for a complaint, in the original
message's ``Return-Path``) names the subscriber and edition and makes the event *verified*.
Nothing here raises on bad input: a message that cannot be read is a :class:`Parsed` with a
one-line ``refusal`` and no events.
"""

from __future__ import annotations

import email
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from email.header import Header, decode_header
from email.message import Message
from email.parser import HeaderParser
from email.utils import getaddresses, parseaddr

from flufl.bounce import all_failures

from newsletter.addresses import address_key
from newsletter.bounces.events import BounceEvent, EventKind, EventSource
from newsletter.bounces.verp import Verp, VerpToken

log = logging.getLogger(__name__)

_STATUS = re.compile(r"\b([245])\.(\d{1,3})\.(\d{1,3})\b")
_REPLY = re.compile(r"\b([45])\d\d\b")
_QUOTED_ID = re.compile(r"^Message-ID:[ \t]*(<[^<>\s]{1,250}>)", re.IGNORECASE | re.MULTILINE)
_MAX_DIAGNOSTIC = 300
#: Permanent (5.x.x) codes that say nothing bad about the address itself: the mailbox is full,
#: the message too big, the receiving system is out of order. They count as soft bounces.
SOFT_PERMANENT = frozenset({"5.2.2", "5.2.3", "5.3.1", "5.3.4", "5.4.5"})
MAX_RECIPIENTS = 10
"""Recipients read from one report; the rest are dropped (and counted in ``Parsed.dropped``).
Each digest has one recipient, so a real report names one (a relay's digest of several
bounces a handful); a report naming a thousand would be a thousand subscriber look-ups."""


@dataclass(frozen=True, slots=True)
class Parsed:
    """What one received message says: its events, or why none was taken from it."""

    events: tuple[BounceEvent, ...]
    refusal: str | None = None
    """One line: why the message gave no event (malformed, not a bounce, an auto-reply...)."""
    token: VerpToken | None = None
    """The verified VERP token the message was addressed to, if any."""
    forged: bool = False
    """The message was addressed to a VERP form of the bounce address whose token is invalid."""
    dropped: int = 0
    """Recipients past :data:`MAX_RECIPIENTS` that were not read."""


def clean(text: str, limit: int = _MAX_DIAGNOSTIC) -> str:
    """``text`` on one line, without control characters, at most ``limit`` characters."""
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())[:limit]


def classify(action: str, status: str | None, diagnostic: str) -> EventKind | None:
    """Hard or soft bounce for one failed recipient; ``None`` when delivery did not fail
    (``delayed`` is a warning: the relay is still trying)."""
    action = action.strip().lower()
    if action and not action.startswith(("fail", "error")):
        return None
    if status is None:
        m = _STATUS.search(diagnostic)
        status = m.group(0) if m else None
    if status is not None:
        if status.startswith("4."):
            return EventKind.SOFT
        if status.startswith("5.") and (status in SOFT_PERMANENT or status.startswith("5.7.")):
            return EventKind.SOFT  # full, too big, or a policy/reputation block: not the address
        if status.startswith("5."):
            return EventKind.HARD
    m = _REPLY.search(diagnostic)
    if m is not None and m.group(1) == "4":
        return EventKind.SOFT
    return EventKind.HARD


def _status_of(value: str) -> str | None:
    m = _STATUS.search(value)
    return m.group(0) if m else None


def _text(value: object) -> str:
    """A header's text. Raw UTF-8 in a header (an SMTPUTF8 bounce, RFC 6533) is read as UTF-8:
    the parser would make each of its bytes a U+FFFD, so ``émile@…`` became ``��mile@…``, an
    address nobody has."""
    if isinstance(value, Header):
        return "".join(
            part.decode("utf-8", "replace") if isinstance(part, bytes) else part
            for part, _charset in decode_header(value)
        )
    return str(value or "")


def _address_field(value: str) -> str:
    """The address in a ``Final-Recipient: rfc822; a@b`` field (or a bare address)."""
    _, _, rest = value.partition(";") if ";" in value else ("", "", value)
    return parseaddr(rest.strip())[1] or rest.strip().strip("<>")


def _blocks(part: Message) -> list[Message]:
    payload = part.get_payload()
    if isinstance(payload, list):
        return [b for b in payload if isinstance(b, Message)]
    if isinstance(payload, str):  # a part the parser left as text: blocks split by blank lines
        parser = HeaderParser()
        return [parser.parsestr(b.strip() + "\n") for b in re.split(r"\r?\n\r?\n", payload)]
    return []


def _original_headers(msg: Message) -> Message | None:
    """The header block of the returned original (``message/rfc822`` or ``text/rfc822-headers``)."""
    for part in msg.walk():
        ctype = part.get_content_type()
        if ctype == "message/rfc822":
            payload = part.get_payload()
            if isinstance(payload, list) and payload and isinstance(payload[0], Message):
                return payload[0]
        if ctype == "text/rfc822-headers":
            raw = part.get_payload(decode=True)
            text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
            return HeaderParser().parsestr(text)
    return None


def _message_id(original: Message | None) -> str | None:
    if original is None:
        return None
    value = clean(str(original.get("Message-ID", "")), 255)
    return value or None


def _report_type(msg: Message) -> str:
    if msg.get_content_type() != "multipart/report":
        return ""
    return str(msg.get_param("report-type", "") or "").lower()


def _verp(recipients: Iterable[str], verp: Verp | None) -> tuple[VerpToken | None, bool]:
    forged = False
    if verp is None:
        return None, False
    for r in recipients:
        if verp.token_of(r) is None:
            continue
        token = verp.verify(r)
        if token is not None:
            return token, False
        forged = True
    return None, forged


def parse_report(
    data: bytes,
    *,
    recipients: Sequence[str],
    verp: Verp | None,
    now: datetime,
) -> Parsed:
    """The events in one message received at the bounce address. ``recipients``: the envelope
    recipients it was delivered to (or, from a mailbox, its ``Delivered-To``/``To``)."""
    try:
        msg = email.message_from_bytes(data)
    except Exception as e:
        return Parsed((), refusal=f"not a readable message ({type(e).__name__}: {clean(str(e))})")
    token, forged = _verp(recipients, verp)
    try:
        if _report_type(msg) == "feedback-report":
            parsed = _arf(msg, verp, now)
        else:
            parsed = _bounce(msg, token, now)
    except Exception as e:
        log.debug("bounce parse failed", exc_info=True)
        parsed = Parsed((), refusal=f"unreadable report ({type(e).__name__}: {clean(str(e))})")
    if parsed.token is None and token is not None:
        parsed = replace(parsed, token=token, forged=forged)
    elif forged:
        parsed = replace(parsed, forged=True)
    return parsed


def _event(
    kind: EventKind,
    address: str,
    source: EventSource,
    now: datetime,
    token: VerpToken | None,
    *,
    status: str | None = None,
    diagnostic: str = "",
    message_id: str | None = None,
) -> BounceEvent:
    return BounceEvent(
        kind=kind,
        address=address,
        source=source,
        received_at=now,
        status=status,
        diagnostic=diagnostic,
        message_id=message_id,
        edition=None if token is None else token.edition.isoformat(),
        verified=token is not None,
        subscriber_id=None if token is None else token.subscriber_id,
    )


def _bounce(msg: Message, token: VerpToken | None, now: datetime) -> Parsed:
    original = _original_headers(msg)
    message_id = _message_id(original)
    events: dict[str, BounceEvent] = {}
    dropped: set[str] = set()
    saw_status_part = False
    malformed: list[str] = []
    for part in msg.walk():
        if part.get_content_type() != "message/delivery-status":
            continue
        saw_status_part = True
        for block in _blocks(part):
            final = _text(block.get("Final-Recipient", "") or block.get("Original-Recipient", ""))
            action = str(block.get("Action", ""))
            if not final:
                continue  # the per-message block (Reporting-MTA, Arrival-Date...)
            address = _address_field(final)
            if "@" not in address or not action:
                malformed.append(clean(final or "(no Final-Recipient)", 80))
                continue
            diagnostic = clean(str(block.get("Diagnostic-Code", "")))
            status = _status_of(str(block.get("Status", ""))) or _status_of(diagnostic)
            kind = classify(action, status, diagnostic)
            if kind is None:
                continue
            key = address_key(address)
            if len(events) >= MAX_RECIPIENTS and key not in events:
                dropped.add(key)
                continue
            events[key] = _event(
                kind,
                address,
                EventSource.DSN,
                now,
                token,
                status=status,
                diagnostic=diagnostic or clean(action),
                message_id=message_id,
            )
    body = _body_text(msg)
    if message_id is None:  # a plain-text bounce quoting the original (Exim, qmail)
        m = _QUOTED_ID.search(body)
        message_id = clean(m.group(1), 255) if m else None
    try:
        _temporary, permanent = all_failures(msg)
    except Exception:
        log.debug("flufl.bounce failed on a message", exc_info=True)
        permanent = frozenset()
    for raw in permanent:
        address = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        key = address_key(address)
        if "@" not in address or key in events:
            continue
        if len(events) >= MAX_RECIPIENTS:
            dropped.add(key)
            continue
        status = _status_near(body, address)
        events[key] = _event(
            classify("failed", status, "") or EventKind.HARD,
            address,
            EventSource.DSN,
            now,
            token,
            status=status,
            diagnostic=_diagnostic_near(body, address),
            message_id=message_id,
        )
    if events:
        return Parsed(tuple(events.values()), token=token, dropped=len(dropped))
    if saw_status_part or _report_type(msg) == "delivery-status":
        if malformed:
            why = f"blocks without a usable Final-Recipient/Action: {', '.join(malformed[:3])}"
        elif saw_status_part:
            why = "no failed recipient in it (a delay warning or a success notice)"
            return Parsed((), refusal=f"DSN ignored: {why}", token=token)
        else:
            why = "no message/delivery-status part"
        return Parsed((), refusal=f"malformed DSN: {why}", token=token)
    return Parsed(
        (), refusal="no failed recipient found (not a bounce: an auto-reply?)", token=token
    )


def _body_text(msg: Message) -> str:
    chunks: list[str] = []
    for part in msg.walk():
        if (
            part.get_content_maintype() != "text"
            or part.get_content_type() == "text/rfc822-headers"
        ):
            continue
        raw = part.get_payload(decode=True)
        if isinstance(raw, bytes):
            chunks.append(raw.decode(part.get_content_charset() or "utf-8", "replace"))
        if sum(len(c) for c in chunks) > 64_000:
            break
    return "\n".join(chunks)


def _near(body: str, address: str) -> str:
    i = body.lower().find(address.lower())
    return body[i : i + 600] if i >= 0 else body[:600]


def _status_near(body: str, address: str) -> str | None:
    window = _near(body, address)
    return _status_of(window)


def _diagnostic_near(body: str, address: str) -> str:
    window = _near(body, address)
    for line in window.splitlines()[1:6]:
        if _STATUS.search(line) or _REPLY.search(line):
            return clean(line)
    return clean(window.splitlines()[0] if window else "")


_COMPLAINTS = frozenset({"abuse", "fraud", "virus", "other", "auth-failure"})


def _feedback_fields(msg: Message) -> Message | None:
    for part in msg.walk():
        if part.get_content_type() != "message/feedback-report":
            continue
        blocks = _blocks(part)
        return blocks[0] if blocks else None
    return None


def _arf(msg: Message, verp: Verp | None, now: datetime) -> Parsed:
    fields = _feedback_fields(msg)
    if fields is None or not fields.get("Feedback-Type"):
        return Parsed(
            (), refusal="malformed ARF report: no message/feedback-report with Feedback-Type"
        )
    kind = clean(str(fields.get("Feedback-Type", "")), 40).lower()
    if kind not in _COMPLAINTS:
        return Parsed((), refusal=f"ARF report of type {kind!r} ignored (not a complaint)")
    original = _original_headers(msg)
    message_id = _message_id(original)
    token = None
    if verp is not None:
        for value in (
            str(original.get("Return-Path", "")) if original is not None else "",
            str(fields.get("Original-Mail-From", "")),
        ):
            address = parseaddr(value)[1]
            token = verp.verify(address) if address else None
            if token is not None:
                break
    addresses = [
        _address_field(_text(v)) for v in fields.get_all("Original-Rcpt-To", []) if _text(v).strip()
    ]
    if not addresses and original is not None:
        addresses = [a for _, a in getaddresses([_text(v) for v in original.get_all("To", [])])]
    unique: dict[str, str] = {}  # one complaint per address, however often and spelled
    for address in addresses:
        if "@" in address:
            unique.setdefault(address_key(address), address)
    addresses = list(unique.values())
    dropped = max(0, len(addresses) - MAX_RECIPIENTS)
    addresses = addresses[:MAX_RECIPIENTS]
    if not addresses and token is None:
        return Parsed((), refusal="ARF report names no recipient (no Original-Rcpt-To, no To)")
    agent = clean(str(fields.get("User-Agent", "")), 80)
    diagnostic = clean(f"feedback-type {kind}" + (f" from {agent}" if agent else ""))
    events = tuple(
        _event(
            EventKind.COMPLAINT,
            address,
            EventSource.ARF,
            now,
            token,
            diagnostic=diagnostic,
            message_id=message_id,
        )
        for address in (addresses or [""])
    )
    return Parsed(events, token=token, dropped=dropped)
