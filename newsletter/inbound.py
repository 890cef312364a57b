"""Email commands: an SMTP (or LMTP) receiver for the request address.

A message whose subject or first line is ``subscribe [topic ...]``, ``unsubscribe``, ``topics``
or ``help`` is answered by mail, to the address in its From header. From headers can be forged,
so no command acts by itself: ``subscribe`` mails a confirmation link (the same double opt-in as
the web form), ``unsubscribe`` mails a one-button unsubscribe link. Bounces, auto-replies and
list traffic are accepted and dropped, so two robots never talk to each other forever. The
operator's MTA hands the alias to this receiver (see ``deploy/postfix/``).

Answers are rate limited like the web form's requests, since anyone can make this service mail
a third party: per sending host (``web.rate_limit.per_ip``; behind a trusted relay, the host its
``Received:`` header names; IPv6 by /64), per address (``per_address``, ``+tag`` ignored, and at
most ``email_confirmations_per_address`` confirmations), and ``inbound.max_per_hour`` in all.
Dropped commands are logged and accepted (``250``), so a forger learns nothing.

With ``bounces.enabled``, mail to the bounce address (plain or its VERP ``bounces+token`` form)
is not a command: it goes to :mod:`newsletter.bounces` (parse, then score or suppress), at most
``bounces.per_host`` messages per sending host (counted like commands) per
``bounces.per_host_window``. Past that a bounce is refused with ``451 4.7.1`` rather than
dropped: a real relay tries again later, and the refusal depends on the host alone, so it
tells nothing about the addresses the message names.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
from email import message_from_bytes, policy
from email.message import EmailMessage
from email.parser import BytesHeaderParser
from email.utils import getaddresses
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.lmtp import LMTP

from newsletter.addresses import InvalidAddress, envelope_address
from newsletter.bounces.receive import BounceReceiver
from newsletter.config import InboundSettings
from newsletter.errors import NewsletterError, listen_error
from newsletter.subscribe import (
    InvalidRequest,
    Outcome,
    Subscriptions,
    client_network,
    parse_command,
)

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


_RECEIVED_FROM = re.compile(r"^\s*from\s.*?\[(?:ipv6:)?([0-9a-f:.]+)\]", re.IGNORECASE | re.DOTALL)


def sending_host(msg: EmailMessage, peer: str, trusted: list[str]) -> str:
    """The host that sent a message: the peer, or, when the peer is a trusted relay (our own
    MTA), the address its topmost ``Received:`` header gives for the client it took it from."""
    if peer not in trusted:
        return peer
    received = msg.get_all("Received") or []
    if not received:
        return peer
    top = str(received[0]).split(" by ", 1)[0]
    m = _RECEIVED_FROM.match(top)
    if m is None:
        return peer
    try:
        return str(ipaddress.ip_address(m.group(1)))
    except ValueError:
        return peer


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
) -> Outcome | None:
    """Run the command in one received message; ``None`` when nothing was answered.

    ``settings``: the receiver's (default: the service config's ``inbound:``). Raises
    :class:`UnreadableMail` for a message nested too deeply to read.
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
    host = sending_host(msg, peer, settings.trusted_relays)
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
    command = parse_command(str(msg.get("Subject", "")), first_text(msg))
    origin = f"email {message_id} via {host}".strip()
    try:
        if command is None:
            return service.reply_info(sender, "help", "no command found in it")
        if command.name == "subscribe":
            try:
                choices = service.choices(command.args or service.topic_names)
            except InvalidRequest as e:
                return service.reply_info(sender, "help", e.reason)
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
        self.bounces = BounceReceiver.from_config(service.services)
        """Takes mail to the bounce address (``bounces.enabled``), see :mod:`newsletter.bounces`."""

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
        loop = asyncio.get_running_loop()
        if self.bounces is not None:
            bounced = [r for r in envelope.rcpt_tos if self.bounces.accepts(r)]
            if bounced:
                host = sending_host(_headers(data), peer, self.settings.trusted_relays)
                origin = f"{envelope.mail_from or '<>'} via {host}"
                try:
                    allowed = await loop.run_in_executor(None, self.bounces.allow_host, host)
                    if not allowed:
                        log.warning(
                            "inbound: host %s over its limit (bounces.per_host); "
                            "bounce message from %s refused",
                            client_network(host),
                            envelope.mail_from or "<>",
                        )
                        return "451 4.7.1 too many bounce messages from your host; try again later"
                    await loop.run_in_executor(None, self.bounces.receive, data, bounced, origin)
                except NewsletterError as e:  # the database (a StoreError), not the mail
                    log.warning("inbound: could not record a bounce: %s", " ".join(str(e).split()))
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


class _LmtpController(Controller):
    def factory(self) -> LMTP:
        return LMTP(self.handler, data_size_limit=self.handler.settings.max_size * 2)


class InboundServer:
    """``with InboundServer(service, settings) as server: ...`` (SMTP, or LMTP when configured)."""

    def __init__(self, service: Subscriptions, settings: InboundSettings) -> None:
        self.handler = InboundHandler(service, settings)
        self.settings = settings
        cls = _LmtpController if settings.lmtp else Controller
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
                "stop the other program, or set inbound.port (or pass --port) to a free port",
            ) from e
        return self

    def __exit__(self, *exc: object) -> None:
        self.controller.stop()
