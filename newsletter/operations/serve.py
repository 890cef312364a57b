"""``newsletter serve``: everything one machine needs, in one process.

The web app (uvicorn, in the main thread, which owns the signal handlers), the scheduler
(APScheduler background threads: fetches and the edition tick) and, when ``inbound.address``
is configured, the email-command receiver; with ``web.metrics_listen``, the metrics on a
loopback port. SIGTERM or Ctrl-C stops uvicorn; the send loop is
then told to stop, finishes the message in flight, and the scheduler is shut down waiting for
it, so the ledger is left consistent.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import datetime
from types import FrameType
from typing import Any

from newsletter.edition import SendRequest, Services, send
from newsletter.errors import NewsletterError, listen_error
from newsletter.runs.fetch import fetch_step
from newsletter.runs.scheduler import Jobs, build_scheduler, due_filter

log = logging.getLogger(__name__)


def make_jobs(services: Services, stop: threading.Event) -> Jobs:
    """The scheduler's jobs, on the process's ``services``: fetch the sources, and send the
    editions due at a tick (queued for the workers and waited for when ``workers:`` is set, so
    the next tick does not queue them again)."""
    config = services.config

    def fetch(now: datetime) -> None:
        fetch_step(services, now)

    def send_due(now: datetime) -> None:
        send(
            services, SendRequest(kind="scheduled", due=due_filter(config, now)), now=now, stop=stop
        )

    return Jobs(fetch=fetch, send_due=send_due, clock=services.clock)


def _server_class() -> Any:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn without its own signal handling: it re-raises SIGTERM after shutting down,
        which would kill the process before the send loop finished its message."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return Server


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port``; :class:`~newsletter.errors.PortInUse` (one line)
    when the port is taken."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as e:
        raise NewsletterError(
            f"cannot listen on {host}:{port}: {e.strerror}; check web.host or --host"
        ) from e
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as e:
        sock.close()
        raise listen_error(
            e,
            host,
            port,
            port_key="web.port (or pass --port)",
            host_key="web.host (or pass --host)",
        ) from e
    sock.set_inheritable(True)
    return sock


def run_service(
    services: Services,
    *,
    host: str,
    port: int,
    scheduler: bool = True,
    listening: Callable[[], None] | None = None,
) -> None:
    """Serve until SIGTERM or SIGINT; ``listening`` is called once every port is bound. The web
    app, the scheduler's jobs and the inbound receiver share the process's ``services``."""
    import uvicorn

    from newsletter.web import build_app
    from newsletter.web.metrics import listener as metrics_listener

    config, store = services.config, services.store
    if config.settings.workers is not None:  # its editions go to Celery: say now if it is missing
        from newsletter.edition.workers import require_celery

        require_celery(config)
    stop = threading.Event()
    jobs = make_jobs(services, stop)
    app = build_app(services)
    app.state.jobs = jobs
    server = _server_class()(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            proxy_headers=True,
            forwarded_allow_ips=config.settings.web.forwarded_allow_ips,
            log_level="warning",
            log_config=None,  # its lines go through our handler: JSON or text, never colours
            access_log=False,
        )
    )
    with ExitStack() as stack:
        sock = stack.enter_context(listen(host, port))
        metrics = metrics_listener(config, store, services.clock)  # web.metrics_listen, if set
        if metrics is not None:
            stack.enter_context(metrics)
        if config.settings.inbound.address:
            from newsletter.operations.inbound_mail import InboundServer
            from newsletter.subscribe import Subscriptions

            stack.enter_context(InboundServer(Subscriptions(services), config.settings.inbound))
            log.info(
                "inbound email commands on %s:%s",
                config.settings.inbound.host,
                config.settings.inbound.port,
            )

        sched = None
        if scheduler:
            sched = build_scheduler(config, jobs)
            sched.start()
            log.info("scheduler started", extra={"jobs": [j.name for j in sched.get_jobs()]})

        def on_signal(signum: int, frame: FrameType | None) -> None:
            log.info(
                "received %s: finishing the message in flight, then stopping",
                signal.Signals(signum).name,
            )
            stop.set()
            server.should_exit = True

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        if listening is not None:
            listening()
        try:
            server.run(sockets=[sock])  # returns once a signal asked it to exit
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            stop.set()
            if sched is not None:
                sched.shutdown(wait=True)  # waits for a running tick: it stops after its message
            log.info("stopped cleanly")
