"""``newsletter bounces poll``: read bounces from an IMAP mailbox (for relays that deliver them
to a mailbox rather than to ``newsletter inbound``).

Uses the standard library's :mod:`imaplib` over IMAPS (or STARTTLS; plain only when the
operator asks, for a server on loopback), verifying the server's certificate. Each new message
goes through the same parse-and-decide path as the inbound server; then it is flagged
``\\Seen`` and ``$NewsletterBounce`` (or moved to ``bounces.imap.processed_mailbox``), and
later polls search only unflagged messages. A message counted but not flagged (the
connection dropped in between) is counted once anyway: a replayed report changes nothing.
"""

from __future__ import annotations

import contextlib
import imaplib
import logging
import ssl
from dataclasses import dataclass, field
from email.parser import BytesHeaderParser
from email.utils import getaddresses
from pathlib import Path

from newsletter.bounces.receive import BounceReceiver
from newsletter.bounces.settings import ImapSettings
from newsletter.errors import NewsletterError
from newsletter.services import Services

log = logging.getLogger(__name__)

KEYWORD = "$NewsletterBounce"
"""The IMAP keyword a processed message gets."""
MAX_BYTES = 1024 * 1024
"""Only a message's first MiB is read: a report says what it has to say at the start."""


class MailboxError(NewsletterError):
    """The bounce mailbox cannot be read: unreachable, TLS, login, or no such mailbox."""


@dataclass
class PollReport:
    """What one poll found and did."""

    messages: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    refused: int = 0

    def count(self, outcome: str) -> None:
        """Count one decision's outcome."""
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1


def recipients_of(data: bytes) -> list[str]:
    """The addresses a stored message was delivered to, from the headers MTAs add on delivery
    (``Delivered-To``, ``X-Original-To``, ``Envelope-To``), then ``To``: a bounce is addressed to
    the envelope sender, so its VERP token is in one of them."""
    headers = BytesHeaderParser().parsebytes(data)
    found: list[str] = []
    for name in ("Delivered-To", "X-Original-To", "Envelope-To", "To"):
        values = [str(v) for v in headers.get_all(name, [])]
        found += [a for _, a in getaddresses(values) if "@" in a]
    return list(dict.fromkeys(found))


def _context(settings: ImapSettings, base_dir: Path) -> ssl.SSLContext:
    context = ssl.create_default_context()
    if settings.ca_file:
        context.load_verify_locations(cafile=str(base_dir / settings.ca_file))
    return context


def connect(settings: ImapSettings, base_dir: Path, timeout: float = 30.0) -> imaplib.IMAP4:
    """A logged-in connection with the mailbox selected; :class:`MailboxError` when not."""
    where = f"IMAP {settings.host}:{settings.port}"
    password = settings.password()
    if password is None:
        raise MailboxError(
            f"{where}: no password: set ${settings.password_env} (bounces.imap.password_env)"
        )
    try:
        conn: imaplib.IMAP4
        if settings.security == "tls":
            conn = imaplib.IMAP4_SSL(
                settings.host,
                settings.port,
                ssl_context=_context(settings, base_dir),
                timeout=timeout,
            )
        else:
            conn = imaplib.IMAP4(settings.host, settings.port, timeout=timeout)
            if settings.security == "starttls":
                conn.starttls(ssl_context=_context(settings, base_dir))
    except (OSError, imaplib.IMAP4.error) as e:
        raise MailboxError(f"{where}: cannot connect: {_why(e)}") from e
    try:
        conn.login(settings.username, password)
    except (OSError, imaplib.IMAP4.error) as e:
        _logout(conn)
        raise MailboxError(
            f"{where}: login as {settings.username} refused: {_why(e)}; check "
            f"bounces.imap.username and ${settings.password_env}"
        ) from e
    try:
        typ, data = conn.select(_quoted(settings.mailbox))
        if typ != "OK":
            raise MailboxError(
                f"{where}: no mailbox {settings.mailbox!r} ({_why(data)}); fix bounces.imap.mailbox"
            )
    except (OSError, imaplib.IMAP4.error) as e:
        _logout(conn)
        raise MailboxError(f"{where}: cannot open {settings.mailbox!r}: {_why(e)}") from e
    return conn


def _why(e: object) -> str:
    if isinstance(e, list):
        e = b" ".join(x for x in e if isinstance(x, bytes)).decode("utf-8", "replace")
    text = " ".join(str(e).split())
    return text[:200] or type(e).__name__


def _quoted(mailbox: str) -> str:
    return '"' + mailbox.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _logout(conn: imaplib.IMAP4) -> None:
    with contextlib.suppress(OSError, imaplib.IMAP4.error):
        conn.logout()


def _keywords_allowed(conn: imaplib.IMAP4) -> bool:
    _, data = conn.response("PERMANENTFLAGS")
    flags = b" ".join(x for x in data if isinstance(x, bytes))
    return b"\\*" in flags


def poll(services: Services, *, receiver: BounceReceiver | None = None) -> PollReport:
    """Process every new message in the bounce mailbox with the process's ``services``; see
    the module docstring."""
    config = services.config
    settings = config.settings.bounces.imap
    if settings is None or not config.settings.bounces.enabled:
        raise MailboxError(
            "no bounce mailbox configured: set bounces.enabled and bounces.imap "
            "(host, username; see docs/deliverability.md)"
        )
    receiver = receiver or BounceReceiver.from_config(services)
    assert receiver is not None
    conn = connect(settings, config.base_dir)
    report = PollReport()
    where = f"IMAP {settings.host}:{settings.port} {settings.mailbox}"
    try:
        keyword = _keywords_allowed(conn)
        typ, caps = conn.capability()  # after login: servers announce more (MOVE)
        can_move = typ == "OK" and b"MOVE" in b" ".join(c for c in caps if isinstance(c, bytes))
        criteria = f"UNKEYWORD {KEYWORD}" if keyword else "UNSEEN"
        typ, data = conn.uid("SEARCH", None, criteria)  # type: ignore[arg-type]
        if typ != "OK":
            raise MailboxError(f"{where}: search failed: {_why(data)}")
        uids = [u.decode() for u in (data[0] or b"").split()]
        moved = False
        for uid in uids:
            typ, fetched = conn.uid("FETCH", uid, f"(BODY.PEEK[]<0.{MAX_BYTES}>)")
            body = next(
                (p[1] for p in fetched if isinstance(p, tuple) and isinstance(p[1], bytes)),
                None,
            )
            if typ != "OK" or body is None:
                log.warning("bounces: %s: message uid %s could not be fetched; skipped", where, uid)
                continue
            report.messages += 1
            received = receiver.receive(body, recipients_of(body), f"{where} uid {uid}")
            if received.parsed.refusal and not received.parsed.events:
                report.refused += 1
            for d in received.decisions:
                report.count(d.outcome.value)
            flags = f"(\\Seen {KEYWORD})" if keyword else "(\\Seen)"
            conn.uid("STORE", uid, "+FLAGS", flags)
            if settings.processed_mailbox:
                target = _quoted(settings.processed_mailbox)
                if can_move:  # RFC 6851: atomic, expunges only this one
                    typ, data = conn.uid("MOVE", uid, target)
                    if typ == "OK":
                        continue
                typ, data = conn.uid("COPY", uid, target)
                if typ != "OK":
                    raise MailboxError(
                        f"{where}: cannot move to {settings.processed_mailbox!r} "
                        f"({_why(data)}); create it or fix bounces.imap.processed_mailbox"
                    )
                conn.uid("STORE", uid, "+FLAGS", "(\\Deleted)")
                moved = True
        if moved:
            conn.expunge()
    except (OSError, imaplib.IMAP4.error) as e:
        raise MailboxError(f"{where}: {_why(e)} (processed so far: {report.messages})") from e
    finally:
        _logout(conn)
    log.info(
        "bounces: polled %s: %d message(s), %s",
        where,
        report.messages,
        ", ".join(f"{n} {k}" for k, n in sorted(report.outcomes.items())) or "no events",
    )
    return report


__all__ = ["KEYWORD", "MailboxError", "PollReport", "connect", "poll", "recipients_of"]
