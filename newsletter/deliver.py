"""Message building and the SMTP relay.

:func:`build_message` turns a rendered digest into RFC 5322 bytes with the list headers mail
providers expect (RFC 2369 / RFC 8058 one-click unsubscribe). :class:`SmtpMailer` hands
messages to any relay (plain, STARTTLS or implicit TLS; AUTH) over one reused connection and
turns every failure into a :class:`DeliveryError` (one message) or a :class:`RelayError`
(the relay itself is unusable: stop the run).
"""

from __future__ import annotations

import smtplib
import ssl
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from email import policy
from email.message import EmailMessage
from email.utils import format_datetime
from types import TracebackType
from typing import Protocol

from newsletter.addresses import InvalidAddress, envelope_address, format_address
from newsletter.config import Settings, SmtpSettings
from newsletter.errors import DeliveryError, RelayError
from newsletter.render import DigestLinks, RenderedDigest

WIRE_POLICY = policy.SMTP.clone(max_line_length=998)


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
    sender = settings.sender
    msg = EmailMessage()
    msg["Subject"] = header_safe(rendered.subject)
    msg["From"] = format_address(sender.from_name, sender.from_address)
    msg["To"] = format_address(to_name, to_address)
    if sender.reply_to:
        msg["Reply-To"] = sender.reply_to
    msg["Date"] = format_datetime(now)
    msg["Message-ID"] = message_id
    list_id = sender.list_id or f"Trending papers <digest.{sender.message_domain}>"
    msg["List-Id"] = header_safe(list_id)
    msg["List-Unsubscribe"] = (
        f"<{links.unsubscribe}>, <mailto:{sender.from_address}?subject=unsubscribe>"
    )
    msg["List-Unsubscribe-Post"] = "List-Unsubscribe=One-Click"
    msg["Auto-Submitted"] = "auto-generated"
    msg["Precedence"] = "bulk"
    msg["X-Auto-Response-Suppress"] = "OOF, AutoReply"
    msg.set_content(rendered.text, cte="quoted-printable")
    msg.add_alternative(rendered.html, subtype="html", cte="quoted-printable")
    # SMTP wants CRLF line endings; smtplib does not fix them for bytes. Lines may be up to 998
    # octets: at 78 the List-Unsubscribe URL (one long word) would be RFC 2047-encoded, and mail
    # clients would no longer find the one-click link in it.
    return Envelope(sender.from_address, to_address, msg.as_bytes(policy=WIRE_POLICY), message_id)


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
