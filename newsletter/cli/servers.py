"""The long-running commands: ``serve``, ``worker``, ``inbound`` and ``sink``.

``serve`` runs the web app, the scheduler and the inbound receiver in one process
(:func:`newsletter.operations.serve.run_service`, on the command's one
:class:`~newsletter.services.Services`); ``worker`` starts a Celery worker (each of its
processes builds its own); ``inbound`` answers email commands alone; ``sink`` is a local SMTP
server that keeps every message, for trying things out.
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path

import click

from newsletter.cli import output
from newsletter.cli.app import Context, cli, errors
from newsletter.cli.output import fail


@cli.command()
@click.option(
    "--concurrency",
    type=click.IntRange(1, 256),
    default=None,
    help="Chunks worked on at once (default: the number of CPUs).",
)
@click.option(
    "--pool",
    type=click.Choice(["prefork", "threads", "solo"]),
    default="prefork",
    show_default=True,
    help="prefork: one process per chunk at once; solo: this process only (one per container).",
)
@click.option(
    "--name", default=None, help="Worker name; %h is the host name (default: newsletter-PID@%h)."
)
@click.option(
    "--ping",
    is_flag=True,
    help="Do not start a worker: exit 0 if the worker called --name answers (a healthcheck).",
)
@click.pass_obj
def worker(obj: Context, concurrency: int | None, pool: str, name: str | None, ping: bool) -> None:
    """Render and send the chunks of editions that 'newsletter send' and the scheduler queue.

    Needs a workers: section in the config (broker, queue) and PostgreSQL shared by every
    worker. Start as many as needed, on as many machines. SIGTERM finishes the chunk in flight;
    a worker that dies leaves its chunk to the others (after workers.visibility_timeout), and
    the ledger makes sure no edition is sent twice.
    """
    from newsletter.edition.workers import run_worker

    with errors():
        config = obj.config
        if config.settings.workers is None:
            fail(
                f"{config.path}: no workers: section; add one (see config/newsletter.example.yaml) "
                "to send with Celery workers"
            )
        if ping:
            from newsletter.edition.workers import node_name, ping_worker

            if not name:
                fail("--ping needs the --name of the worker to ask")
            if not ping_worker(config, name):
                fail(f"worker {node_name(name)} did not answer on the broker")
            output.console.print(f"worker {node_name(name)} answered", highlight=False)
            return
        code = run_worker(config, concurrency=concurrency, pool=pool, name=name)
    sys.exit(code)


@cli.command()
@click.option("--host", default=None, help="Address to listen on (default: web.host).")
@click.option("--port", default=None, type=int, help="Port (default: web.port).")
@click.option(
    "--no-scheduler", is_flag=True, help="Web pages only: no scheduled fetches or editions."
)
@click.pass_obj
def serve(obj: Context, host: str | None, port: int | None, no_scheduler: bool) -> None:
    """Run everything one machine needs: web pages, scheduler, inbound email commands.

    The scheduler fetches sources after arXiv's announcements and sends each subscriber's
    edition at their local hour (schedule: in the config). SIGTERM or Ctrl-C finishes the
    message in flight, then stops.
    """
    from newsletter.operations.serve import run_service
    from newsletter.services.link_tokens import admin_token, signing_key

    with errors():
        config = obj.config
        signing_key(config)  # refuse to start without a strong link-signing key
        admin_token(config)  # ... or with a weak admin token
        web = config.settings.web
        host, port = host or web.host, port or web.port
        run_service(
            obj.services(),
            host=host,
            port=port,
            scheduler=not no_scheduler,
            listening=lambda: output.console.print(
                f"Serving on http://{host}:{port} (public URL: {config.settings.sender.base_url}).",
                highlight=False,
            ),
        )


@cli.command()
@click.option("--host", default=None, help="Address to listen on (default: inbound.host).")
@click.option("--port", default=None, type=int, help="Port (default: inbound.port).")
@click.pass_obj
def inbound(obj: Context, host: str | None, port: int | None) -> None:
    """Answer email commands (subscribe, unsubscribe, topics, help) sent to the request address,
    and process bounces and complaints sent to the bounce address (bounces.enabled)."""
    from newsletter.operations.inbound_mail import InboundServer
    from newsletter.subscribe import Subscriptions

    with errors():
        settings = obj.config.settings.inbound.model_copy(
            update={k: v for k, v in (("host", host), ("port", port)) if v is not None}
        )
        service = Subscriptions(obj.services())
        with InboundServer(service, settings):
            kind = "LMTP" if settings.lmtp else "SMTP"
            output.console.print(
                f"Answering email commands by {kind} on {settings.host}:{settings.port}"
                f" for {settings.address or 'any recipient'}. Ctrl-C stops it.",
                highlight=False,
            )
            with contextlib.suppress(KeyboardInterrupt):
                while True:
                    time.sleep(3600)


@cli.command()
@click.option(
    "--maildir",
    default="var/sink",
    type=click.Path(file_okay=False, path_type=Path),
    show_default=True,
)
@click.option("--port", default=2525, show_default=True, help="Port on 127.0.0.1.")
def sink(maildir: Path, port: int) -> None:
    """Run a local SMTP server that stores every message in a Maildir (for trying things out)."""
    from newsletter.operations.smtp_sink import MaildirSink

    with errors(), MaildirSink(maildir, port=port):
        output.console.print(
            f"SMTP sink on 127.0.0.1:{port}, storing into {maildir}. Ctrl-C stops it."
        )
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)
