"""What sending costs in threads against one thread: ``python -m bench.smtp_mux [N]``.

A probe (issue 30), not a target: ``N`` messages of 62 KB over four connections into the
aiosmtpd sink (``bench.smtp_counter --aiosmtpd``, its own process), twice each way,
interleaved:

- **threads**: ``smtplib`` ``sendmail`` in four threads, as the send pool's senders do today
  (and as the send benchmark's raw baseline does);
- **one thread**: the same SMTP dialogue (EHLO, MAIL, RCPT, DATA, data and the final dot, QUIT)
  on four non-blocking sockets driven by one :mod:`selectors` loop.

It prints the CPU (this process's) and the wall time of each. On a 2-core machine the sink sets
the pace, so the wall times match. The CPU gap is that of four threads with nothing else to
do; it is not what a send saves by running its connections on one loop: the pool rebuilt that
way cost the same CPU as its four threads, whose time in a send goes mostly to waiting for the
relay and the ledger (bench/history/send.md, sixth session).
"""

from __future__ import annotations

import selectors
import socket
import sys
import time
from pathlib import Path

POOL = 4
MESSAGE = (
    b"Subject: x\r\nFrom: a@b.example\r\nTo: d@e.example\r\n\r\n" + (b"x" * 76 + b"\r\n") * 800
)


def in_threads(port: int, n: int, data: bytes = MESSAGE) -> None:
    """``n`` messages by ``smtplib`` in POOL threads, one connection each: the raw baseline of
    the delivery and send benchmarks (:func:`bench.bench_deliver.raw_smtplib`)."""
    from bench.bench_deliver import POOL as DELIVER_POOL
    from bench.bench_deliver import raw_smtplib

    assert DELIVER_POOL == POOL
    raw_smtplib(port, n, data)


class _Connection:
    """One non-blocking SMTP connection: what is left to write, what was read, where it is."""

    def __init__(self, port: int, sel: selectors.BaseSelector) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setblocking(False)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sel = sel
        self.read = b""
        self.out = b""
        self.state = "greeting"
        self.rcpt = ""
        sel.register(self.sock, selectors.EVENT_READ, self)

    def send(self, data: bytes) -> None:
        self.out += data
        self.flush()

    def flush(self) -> None:
        if self.out:
            try:
                sent = self.sock.send(self.out)
            except BlockingIOError:
                sent = 0
            self.out = self.out[sent:]
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if self.out else 0)
        self.sel.modify(self.sock, events, self)


_EXPECT = {"greeting": 220, "ehlo": 250, "mail": 250, "rcpt": 250, "data": 354, "dot": 250}


def in_one_thread(port: int, n: int, data: bytes = MESSAGE) -> None:
    """``n`` messages over POOL non-blocking connections driven by one selector loop; raises
    on a reply it does not expect."""
    assert not data.endswith(b"\r\n.\r\n") and b"\r\n." not in data  # no dot-stuffing needed
    sel = selectors.DefaultSelector()
    todo = iter(range(n))
    open_ = [_Connection(port, sel) for _ in range(POOL)]
    left = len(open_)

    def next_message(c: _Connection) -> None:
        i = next(todo, None)
        if i is None:
            c.send(b"QUIT\r\n")
            c.state = "quit"
            return
        c.rcpt = f"r{i}@e.example"
        c.send(b"MAIL FROM:<a@b.example>\r\n")
        c.state = "mail"

    while left:
        for key, events in sel.select(timeout=30):
            c: _Connection = key.data
            if events & selectors.EVENT_WRITE:
                c.flush()
            if not events & selectors.EVENT_READ:
                continue
            got = c.sock.recv(65536)
            if not got:
                raise ConnectionError(f"the relay closed the connection at {c.state}")
            c.read += got
            while b"\r\n" in c.read:
                line, c.read = c.read.split(b"\r\n", 1)
                if line[3:4] == b"-":
                    continue  # a multi-line reply goes on
                if c.state == "quit":
                    sel.unregister(c.sock)
                    c.sock.close()
                    left -= 1
                    break
                if int(line[:3]) != _EXPECT[c.state]:
                    raise RuntimeError(f"unexpected reply at {c.state}: {line!r}")
                if c.state == "greeting":
                    c.send(b"EHLO bench\r\n")
                    c.state = "ehlo"
                elif c.state in ("ehlo", "dot"):
                    next_message(c)
                elif c.state == "mail":
                    c.send(f"RCPT TO:<{c.rcpt}>\r\n".encode())
                    c.state = "rcpt"
                elif c.state == "rcpt":
                    c.send(b"DATA\r\n")
                    c.state = "data"
                elif c.state == "data":
                    c.send(data + b".\r\n")
                    c.state = "dot"
    sel.close()


def main(n: int) -> list[tuple[str, float, float]]:
    """Both ways twice, interleaved, into one sink (the send benchmark's): (name, CPU s, wall s)
    each."""
    from tempfile import TemporaryDirectory

    from bench.bench_send import Sink

    out: list[tuple[str, float, float]] = []
    with TemporaryDirectory() as tmp:
        sink = Sink(Path(tmp), "mux")
        try:
            for name, run in [("threads", in_threads), ("one thread", in_one_thread)] * 2:
                cpu, wall = time.process_time(), time.perf_counter()
                run(sink.port, n)
                out.append((name, time.process_time() - cpu, time.perf_counter() - wall))
        finally:
            sink.stop()
    return out


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    for name, cpu, wall in main(count):
        print(f"{name:10s}  {count:,} messages: CPU {cpu:.2f} s, wall {wall:.2f} s")
