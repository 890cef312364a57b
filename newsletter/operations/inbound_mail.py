"""Email commands: an SMTP (or LMTP) receiver for the request address.

A message whose subject or first line is ``subscribe [topic ...]``, ``unsubscribe``, ``topics``
or ``help`` is answered by mail, to the address in its From header. From headers can be forged,
so no command acts by itself: ``subscribe`` mails a confirmation link (the same double opt-in as
the web form), ``unsubscribe`` mails a one-button unsubscribe link. Bounces, auto-replies and
list traffic are accepted and dropped, so two robots never talk to each other forever. The
operator's MTA hands the alias to this receiver (see ``deploy/postfix/``).

Answers are rate limited like the web form's requests, since anyone can make this service mail
a third party: per sending host (``web.rate_limit.per_ip``; behind a trusted relay, the client
address it forwards by XFORWARD or XCLIENT or records in its own ``Received:`` comment, never the
client's HELO, see :func:`sending_host`; IPv6 by /64), per address (``per_address``, ``+tag`` ignored, and at
most ``email_confirmations_per_address`` confirmations), and ``inbound.max_per_hour`` in all.
Dropped commands are logged and accepted (``250``), so a forger learns nothing.

With ``bounces.enabled``, mail to the bounce address (plain or its VERP ``bounces+token`` form)
is not a command: it goes to :mod:`newsletter.bounces` (parse, then score or suppress), at most
``bounces.per_host`` messages per sending host (counted like commands) per
``bounces.per_host_window``. Past that a bounce is refused with ``451 4.7.1`` rather than
dropped: a real relay tries again later, and the refusal depends on the host alone, so it
tells nothing about the addresses the message names. Nor does the answer's timing: a report
is answered after the per-host count alone and applied afterwards, on a thread of its own
(:class:`~newsletter.bounces.receive.BounceWriter`).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
from collections import deque
from email import message_from_bytes, policy
from email.message import EmailMessage
from email.parser import BytesHeaderParser
from email.utils import getaddresses
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.lmtp import LMTP
from aiosmtpd.smtp import SMTP, syntax

from newsletter.addresses import InvalidAddress, envelope_address
from newsletter.bounces.receive import BounceReceiver, BounceWriter
from newsletter.config import InboundSettings
from newsletter.errors import NewsletterError, listen_error
from newsletter.subscribe import (
    InvalidRequest,
    Outcome,
    Problem,
    Subscriptions,
    client_network,
    parse_command,
)
from newsletter.subscribe.own_mail import parse_own_command

log = logging.getLogger(__name__)


MAX_MIME_DEPTH = 20
"""The deepest nesting of MIME parts a command mail may have. A command is one line of text;
Python's mail parser recurses once per level, so a mail nested thousands deep would exhaust it."""


class UnreadableMail(NewsletterError):
    """A message whose structure cannot be read as a command (nested too deeply): refused with a
    permanent SMTP error, since sending it again cannot help."""


def read_mail(data: bytes) -> EmailMessage:
    """Parse a received message; raises :class:`UnreadableMail` when its MIME parts are nested
    more than :data:`MAX_MIME_DEPTH` deep."""
    try:
        msg = message_from_bytes(data, policy=policy.default)
    except RecursionError as e:
        raise UnreadableMail(f"MIME parts nested more than {MAX_MIME_DEPTH} deep") from e
    assert isinstance(msg, EmailMessage)
    todo: list[tuple[EmailMessage, int]] = [(msg, 1)]  # no recursion: the mail decides the depth
    while todo:
        part, depth = todo.pop()
        if depth > MAX_MIME_DEPTH:
            raise UnreadableMail(f"MIME parts nested more than {MAX_MIME_DEPTH} deep")
        payload = part.get_payload()
        if isinstance(payload, list):  # multipart/*, message/rfc822
            todo.extend((p, depth + 1) for p in payload if isinstance(p, EmailMessage))
    return msg


def first_text(msg: EmailMessage) -> str:
    """The first text/plain part (or the body), at most 4 KB of it."""
    part = msg.get_body(preferencelist=("plain",))
    if part is None:
        return ""
    try:
        content = part.get_content()
    except (LookupError, ValueError):
        return ""
    return str(content)[:4096]


def is_automatic(msg: EmailMessage, mail_from: str) -> bool:
    """Bounces, auto-replies and list mail: never answered."""
    if not mail_from or mail_from == "<>":
        return True
    auto = str(msg.get("Auto-Submitted", "no")).strip().lower()
    if auto and auto != "no":
        return True
    if str(msg.get("Precedence", "")).strip().lower() in ("bulk", "junk", "list"):
        return True
    return bool(msg.get("List-Id") or msg.get("X-Autoreply") or msg.get("X-Autorespond"))


def same_address(a: str, b: str) -> bool:
    """Whether two addresses name the same mailbox: case aside, an IDN domain in either form."""
    try:
        return envelope_address(a)[0].lower() == envelope_address(b)[0].lower()
    except InvalidAddress:
        return a.lower() == b.lower()


_MTA_COMMENT = re.compile(
    r"\(\s*[^\s()\[\]]+\s+\[(?:ipv6:)?([0-9a-f:.]+)\](?::\d+)?\s*\)", re.IGNORECASE
)
"""The comment an MTA writes after the client's HELO: ``(rdns [IP])``, ``(unknown [IPv6:...])``."""


def recorded_client(received: str) -> str | None:
    """The client address an MTA recorded in a ``Received:`` line it wrote, or ``None``.

    Postfix writes ``from HELO (rdns [IP]) by ...``: the HELO is whatever the client said (a
    literal ``[10.0.0.7]``, or text that imitates the comment), the parenthesised comment is the
    MTA's own. The address is taken from that comment, and only when the line holds exactly one
    such comment: a HELO that forges a second one makes the line say nothing.
    """
    text = " ".join(received.split())
    if not text.lower().startswith("from "):
        return None
    found = _MTA_COMMENT.findall(text)
    if len(found) != 1:
        return None
    try:
        return str(ipaddress.ip_address(found[0]))
    except ValueError:
        return None


def sending_host(
    msg: EmailMessage, peer: str, trusted: list[str], forwarded: str | None = None
) -> str:
    """The host that sent a message: the peer, or, when the peer is a trusted relay (our own
    MTA), the client address it gave: ``forwarded`` (an XFORWARD or XCLIENT ``ADDR``), else the
    address in its own comment on the topmost ``Received:`` line (:func:`recorded_client`),
    else the relay itself (never an address the client chose, such as its HELO)."""
    if peer not in trusted:
        return peer
    if forwarded:
        return forwarded
    received = msg.get_all("Received") or []
    if not received:
        return peer
    return recorded_client(str(received[0])) or peer


_XTEXT = re.compile(r"\+([0-9A-Fa-f]{2})")
_FORWARD_ATTRIBUTES = {
    "XFORWARD": frozenset({"NAME", "ADDR", "PORT", "PROTO", "HELO", "IDENT", "SOURCE"}),
    "XCLIENT": frozenset(
        {"NAME", "ADDR", "PORT", "PROTO", "HELO", "LOGIN", "DESTADDR", "DESTPORT"}
    ),
}
_UNKNOWN = ("[UNAVAILABLE]", "[TEMPUNAVAIL]")


class BadForward(ValueError):
    """An XFORWARD or XCLIENT argument that cannot be read."""


def forwarded_address(verb: str, arg: str) -> tuple[bool, str | None]:
    """Read an ``XFORWARD``/``XCLIENT`` argument (``NAME=value ...``, values in xtext):
    whether it gives ``ADDR``, and the address (``None`` for ``[UNAVAILABLE]``).

    Raises :class:`BadForward` for an unknown attribute or an address that is not one.
    """
    given, address = False, None
    words = arg.split()
    if not words:
        raise BadForward("no attributes")
    for word in words:
        name, sep, raw = word.partition("=")
        name = name.upper()
        if not sep or name not in _FORWARD_ATTRIBUTES[verb]:
            raise BadForward(f"bad attribute {name[:20]!r}")
        if name != "ADDR":
            continue
        value = _XTEXT.sub(lambda m: chr(int(m.group(1), 16)), raw)
        given = True
        if value.upper() in _UNKNOWN:
            address = None
            continue
        if value[:5].lower() == "ipv6:":
            value = value[5:]
        try:
            address = str(ipaddress.ip_address(value))
        except ValueError as e:
            raise BadForward("ADDR is not an IP address") from e
    return given, address


def _headers(data: bytes) -> EmailMessage:
    """The header block of a message (for its ``Received:`` lines), the body left unparsed."""
    msg = BytesHeaderParser(policy=policy.default).parsebytes(data)
    assert isinstance(msg, EmailMessage)
    return msg


def handle_message(
    service: Subscriptions,
    data: bytes,
    mail_from: str,
    peer: str,
    settings: InboundSettings | None = None,
    host: str | None = None,
) -> Outcome | None:
    """Run the command in one received message; ``None`` when nothing was answered.

    ``settings``: the receiver's (default: the service config's ``inbound:``). ``host``: the
    sending host, when the receiver knows it (else read from ``peer`` and the message, see
    :func:`sending_host`). Raises :class:`UnreadableMail` for a message nested too deeply to
    read.
    """
    msg = read_mail(data)
    if is_automatic(msg, mail_from):
        log.info("inbound: automatic message from %r dropped", mail_from)
        return None
    senders = [a for _, a in getaddresses([str(msg.get("From", ""))]) if "@" in a]
    if len(senders) != 1:
        log.info("inbound: no single From address; dropped")
        return None
    sender = senders[0]
    own = {service.settings.sender.from_address.lower()}
    if service.settings.inbound.address:
        own.add(service.settings.inbound.address.lower())
    if sender.lower() in own:
        return None  # never answer ourselves
    settings = settings or service.settings.inbound
    host = host or sending_host(msg, peer, settings.trusted_relays)
    message_id = " ".join(str(msg.get("Message-ID", "")).split())[:200]  # one line in logs
    if not service.allow_client(host):
        log.warning(
            "inbound: host %s over its limit (web.rate_limit.per_ip); %s dropped",
            client_network(host),
            message_id or "a message",
        )
        return Outcome.LIMITED
    if not service.allow_inbound(settings.max_per_hour):
        log.warning(
            "inbound: over inbound.max_per_hour (%d); %s from %s dropped",
            settings.max_per_hour,
            message_id or "a message",
            host,
        )
        return Outcome.LIMITED
    own_command = parse_own_command(str(msg.get("Subject", "")), first_text(msg))
    if own_command is not None:
        try:
            return service.request_own_topic(sender, *own_command)
        except InvalidRequest as e:
            log.info("inbound: unusable sender address: %s", e)
            return None
    command = parse_command(str(msg.get("Subject", "")), first_text(msg))
    origin = f"email {message_id} via {host}".strip()
    try:
        if command is None:
            return service.reply_info(sender, "help", Problem.NO_COMMAND)
        if command.name == "subscribe":
            try:
                choices = service.choices(command.args or service.topic_names)
            except InvalidRequest:  # its reason names the topics asked for: never mailed back
                return service.reply_info(sender, "help", Problem.UNKNOWN_TOPIC)
            return service.request(
                sender, choices, via="email", origin=origin, reply=True, by_email=True
            )
        if command.name == "unsubscribe":
            return service.request_unsubscribe(sender)
        return service.reply_info(sender, command.name)
    except InvalidRequest as e:
        log.info("inbound: unusable sender address: %s", e)
        return None


class InboundHandler:
    """aiosmtpd handler: accepts mail for the request address and answers commands."""

    def __init__(self, service: Subscriptions, settings: InboundSettings) -> None:
        self.service = service
        self.settings = settings
        self.outcomes: list[Outcome | None] = []
        self.hosts: deque[str] = deque(maxlen=1000)
        """The sending host each message was counted as (the latest 1,000), for tests."""
        self.bounces = BounceReceiver.from_config(service.services)
        """Takes mail to the bounce address (``bounces.enabled``), see :mod:`newsletter.bounces`."""
        self.writer = BounceWriter(self.bounces) if self.bounces is not None else None
        """Applies the reports after the answer (see :class:`BounceWriter`)."""

    def settle(self) -> None:
        """Wait until every bounce report taken so far has been applied."""
        if self.writer is not None:
            self.writer.settle()

    def close(self) -> None:
        """Apply the bounce reports still queued, then stop their writer."""
        if self.writer is not None:
            self.writer.close()

    def trusted(self, session: Any) -> bool:
        """Whether the peer of ``session`` is a trusted relay (``inbound.trusted_relays``)."""
        return bool(session.peer) and str(session.peer[0]) in self.settings.trusted_relays

    async def handle_EHLO(
        self, server: Any, session: Any, envelope: Any, hostname: str, responses: list[str]
    ) -> list[str]:
        """Offer XFORWARD and XCLIENT to a trusted relay only (as Postfix's smtpd does)."""
        session.host_name = hostname
        if self.trusted(session):
            offers = [
                f"250-{verb} {' '.join(sorted(names))}"
                for verb, names in _FORWARD_ATTRIBUTES.items()
            ]
            responses = responses[:-1] + offers + responses[-1:]
        return responses

    def forward(self, verb: str, session: Any, envelope: Any, arg: str) -> str:
        """Take an ``XFORWARD`` (for the next transaction) or ``XCLIENT`` (for the session)
        from a trusted relay; the SMTP reply. Its ``ADDR`` becomes the sending host."""
        if not self.trusted(session):
            return "550 5.7.0 Error: insufficient authorization"
        if envelope.mail_from is not None:
            return "503 5.5.1 Error: MAIL transaction in progress"
        try:
            given, address = forwarded_address(verb, arg)
        except BadForward as e:
            log.warning("inbound: %s from %s refused: %s", verb, session.peer[0], e)
            return f"501 5.5.4 Bad {verb} attribute"
        if given and verb == "XFORWARD":
            envelope.forwarded_host = address
        elif given:
            session.forwarded_host = address
        return "250 2.0.0 Ok"

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, options: Any
    ) -> str:
        """Accept the request address (or any, when none is set) and the bounce address; refuse
        others with 550."""
        if self.bounces is not None and self.bounces.accepts(address):
            envelope.rcpt_tos.append(address)
            return "250 OK"
        wanted = self.settings.address
        if wanted is not None and not same_address(address, wanted):
            return f"550 5.1.1 this server only takes mail for {wanted}"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        """Record bounces and answer the commands in the message; the SMTP reply says whether it
        was taken."""
        data = envelope.original_content or envelope.content
        if len(data) > self.settings.max_size:
            return "552 5.3.4 message too big for a command"
        peer = str(session.peer[0]) if session.peer else "unknown"
        forwarded = getattr(envelope, "forwarded_host", None) or getattr(
            session, "forwarded_host", None
        )
        host = sending_host(_headers(data), peer, self.settings.trusted_relays, forwarded)
        self.hosts.append(host)
        loop = asyncio.get_running_loop()
        if self.bounces is not None and self.writer is not None:
            bounced = [r for r in envelope.rcpt_tos if self.bounces.accepts(r)]
            if bounced:
                origin = f"{envelope.mail_from or '<>'} via {host}"
                # Before the answer only what every report costs alike (the per-host count):
                # what a report does to a subscriber's history is applied after it, by the
                # writer, or the answer's timing would tell a subscriber from a stranger.
                try:
                    allowed = await loop.run_in_executor(None, self.bounces.allow_host, host)
                except NewsletterError as e:  # the database (a StoreError), not the mail
                    log.warning("inbound: could not record a bounce: %s", " ".join(str(e).split()))
                    return "451 4.3.0 cannot record the bounce right now; try again later"
                if not allowed:
                    log.warning(
                        "inbound: host %s over its limit (bounces.per_host); "
                        "bounce message from %s refused",
                        client_network(host),
                        envelope.mail_from or "<>",
                    )
                    return "451 4.7.1 too many bounce messages from your host; try again later"
                if not self.writer.put(data, bounced, origin):
                    log.warning("inbound: bounce reports waiting to be applied; one refused")
                    return "451 4.3.0 cannot record the bounce right now; try again later"
                if len(bounced) == len(envelope.rcpt_tos):
                    return "250 OK"
        try:
            outcome = await loop.run_in_executor(
                None,
                handle_message,
                self.service,
                data,
                envelope.mail_from or "",
                peer,
                self.settings,
                host,
            )
        except UnreadableMail as e:
            log.warning(
                "inbound: refused a message from %r via %s: %s", envelope.mail_from, peer, e
            )
            return f"554 5.6.0 cannot read this message as a command: {e}"
        except NewsletterError as e:
            log.warning("inbound: could not answer: %s", e)
            return "451 4.3.0 cannot answer right now; try again later"
        self.outcomes.append(outcome)
        return "250 OK"


class _ForwardingSMTP(SMTP):
    """aiosmtpd's SMTP with Postfix's XFORWARD and XCLIENT commands (taken from a trusted relay
    only, see :meth:`InboundHandler.forward`)."""

    event_handler: InboundHandler

    @syntax("XFORWARD attribute=value ...")
    async def smtp_XFORWARD(self, arg: str) -> None:
        if await self.check_helo_needed("EHLO"):
            return
        await self.push(self.event_handler.forward("XFORWARD", self.session, self.envelope, arg))

    @syntax("XCLIENT attribute=value ...")
    async def smtp_XCLIENT(self, arg: str) -> None:
        if await self.check_helo_needed("EHLO"):
            return
        reply = self.event_handler.forward("XCLIENT", self.session, self.envelope, arg)
        if not reply.startswith("250"):
            await self.push(reply)
            return
        # As after a new connection: a fresh greeting, and the client says EHLO again.
        assert self.session is not None
        self._set_rset_state()  # type: ignore[no-untyped-call]
        self.session.host_name = None
        self.session.extended_smtp = False
        await self.push(f"220 {self.hostname} ESMTP")


class _ForwardingLMTP(LMTP, _ForwardingSMTP):
    """LMTP (``LHLO``) with XFORWARD and XCLIENT."""


class _SmtpController(Controller):
    def factory(self) -> SMTP:
        return _ForwardingSMTP(self.handler, **self.SMTP_kwargs)


class _LmtpController(Controller):
    def factory(self) -> SMTP:
        return _ForwardingLMTP(self.handler, data_size_limit=self.handler.settings.max_size * 2)


class InboundServer:
    """``with InboundServer(service, settings) as server: ...`` (SMTP, or LMTP when configured)."""

    def __init__(self, service: Subscriptions, settings: InboundSettings) -> None:
        self.handler = InboundHandler(service, settings)
        self.settings = settings
        cls = _LmtpController if settings.lmtp else _SmtpController
        kwargs: dict[str, Any] = {"hostname": settings.host, "port": settings.port}
        if not settings.lmtp:
            kwargs["data_size_limit"] = settings.max_size * 2
        self.controller = cls(self.handler, **kwargs)

    def __enter__(self) -> InboundServer:
        try:
            self.controller.start()
        except OSError as e:
            raise listen_error(
                e,
                self.settings.host,
                self.settings.port,
                port_key="inbound.port (or pass --port)",
                host_key="inbound.host (or pass --host)",
            ) from e
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.controller.stop()
        finally:
            self.handler.close()
