"""The SMTP relay: one reused connection per :class:`SmtpMailer`.

:class:`SmtpMailer` hands messages to any relay (plain, STARTTLS or implicit TLS; AUTH) over
one reused connection and turns every failure into a :class:`DeliveryError` (one message:
temporary, permanent, throttled, or ambiguous when the line dropped after the final dot) or a
:class:`RelayError` (the relay itself is unusable: stop the run), and a connection the relay
refused as one too many into :class:`Crowded`. The pool, rate limit, retries and ledger outcomes
live in :mod:`.pool` and :mod:`.pace`. One module, though long: every way a relay answers is
read in one place, next to the transaction that meets it (greeting check, PIPELINING, the RFC
1047 window), so that each reply's meaning is decided once.
"""

from __future__ import annotations

import contextlib
import re
import smtplib
import socket
import ssl
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, NoReturn, Protocol

from newsletter.addresses import InvalidAddress, envelope_address
from newsletter.config import SmtpSettings
from newsletter.deliver.message import Envelope, wire_data
from newsletter.deliver.retry import Refusal
from newsletter.errors import DeliveryError, RelayError


class Mailer(Protocol):
    answers: int
    """Messages the relay took (the pool reads and resets it when the connection closes)."""
    answer_seconds: float
    """Seconds, all of them together, from their final dots to the relay's ``250``."""

    @property
    def connected(self) -> bool:
        """Whether a connection the relay greeted is open."""

    def send(self, envelope: Envelope) -> None:
        """Hand the message to the relay; raises :class:`DeliveryError`, :class:`Crowded` or
        :class:`RelayError`."""

    def close(self) -> None:
        """Close the connection, if one is open."""


MailerFactory = Callable[[], Mailer]


class Crowded(Exception):
    """The relay refused a connection as one too many: a ``4xx`` greeting, or ``421 too many
    connections`` in the session. It does not have the message, and the connection is closed;
    the pool gives the slot back and sends the message on another connection."""

    def __init__(self, reply: str) -> None:
        self.reply = reply
        super().__init__(reply)


def _reply_text(resp: bytes | str) -> str:
    return (resp.decode("utf-8", "replace") if isinstance(resp, bytes) else resp).strip()


_THROTTLE = re.compile(r"rate.?limit|too many|throttl|slow down|exceeded", re.IGNORECASE)
_CROWDED = re.compile(
    r"too many (?:\S+ )?(?:connections|sessions|concurrent|simultaneous|clients)"
    r"|connection (?:limit|count)|concurrency limit",
    re.IGNORECASE,
)


def is_crowded(code: int, text: str) -> bool:
    """A 421 that says the relay has too many connections (from us): close one, not slow down."""
    return code == 421 and bool(_CROWDED.search(text))


def is_throttle(code: int, text: str) -> bool:
    """454, or a temporary reply that says the sender goes too fast: slow down, not a failure."""
    if is_crowded(code, text):
        return False
    return code == 454 or (400 <= code < 500 and bool(_THROTTLE.search(text)))


def is_temporary(code: int) -> bool:
    """4xx, and 552 (mailbox full: RFC 5321 lets relays treat it as temporary)."""
    return 400 <= code < 500 or code == 552


def classify(code: int, text: str, stage: str) -> Refusal:
    """What the relay's refusal at ``stage`` means, as data for the retry policy
    (:func:`newsletter.deliver.retry.next_step`): temporary or not, a throttle or not."""
    return Refusal(
        f"{code} {text}",
        code,
        stage,
        temporary=is_temporary(code),
        throttled=is_throttle(code, text),
    )


class _NoGreeting(smtplib.SMTPException):
    """The server did not greet like an SMTP server: ``said`` is what it sent instead."""

    def __init__(self, said: str) -> None:
        self.said = said
        super().__init__(said)


_GREETING = re.compile(rb"\d{3}(?:[ -]|\r?\n)")


class _Tracking(smtplib.SMTP):
    """``smtplib.SMTP`` that remembers how far the transaction got (set by ``_transact``).

    ``stage`` is the last command sent (``MAIL``, ``RCPT``, ``DATA``); ``final_dot_sent`` is true
    once the message and its final ``.`` were written to the socket, before the reply is read. A
    connection lost after that point is RFC 1047's window: the relay may have taken the message.
    Its greeting is checked first: :class:`_NoGreeting` when the server said something else
    (an HTTP server), nothing, or closed the connection.
    """

    stage = "CONNECT"
    final_dot_sent = False
    answered_in = 0.0
    """Seconds the relay took to answer the last final dot."""
    _greeted = False

    def getreply(self) -> tuple[int, bytes]:
        if not self._greeted:
            self._greeted = True
            self._check_greeting()
        return super().getreply()

    def _check_greeting(self) -> None:
        sock = self.sock
        if sock is None or isinstance(sock, ssl.SSLSocket):  # TLS already proved a TLS server
            return
        timeout = sock.gettimeout()
        patience = GREETING_PATIENCE if timeout is None else min(GREETING_PATIENCE, timeout)
        deadline = time.monotonic() + (timeout or 0)
        try:
            try:
                sock.settimeout(patience)
                start = sock.recv(512, socket.MSG_PEEK)  # left in the socket for smtplib to read
            except TimeoutError:
                # Silent so far: a slow relay, or a web server waiting for a request. Ask the
                # same address, on a second connection, whether it speaks HTTP; this one never
                # talks before the greeting (some relays drop clients that do).
                web = _answers_http(sock.getpeername(), patience)
                if web is not None:
                    self.close()
                    raise _NoGreeting(web) from None
                left = None if timeout is None else deadline - time.monotonic()
                sock.settimeout(None if left is None else max(left, 0.001))
                start = sock.recv(512, socket.MSG_PEEK)
            finally:
                if self.sock is not None:
                    sock.settimeout(timeout)
        except _NoGreeting:
            raise  # an SMTPException is an OSError too: not the case below
        except TimeoutError as e:
            self.close()
            raise _NoGreeting("") from e
        except OSError:
            return  # smtplib reads the same socket and reports the error
        if not start:
            self.close()
            raise _NoGreeting("")
        if (len(start) >= 4 and not _GREETING.match(start)) or not start[:3].isdigit():
            first = start.splitlines()[0].decode("latin-1") if start.strip() else ""
            self.close()
            raise _NoGreeting(re.sub(r"[\x00-\x1f\x7f]", "?", first)[:80] or repr(start[:20]))


GREETING_PATIENCE = 2.0
"""Seconds of silence before a relay's greeting is late enough to ask whether it is a web server."""


def _answers_http(address: tuple[Any, ...], timeout: float) -> str | None:
    """The status line, when the server at ``address`` answers an HTTP request; else ``None``.

    Asked on a connection of its own, so a slow SMTP relay's session is left alone (the probe's
    ``HEAD`` is refused by a relay like any unknown command, or dropped)."""
    try:
        with socket.create_connection((address[0], address[1]), timeout=timeout) as probe:
            probe.sendall(b"HEAD / HTTP/1.0\r\n\r\n")
            reply = probe.recv(128)
    except OSError:
        return None
    if not reply.startswith(b"HTTP/"):
        return None
    return re.sub(r"[\x00-\x1f\x7f]", "?", reply.splitlines()[0].decode("latin-1"))[:80]


class _TrackingSSL(_Tracking, smtplib.SMTP_SSL):
    """Implicit TLS (port 465) with the same tracking."""


class SmtpMailer:
    """One connection to the relay, reused for every message; reopened when the relay closed it.

    A pool of N connections is N mailers (see :mod:`.pool`). ``send`` raises
    :class:`DeliveryError` for one message (``stage``, ``temporary``, ``throttled`` and
    ``ambiguous`` say what happened) and :class:`RelayError` when the relay cannot be used at
    all (unreachable, TLS failure, login refused). After any failure of a message the
    connection is dropped, so a retry starts on a fresh one.
    """

    def __init__(self, smtp: SmtpSettings) -> None:
        self.smtp = smtp
        self._conn: _Tracking | None = None
        self._sent_on_conn = 0
        self._tls: ssl.SSLContext | None = None
        self.answers = 0
        """Messages the relay took on this mailer's connections."""
        self.answer_seconds = 0.0
        """Seconds, all of them together, from their final dot to the relay's ``250``."""

    @property
    def connected(self) -> bool:
        """Whether a connection the relay greeted is open."""
        return self._conn is not None

    def tls_context(self) -> ssl.SSLContext:
        """The TLS settings for this relay (system CAs, hostname checked), built once: loading
        the CA store costs more than a handshake, and a mailer reconnects many times."""
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return self._tls

    def __enter__(self) -> SmtpMailer:
        return self

    def __exit__(self, *exc: object | TracebackType) -> None:
        self.close()

    def _where(self) -> str:
        return f"{self.smtp.host}:{self.smtp.port}"

    def connect(self) -> _Tracking:
        """A new logged-in connection to the relay; raises :class:`RelayError` naming the setting
        to check."""
        s = self.smtp
        conn: _Tracking | None = None
        try:
            if s.security == "tls":
                conn = _TrackingSSL(s.host, s.port, timeout=s.timeout, context=self.tls_context())
            else:
                conn = _Tracking(s.host, s.port, timeout=s.timeout)
                if s.security == "starttls":
                    conn.starttls(context=self.tls_context())
            if s.username:
                conn.login(s.username, s.password() or "")
        except smtplib.SMTPConnectError as e:
            _close_quietly(conn)
            if 400 <= e.smtp_code < 500:  # "421 too many connections": come back with fewer
                raise Crowded(f"{e.smtp_code} {_reply_text(e.smtp_error)}") from e
            raise RelayError(
                f"the relay at {self._where()} refused the connection: {e.smtp_code} "
                f"{_reply_text(e.smtp_error)}; check smtp.host, smtp.port and the relay's access "
                "rules for this machine"
            ) from e
        except _NoGreeting as e:
            _close_quietly(conn)
            said = f"it said {e.said!r}" if e.said else ""
            if not said:
                raise RelayError(
                    f"the relay at {self._where()} sent no SMTP greeting within {s.timeout:g} s "
                    "or closed the connection; check smtp.host and smtp.port (an SMTP relay "
                    "greets at once, on port 25, 465 or 587)"
                ) from e
            web = ": it is a web server" if e.said.startswith("HTTP/") else ""
            raise RelayError(
                f"the relay at {self._where()} did not answer like an SMTP server{web} ({said}); "
                "check smtp.host and smtp.port (an SMTP relay listens on 25, 465 or 587)"
            ) from e
        except smtplib.SMTPAuthenticationError as e:
            _close_quietly(conn)
            raise RelayError(
                f"relay {self._where()} refused the login for {s.username!r}: "
                f"{e.smtp_code} {_reply_text(e.smtp_error)}; check smtp.username and ${s.password_env}"
            ) from e
        except smtplib.SMTPNotSupportedError as e:
            _close_quietly(conn)
            raise RelayError(
                f"relay {self._where()} does not offer {'STARTTLS' if s.security == 'starttls' else 'AUTH'}: "
                f"{e}; check smtp.security and smtp.username"
            ) from e
        except (ssl.SSLError, ssl.CertificateError) as e:
            _close_quietly(conn)
            raise RelayError(
                f"TLS with relay {self._where()} failed: {e}; check smtp.security and the relay's certificate"
            ) from e
        except (OSError, smtplib.SMTPException) as e:
            _close_quietly(conn)
            raise RelayError(
                f"cannot reach the relay at {self._where()}: {e}; check smtp.host and smtp.port"
            ) from e
        if conn.sock is not None:
            # Small writes (the pipelined MAIL, RCPT and DATA, a message's tail) go at once:
            # without this, Nagle's algorithm holds one until the relay acknowledges the last,
            # which a relay delays (delayed ACK), costing up to 40 ms a message.
            with contextlib.suppress(OSError):
                conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sent_on_conn = 0
        return conn

    def send(self, envelope: Envelope) -> None:
        """Hand the message to the relay on the open connection (opened first when needed)."""
        try:
            self._send_once(envelope)
        except _ClosedWhileIdle:
            # The relay closed a connection we had not used for a while (idle timeout): that is
            # not the message's fault. Reopen once and send; a second failure counts.
            self._drop()
            self._send_once(envelope)

    def _send_once(self, envelope: Envelope) -> None:
        cap = self.smtp.messages_per_connection
        if self._conn is not None and cap and self._sent_on_conn >= cap:
            self.close()  # QUIT, then a fresh connection: some relays cap messages per session
        if self._conn is None:
            self._conn = self.connect()
        conn = self._conn
        conn.stage, conn.final_dot_sent = "MAIL", False
        rcpt = envelope.recipient
        try:
            wire_rcpt, utf8 = envelope_address(rcpt)  # an IDN domain goes out as xn--
            options: list[str] = []
            if utf8 or not envelope.sender.isascii():
                conn.ehlo_or_helo_if_needed()
                if not conn.has_extn("smtputf8"):
                    raise DeliveryError(
                        rcpt,
                        "the relay does not support SMTPUTF8, needed for this address's "
                        "non-ASCII local part",
                        code=None,
                        temporary=False,
                        stage="MAIL",
                    )
                options.append("SMTPUTF8")
            data = wire_data(envelope)
            self._transact(conn, envelope.sender, wire_rcpt, options, data)
        except InvalidAddress as e:
            raise DeliveryError(rcpt, str(e), code=None, temporary=False, stage="RCPT") from e
        except smtplib.SMTPRecipientsRefused as e:
            code, resp = next(iter(e.recipients.values()))
            self._crowded(code, resp)
            self._fail(rcpt, "RCPT", code, _reply_text(resp), e, drop=is_temporary(code))
        except smtplib.SMTPSenderRefused as e:
            self._crowded(e.smtp_code, e.smtp_error)
            self._fail(rcpt, "MAIL", e.smtp_code, _reply_text(e.smtp_error), e, drop=True)
        except smtplib.SMTPDataError as e:
            self._crowded(e.smtp_code, e.smtp_error)
            self._fail(rcpt, "DATA", e.smtp_code, _reply_text(e.smtp_error), e, drop=True)
        except smtplib.SMTPResponseException as e:
            self._crowded(e.smtp_code, e.smtp_error)
            self._fail(rcpt, conn.stage, e.smtp_code, _reply_text(e.smtp_error), e, drop=True)
        except smtplib.SMTPServerDisconnected as e:
            self._lost(rcpt, conn, e)
        except (smtplib.SMTPException, UnicodeError) as e:  # e.g. a non-ASCII address, no SMTPUTF8
            self._drop()
            raise DeliveryError(
                rcpt,
                f"cannot send at {conn.stage}: {e}",
                code=None,
                temporary=False,
                stage=conn.stage,
            ) from e
        except OSError as e:
            self._lost(rcpt, conn, e)
        self._sent_on_conn += 1
        self.answers += 1
        self.answer_seconds += conn.answered_in

    def _crowded(self, code: int, resp: bytes | str) -> None:
        """Raise :class:`Crowded` for a ``421 too many connections`` (the connection is dropped;
        a 421 at the final dot too: the relay refused the message, it does not have it)."""
        text = _reply_text(resp)
        if is_crowded(code, text):
            self._drop()
            raise Crowded(f"{code} {text}")

    @staticmethod
    def _transact(
        conn: _Tracking,
        sender: str,
        rcpt: str,
        options: list[str],
        data: bytes,
    ) -> None:
        """MAIL, RCPT, DATA for one recipient; raises what ``smtplib.SMTP.sendmail`` raises.

        Written out rather than ``sendmail``: the addresses are already in envelope form (no
        ``quoteaddr`` parsing) and ``data`` is already in wire form (see :func:`wire_data`).
        With a relay that offers PIPELINING (Postfix, Amazon SES, Mailgun do), MAIL, RCPT and
        DATA go in one write: two round trips per message instead of four. A refused command
        is followed by RSET (or, after 421, by closing), as ``sendmail`` does.
        """
        for address in (sender, rcpt):
            if _NOT_IN_PATH.search(address):
                raise InvalidAddress(f"{address!r} cannot be sent in an SMTP command")
        conn.ehlo_or_helo_if_needed()
        mail = f"FROM:<{sender}>"
        if conn.does_esmtp:
            if conn.has_extn("size"):
                options = [*options, f"SIZE={len(data) + 3}"]
            if options:
                mail += " " + " ".join(options)
        conn.command_encoding = "utf-8" if "SMTPUTF8" in options else "ascii"
        conn.stage, conn.final_dot_sent = "MAIL", False
        if conn.does_esmtp and conn.has_extn("pipelining"):
            # RFC 2920: MAIL, RCPT and DATA in one write, their three replies read in order
            # (every reply is read, so the connection stays in step whatever fails).
            conn.send(f"MAIL {mail}\r\nRCPT TO:<{rcpt}>\r\nDATA\r\n")
            replies: list[tuple[int, bytes]] = []
            for stage in ("MAIL", "RCPT", "DATA"):
                conn.stage = stage
                try:
                    replies.append(conn.getreply())
                except smtplib.SMTPServerDisconnected:
                    if replies and replies[-1][0] == 421:
                        break  # the relay said why before it hung up: report that
                    raise
            replies += [(0, b"")] * (3 - len(replies))
            mail_reply, rcpt_reply, data_reply = replies
            if data_reply[0] == 354 and (mail_reply[0] != 250 or rcpt_reply[0] not in (250, 251)):
                conn.send(b".\r\n")  # a relay that took DATA anyway: end the empty message
                conn.getreply()
        else:
            mail_reply = conn.docmd("MAIL", mail)
            rcpt_reply = data_reply = (0, b"")
            if mail_reply[0] == 250:
                conn.stage = "RCPT"
                rcpt_reply = conn.docmd("RCPT", f"TO:<{rcpt}>")
                if rcpt_reply[0] in (250, 251):
                    conn.stage = "DATA"
                    data_reply = conn.docmd("DATA")
        code, resp = mail_reply
        if code != 250:
            conn.stage = "MAIL"
            _abandon(conn, code)
            raise smtplib.SMTPSenderRefused(code, resp, sender)
        code, resp = rcpt_reply
        if code not in (250, 251):
            conn.stage = "RCPT"
            _abandon(conn, code)
            raise smtplib.SMTPRecipientsRefused({rcpt: (code, resp)})
        code, resp = data_reply
        if code != 354:
            _abandon(conn, code)
            raise smtplib.SMTPDataError(code, resp)
        conn.send(data + b".\r\n")
        conn.final_dot_sent = True
        dot = time.monotonic()
        code, resp = conn.getreply()
        conn.answered_in = time.monotonic() - dot
        if code != 250:
            _abandon(conn, code)
            raise smtplib.SMTPDataError(code, resp)

    def _lost(self, rcpt: str, conn: _Tracking, e: Exception) -> NoReturn:
        dot, stage, reused = conn.final_dot_sent, conn.stage, self._sent_on_conn > 0
        self._drop()
        # smtplib turns a read timeout into SMTPServerDisconnected, the timeout as its context
        timed_out = isinstance(e, TimeoutError) or isinstance(e.__context__, TimeoutError)
        if dot:
            raise DeliveryError(
                rcpt,
                f"connection lost after the final '.' with no reply ({e}); the relay may "
                "have accepted the message",
                code=None,
                temporary=True,
                stage="DATA",
                ambiguous=True,
                timed_out=timed_out,
            ) from e
        if reused and stage == "MAIL" and not timed_out:
            raise _ClosedWhileIdle from e
        raise DeliveryError(
            rcpt,
            f"connection lost at {stage} before the end of DATA: {e}",
            code=None,
            temporary=True,
            stage=stage,
            timed_out=timed_out,
        ) from e

    def _fail(
        self, rcpt: str, stage: str, code: int, text: str, cause: Exception, *, drop: bool
    ) -> NoReturn:
        if drop:
            self._drop()
        r = classify(code, text, stage)
        raise DeliveryError(
            rcpt, r.reason, code=code, temporary=r.temporary, stage=stage, throttled=r.throttled
        ) from cause

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        _close_quietly(conn)

    def close(self) -> None:
        """Say QUIT and close the connection, if one is open."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.quit()
            except (smtplib.SMTPException, OSError):
                _close_quietly(conn)


_NOT_IN_PATH = re.compile(r"[\x00-\x20<>\x7f]")
"""Characters that cannot stand inside ``<...>`` in MAIL FROM / RCPT TO as written here."""


def _abandon(conn: smtplib.SMTP, code: int) -> None:
    """After a refused command: RSET to reuse the connection, or close it after a 421."""
    if code == 421:
        conn.close()
        return
    with contextlib.suppress(smtplib.SMTPServerDisconnected):
        conn.rset()


class _ClosedWhileIdle(Exception):
    """A reused connection was found closed before the message was sent (internal)."""


def _close_quietly(conn: smtplib.SMTP | None) -> None:
    if conn is not None:
        with contextlib.suppress(OSError):
            conn.close()
