"""The ``newsletter`` command: a thin layer over the same functions the scheduler and web use.

Each command parses its options, calls one domain function and prints what it returns; the
domain parts live elsewhere: :mod:`newsletter.seeding` (the config's subscribers),
:mod:`newsletter.importer` and :mod:`newsletter.exporter` (CSV in and out, one subscriber's
record), :mod:`newsletter.preview` (``rank`` and ``preview``), :mod:`newsletter.status`
(``status``), :mod:`newsletter.ingest` (the fetch report).

Why one long module: it is the click command tree, 23 commands of options, help text,
error wording and output formatting, which reads best in one place. What still makes it longer
than that: the send command's terminal side (``do_send``, ``send_by_workers``, ``SendProgress``,
``print_send_report``: the live progress, the workers' queue display and the summary table; the
send itself is :mod:`newsletter.edition`), and the operator's checks in ``subscribers add`` and
``subscribers set``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from newsletter import __version__
from newsletter.addresses import InvalidAddress, normalize_address, normalize_name
from newsletter.bounces import report as bounce_report
from newsletter.clock import utcnow
from newsletter.config import Config, load_config
from newsletter.errors import ExitStatus, NewsletterError
from newsletter.models import Subscriber, SubscriberStatus
from newsletter.seeding import seed_subscribers
from newsletter.store import Store
from newsletter.text import counted, strip_controls

if TYPE_CHECKING:  # imported when used: they load the renderer, the relay and DKIM
    from newsletter.edition import SendReport, SendRequest
    from newsletter.ingest import FetchReport
    from newsletter.services import Services

log = logging.getLogger(__name__)


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or already closed
        return False


def make_console(*, stderr: bool = False) -> Console:
    """A Rich console for stdout or stderr that writes escape codes only to a terminal.

    Colours and styles only when the stream is a terminal, ``NO_COLOR`` is unset and ``TERM`` is
    not ``dumb``; a pipe, a file or the journal gets plain text even when ``FORCE_COLOR`` or
    ``TTY_COMPATIBLE`` is set (another tool's setting must not put escape codes into logs).
    """
    stream = sys.stderr if stderr else sys.stdout
    terminal = _is_terminal(stream)
    plain = (
        not terminal
        or os.environ.get("NO_COLOR", "") != ""
        or os.environ.get("TERM", "").lower() in ("dumb", "unknown")
    )
    return Console(
        stderr=stderr,
        force_terminal=terminal,
        color_system=None if plain else "auto",
        no_color=plain,
    )


console = make_console()
err_console = make_console(stderr=True)


def setup_output() -> None:
    """Consoles for this command's real streams; stdout written a line at a time, so a log line
    on stderr never lands inside a half-written line when both go to one file (``2>&1``)."""
    global console, err_console
    console = make_console()
    err_console = make_console(stderr=True)
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None and not _is_terminal(sys.stdout):
        with contextlib.suppress(ValueError, OSError):  # cannot be reconfigured: keep it
            reconfigure(line_buffering=True)


@dataclass
class Context:
    """What every command shares: the config (loaded on first use) and the stores it opened
    (closed when the command ends)."""

    config_path: str | None
    started: float = field(default_factory=time.monotonic)
    """When the command started (``time.monotonic``): the process's start-up when run as
    ``newsletter``, so a "Took" line includes start-up, config and database set-up."""
    _config: Config | None = None
    _stores: list[Store] = field(default_factory=list)
    _services: Services | None = None

    @property
    def config(self) -> Config:
        """The command's config, loaded once."""
        if self._config is None:
            self._config = load_config(self.config_path)
        return self._config

    def open_store(self) -> Store:
        """The configured database, connected (one clear error when it cannot be)."""
        from newsletter.config import ENV_DATABASE_URL

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
        """Close every store this command opened."""
        for store in self._stores:
            store.close()
        self._stores.clear()

    def services(self) -> Services:
        """This command's effects (:class:`~newsletter.services.Services`) over its database,
        built once."""
        if self._services is None:
            from newsletter.services import Services

            self._services = Services(self.config, self.store())
        return self._services

    def store(self, *, migrate: bool = False) -> Store:
        """The configured database with its schema checked (``migrate``: brought up to date)."""
        store = self.open_store()
        if migrate:
            store.upgrade()
        else:
            store.check_schema()
        return store


def shown(text: object) -> str:
    """Text from outside (a feed, a subscriber, a server) for a Rich print: escape sequences and
    control characters removed, ``[markup]`` printed literally."""
    return escape(strip_controls(str(text)))


def fail(message: str, code: int = ExitStatus.FAILED) -> NoReturn:
    """Print ``error: message`` (as plain text: never markup) to stderr and exit."""
    err_console.print(
        f"[bold red]error:[/] {shown(message)}", highlight=False, markup=True, soft_wrap=True
    )
    sys.exit(int(code))


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
    help="Log lines as text or JSON; auto: JSON unless stderr is a terminal.",
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
    from newsletter.logs import setup_logging

    setup_output()
    setup_logging(verbose, log_format)  # type: ignore[arg-type]
    # main() hands over when the process started; otherwise (tests, embedding) start now.
    started = ctx.obj if isinstance(ctx.obj, float) else time.monotonic()
    ctx.obj = Context(config_path, started=started)
    ctx.call_on_close(ctx.obj.close)


# ---------------------------------------------------------------------------- init


def example_config() -> Path:
    """The commented starter config shipped with this install."""
    here = Path(__file__).resolve().parent
    for candidate in (
        here / "data" / "newsletter.example.yaml",
        here.parent / "config" / "newsletter.example.yaml",
    ):
        if candidate.is_file():
            return candidate
    raise NewsletterError("the example config is missing from this install")


DEMO_STARTER_HEADER = """\
# newsletter: a starter config that works on this machine today (`newsletter init --demo`).
# Sources are the snapshot feeds in demo-feeds/ (no internet needed), links point at
# http://localhost:8000 (`newsletter serve`), and mail goes to a local sink on 127.0.0.1:2525
# (`newsletter sink --port 2525`). For production, change: sources (live feeds), sender
# (from, postal_address, base_url: the public https URL of `newsletter serve`), smtp (your
# relay), subscribers; `newsletter init` writes the full commented example of every key.
"""


@cli.command()
@click.argument("path", default="newsletter.yaml", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
@click.option(
    "--demo",
    "demo_starter",
    is_flag=True,
    help="A config that works offline today: snapshot feeds (copied beside it), links on "
    "localhost, mail to a local sink.",
)
def init(path: Path, force: bool, demo_starter: bool) -> None:
    """Write a commented starter config to PATH (default ./newsletter.yaml)."""
    with errors():
        if path.exists() and not force:
            fail(f"{path} already exists; pass --force to overwrite it")
        path.parent.mkdir(parents=True, exist_ok=True)
        if demo_starter:
            from newsletter.demo import DEMO_FEEDS, shipped_demo

            config_file, feeds = shipped_demo()
            body = config_file.read_text(encoding="utf-8").split("\ndatabase:", 1)[1]
            body = re.sub(
                r"url: sqlite:///demo\.db.*",
                "url: sqlite:///var/newsletter.db  # beside this file",
                body,
            )
            body = re.sub(
                r"secret_key_file: secret\.key.*", "secret_key_file: var/secret.key", body
            )
            path.write_text(DEMO_STARTER_HEADER + "\ndatabase:" + body, encoding="utf-8")
            shutil.copytree(feeds, path.parent / DEMO_FEEDS, dirs_exist_ok=True)
        else:
            shutil.copyfile(example_config(), path)
    c = "" if path == Path("newsletter.yaml") else f" -c {shlex.quote(str(path))}"
    console.print(f"Wrote [bold]{path}[/]. Next:", highlight=False)
    if demo_starter:
        console.print(
            "  1. in another terminal, a local relay that keeps every message: "
            "newsletter sink --port 2525\n"
            f"  2. newsletter db upgrade{c}  (adds the three example subscribers)\n"
            f"  3. newsletter fetch{c} && newsletter send --now{c}\n"
            f"  4. newsletter serve{c}  (the digests' links, on http://localhost:8000)\n"
            "For production, change in it: sources (live feeds), sender.base_url (the public "
            "https URL of 'newsletter serve'), sender.from and postal_address, smtp (your "
            "relay), subscribers.",
            highlight=False,
        )
        return
    console.print(
        f"  1. edit it: topics (what readers follow), sender.from and postal_address ({path})\n"
        f"  2. newsletter db upgrade{c}\n"
        f"  3. newsletter fetch{c} && newsletter send --now --dry-run{c}\n"
        "For production, change: sender.base_url to the public https URL of 'newsletter serve' "
        "(the digests' confirm, manage and unsubscribe links go there), smtp to your relay "
        "(password in $NEWSLETTER_SMTP_PASSWORD), sender.from to a domain with SPF and DKIM "
        "(docs/deploy.md). To try it all offline first: newsletter init --demo DIR/newsletter.yaml",
        highlight=False,
    )


# ---------------------------------------------------------------------------- db


@cli.group()
def db() -> None:
    """Database schema (Alembic migrations)."""


@db.command("upgrade")
@click.pass_obj
def db_upgrade(obj: Context) -> None:
    """Create the database or migrate it to the current schema; add the config's subscribers."""
    with errors():
        store = obj.open_store()
        before = store.current_revision()
        store.upgrade()
        notes: list[str] = []
        added = seed_subscribers(obj.config, store, notes.append)
        after = store.current_revision()
        url = store.engine.url.render_as_string(hide_password=True)
    if before == after:
        console.print(f"Database {url} is up to date (revision {after}).")
    else:
        console.print(f"Database {url} migrated: {before or 'empty'} → {after}.")
    if added:
        console.print(f"Added {counted(added, 'subscriber')} from {obj.config.path}.")
    for note in notes:
        click.echo(f"not added: {note}", err=True)


@db.command("current")
@click.pass_obj
def db_current(obj: Context) -> None:
    """Show the database's schema revision and the code's."""
    with errors():
        store = obj.open_store()
        console.print(
            f"database: {store.current_revision() or 'empty'}  code: {store.head_revision()}"
        )


# ---------------------------------------------------------------------------- fetch


@cli.command()
@click.option(
    "--source", "sources", multiple=True, metavar="NAME", help="Only this source (repeatable)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the per-source report as JSON.")
@click.pass_obj
def fetch(obj: Context, sources: tuple[str, ...], as_json: bool) -> None:
    """Pull new papers from every configured source and store them."""
    from rich.progress import Progress

    from newsletter.runs import fetch_step

    with errors():
        config = obj.config
        known = {s.name for s in config.settings.sources}
        unknown = [s for s in sources if s not in known]
        if unknown:
            fail(
                f"unknown source {', '.join(unknown)} (configured: {', '.join(sorted(known)) or 'none'})"
            )
        store = obj.store()
        enabled = [
            s for s in config.settings.sources if s.enabled and (not sources or s.name in sources)
        ]
        if not enabled:
            fail(f"no sources to fetch; add some under 'sources:' in {config.path}")
        with Progress(
            console=err_console, transient=True, disable=as_json or not err_console.is_terminal
        ) as bar:
            task = bar.add_task("fetching", total=len(enabled))
            report = fetch_step(
                config,
                store,
                utcnow(),
                only=sources,
                progress=lambda s, r: (
                    bar.update(task, description=f"fetching {s.name}")
                    if r is None
                    else bar.update(task, advance=1)
                ),
            )
    if as_json:
        click.echo(json.dumps(report.as_json(), indent=2))
    else:
        print_fetch_report(report)
    if report.failed and len(report.failed) == len(report.sources):
        sys.exit(1)


def print_fetch_report(report: FetchReport) -> None:
    """The fetch's table (one row per source), its totals, and each error and skipped entry."""
    # A light box and unbreakable cells keep the table readable in an 80-column terminal.
    table = Table(
        title="Fetch", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False
    )
    for col in ("source", "status", "fetched", "new", "updated", "skipped", "errors", "time"):
        table.add_column(
            col,
            justify="left" if col in ("source", "status") else "right",
            no_wrap=True,
            overflow="fold",
        )
    for s in report.sources:
        status = s.status
        colour = {"ok": "green", "failed": "red", "partial": "yellow"}.get(status, "cyan")
        table.add_row(
            shown(s.source),
            f"[{colour}]{status}[/]",
            str(s.entries),
            str(s.new),
            str(s.updated),
            str(len(s.skipped)),
            str(len(s.errors)),
            f"{s.seconds:.2f}s",
        )
    console.print(table)
    failed = len(report.failed)
    tail = (
        f" {failed} source{'s' if failed != 1 else ''} had errors (recorded in source state)."
        if failed
        else ""
    )
    console.print(
        f"{counted(report.entries, 'entry')}, {counted(report.new, 'new paper')}, "
        f"{report.updated} updated"
        + (
            f", {counted(report.unannounced, 'paper')} stored without announcing (revisions of "
            "papers not seen before, or backfill)"
            if report.unannounced
            else ""
        )
        + f".{tail}",
        highlight=False,
    )
    if report.embedded:
        console.print(
            f"Embedded {counted(report.embedded, 'paper')} for semantic ranking.", highlight=False
        )
    elif report.matching and "lexical" in report.matching:
        console.print(report.matching, highlight=False, markup=False, style="dim")
    for s in report.sources:
        for error in s.errors:
            console.print(shown(f"  error in {s.source}: {error}"), style="red", highlight=False)
    for s in report.sources:
        for k in s.skipped:
            console.print(shown(f"  skipped in {s.source}: {k.what}: {k.reason}"), highlight=False)


# ---------------------------------------------------------------------------- send and preview


@cli.command()
@click.option(
    "--now",
    "now_flag",
    is_flag=True,
    help="Send today's editions now (everyone due who has not had one).",
)
@click.option(
    "--dry-run", is_flag=True, help="Rank and render, but send nothing and record nothing."
)
@click.option("--to", "to", metavar="EMAIL", help="Only this subscriber.")
@click.option(
    "--topic", metavar="NAME", help="Only followers of this topic; their digest holds only it."
)
@click.option(
    "--force",
    is_flag=True,
    help="With --to: send today's edition again even though it went out (marked as forced).",
)
@click.option("--fetch/--no-fetch", "do_fetch", default=False, help="Fetch sources first.")
@click.option(
    "--wait/--no-wait",
    default=True,
    show_default=True,
    help="With workers: wait for the queued chunks and show the summary, or return once queued.",
)
@click.option(
    "--settle-unknown",
    type=click.Choice(["resend", "drop"]),
    help="Settle the editions whose delivery is unknown ('newsletter status' lists them): "
    "resend once with the same Message-ID on the next send, or drop (give up, recorded). "
    "Sends nothing itself.",
)
@click.pass_obj
def send(
    obj: Context,
    now_flag: bool,
    dry_run: bool,
    to: str | None,
    topic: str | None,
    force: bool,
    do_fetch: bool,
    wait: bool,
    settle_unknown: str | None,
) -> None:
    """Send today's digest to every active subscriber who has not had it yet.

    \b
    newsletter send --now                       everyone due today
    newsletter send --now --dry-run             what would go out; sends and records nothing
    newsletter send --now --to ada@example.org  one subscriber
    newsletter send --now --topic moe           followers of one topic, that topic only
    newsletter send --now --to ada@example.org --force   re-send today's edition to one address
    newsletter send --settle-unknown resend     re-send the editions left unknown, once

    With a workers: section in the config, the editions are queued in chunks for the Celery
    workers ('newsletter worker') instead of being sent from this process; --to, --force and
    --dry-run still run here.

    Progress (sent, failed, in flight, remaining, rate) goes to stderr, a summary table to stdout. Exit
    status 1: an edition failed (see the list, or 'newsletter status'); 2: the relay could not
    be used and the run stopped; 8: stopped by SIGTERM or Ctrl-C (the messages in flight were
    finished and recorded, the rest given back; a second signal stops at once). Safe to run
    again at any time: each subscriber gets one edition per day (docs/delivery.md).
    """
    if settle_unknown is not None:
        if now_flag or dry_run or to or topic or force or do_fetch:
            fail("--settle-unknown settles the unknown editions and sends nothing: use it alone")
        with errors():
            settled = obj.store().settle_unknown(
                "resend" if settle_unknown == "resend" else "drop", utcnow()
            )
        if settle_unknown == "resend":
            console.print(
                f"{counted(settled, 'unknown edition')} will be re-sent once, with the same "
                "Message-ID, by the next send ('newsletter send --now' or the scheduler).",
                highlight=False,
            )
        else:
            console.print(
                f"{counted(settled, 'unknown edition')} given up (recorded as dropped).",
                highlight=False,
            )
        return
    if not now_flag:
        fail(
            "say --now to send today's editions now (the scheduler sends them on time: 'newsletter serve')"
        )
    if force and not to:
        fail("--force re-sends one subscriber's edition: add --to EMAIL")
    with errors():
        report = do_send(
            obj, to=to, dry_run=dry_run, do_fetch=do_fetch, topic=topic, force=force, wait=wait
        )
    if report is None:
        return
    if report.relay_error:
        sys.exit(ExitStatus.RELAY_UNUSABLE)
    if report.stopped:
        sys.exit(ExitStatus.STOPPED)
    if report.failed:
        sys.exit(ExitStatus.FAILED)


def do_send(
    obj: Context,
    *,
    to: str | None,
    dry_run: bool,
    do_fetch: bool,
    keep_rendered: int = 0,
    topic: str | None = None,
    force: bool = False,
    wait: bool = True,
) -> SendReport | None:
    """``newsletter send``: build the request, send it (here or by the workers), print it."""
    from newsletter.edition import SendRequest, send
    from newsletter.runs import fetch_step

    config = obj.config
    services = obj.services()
    store = services.store
    seed_subscribers(config, store)
    request = SendRequest(
        to=to,
        topic=topic,
        force=force,
        dry_run=dry_run,
        keep_rendered=keep_rendered,
        wait=wait,
    ).validated(config, store)
    now = services.clock()
    if do_fetch:
        print_fetch_report(fetch_step(config, store, now))
    if request.by_workers(config):
        return send_by_workers(services, request, now, started=obj.started)
    from newsletter.logs import uses_json
    from newsletter.stopping import StopRequest, stop_on_signals

    with (
        SendProgress(err_console, enabled=not dry_run, as_log=uses_json()) as progress,
        stop_on_signals(StopRequest(), _stop_notice) as stop,
    ):
        report = send(services, request, now=now, progress=progress, stop=stop).report
    assert report is not None  # sent in this process
    print_send_report(report, started=obj.started)
    if stop.at_once.is_set():  # senders may still wait for the relay: do not wait for them
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(ExitStatus.STOPPED)
    return report


def _stop_notice(name: str, at_once: bool) -> None:
    """Tell the operator what a SIGTERM or SIGINT does to a running send."""
    if at_once:
        line = f"{name} again: stopping now, without waiting for the relay's answers."
    else:
        line = (
            f"{name}: stopping; finishing the messages in flight and giving the rest back "
            "(send it again to stop at once)."
        )
    err_console.print(line, highlight=False)


def send_by_workers(
    services: Services, request: SendRequest, now: datetime, *, started: float
) -> SendReport | None:
    """Queue the edition for the workers; with ``wait``, show progress and the summary."""
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

    from newsletter.edition import send
    from newsletter.edition.workers import Enqueued

    config = services.config
    wait = request.wait

    queue = config.settings.workers.queue if config.settings.workers else ""
    bar = None
    task = None

    def enqueued(e: Enqueued) -> None:
        nonlocal bar, task
        console.print(
            f"Queued {counted(e.subscribers, 'edition')} in {counted(len(e.results), 'chunk')} "
            f"on queue {queue}"
            + (f"; {e.settled} already sent or skipped" if e.settled else "")
            + ".",
            highlight=False,
        )
        if wait and e.results:
            from rich.progress import Progress

            bar = Progress(
                TextColumn("chunks"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[sent]} sent"),
                TimeElapsedColumn(),
                console=console,
                transient=True,
            )
            task = bar.add_task("chunks", total=len(e.results), sent=0)
            bar.start()

    hinted = False

    def progress(p: Any) -> None:
        nonlocal hinted
        if bar is not None and task is not None:
            bar.update(task, completed=p.done, sent=p.sent)
        if not hinted and p.done == 0 and p.waited > 30:
            hinted = True
            console.print(
                f"No chunk finished after {p.waited:.0f} s: is a worker running on queue "
                f"{queue}? Start one with 'newsletter worker'. Ctrl-C stops waiting; the "
                "queued chunks stay queued.",
                highlight=False,
            )

    try:
        report = send(
            services, request, now=now, chunk_progress=progress, on_enqueued=enqueued
        ).report
    finally:
        if bar is not None:
            bar.stop()
    if report is None:
        console.print("Not waiting: 'newsletter status' shows the run once the workers finish.")
        return None
    print_send_report(report, started=started)
    return report


class SendProgress:
    """Live progress of a send on stderr: sent, failed, in flight, remaining, rate.

    In flight: handed to the connections, outcome not known yet; remaining: not reached yet.
    Sent + failed + in flight + remaining (+ already sent, empty, skipped) is the whole list.

    On a terminal a progress bar redrawn a few times a second; otherwise (cron, systemd, a
    pipe) one plain line every ``every`` seconds, so long runs show they are alive in logs.
    """

    def __init__(
        self, console: Console, *, enabled: bool = True, every: float = 10.0, as_log: bool = False
    ) -> None:
        import time

        self.console = console
        self.as_log = as_log
        self.enabled = enabled
        self.every = every
        self._time = time.monotonic
        self._last = self._time()
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> SendProgress:
        if self.enabled and self.console.is_terminal:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn("sending"),
                BarColumn(),
                TextColumn("{task.fields[line]}"),
                TimeElapsedColumn(),
                console=self.console,
                transient=True,
            )
            self._progress.start()
            self._task = self._progress.add_task("send", total=None, line="starting")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    @staticmethod
    def line(report: Any) -> str:
        """One line of counts: sent, failed, in flight, remaining, and the rate in messages/s."""
        remaining = report.remaining
        return (
            f"sent {report.sent}, failed {report.failed}, in flight {report.in_flight}, "
            f"remaining {'?' if remaining is None else remaining}, {report.rate:.1f} msg/s"
        )

    def __call__(self, report: Any) -> None:
        if not self.enabled:
            return
        if self._progress is not None:
            now = self._time()
            if now - self._last >= 0.1:
                self._last = now
                self._progress.update(
                    self._task,
                    total=report.total,
                    completed=report.considered,
                    line=self.line(report),
                )
            return
        now = self._time()
        if now - self._last >= self.every:
            self._last = now
            if self.as_log:  # stderr holds JSON log lines: the progress is one of them
                from newsletter.logs import step

                remaining = report.remaining
                step(
                    "sending",
                    sent=report.sent,
                    failed=report.failed,
                    remaining=remaining,
                    rate=round(report.rate, 1),
                )
            else:
                self.console.print(f"sending: {self.line(report)}", highlight=False)


def seconds_text(seconds: float) -> str:
    """A duration as people read it: "0.043 s", "1.3 s", "42 s", "3 min 05 s"."""
    if seconds < 0.01:
        return "under 0.01 s"
    if seconds < 10:
        return f"{seconds:.2g} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s"


def took_line(seconds: float, sent: int) -> str:
    """``Took … (… messages/s).`` over the whole command, start-up included."""
    if sent == 0:
        return f"Took {seconds_text(seconds)}, start-up included; nothing was sent."
    rate = sent / max(seconds, 1e-9)
    shown_rate = f"{rate:.2g}" if rate < 10 else f"{rate:.0f}"
    unit = "message" if sent == 1 else "messages"
    return (
        f"Took {seconds_text(seconds)}, start-up included: {sent} {unit}, {shown_rate} messages/s."
    )


def print_send_report(report: Any, started: float | None = None) -> None:
    """The summary table; ``started`` (``time.monotonic``) dates the "Took" line."""
    dates = ", ".join(sorted(d.isoformat() for d in report.dates)) or "today"
    if report.dry_run:
        console.print(
            f"Dry run for {dates}: {counted(len(report.rendered), 'digest')} would be sent, "
            + (f"{report.already} already sent, " if report.already else "")
            + f"{report.empty} empty; nothing was sent or recorded."
            + (" A subscriber gets one edition a day." if report.already else "")
        )
        for addr, rendered in report.rendered:
            console.print(f"  {shown(addr)}: {shown(rendered.subject)}", highlight=False)
        return
    table = Table(title=f"Edition {dates}", title_justify="left")
    table.add_column("subscribers")
    table.add_column("count", justify="right")
    rows: list[tuple[str, int, bool]] = [
        # (label, value, shown even when zero)
        ("considered", report.considered, True),
        ("sent", report.sent, True),
        ("already sent", report.already, True),
        ("empty (nothing new)", report.empty, False),
        ("failed", report.failed, True),
        ("  of which now suppressed", report.suppressed, False),
        ("unknown (line dropped after the final dot)", report.unknown, False),
        ("re-sent after an unknown, same Message-ID", report.resent, False),
        ("re-send refused, first copy may have arrived", report.resend_refused, False),
        ("unsubscribed before sending", report.unsubscribed, False),
        ("given back unsent (next run sends them)", report.released, False),
        ("resumed from an interrupted run", report.resumed, False),
        ("retries (4xx, dropped connections)", report.retried, False),
        ("slowed down by the relay", report.throttled, False),
    ]
    for label, value, always in rows:
        if always or value:
            table.add_row(label, str(value))
    console.print(table)
    took = report.duration if started is None else time.monotonic() - started
    console.print(took_line(took, report.sent), highlight=False)
    if report.considered == 0:
        console.print(
            "No active subscribers. Add one: newsletter subscribers add EMAIL --topic NAME"
        )
    if report.no_listing:
        console.print(
            f"{counted(report.no_listing, 'edition')} skipped: {shown(report.no_listing_reason)}; "
            "their papers go out in the next edition.",
            highlight=False,
        )
    if report.stopped:
        console.print("Stopped on request after the message in flight; run again to finish.")
    if report.considered == 0:
        pass
    elif report.already == report.considered:
        console.print(
            f"Today's editions were already sent ({report.already} of {report.considered}); nothing to do."
        )
    for e in report.errors:
        console.print(f"  failed: {shown(e)}", highlight=False)
    if report.more_errors:
        console.print(
            f"  ... and {report.more_errors} more (newsletter status; the ledger has each one)"
        )
    if report.relay_error:
        err_console.print(
            f"[bold red]error:[/] {shown(report.relay_error)}. The run stopped; nothing more was sent. Run 'newsletter send --now' again when the relay works.",
            highlight=False,
            soft_wrap=True,  # one line, however long: logs and the journal split at newlines
        )


def known_subscriber(obj: Context, email: str, *, seed: bool = True) -> tuple[Store, Subscriber]:
    """The store and the subscriber with this address; a clear error when there is none.

    ``seed``: first add the config's ``subscribers:`` list, as commands that read them do.
    """
    store = obj.store()
    if seed:
        seed_subscribers(obj.config, store)
    address = _address(email)
    sub = store.get_subscriber(address)
    if sub is None:
        fail(f"{address} is not a subscriber (see: newsletter subscribers list)")
    return store, sub


@cli.command()
@click.option(
    "--to", "to", required=True, metavar="EMAIL", help="The subscriber whose digest to render."
)
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write the HTML.",
)
@click.option(
    "--text",
    "text_out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the text part here.",
)
@click.pass_obj
def preview(obj: Context, to: str, out: Path, text_out: Path | None) -> None:
    """Render what a subscriber would get today, without sending or recording anything.

    The file holds exactly the HTML part that 'newsletter send' would send (CSS inlined).
    """
    from newsletter.preview import render_preview

    with errors():
        store, sub = known_subscriber(obj, to)
        digest_preview = render_preview(obj.config, store, sub, utcnow())
        rendered = digest_preview.rendered
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(rendered.html, encoding="utf-8")
        if text_out is not None:
            text_out.write_text(rendered.text, encoding="utf-8")
    console.print(f"Subject: {shown(rendered.subject)}", highlight=False)
    console.print(f"Wrote {out} ({counted(len(digest_preview.digest.items), 'paper')}).")
    if digest_preview.skipped:
        console.print(
            "Nothing new in these topics today: with digest.empty: skip this edition is not "
            "sent (the file shows the 'nothing new' note that digest.empty: send would send).",
            highlight=False,
        )


@cli.command("rank")
@click.option(
    "--to", "to", required=True, metavar="EMAIL", help="The subscriber whose ranking to show."
)
@click.option("--explain", is_flag=True, help="Show how each score was made.")
@click.pass_obj
def rank_cmd(obj: Context, to: str, explain: bool) -> None:
    """Print what a subscriber would get today, with scores and reasons (sends nothing)."""
    from newsletter.preview import rank_preview

    with errors():
        settings = obj.config.settings
        store, sub = known_subscriber(obj, to)
        ranking = rank_preview(obj.config, store, sub, utcnow())
    console.print(
        f"{shown(sub.email)} ({sub.status.value}): topics {shown(', '.join(sub.topics)) or 'none'}; "
        f"{counted(ranking.papers, 'paper')} first seen here in the last "
        f"{counted(settings.digest.lookback_days, 'day')} (digest.lookback_days; the ages "
        f"below count from publication), {ranking.already_sent} already sent to them"
        + (f"; {ranking.votes} of their votes reorder their topics." if ranking.votes else "."),
        highlight=False,
    )
    if ranking.missing_topics:
        console.print(
            f"Topics no longer in the config (ignored): {shown(', '.join(ranking.missing_topics))}"
        )
    if ranking.matching:
        console.print(f"Matching: {ranking.matching}", highlight=False, markup=False)
    for section in ranking.sections:
        console.print(f"\n[bold]{shown(section.title)}[/] ({len(section.papers)})", highlight=False)
        already = [
            f"already sent today: {counted(section.sent_today, 'paper')}"
            if section.sent_today
            else "",
            f"already sent in earlier digests: {counted(section.sent_before, 'paper')}"
            if section.sent_before
            else "",
        ]
        if any(already):
            console.print("  " + "; ".join(a for a in already if a) + " (never sent twice)")
        elif not section.papers:
            console.print("  nothing strong in this topic today")
        left_out = section.left_out
        if left_out:
            console.print(
                f"  ({left_out} weaker {'match' if left_out == 1 else 'matches'} left out: a "
                "single passing mention, or far below the best; see docs/topics.md)",
                highlight=False,
            )
        for n, ranked in enumerate(section.papers, start=1):
            item = ranked.item
            console.print(
                f"{n:3}. {item.score:8.3f}  {shown(item.paper.key)}  {shown(item.paper.title)}",
                highlight=False,
            )
            console.print(f"               {shown(item.reason)}", highlight=False)
            if explain:
                topic = "" if settings.digest.group_by_topic else f" (topic {shown(item.topic)})"
                for line in ranked.explanation.lines():
                    console.print(f"               {shown(line)}{topic}", highlight=False)
                    topic = ""


# ---------------------------------------------------------------------------- feedback


@cli.command()
@click.argument("email")
@click.option(
    "--more",
    "more",
    multiple=True,
    metavar="PAPER",
    help="Show more papers like this (repeatable).",
)
@click.option(
    "--less",
    "less",
    multiple=True,
    metavar="PAPER",
    help="Show fewer papers like this (repeatable).",
)
@click.option(
    "--clear", "clear", multiple=True, metavar="PAPER", help="Withdraw a vote (repeatable)."
)
@click.pass_obj
def feedback(
    obj: Context, email: str, more: tuple[str, ...], less: tuple[str, ...], clear: tuple[str, ...]
) -> None:
    """Vote "more like this" / "less like this" on papers for a subscriber, or list their votes.

    The same votes as the links under each paper of the digest: papers like a "more" paper rank
    higher for that reader, papers like a "less" one lower. A new vote on a paper replaces the
    old one. PAPER is a stored paper's arXiv id, with or without version, or its arXiv link.
    Every PAPER is checked first: if one is unknown, nothing is recorded. Without options, the
    subscriber's votes are listed.

    \b
    newsletter feedback ada@example.org --more 2611.00019 --more hep-th/9901001v2
    newsletter feedback ada@example.org --less https://arxiv.org/abs/2611.00042v1
    newsletter feedback ada@example.org --clear 2611.00019
    newsletter feedback ada@example.org
    """
    from newsletter.feedback import Feedback

    with errors():
        store, sub = known_subscriber(obj, email)
        service = Feedback(store, None, utcnow)
        if more or less or clear:
            done = service.apply(sub, more, less, clear)
            for what, paper in done:
                verb = {"more": "more like", "less": "less like", "clear": "no vote on"}[what]
                console.print(
                    f"{escape(sub.email)}: {verb} {escape(paper.key)} {escape(paper.title)}",
                    highlight=False,
                )
            return
        votes = service.votes(sub)
    if not votes:
        console.print(
            f"{escape(sub.email)} has no votes. Add one: newsletter feedback {escape(sub.email)} "
            "--more PAPER",
            highlight=False,
        )
        return
    table = Table(box=box.SIMPLE)
    for col in ("paper", "vote", "title", "topic", "when"):
        table.add_column(col, overflow="fold")
    for v in votes:
        table.add_row(
            escape(v.paper_key),
            "more" if v.more else "less",
            escape(v.title),
            escape(v.topic or ""),
            v.created_at.date().isoformat(),
        )
    console.print(table)


# ---------------------------------------------------------------------------- subscribers


def _address(value: str) -> str:
    try:
        return normalize_address(value)
    except InvalidAddress as e:
        fail(str(e))


@cli.group()
def subscribers() -> None:
    """Add, import, export, list, show and remove subscribers."""


@subscribers.command("add")
@click.argument("email")
@click.option(
    "--topic", "topics", multiple=True, metavar="NAME", help="A topic to follow (repeatable)."
)
@click.option("--name", default="", help="Display name.")
@click.option("--timezone", "tz", default=None, help="IANA timezone (default: schedule.timezone).")
@click.pass_obj
def subscribers_add(
    obj: Context, email: str, topics: tuple[str, ...], name: str, tz: str | None
) -> None:
    """Add an active subscriber (an operator adding someone who has agreed).

    An address that unsubscribed, was suppressed or erased is not made active again: it
    stays so until it confirms by email (see 'newsletter subscribers invite').
    """
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    from newsletter.subscribe import LIVE, consent_block

    with errors():
        config = obj.config
        address = _address(email)
        try:
            name = normalize_name(name)
        except InvalidAddress as e:
            fail(str(e))
        names = [t.name for t in config.settings.topics]
        if not topics:
            fail(
                f"name at least one --topic (available: {', '.join(names) or 'none; add topics to the config'})"
            )
        bad = [t for t in topics if t not in names]
        if bad:
            fail(f"unknown topic {', '.join(bad)} (available: {', '.join(names)})")
        timezone = tz or config.settings.schedule.timezone
        try:
            ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError):
            fail(f"unknown timezone {timezone!r}")
        store = obj.store()
        now = utcnow()
        existing = store.get_subscriber(address)
        if existing is None or existing.status not in LIVE:
            blocked = consent_block(config, store, address)
            if blocked is not None:
                fail(escape(blocked))
        sub, created = store.add_subscriber(
            address,
            name=name,
            topics=topics,
            timezone=timezone,
            now=now,
            consent={"how": "cli", "when": now.isoformat(), "where": "newsletter subscribers add"},
        )
    if created:
        console.print(
            f"Added {shown(sub.email)} ({shown(', '.join(sub.topics))}).", highlight=False
        )
    else:
        wanted = [
            *(f"--topic {t}" for t in topics if set(topics) != set(sub.topics)),
            *([f"--name {shlex.quote(name)}"] if name and name != sub.name else []),
            *([f"--timezone {tz}"] if tz and tz != sub.timezone else []),
        ]
        line = (
            f"{sub.email} is already a subscriber ({sub.status.value}; topics "
            f"{', '.join(sub.topics)}; timezone {sub.timezone})"
        )
        if wanted:
            line += (
                "; nothing changed: 'subscribers add' only adds. To change them: "
                f"newsletter subscribers set {sub.email} {' '.join(wanted)}"
            )
        console.print(escape(strip_controls(line + ".")), highlight=False, soft_wrap=True)


@subscribers.command("list")
@click.option(
    "--status", type=click.Choice([s.value for s in SubscriberStatus]), help="Only this status."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def subscribers_list(obj: Context, status: str | None, as_json: bool) -> None:
    """List subscribers with their status and topics.

    Suppressed addresses (mail to them failed permanently delivery.suppress_after times)
    also show their failure count and the relay's last answer:

    \b
    newsletter subscribers list --status suppressed
    """
    with errors():
        store = obj.store()
        rows = [
            s
            for batch in store.iter_subscribers(SubscriberStatus(status) if status else None)
            for s in batch
        ]
        failures = store.delivery_failures(
            [s.id for s in rows if s.status is SubscriberStatus.SUPPRESSED]
        )
    if as_json:
        click.echo(
            json.dumps(
                [
                    {
                        "email": s.email,
                        "name": s.name,
                        "status": s.status.value,
                        "topics": list(s.topics),
                        "timezone": s.timezone,
                    }
                    | (
                        {
                            "permanent_failures": failures[s.id][0],
                            "last_error": failures[s.id][1],
                        }
                        if s.id in failures
                        else {}
                    )
                    for s in rows
                ],
                indent=2,
            )
        )
        return
    if not rows:
        console.print(
            "No subscribers"
            + (
                f" with status {status}."
                if status
                else ". Add one: newsletter subscribers add EMAIL --topic NAME"
            )
        )
        return
    table = Table()
    # An address is never cut or folded (it is copied into other commands); other columns fold.
    longest = max(len(shown(s.email)) for s in rows)
    table.add_column("email", no_wrap=True, min_width=longest)
    if status == SubscriberStatus.SUPPRESSED.value:
        for col in ("failures", "relay's last answer"):
            table.add_column(col, overflow="fold")
        for s in rows:
            count, answer = failures.get(s.id, (0, None))
            table.add_row(shown(s.email), str(count), shown(answer or ""))
        _print_wide(table)
        console.print(
            "Suppressed addresses get no mail until they confirm by email again: "
            "newsletter subscribers invite EMAIL --topic NAME."
        )
        return
    for col in ("name", "status", "topics", "timezone", "since"):
        table.add_column(col, overflow="fold")
    for s in rows:
        table.add_row(
            shown(s.email),
            shown(s.name),
            s.status.value,
            shown(", ".join(s.topics)),
            shown(s.timezone),
            s.created.date().isoformat(),
        )
    _print_wide(table)


def _print_wide(table: Table) -> None:
    """Print ``table`` whole: on a terminal other columns fold to fit; into a pipe or a file
    there is no screen to fit, so the table is as wide as its content needs."""
    if console.is_terminal:
        console.print(table)
        return
    from rich.measure import Measurement

    needed = Measurement.get(console, console.options.update_width(100_000), table).maximum
    width = console.width
    console.width = max(width, needed)
    try:
        console.print(table)
    finally:
        console.width = width


@subscribers.command("remove")
@click.argument("email")
@click.option(
    "--forget",
    is_flag=True,
    help="Delete the subscriber and their history instead of marking them unsubscribed.",
)
@click.pass_obj
def subscribers_remove(obj: Context, email: str, forget: bool) -> None:
    """Unsubscribe an address (no more digests), or erase it with --forget."""
    with errors():
        address = _address(email)
        store = obj.store()
        if forget:
            from newsletter.subscribe import Subscriptions

            ok = Subscriptions(obj.config, store).forget(address)
        else:
            ok = store.set_status(address, SubscriberStatus.UNSUBSCRIBED, utcnow())
    if not ok:
        fail(f"{address} is not a subscriber")
    console.print(f"{'Erased' if forget else 'Unsubscribed'} {shown(address)}.", highlight=False)


@subscribers.command("export")
@click.option(
    "--status", type=click.Choice([s.value for s in SubscriberStatus]), help="Only this status."
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write to this file (default: standard output).",
)
@click.pass_obj
def subscribers_export(obj: Context, status: str | None, out: Path | None) -> None:
    """Write subscribers as CSV (topics separated by spaces); 'import' reads the same format.

    The last column, votes, lists the reader's "more/less like this" votes as +PAPER / -PAPER.
    """
    import io

    from newsletter.exporter import write_csv

    with errors():
        buf = io.StringIO()
        write_csv(obj.store(), buf, SubscriberStatus(status) if status else None)
    if out is None:
        click.echo(buf.getvalue(), nl=False)
    else:
        out.write_text(buf.getvalue(), encoding="utf-8")
        console.print(f"Wrote {out}.")


@subscribers.command("import")
@click.argument("csv_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--topic",
    "default_topics",
    multiple=True,
    metavar="NAME",
    help="Topic for rows without one (repeatable).",
)
@click.option("--dry-run", is_flag=True, help="Check every row; add nobody.")
@click.pass_obj
def subscribers_import(
    obj: Context, csv_file: Path, default_topics: tuple[str, ...], dry_run: bool
) -> None:
    """Add subscribers from a CSV with a header row: email, and optionally name, status,
    topics (separated by spaces or ';'), timezone, send_hour, frequency, consent (how they
    agreed). 'export' writes this format.

    
    status: empty or active (added active), paused (added paused), unsubscribed, suppressed
    or complained (kept so: added as unsubscribed or suppressed, never mailed); pending or
    anything else is refused.

    Only import people who agreed to get the digest. Addresses already present are left as
    they are; an address that unsubscribed, was suppressed or erased here is never made
    active by an import: it stays so until it confirms by email. Refused rows are reported as
    file:line and why, and make the exit status 1.
    """
    from newsletter.importer import ImportFileError, import_csv

    with errors():
        try:
            report = import_csv(
                obj.config,
                obj.store(),
                csv_file,
                utcnow(),
                default_topics=default_topics,
                dry_run=dry_run,
            )
        except ImportFileError as e:
            fail(str(e))
    added, kept, present = report.added, report.kept, report.present
    problems, notes = report.problems, report.notes
    for n in notes:
        click.echo(f"note: {n}", err=True)
    for p in problems:
        click.echo(f"refused {p}", err=True)
    verb = "would add" if dry_run else "added"
    inactive = f" ({kept} of them {'would stay' if dry_run else 'kept'} unsubscribed/suppressed)"
    click.echo(
        f"{csv_file}: {verb} {added}{inactive if kept else ''}, already present {present}, "
        f"refused {len(problems)}."
    )
    if problems:
        sys.exit(1)


_OPTION_OF_FIELD = {
    "topics": "--topic",
    "timezone": "--timezone",
    "send_hour": "--hour",
    "frequency": "--frequency",
    "name": "--name",
}


@subscribers.command("set")
@click.argument("email")
@click.option(
    "--topic",
    "topics",
    multiple=True,
    metavar="NAME",
    help="Follow exactly these topics (repeatable; replaces the current ones).",
)
@click.option("--timezone", "tz", metavar="ZONE", help="IANA timezone, e.g. Europe/Berlin.")
@click.option(
    "--hour",
    metavar="H",
    help="Preferred local hour of the digest, 0-23; 'default' for schedule.send_hour.",
)
@click.option("--frequency", type=click.Choice(["daily", "weekly"]), help="How often.")
@click.option("--name", default=None, help="Display name ('' clears it).")
@click.option(
    "--pause/--resume", "pause", default=None, help="Stop the digest for now, or start it again."
)
@click.pass_obj
def subscribers_set(
    obj: Context,
    email: str,
    topics: tuple[str, ...],
    tz: str | None,
    hour: str | None,
    frequency: str | None,
    name: str | None,
    pause: bool | None,
) -> None:
    """Change a subscriber's preferences (what the manage page changes); only the options
    given change.

    \b
    newsletter subscribers set ada@example.org --topic llm-serving --topic gpu-kernels
    newsletter subscribers set ada@example.org --timezone Asia/Tokyo --hour 8 --frequency weekly
    newsletter subscribers set ada@example.org --pause

    Only an active or paused subscriber can be changed: someone who unsubscribed becomes a
    subscriber again by confirming by email (newsletter subscribers invite).
    """
    from newsletter.subscribe import LIVE, InvalidRequest, Subscriptions

    if not (topics or tz or hour or frequency or name is not None or pause is not None):
        fail(
            "nothing to change: give --topic, --timezone, --hour, --frequency, --name, "
            "--pause or --resume (see newsletter subscribers set --help)"
        )
    with errors():
        store, sub = known_subscriber(obj, email, seed=False)
        address = sub.email
        if sub.status not in LIVE:
            fail(
                f"{address} is {sub.status.value}; only an active or paused subscriber's "
                "preferences change (they subscribe again by confirming by email: "
                f"newsletter subscribers invite {address} --topic NAME)"
            )
        service = Subscriptions(obj.config, store)
        try:
            if hour is None:
                send_hour = sub.send_hour
            elif hour.strip().lower() == "default":
                send_hour = None
            elif hour.strip().isdigit():
                send_hour = int(hour)
            else:
                raise InvalidRequest("send_hour", f"{hour!r}: an hour from 0 to 23, or 'default'")
            choices = service.choices(
                topics or sub.topics, tz or sub.timezone, send_hour, frequency or sub.frequency
            )
            if name is not None:
                try:
                    name = normalize_name(name)
                except InvalidAddress as e:
                    raise InvalidRequest("name", str(e)) from e
        except InvalidRequest as e:
            fail(escape(f"{_OPTION_OF_FIELD.get(e.field, e.field)}: {e.reason}"))
        paused = sub.status is SubscriberStatus.PAUSED if pause is None else pause
        got = service.update(sub, choices, paused=paused, name=name)
    hour_text = "default" if got.send_hour is None else f"{got.send_hour:02d}:00"
    console.print(
        escape(
            f"{got.email}: {got.status.value}; topics {', '.join(got.topics)}; "
            f"timezone {got.timezone}; hour {hour_text}; {got.frequency.value}"
            + (f"; name {got.name}" if got.name else "")
        ),
        highlight=False,
        soft_wrap=True,
    )


@subscribers.command("invite")
@click.argument("email")
@click.option(
    "--topic", "topics", multiple=True, metavar="NAME", help="A topic to offer (repeatable)."
)
@click.option(
    "--timezone", "tz", metavar="ZONE", help="IANA timezone (default: schedule.timezone)."
)
@click.pass_obj
def subscribers_invite(obj: Context, email: str, topics: tuple[str, ...], tz: str | None) -> None:
    """Mail EMAIL a confirmation link: they become a subscriber only if they follow it.

    The way back for an address that unsubscribed, was suppressed or erased, when its owner
    asks you. Someone subscribed already gets a mail with their manage link instead. Counts
    against web.rate_limit.per_address like a request on the subscribe page.
    """
    from newsletter.subscribe import InvalidRequest, Outcome, Subscriptions

    with errors():
        address = _address(email)
        store = obj.store()
        service = Subscriptions(obj.config, store)
        try:
            choices = service.choices(topics, tz)
        except InvalidRequest as e:
            fail(escape(f"{_OPTION_OF_FIELD.get(e.field, e.field)}: {e.reason}"))
        outcome = service.request(
            address, choices, via="operator invite", origin="newsletter subscribers invite"
        )
    if outcome is Outcome.LIMITED:
        rl = obj.config.settings.web.rate_limit
        fail(
            f"{address} was sent {counted(rl.per_address, 'mail')} in the last "
            f"{rl.per_address_window // 3600} h (web.rate_limit.per_address); nothing sent, "
            "try again later"
        )
    what = "a confirmation link" if outcome is Outcome.CONFIRM_SENT else "their manage link"
    console.print(escape(f"Mailed {what} to {address}."), highlight=False, soft_wrap=True)


@subscribers.command("show")
@click.argument("email")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def subscribers_show(obj: Context, email: str, as_json: bool) -> None:
    """Show one subscriber with their consent record (when, how, from where they agreed) and
    their "more/less like this" votes."""
    from newsletter.exporter import subscriber_record

    with errors():
        store, sub = known_subscriber(obj, email, seed=False)
        record = subscriber_record(store, sub)
    data = record.as_json()
    if as_json:
        click.echo(json.dumps(data, indent=2, ensure_ascii=False))
        return
    for key, value in data.items():
        if key in ("consent", "votes", "bounces"):
            continue
        text = ", ".join(value) if isinstance(value, list) else ("" if value is None else value)
        click.echo(strip_controls(f"{key:>10}: {text}"))
    click.echo("   consent:")
    history = record.consent_history
    if not history:
        click.echo("            (none recorded)")
    for entry in history:
        parts = [f"{k}={v}" for k, v in entry.items() if k != "history" and v not in ("", None)]
        click.echo(strip_controls("            " + "  ".join(parts)))
    click.echo("     votes:" + ("" if record.votes else " (none)"))
    for v in record.votes:
        kind = "more" if v.more else "less"
        click.echo(
            strip_controls(f"            {kind} {v.paper_key}  {v.title}  ({v.created_at.date()})")
        )
    for line in bounce_report.subscriber_lines(record.bounce_score, record.bounce_history):
        click.echo(strip_controls(line))


# ---------------------------------------------------------------------------- worker


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
            console.print(f"worker {node_name(name)} answered", highlight=False)
            return
        code = run_worker(config, concurrency=concurrency, pool=pool, name=name)
    sys.exit(code)


# ---------------------------------------------------------------------------- serve and inbound


def serve_app(
    config: Config,
    store: Store,
    *,
    host: str,
    port: int,
    scheduler: bool = True,
    listening: Callable[[], None] | None = None,
) -> None:
    """Run the web app, the scheduler and (when configured) the inbound receiver until stopped;
    ``listening`` is called once every port is bound."""
    from newsletter.serve import run_service

    run_service(config, store, host=host, port=port, scheduler=scheduler, listening=listening)


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
    with errors():
        config = obj.config
        from newsletter.tokens import signing_key

        signing_key(config)  # refuse to start without a strong link-signing key
        store = obj.store()
        web = config.settings.web
        host, port = host or web.host, port or web.port
        serve_app(
            config,
            store,
            host=host,
            port=port,
            scheduler=not no_scheduler,
            listening=lambda: console.print(
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
    import time

    from newsletter.inbound import InboundServer
    from newsletter.subscribe import Subscriptions

    with errors():
        config = obj.config
        store = obj.store()
        settings = config.settings.inbound.model_copy(
            update={k: v for k, v in (("host", host), ("port", port)) if v is not None}
        )
        service = Subscriptions(config, store)
        with InboundServer(service, settings):
            kind = "LMTP" if settings.lmtp else "SMTP"
            console.print(
                f"Answering email commands by {kind} on {settings.host}:{settings.port}"
                f" for {settings.address or 'any recipient'}. Ctrl-C stops it.",
                highlight=False,
            )
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass


@cli.group()
def bounces() -> None:
    """Bounces and complaints (see docs/deliverability.md)."""


@bounces.command("poll")
@click.pass_obj
def bounces_poll(obj: Context) -> None:
    """Read new bounce and complaint reports from the IMAP mailbox (bounces.imap) once."""
    from newsletter.bounces.poll import poll

    with errors():
        report = poll(obj.config, obj.store())
    events = ", ".join(f"{n} {k}" for k, n in sorted(report.outcomes.items()))
    console.print(
        f"Read {counted(report.messages, 'new message')}"
        + (f": {events}" if events else "")
        + (f"; {report.refused} not taken (see the log)" if report.refused else "")
        + ".",
        highlight=False,
    )


# ---------------------------------------------------------------------------- demo and sink


@cli.command()
@click.option(
    "--dir",
    "var",
    default="newsletter-demo",
    type=click.Path(file_okay=False, path_type=Path),
    show_default=True,
    help="The demo's own directory: its config, snapshot feeds, database, Maildir and digests.",
)
@click.pass_obj
def demo(obj: Context, var: Path) -> None:
    """One full edition on the bundled demo: fetch snapshots, send to a local SMTP sink.

    The demo runs on its own config and SQLite database in --dir, never on yours: --config,
    $NEWSLETTER_CONFIG and $NEWSLETTER_DATABASE_URL are not read. Delete the directory to start
    over.
    """
    from newsletter.demo import prepare_demo, run_demo

    with errors():
        config = prepare_demo(var)
        if obj.config_path:
            console.print(
                f"The demo ignores the config {shown(obj.config_path)}: it runs on its own, "
                f"{shown(config.path)}.",
                highlight=False,
            )
        run_demo(config, var, console, print_fetch_report=print_fetch_report)


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
    import time

    from newsletter.sink import MaildirSink

    with errors(), MaildirSink(maildir, port=port):
        console.print(f"SMTP sink on 127.0.0.1:{port}, storing into {maildir}. Ctrl-C stops it.")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


def main() -> None:
    """The ``newsletter`` program."""
    from newsletter import STARTED

    cli(prog_name="newsletter", obj=STARTED)


# ---------------------------------------------------------------------------- status


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--runs", "run_count", default=10, show_default=True, help="How many recent runs.")
@click.pass_obj
def status(obj: Context, as_json: bool, run_count: int) -> None:
    """Next scheduled runs, recent runs with counts, failing sources, suppressed addresses."""
    from datetime import UTC

    from newsletter.status import gather_status, run_duration

    with errors():
        report = gather_status(obj.config, obj.store(), utcnow(), runs=run_count)
    if as_json:
        click.echo(json.dumps(report.as_json(), indent=2))
        return
    now, upcoming, runs, unsettled = report.now, report.upcoming, report.runs, report.unknown
    subs = report.subscribers
    console.print(
        f"[bold]{subs.get('active', 0)}[/] active subscriber{'' if subs.get('active', 0) == 1 else 's'}"
        + "".join(f", {v} {k}" for k, v in sorted(subs.items()) if k != "active")
        + f"; {counted(report.papers, 'paper')} stored.",
        highlight=False,
    )
    today = ", ".join(f"{v} {k}" for k, v in sorted(report.editions_today.items()))
    console.print(f"Editions dated {now:%Y-%m-%d} (UTC): {today or 'none yet'}.", highlight=False)
    if report.matching:
        console.print(f"Matching: {report.matching}.", highlight=False, markup=False)
    console.print(f"Editions are checked every {report.tick_minutes} min; next fetches:")
    for name, when in upcoming[:4]:
        console.print(
            f"  {when.astimezone(UTC):%a %Y-%m-%d %H:%M} UTC  {shown(name)}"
            if when
            else f"  never  {shown(name)}",
            highlight=False,
        )
    table = Table(title="Recent runs", title_justify="left")
    for col in ("started (UTC)", "kind", "status", "took", "counts", "error"):
        table.add_column(col)
    for r in runs:
        counts = ", ".join(
            f"{k} {v}"
            for k, v in r.counts.items()
            if v and v is not True and k not in ("duration", "lease") and not isinstance(v, float)
        )
        took = run_duration(r)
        table.add_row(
            f"{r.started:%Y-%m-%d %H:%M}",
            shown(r.kind),
            shown(r.status),
            "" if took is None else f"{took:.1f} s",
            shown(counts),
            shown((r.error or "")[:80]),
        )
    if runs:
        console.print(table)
    else:
        console.print("No runs yet: 'newsletter fetch' and 'newsletter send --now' record theirs.")
    for source, failures, error in report.failing_sources:
        console.print(
            f"[yellow]source {shown(source)}[/] failed {counted(failures, 'time')} in a row: "
            f"{shown(error)}",
            highlight=False,
        )
    if unsettled:
        console.print(
            f"[yellow]Editions whose delivery is unknown ({len(unsettled)})[/]: "
            + shown(
                ", ".join(f"{e.email} {e.edition_date} ({e.status.value})" for e in unsettled[:20])
            )
            + (" …" if len(unsettled) > 20 else "")
            + (
                "; 'unknown' and 'resend' ones are re-sent once by the next send (same "
                "Message-ID), 'held' ones wait for you"
                if report.resend_unknown
                else "; 'resend' ones are re-sent once by the next send (same Message-ID), the "
                "others wait for you (delivery.on_unknown: hold)"
            )
            + ": 'newsletter send --settle-unknown resend' (or drop).",
            highlight=False,
        )
    if report.suppressed:
        console.print(
            f"Suppressed addresses ({len(report.suppressed)}): "
            + shown(", ".join(s.email for s in report.suppressed[:20]))
            + (" …" if len(report.suppressed) > 20 else ""),
            highlight=False,
        )
    rates = [r for r in report.rates if r.hard or r.soft or r.complaints]
    for line in bounce_report.rate_lines(rates):
        console.print("Deliverability: " + shown(line), highlight=False)
    for line in report.alerts:
        console.print("[yellow]deliverability alert:[/] " + shown(line), highlight=False)
