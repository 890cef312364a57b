"""An SMTP sink that only counts: ``python -m bench.smtp_counter PORT``.

Accepts every message on 127.0.0.1:PORT without storing or parsing it, prints ``ready`` once
listening, and on SIGTERM prints how many messages it accepted. The benchmarks run it in a process
of its own so its work is not counted as the product's.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import Any

from aiosmtpd.smtp import SMTP


class Counter:
    def __init__(self) -> None:
        self.count = 0

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.count += 1
        return "250 OK"


async def serve(port: int) -> int:
    handler = Counter()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: SMTP(handler, data_size_limit=None, ident="counter"), "127.0.0.1", port
    )
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    print("ready", flush=True)
    await stop.wait()
    server.close()
    return handler.count


def main() -> None:
    count = asyncio.run(serve(int(sys.argv[1])))
    print(count, flush=True)


if __name__ == "__main__":
    main()
