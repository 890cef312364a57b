"""A digest as a message: RFC 5322 bytes with the list headers mail providers expect.

:func:`build_message` turns a rendered digest into an :class:`Envelope` (RFC 2369 / RFC 8058
one-click unsubscribe, Message-ID, the sender fields); :func:`wire_data` gives the bytes as
they go over SMTP (dot-stuffed). The MIME itself is written by :mod:`.mime`, signed by
:mod:`.dkim`, and handed to the relay by :mod:`.smtp`.
"""

from __future__ import annotations

import functools
import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from email import policy
from email.utils import format_datetime, parseaddr

from newsletter.config import SenderSettings, Settings
from newsletter.deliver.mime import DigestMessage, MimeWriter, assemble, header_address
from newsletter.digest.render import DigestLinks, RenderedDigest

WIRE_POLICY = policy.SMTP.clone(max_line_length=998)

MIME_WRITER = MimeWriter()
"""Shared by every message of the process: its quoted-printable line cache is bounded."""


def make_message_id(domain: str) -> str:
    """A new unique ``Message-ID`` (angle brackets included) in ``domain``."""
    return f"<{uuid.uuid4().hex}@{domain}>"


def header_safe(text: str) -> str:
    """No CR, LF or other control characters may reach a header."""
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())


@dataclass(frozen=True, slots=True)
class Envelope:
    sender: str
    recipient: str
    data: bytes
    message_id: str
    crlf: bool = False
    """``data`` is known to end its lines with CRLF only (no bare CR or LF to fix)."""
    dot_lines: bool = True
    """A line of ``data`` may begin with ``.`` (to be doubled on the wire). False only when the
    writer knows none does."""


_EOLS = re.compile(rb"\r\n|\n|\r(?!\n)")


def wire_data(envelope: Envelope) -> bytes:
    """``envelope.data`` as the DATA command carries it (RFC 5321 4.5.2), final dot excluded.

    Bare CR and LF become CRLF (RFC 5321 2.3.8 allows no other line ending; ``smtplib`` passes
    bytes through as they are) and a dot that begins a line is doubled, but only when the
    envelope does not vouch for its bytes: a digest from :mod:`newsletter.deliver.mime` is CRLF
    throughout and knows whether it has a dotted line, so its 60 KB are not scanned per message.
    """
    data = envelope.data
    if not envelope.crlf:
        data = _EOLS.sub(b"\r\n", data)
    if envelope.dot_lines:
        if data.startswith(b"."):
            data = b"." + data
        data = data.replace(b"\n.", b"\n..")
    if not data.endswith(b"\r\n"):
        data += b"\r\n"
    return data


def build_message(
    rendered: RenderedDigest,
    *,
    settings: Settings,
    to_address: str,
    to_name: str,
    message_id: str,
    links: DigestLinks,
    now: datetime,
) -> Envelope:
    """The digest as RFC 5322 bytes, assembled by :mod:`newsletter.deliver.mime` (not ``email.message``).

    Headers: Subject, From, To, Reply-To (when set), Date, Message-ID, List-Id, List-Unsubscribe
    (HTTPS, and a ``mailto:`` to ``inbound.address`` when one is set: the address whose
    ``unsubscribe`` command ``newsletter inbound`` answers) with ``List-Unsubscribe-Post: List-Unsubscribe=One-Click`` (RFC 8058),
    Auto-Submitted, Precedence: bulk, X-Auto-Response-Suppress. Body: multipart/alternative,
    text then HTML, quoted-printable, CRLF. An IDN domain is written in its IDNA form; a
    non-ASCII local part is written as UTF-8 (RFC 6532) and the mailer sends it with SMTPUTF8.
    """
    m = _message(rendered.subject, rendered.text, rendered.html, settings, to_address, to_name)
    data, dot_lines = MIME_WRITER.compose(m.fill(message_id, links, now))
    # The recipient as stored: the mailer turns it into its envelope form (IDNA, SMTPUTF8).
    return Envelope(m.from_address, to_address, data, message_id, crlf=True, dot_lines=dot_lines)


def build_encoded_message(
    subject: str,
    text: bytes,
    html: bytes,
    dot_lines: bool,
    *,
    settings: Settings,
    to_address: str,
    to_name: str,
    message_id: str,
    links: DigestLinks,
    now: datetime,
) -> Envelope:
    """:func:`build_message` for parts already encoded (the text part quoted-printable, the HTML
    part 7bit: :mod:`newsletter.deliver.wire`): the same headers and bytes."""
    m = _message(subject, "", "", settings, to_address, to_name)
    data = assemble(m.fill(message_id, links, now), text, html, html_7bit=True)
    return Envelope(m.from_address, to_address, data, message_id, crlf=True, dot_lines=dot_lines)


@dataclass(frozen=True, slots=True)
class _Message:
    subject: str
    text: str
    html: str
    fields: _SenderFields
    to_address: str
    to_name: str

    @property
    def from_address(self) -> str:
        return self.fields.from_address

    def fill(self, message_id: str, links: DigestLinks, now: datetime) -> DigestMessage:
        s = self.fields
        return DigestMessage(
            subject=self.subject,
            from_name=s.from_name,
            from_address=s.from_address,
            to_name=self.to_name,
            to_address=self.to_address,
            reply_to_name=s.reply_to_name,
            reply_to_address=s.reply_to_address,
            date=_date(now),
            message_id=message_id,
            list_id_name=s.list_id_name,
            list_id=s.list_id,
            unsubscribe_url=links.unsubscribe,
            unsubscribe_mailto=s.unsubscribe_mailto,
            text=self.text,
            html=self.html,
        )


def _message(
    subject: str, text: str, html: str, settings: Settings, to_address: str, to_name: str
) -> _Message:
    fields = _sender_fields(settings.sender, settings.inbound.address)
    return _Message(subject, text, html, fields, to_address, to_name)


@functools.lru_cache(maxsize=8)
def _date(now: datetime) -> str:
    """The Date header's value: a run dates every message with its start."""
    return format_datetime(now)


@dataclass(frozen=True, slots=True)
class _SenderFields:
    from_name: str
    from_address: str
    reply_to_name: str
    reply_to_address: str | None
    list_id_name: str
    list_id: str
    unsubscribe_mailto: str | None


@functools.lru_cache(maxsize=16)
def _sender_fields(sender: SenderSettings, request_address: str | None) -> _SenderFields:
    """The sender's header fields, parsed once per settings (parsing costs ~0.1 ms a message).

    The ``mailto:`` unsubscribe goes to the request address (``inbound.address``), the one
    address that answers an ``unsubscribe`` mail; without one there is no mailto (the From
    address takes no commands).
    """
    reply_name, reply_address = parseaddr(sender.reply_to) if sender.reply_to else ("", "")
    list_id = sender.list_id or f"Trending papers <digest.{sender.message_domain}>"
    m = re.match(r"^(.*?)<([^<>]*)>\s*$", list_id)
    from_address = header_address(sender.from_address)
    return _SenderFields(
        from_name=sender.from_name,
        from_address=from_address,
        reply_to_name=reply_name,
        reply_to_address=reply_address or None,
        list_id_name=m.group(1) if m else "",
        list_id=m.group(2) if m else list_id,
        unsubscribe_mailto=f"mailto:{header_address(request_address)}?subject=unsubscribe"
        if request_address
        else None,
    )
