"""An SMTP sink that only counts: ``python -m bench.smtp_counter PORT``.

Accepts every message on 127.0.0.1:PORT without storing or parsing it, prints ``ready`` once
listening, and on SIGTERM prints how many messages it accepted. The benchmarks run it in a process
of its own so its work is not counted as the product's.

It speaks just enough SMTP for a client (EHLO/HELO, MAIL, RCPT, DATA, RSET, NOOP, QUIT; it
offers PIPELINING, as Postfix, Amazon SES and Mailgun do) on a bare ``asyncio.Protocol``: on a machine with two cores the sink
competes with the processes being measured, and aiosmtpd spends several times more CPU per
message than this does. ``--aiosmtpd`` runs the aiosmtpd sink instead, for comparison.

``--stats FILE``: on SIGTERM also write a JSON summary to FILE (messages, distinct recipients,
bytes, median size) and, beside it as FILE.eml, the received message (of the first 200) whose size
is closest to the median: a typical digest of the run, for a raw baseline to send again.
"""

from __future__ import annotations

import asyncio
import json
import signal
import statistics
import sys
from pathlib import Path
from typing import Any

END = b"\r\n.\r\n"
KEEP = 200
"""Messages kept whole (the first ones) to pick the typical one from."""


class Stats:
    """What the sink received: counts, sizes, recipients, and the first few messages."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.recipients: set[str] = set()
        self.kept: list[bytes] = []

    def add(self, rcpts: list[str], size: int, data: bytes | None) -> None:
        self.sizes.append(size)
        self.recipients.update(rcpts)
        if data is not None and len(self.kept) < KEEP:
            self.kept.append(data)

    @property
    def wants_data(self) -> bool:
        return len(self.kept) < KEEP

    def write(self, path: Path) -> None:
        median = statistics.median(self.sizes) if self.sizes else 0
        typical = min(self.kept, key=lambda d: abs(len(d) - median), default=b"")
        path.with_suffix(".eml").write_bytes(typical)
        path.write_text(
            json.dumps(
                {
                    "messages": len(self.sizes),
                    "recipients": len(self.recipients),
                    "bytes": sum(self.sizes),
                    "median_size": median,
                    "typical_size": len(typical),
                }
            )
        )


STATS = Stats()


def _address(line: bytes) -> str:
    """``RCPT TO:<a@b> SIZE=1`` -> ``a@b``."""
    arg = line[8:].decode("utf-8", "replace").strip()
    return arg.split(">", 1)[0].lstrip("<").strip().lower()


class Sink(asyncio.Protocol):
    count = 0

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.buffer = bytearray()
        self.in_data = False
        self._scanned = 0
        self.rcpts: list[str] = []
        transport.write(b"220 counter ESMTP\r\n")

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            if self.in_data:
                # the end of DATA may straddle two reads: look a few bytes back
                if self.buffer.startswith(b".\r\n"):  # an empty message
                    self.buffer[:0] = b"\r\n"
                at = self.buffer.find(END, max(0, self._scanned - 4))
                if at < 0:
                    self._scanned = len(self.buffer)
                    return
                self._message(at)
                del self.buffer[: at + len(END)]
                self.in_data = False
                continue
            end = self.buffer.find(b"\r\n")
            if end < 0:
                return
            line = bytes(self.buffer[:end])
            del self.buffer[: end + 2]
            self._command(line)

    def body(self, at: int) -> bytes:
        """The message ending at ``at`` in the buffer, dot-stuffing undone: the client's bytes."""
        return bytes(self.buffer[:at]).replace(b"\r\n..", b"\r\n.") + b"\r\n"

    def _message(self, at: int) -> None:
        """A message's final dot came (its data is ``buffer[:at]``): count it and answer."""
        STATS.add(self.rcpts, at + 2, self.body(at) if STATS.wants_data else None)
        self.rcpts = []
        Sink.count += 1
        self.transport.write(b"250 OK\r\n")

    def _command(self, line: bytes) -> None:
        verb = line[:4].upper()
        if verb in (b"EHLO", b"HELO"):
            self.transport.write(
                b"250-counter\r\n250-PIPELINING\r\n250-8BITMIME\r\n250-SMTPUTF8\r\n250 SIZE 0\r\n"
            )
        elif verb == b"DATA":
            self.in_data = True
            self._scanned = 0
            self.transport.write(b"354 end with <CRLF>.<CRLF>\r\n")
        elif verb == b"RCPT":
            self.rcpts.append(_address(line))
            self.transport.write(b"250 OK\r\n")
        elif verb == b"RSET" or verb == b"MAIL":
            self.rcpts = []
            self.transport.write(b"250 OK\r\n")
        elif verb == b"QUIT":
            self.transport.write(b"221 bye\r\n")
            self.transport.close()
        else:  # MAIL, RCPT, RSET, NOOP and anything else
            self.transport.write(b"250 OK\r\n")


async def serve(port: int) -> int:
    loop = asyncio.get_running_loop()
    await _until_signalled(await loop.create_server(Sink, "127.0.0.1", port))
    return Sink.count


async def _until_signalled(server: asyncio.Server) -> None:
    """Say ``ready``, serve until SIGTERM or SIGINT, then close."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    print("ready", flush=True)
    await stop.wait()
    server.close()


async def serve_aiosmtpd(port: int) -> int:
    from aiosmtpd.smtp import SMTP

    class Counter:
        count = 0

        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
            self.count += 1
            content = envelope.original_content or envelope.content
            data = bytes(content) if STATS.wants_data else None
            STATS.add([str(r).lower() for r in envelope.rcpt_tos], len(content), data)
            return "250 OK"

    handler = Counter()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: SMTP(handler, data_size_limit=None, ident="counter"), "127.0.0.1", port
    )
    await _until_signalled(server)
    return handler.count


def main() -> None:
    port = int(sys.argv[1])
    run = serve_aiosmtpd if "--aiosmtpd" in sys.argv else serve
    count = asyncio.run(run(port))
    if "--stats" in sys.argv:
        STATS.write(Path(sys.argv[sys.argv.index("--stats") + 1]))
    print(count, flush=True)


if __name__ == "__main__":
    main()
