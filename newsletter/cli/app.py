"""The ``newsletter`` group: its options, the per-command context and the error handling.

:data:`cli` is the click group every command module registers on (:class:`CommandGroup` gives
each command its own ``-c/--config``); :class:`Context` loads the config once and builds the
command's one :class:`~newsletter.services.Services` (store, relay, tokens, clock), closed when
the command ends; :func:`errors` turns newsletter's own errors into one ``error:`` line and the
exit status of their kind.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

import click

from newsletter import __version__
from newsletter.cli import output
from newsletter.cli.output import fail
from newsletter.clock import utcnow
from newsletter.errors import NewsletterError
from newsletter.models import Subscriber

if TYPE_CHECKING:
    # Imported when used: the config (pydantic, YAML) and the store (SQLAlchemy) take about
    # 0.3 s to import, and `newsletter --help` or `newsletter cache show` need neither; the
    # services load the renderer, the relay and DKIM.
    from newsletter.config import Config
    from newsletter.services import Services
    from newsletter.store import Store


@dataclass
class Context:
    """What every command shares: the config (loaded on first use), the stores it opened
    (closed when the command ends) and its one :class:`~newsletter.services.Services`."""

    config_path: str | None
    started: float = field(default_factory=time.monotonic)
    """When the command started (``time.monotonic``): the process's start-up when run as
    ``newsletter``, so a "Took" line includes start-up, config and database set-up."""
    clock: Callable[[], datetime] = utcnow
    """The wall clock of the command's :class:`~newsletter.services.Services`: every ``now``
    the command uses is read from it (a program embedding the command can pass its own)."""
    _config: Config | None = None
    _stores: list[Store] = field(default_factory=list)
    _services: Services | None = None

    @property
    def config(self) -> Config:
        """The command's config, loaded once."""
        if self._config is None:
            from newsletter.config import load_config

            self._config = load_config(self.config_path)
        return self._config

    def open_store(self) -> Store:
        """The configured database, connected (one clear error when it cannot be)."""
        from newsletter.config import ENV_DATABASE_URL
        from newsletter.store import Store

        config = self.config
        where = (
            f"${ENV_DATABASE_URL}"
            if os.environ.get(ENV_DATABASE_URL)
            else f"database.url in {config.path}"
        )
        store = Store(
            config.database_url,
            where=where,
            reconnect_seconds=config.settings.database.reconnect_seconds,
        )
        self._stores.append(store)
        store.check_connection()
        return store

    def close(self) -> None:
        """Close every store this command opened (and forget its services)."""
        for store in self._stores:
            store.close()
        self._stores.clear()
        self._services = None

    def services(self) -> Services:
        """This command's effects (:class:`~newsletter.services.Services`) over its database
        (the store it opened, else a new one; schema checked) and on :attr:`clock`, built once
        and passed down."""
        if self._services is None:
            from newsletter.services import Services

            store = self._stores[-1] if self._stores else self.open_store()
            store.check_schema()
            self._services = Services(self.config, store, clock=self.clock)
        return self._services

    def store(self) -> Store:
        """The command's database, schema checked: its :class:`Services`' store."""
        return self.services().store


def _open_stores() -> list[Store]:
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_object(Context) if ctx is not None else None
    return list(obj._stores) if obj is not None else []


@contextmanager
def errors() -> Iterator[None]:
    """Turn newsletter's own errors, and a database that fails under a command, into one clear
    line on stderr and the exit status of their kind (:class:`ExitStatus`).

    The Store raises every database failure of its methods as a :class:`StoreError` (a
    ``NewsletterError``). The ``DBAPIError`` branch is for the one place that still uses the
    database raw: the send path's ledger writer opens connections on ``store.engine`` itself.
    """
    from sqlalchemy.exc import DBAPIError

    try:
        yield
    except NewsletterError as e:
        fail(str(e), e.exit_status)
    except DBAPIError as e:  # store.engine used directly (the ledger writer); see above
        stores = _open_stores()
        error = stores[-1].error(e) if stores else None
        if error is None:
            fail(f"database error: {' '.join(str(e.orig).split())}")
        fail(str(error), error.exit_status)


NO_CONFIG = frozenset({"init", "sink"})
"""Commands that read no config: they take no ``--config`` of their own."""


def _config_after(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    obj = ctx.find_object(Context)
    if value is not None and obj is not None:
        obj.config_path = value


class CommandGroup(click.Group):
    """A group whose commands also take ``--config``/``-c`` after their name.

    ``newsletter fetch --config x.yaml`` is where people put it; it means the same as
    ``newsletter --config x.yaml fetch`` (given in both places, the later one wins). Added as
    each command is registered, so a new command gets it too; subgroups are of this class.
    """

    group_class = type

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        """Register ``cmd`` with its own ``--config``/``-c`` (unless it reads no config)."""
        if cmd.name not in NO_CONFIG and not any(p.name == "config_after" for p in cmd.params):
            cmd.params.append(
                click.Option(
                    ["--config", "-c", "config_after"],
                    metavar="FILE",
                    expose_value=False,
                    callback=_config_after,
                    help="Config file (the same as 'newsletter --config FILE').",
                )
            )
        super().add_command(cmd, name)


@click.group(
    cls=CommandGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.option(
    "--config",
    "-c",
    "config_path",
    envvar="NEWSLETTER_CONFIG",
    metavar="FILE",
    help="Config file (default: $NEWSLETTER_CONFIG, else ./newsletter.yaml).",
)
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
@click.option(
    "--log-format",
    type=click.Choice(["auto", "json", "text"]),
    default="auto",
    envvar="NEWSLETTER_LOG_FORMAT",
    show_default=True,
    help="Log lines (on stderr) as text or JSON; auto: text, but JSON for serve, worker and "
    "inbound when stderr is not a terminal.",
)
@click.version_option(__version__, prog_name="newsletter")
@click.pass_context
def cli(ctx: click.Context, config_path: str | None, verbose: int, log_format: str) -> None:
    """Email each subscriber a daily digest of the research papers trending in their topics.

    \b
    Getting started:
      newsletter init                 write a commented starter config
      newsletter db upgrade           create or migrate the database
      newsletter fetch                pull new papers from every source
      newsletter send --now           send today's digests
    """
    from newsletter.logs import SERVICES, setup_logging

    output.setup_output()
    service = ctx.invoked_subcommand in SERVICES
    setup_logging(verbose, log_format, service=service)  # type: ignore[arg-type]
    if isinstance(ctx.obj, Context):  # a program embedding the command made its context
        obj = ctx.obj
        obj.config_path = config_path or obj.config_path
    else:  # main() hands over when the process started; otherwise start now
        started = ctx.obj if isinstance(ctx.obj, float) else time.monotonic()
        obj = Context(config_path, started=started)
    ctx.obj = obj
    ctx.call_on_close(obj.close)


def known_subscriber(obj: Context, email: str, *, seed: bool = True) -> tuple[Store, Subscriber]:
    """The store and the subscriber with this address; a clear error when there is none.

    ``seed``: first add the config's ``subscribers:`` list, as commands that read them do.
    """
    from newsletter.subscriber_lists.from_config import seed_subscribers

    services = obj.services()
    store = services.store
    if seed:
        seed_subscribers(obj.config, store, now=services.clock())
    address = checked_address(email)
    sub = store.get_subscriber(address)
    if sub is None:
        fail(f"{address} is not a subscriber (see: newsletter subscribers list)")
    return store, sub


def checked_address(value: str) -> str:
    """``value`` as a normalized address; the command fails with the reason when it is not."""
    from newsletter.addresses import InvalidAddress, normalize_address

    try:
        return normalize_address(value)
    except InvalidAddress as e:
        fail(str(e))


def main() -> None:
    """The ``newsletter`` program."""
    from newsletter import STARTED

    try:
        cli(prog_name="newsletter", obj=STARTED)
    finally:
        # The command is over (its Services closed) and the process exits next. Reference
        # counting frees what is left either way, but the interpreter's shutdown also runs the
        # cyclic collector over every object still alive: after a send of 10,000 readers that
        # walk cost 0.4 s of the command's 10 s of CPU. Frozen objects are left out of it. (At
        # exit, Python does not promise finalizers of objects still alive anyway.)
        gc.freeze()
