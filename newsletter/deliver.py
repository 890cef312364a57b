"""Message building and the SMTP relay.

:func:`build_message` turns a rendered digest into RFC 5322 bytes with the list headers mail
providers expect (RFC 2369 / RFC 8058 one-click unsubscribe). :class:`SmtpMailer` hands
messages to any relay (plain, STARTTLS or implicit TLS; AUTH) over one reused connection and
turns every failure into a :class:`DeliveryError` (one message) or a :class:`RelayError`
(the relay itself is unusable: stop the run).
"""

from __future__ import annotations

import functools
import re
import smtplib
import ssl
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from email import policy
from email.utils import format_datetime, parseaddr
from types import TracebackType
from typing import Protocol

from newsletter.addresses import InvalidAddress, envelope_address
from newsletter.config import SenderSettings, Settings, SmtpSettings
from newsletter.errors import DeliveryError, RelayError
from newsletter.mime import DigestMessage, MimeWriter, header_address
from newsletter.render import DigestLinks, RenderedDigest

WIRE_POLICY = policy.SMTP.clone(max_line_length=998)

MIME_WRITER = MimeWriter()
"""Shared by every message of the process: its quoted-printable line cache is bounded."""


def make_message_id(domain: str) -> str:
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
    """The digest as RFC 5322 bytes, assembled by :mod:`newsletter.mime` (not ``email.message``).

    Headers: Subject, From, To, Reply-To (when set), Date, Message-ID, List-Id, List-Unsubscribe
    (HTTPS + mailto) with ``List-Unsubscribe-Post: List-Unsubscribe=One-Click`` (RFC 8058),
    Auto-Submitted, Precedence: bulk, X-Auto-Response-Suppress. Body: multipart/alternative,
    text then HTML, quoted-printable, CRLF. An IDN domain is written in its IDNA form; a
    non-ASCII local part is written as UTF-8 (RFC 6532) and the mailer sends it with SMTPUTF8.
    """
    s = _sender_fields(settings.sender)
    data = MIME_WRITER.write(
        DigestMessage(
            subject=rendered.subject,
            from_name=s.from_name,
            from_address=s.from_address,
            to_name=to_name,
            to_address=to_address,
            reply_to_name=s.reply_to_name,
            reply_to_address=s.reply_to_address,
            date=format_datetime(now),
            message_id=message_id,
            list_id_name=s.list_id_name,
            list_id=s.list_id,
            unsubscribe_url=links.unsubscribe,
            unsubscribe_mailto=s.unsubscribe_mailto,
            text=rendered.text,
            html=rendered.html,
        )
    )
    # The recipient as stored: the mailer turns it into its envelope form (IDNA, SMTPUTF8).
    return Envelope(s.from_address, to_address, data, message_id)


@dataclass(frozen=True, slots=True)
class _SenderFields:
    from_name: str
    from_address: str
    reply_to_name: str
    reply_to_address: str | None
    list_id_name: str
    list_id: str
    unsubscribe_mailto: str


@functools.lru_cache(maxsize=16)
def _sender_fields(sender: SenderSettings) -> _SenderFields:
    """The sender's header fields, parsed once per settings (parsing costs ~0.1 ms a message)."""
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
        unsubscribe_mailto=f"mailto:{from_address}?subject=unsubscribe",
    )


class Mailer(Protocol):
    def send(self, envelope: Envelope) -> None: ...

    def close(self) -> None: ...


MailerFactory = Callable[[], Mailer]


def _reply_text(resp: bytes | str) -> str:
    return (resp.decode("utf-8", "replace") if isinstance(resp, bytes) else resp).strip()


class SmtpMailer:
    """One reused connection to the relay; reconnects when the relay closed it."""

    def __init__(self, smtp: SmtpSettings) -> None:
        self.smtp = smtp
        self._conn: smtplib.SMTP | None = None

    def __enter__(self) -> SmtpMailer:
        return self

    def __exit__(self, *exc: object | TracebackType) -> None:
        self.close()

    def _where(self) -> str:
        return f"{self.smtp.host}:{self.smtp.port}"

    def connect(self) -> smtplib.SMTP:
        s = self.smtp
        try:
            conn: smtplib.SMTP
            if s.security == "tls":
                conn = smtplib.SMTP_SSL(
                    s.host, s.port, timeout=s.timeout, context=ssl.create_default_context()
                )
            else:
                conn = smtplib.SMTP(s.host, s.port, timeout=s.timeout)
                if s.security == "starttls":
                    conn.starttls(context=ssl.create_default_context())
            if s.username:
                conn.login(s.username, s.password() or "")
        except smtplib.SMTPAuthenticationError as e:
            raise RelayError(
                f"relay {self._where()} refused the login for {s.username!r}: "
                f"{e.smtp_code} {_reply_text(e.smtp_error)}; check smtp.username and ${s.password_env}"
            ) from e
        except ssl.SSLError as e:
            raise RelayError(
                f"TLS with relay {self._where()} failed: {e}; check smtp.security"
            ) from e
        except (OSError, smtplib.SMTPException) as e:
            raise RelayError(
                f"cannot reach the relay at {self._where()}: {e}; check smtp.host and smtp.port"
            ) from e
        return conn

    def send(self, envelope: Envelope) -> None:
        if self._conn is None:
            self._conn = self.connect()
        try:
            recipient, utf8 = envelope_address(envelope.recipient)
            refused = self._conn.sendmail(
                envelope.sender, [recipient], envelope.data, ["SMTPUTF8"] if utf8 else []
            )
        except smtplib.SMTPNotSupportedError as e:
            raise DeliveryError(
                envelope.recipient,
                "the relay does not support SMTPUTF8, needed for this address's non-ASCII "
                "local part",
                code=None,
                temporary=False,
            ) from e
        except InvalidAddress as e:
            raise DeliveryError(envelope.recipient, str(e), code=None, temporary=False) from e
        except smtplib.SMTPRecipientsRefused as e:
            code, resp = next(iter(e.recipients.values()))
            raise DeliveryError(
                envelope.recipient,
                f"{code} {_reply_text(resp)}",
                code=code,
                temporary=400 <= code < 500,
            ) from e
        except smtplib.SMTPResponseException as e:
            self._drop()
            raise DeliveryError(
                envelope.recipient,
                f"{e.smtp_code} {_reply_text(e.smtp_error)}",
                code=e.smtp_code,
                temporary=400 <= e.smtp_code < 500 or e.smtp_code == 552,
            ) from e
        except (TimeoutError, smtplib.SMTPServerDisconnected, ConnectionError, OSError) as e:
            self._drop()
            raise DeliveryError(
                envelope.recipient, f"connection lost: {e}", code=None, temporary=True
            ) from e
        if refused:  # pragma: no cover - single recipient: refusal raises above
            raise DeliveryError(envelope.recipient, str(refused), code=None, temporary=False)

    def _drop(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.quit()
            except (smtplib.SMTPException, OSError):
                pass
            finally:
                self._conn = None
