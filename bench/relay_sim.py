"""A relay across the internet, on loopback: ``python -m bench.relay_sim PORT [options]``.

Speaks the SMTP a client needs (EHLO/HELO with PIPELINING, MAIL, RCPT, DATA, RSET, NOOP, QUIT)
on a bare ``asyncio.Protocol``, as :mod:`bench.smtp_counter` does, and behaves as a distant
relay (Amazon SES, Mailgun, a university's Postfix) does:

- ``--dot MS``: answers each final dot after MS milliseconds (the relay queues the message
  first: 50-400 ms across the internet);
- ``--command MS``: answers every other command after MS milliseconds (the round trip);
- ``--connections N``: takes N connections at once; one more is greeted with
  ``421 4.7.0 Too many connections`` and closed;
- ``--quota Q``: takes Q messages a second (a token bucket holding one second's worth); a
  ``MAIL`` beyond it is answered ``454 4.7.0 Throttling failure: Maximum sending rate
  exceeded`` (Amazon SES's words).

Replies on one connection always leave in order. Prints ``ready`` once listening; on SIGTERM
writes ``--stats FILE`` (JSON: messages, distinct recipients, duplicates, throttling replies,
connections refused, the most connections open at once, the first and last acceptance times,
and beside it as FILE.eml the message whose size is the median of the first 200) and prints
the message count. It runs in a process of its own: its work is not the product's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.smtp_counter import Sink, _address
from bench.smtp_counter import _until_signalled as until_signalled

KEEP = 200


class Relay:
    """What the relay does and what it saw (one per process)."""

    def __init__(self, dot: float, command: float, connections: int, quota: float) -> None:
        self.dot = dot
        self.command = command
        self.connections = connections
        self.quota = quota
        self.tokens = quota
        self.refilled = time.monotonic()
        self.open = 0
        self.peak = 0
        self.refused = 0
        self.throttled = 0
        self.recipients: Counter[str] = Counter()
        self.sizes: list[int] = []
        self.kept: list[bytes] = []
        self.awaiting = 0
        self.peak_awaiting = 0
        """The most messages at once past their final dot and not answered yet."""
        self.first: float | None = None
        self.last: float | None = None

    def take_token(self) -> bool:
        if not self.quota:
            return True
        now = time.monotonic()
        self.tokens = min(self.quota, self.tokens + (now - self.refilled) * self.quota)
        self.refilled = now
        if self.tokens < 1:
            self.throttled += 1
            return False
        self.tokens -= 1
        return True

    def accepted(self, rcpts: list[str], size: int, data: bytes | None) -> None:
        now = time.time()
        self.first = self.first if self.first is not None else now
        self.last = now
        self.sizes.append(size)
        self.recipients.update(rcpts)
        if data is not None and len(self.kept) < KEEP:
            self.kept.append(data)

    def stats(self) -> dict[str, Any]:
        median = statistics.median(self.sizes) if self.sizes else 0
        return {
            "messages": len(self.sizes),
            "recipients": len(self.recipients),
            "duplicates": sum(n - 1 for n in self.recipients.values() if n > 1),
            "throttled": self.throttled,
            "refused_connections": self.refused,
            "peak_connections": self.peak,
            "peak_awaiting": self.peak_awaiting,
            "first": self.first,
            "last": self.last,
            "median_size": median,
        }

    def typical(self) -> bytes:
        median = statistics.median(self.sizes) if self.sizes else 0
        return min(self.kept, key=lambda d: abs(len(d) - median), default=b"")


RELAY: Relay


class Session(Sink):
    """One client connection: the counting sink's parsing, this relay's answers."""

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.loop = asyncio.get_running_loop()
        self.buffer = bytearray()
        self.in_data = False
        self._scanned = 0
        self.mail = False
        self.rcpts: list[str] = []
        self.next_at = 0.0
        self.counted = False
        if RELAY.connections and RELAY.open >= RELAY.connections:
            RELAY.refused += 1
            transport.write(b"421 4.7.0 Too many connections from your host, try again later\r\n")
            transport.close()
            return
        self.counted = True
        RELAY.open += 1
        RELAY.peak = max(RELAY.peak, RELAY.open)
        transport.write(b"220 relay-sim ESMTP\r\n")

    def connection_lost(self, exc: Exception | None) -> None:
        if self.counted:
            RELAY.open -= 1
            self.counted = False

    def reply(self, text: bytes, delay: float, *, answered: bool = False) -> None:
        """Write ``text`` after ``delay`` seconds, never before an earlier reply (``answered``:
        it answers a final dot)."""
        at = max(self.loop.time() + delay, self.next_at)
        self.next_at = at
        if at <= self.loop.time():
            self._write(text, answered)
        else:
            self.loop.call_at(at, self._write, text, answered)

    def _write(self, text: bytes, answered: bool = False) -> None:
        if answered:
            RELAY.awaiting -= 1
        if not self.transport.is_closing():
            self.transport.write(text)

    def _message(self, at: int) -> None:
        RELAY.accepted(self.rcpts, at + 2, self.body(at) if len(RELAY.kept) < KEEP else None)
        self.rcpts, self.mail = [], False
        RELAY.awaiting += 1
        RELAY.peak_awaiting = max(RELAY.peak_awaiting, RELAY.awaiting)
        self.reply(b"250 2.0.0 Ok: queued\r\n", RELAY.dot, answered=True)

    def _command(self, line: bytes) -> None:
        verb = line[:4].upper()
        wait = RELAY.command
        if verb in (b"EHLO", b"HELO"):
            self.reply(b"250-relay-sim\r\n250-PIPELINING\r\n250-8BITMIME\r\n250 SIZE 0\r\n", wait)
        elif verb == b"MAIL":
            if RELAY.take_token():
                self.mail = True
                self.reply(b"250 2.1.0 Ok\r\n", wait)
            else:
                self.reply(
                    b"454 4.7.0 Throttling failure: Maximum sending rate exceeded.\r\n", wait
                )
        elif verb == b"RCPT":
            if self.mail:
                self.rcpts.append(_address(line))
                self.reply(b"250 2.1.5 Ok\r\n", wait)
            else:
                self.reply(b"503 5.5.1 Error: need MAIL command\r\n", wait)
        elif verb == b"DATA":
            if self.mail and self.rcpts:
                self.in_data = True
                self._scanned = 0
                self.reply(b"354 End data with <CR><LF>.<CR><LF>\r\n", wait)
            else:
                self.reply(b"503 5.5.1 Error: need RCPT command\r\n", wait)
        elif verb == b"RSET":
            self.rcpts, self.mail = [], False
            self.reply(b"250 2.0.0 Ok\r\n", wait)
        elif verb == b"QUIT":
            self.reply(b"221 2.0.0 Bye\r\n", 0)
            self.loop.call_at(self.next_at, self.transport.close)
        else:
            self.reply(b"250 2.0.0 Ok\r\n", wait)


async def serve(port: int) -> None:
    loop = asyncio.get_running_loop()
    await until_signalled(await loop.create_server(Session, "127.0.0.1", port, backlog=512))


def main() -> None:
    global RELAY
    parser = argparse.ArgumentParser(prog="python -m bench.relay_sim")
    parser.add_argument("port", type=int)
    parser.add_argument("--dot", type=float, default=0.0, help="ms before the final dot's 250")
    parser.add_argument("--command", type=float, default=0.0, help="ms before other replies")
    parser.add_argument("--connections", type=int, default=0, help="connections taken at once")
    parser.add_argument("--quota", type=float, default=0.0, help="messages taken a second")
    parser.add_argument("--stats", type=Path)
    args = parser.parse_args()
    RELAY = Relay(args.dot / 1000, args.command / 1000, args.connections, args.quota)
    asyncio.run(serve(args.port))
    if args.stats is not None:
        args.stats.write_text(json.dumps(RELAY.stats()))
        args.stats.with_suffix(".eml").write_bytes(RELAY.typical())
    print(len(RELAY.sizes), flush=True)


if __name__ == "__main__":
    main()
