"""``newsletter serve``: everything one machine needs, in one process.

The web app (uvicorn, in the main thread, which owns the signal handlers), the scheduler
(APScheduler background threads: fetches and the edition tick) and, when ``inbound.address``
is configured, the email-command receiver. SIGTERM or Ctrl-C stops uvicorn; the send loop is
then told to stop, finishes the message in flight, and the scheduler is shut down waiting for
it, so the ledger is left consistent.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import datetime
from types import FrameType
from typing import Any

from newsletter.config import Config
from newsletter.runs import fetch_step, send_step
from newsletter.scheduler import Jobs, build_scheduler, due_filter
from newsletter.store import Store

log = logging.getLogger(__name__)


def make_jobs(config: Config, store: Store, stop: threading.Event) -> Jobs:
    def fetch(now: datetime) -> None:
        fetch_step(config, store, now)

    def send_due(now: datetime) -> None:
        if config.settings.workers is not None:
            from newsletter.workers import send_with_workers

            # enqueue the due chunks and wait for them, so the next tick does not queue them again
            send_with_workers(
                config, store, now, kind="scheduled", due=due_filter(config, now), stop=stop
            )
            return
        send_step(config, store, now, kind="scheduled", due=due_filter(config, now), stop=stop)

    return Jobs(fetch=fetch, send_due=send_due)


def _server_class() -> Any:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn without its own signal handling: it re-raises SIGTERM after shutting down,
        which would kill the process before the send loop finished its message."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return Server


def run_service(
    config: Config, store: Store, *, host: str, port: int, scheduler: bool = True
) -> None:
    import uvicorn

    from newsletter.web import create_app

    stop = threading.Event()
    jobs = make_jobs(config, store, stop)
    app = create_app(config, store)
    app.state.jobs = jobs
    server = _server_class()(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            proxy_headers=True,
            forwarded_allow_ips=config.settings.web.forwarded_allow_ips,
            log_level="warning",
            access_log=False,
        )
    )
    with ExitStack() as stack:
        sched = None
        if scheduler:
            sched = build_scheduler(config, jobs)
            sched.start()
            log.info("scheduler started", extra={"jobs": [j.name for j in sched.get_jobs()]})
        if config.settings.inbound.address:
            from newsletter.inbound import InboundServer
            from newsletter.subscribe import Subscriptions

            stack.enter_context(
                InboundServer(Subscriptions(config, store), config.settings.inbound)
            )
            log.info(
                "inbound email commands on %s:%s",
                config.settings.inbound.host,
                config.settings.inbound.port,
            )

        def on_signal(signum: int, frame: FrameType | None) -> None:
            log.info(
                "received %s: finishing the message in flight, then stopping",
                signal.Signals(signum).name,
            )
            stop.set()
            server.should_exit = True

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            server.run()  # returns once a signal asked it to exit
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            stop.set()
            if sched is not None:
                sched.shutdown(wait=True)  # waits for a running tick: it stops after its message
            log.info("stopped cleanly")
