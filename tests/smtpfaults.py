"""A real aiosmtpd relay on loopback that injects faults where a test tells it to.

``plan(stage, recipient)`` is asked at every step of every transaction and returns a
:class:`Fault` or ``None`` (go on). Stages: ``MAIL`` (recipient unknown: ``None``), ``RCPT``,
``DATA-CMD`` (the DATA command, before the ``354``), ``DATA`` (after the final dot, before the
reply). A fault answers with ``reply`` and/or closes the connection; at ``DATA`` with
``keep=True`` the message is stored first (the relay took it) and then the line is dropped with no
reply: RFC 1047's window.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult

from newsletter.operations.smtp_sink import free_port


@dataclass(frozen=True)
class Fault:
    reply: str | None = None
    """The SMTP reply to send instead of accepting (``None``: no reply)."""
    close: bool = False
    """Close the connection (after ``reply``, if any)."""
    keep: bool = False
    """At ``DATA``: store the message before dropping the line (the relay accepted it)."""
    stall: float = 0.0
    """Wait this many seconds before answering (or closing): a relay that stalls."""


Plan = Callable[[str, str | None], Fault | None]


@dataclass
class Delivered:
    rcpt_tos: list[str]
    data: bytes

    @property
    def message(self) -> Message:
        return message_from_bytes(self.data)

    @property
    def message_id(self) -> str:
        return str(self.message["Message-ID"])


@dataclass
class FaultHandler:
    plan: Plan | None = None
    received: list[Delivered] = field(default_factory=list)
    connections: int = 0
    hold: threading.Event | None = None
    """When set to an Event, DATA waits for it before answering (to freeze a send in flight)."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    pipelining: bool = False
    """Offer PIPELINING (RFC 2920) in the EHLO reply, as Postfix and the big relays do."""
    delay: float = 0.0
    """Seconds every DATA waits before the relay stores the message and answers (a slow relay)."""
    on_quit: Callable[[], None] | None = None
    """Called (on the relay's loop) when a client sends QUIT, before the relay answers it."""
    max_connections: int = 0
    """Connections taken at once (0: any); one more is greeted ``421 Too many connections``."""
    quota: float = 0.0
    """Messages taken a second (a bucket holding one second's worth; 0: any); a MAIL beyond it
    is answered ``454 Throttling failure`` (Amazon SES's words)."""
    open: int = 0
    peak: int = 0
    """The most connections open at once."""
    refused: int = 0
    """Connections greeted with 421 as one too many."""
    throttled: int = 0
    """MAIL commands answered 454."""
    awaiting: int = 0
    peak_awaiting: int = 0
    """The most messages at once past their final dot and not answered yet."""
    _tokens: float = -1.0
    _refilled: float = 0.0

    def take_token(self) -> bool:
        """One message of the quota (True), or a throttle (False)."""
        if not self.quota:
            return True
        now = asyncio.get_running_loop().time()
        with self.lock:
            if self._tokens < 0:
                self._tokens, self._refilled = self.quota, now
            self._tokens = min(self.quota, self._tokens + (now - self._refilled) * self.quota)
            self._refilled = now
            if self._tokens < 1:
                self.throttled += 1
                return False
            self._tokens -= 1
            return True

    async def handle_EHLO(
        self, server: SMTP, session: Any, envelope: Any, hostname: str, responses: list[str]
    ) -> list[str]:
        session.host_name = hostname
        if self.pipelining:
            return [responses[0], "250-PIPELINING", *responses[1:]]
        return responses

    def fault(self, stage: str, rcpt: str | None) -> Fault | None:
        if self.plan is None:
            return None
        with self.lock:
            return self.plan(stage, rcpt)

    @staticmethod
    async def apply(server: SMTP, fault: Fault) -> str:
        if fault.stall:
            await asyncio.sleep(fault.stall)
        if fault.close:
            if fault.reply:
                await server.push(fault.reply)
            assert server.transport is not None
            server.transport.close()
            return "421 4.4.2 closing"  # written to a closed line: never seen
        assert fault.reply is not None
        return fault.reply

    async def handle_MAIL(
        self, server: SMTP, session: Any, envelope: Any, address: str, options: list[str]
    ) -> str:
        f = self.fault("MAIL", None)
        if f is not None:
            return await self.apply(server, f)
        if not self.take_token():
            return "454 4.7.0 Throttling failure: Maximum sending rate exceeded."
        envelope.mail_from = address
        envelope.mail_options.extend(options)
        return "250 OK"

    async def handle_RCPT(
        self, server: SMTP, session: Any, envelope: Any, address: str, options: list[str]
    ) -> str:
        f = self.fault("RCPT", address)
        if f is not None:
            return await self.apply(server, f)
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Any, envelope: Any) -> str:
        while self.hold is not None and not self.hold.is_set():
            await asyncio.sleep(0.01)
        if self.delay:
            with self.lock:
                self.awaiting += 1
                self.peak_awaiting = max(self.peak_awaiting, self.awaiting)
            try:
                await asyncio.sleep(self.delay)
            finally:
                with self.lock:
                    self.awaiting -= 1
        rcpt = envelope.rcpt_tos[0] if envelope.rcpt_tos else None
        f = self.fault("DATA", rcpt)
        data = envelope.original_content or envelope.content
        if f is not None and not f.keep:
            return await self.apply(server, f)
        with self.lock:
            self.received.append(Delivered(list(envelope.rcpt_tos), data))
        if f is not None:
            return await self.apply(server, f)
        return "250 2.0.0 OK queued"


class _FaultSMTP(SMTP):
    def __init__(self, handler: FaultHandler, **kw: Any) -> None:
        super().__init__(handler, **kw)
        self.fault_handler = handler

    _counted = False
    _refused = False

    def connection_made(self, transport: Any) -> None:
        h = self.fault_handler
        with h.lock:
            h.connections += 1
            self._refused = bool(h.max_connections) and h.open >= h.max_connections
            if self._refused:
                h.refused += 1
            else:
                h.open += 1
                h.peak = max(h.peak, h.open)
                self._counted = True
        if self._refused:
            transport.write(b"421 4.7.0 Too many connections from your host, try later\r\n")
            transport.close()
            return
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._counted:
            with self.fault_handler.lock:
                self.fault_handler.open -= 1
            self._counted = False
        if not self._refused:
            super().connection_lost(exc)

    async def smtp_QUIT(self, arg: str) -> None:
        if self.fault_handler.on_quit is not None:
            self.fault_handler.on_quit()
        await super().smtp_QUIT(arg)

    async def smtp_DATA(self, arg: str) -> None:
        rcpt = self.envelope.rcpt_tos[0] if self.envelope and self.envelope.rcpt_tos else None
        f = self.fault_handler.fault("DATA-CMD", rcpt)
        if f is not None:
            if f.reply:
                await self.push(f.reply)
            if f.close:
                assert self.transport is not None
                self.transport.close()
            return
        await super().smtp_DATA(arg)


class _Controller(Controller):
    def factory(self) -> SMTP:
        return _FaultSMTP(self.handler, **self.SMTP_kwargs)


@dataclass
class FaultServer:
    host: str
    port: int
    handler: FaultHandler

    @property
    def received(self) -> list[Delivered]:
        with self.handler.lock:
            return list(self.handler.received)

    def ids_by_rcpt(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for d in self.received:
            for r in d.rcpt_tos:
                out.setdefault(r, []).append(d.message_id)
        return out

    def count_by_rcpt(self) -> Counter[str]:
        return Counter(r for d in self.received for r in d.rcpt_tos)


@contextmanager
def fault_server(
    plan: Plan | None = None,
    *,
    refuse_login: bool = False,
    pipelining: bool = False,
    delay: float = 0.0,
    handler: FaultHandler | None = None,
) -> Iterator[FaultServer]:
    """The relay, on a free port while the block lasts; ``handler`` replaces the one built from
    ``plan``, ``pipelining`` and ``delay`` (a test's own subclass)."""
    handler = handler or FaultHandler(plan, pipelining=pipelining, delay=delay)
    port = free_port()
    kw: dict[str, Any] = {}
    if refuse_login:
        kw = {
            "auth_require_tls": False,
            "authenticator": lambda *a: AuthResult(success=False, handled=False),
        }
    controller = _Controller(handler, hostname="127.0.0.1", port=port, **kw)
    controller.start()
    handler.connections = handler.peak = 0  # start() connects once to check the server is up
    try:
        yield FaultServer("127.0.0.1", port, handler)
    finally:
        controller.stop()
        asyncio.set_event_loop(None)


@contextmanager
def serving(server: socket.socket, serve: Callable[[threading.Event], None]) -> Iterator[int]:
    """Run ``serve(done)`` in a thread while the block lasts (``done`` is set at its end); yields
    the listening ``server``'s port, and closes it once the thread is done."""
    done = threading.Event()
    thread = threading.Thread(target=serve, args=(done,), daemon=True)
    thread.start()
    try:
        yield int(server.getsockname()[1])
    finally:
        done.set()
        thread.join()
        server.close()
