"""The operator's routine commands: ``db``, ``fetch``, ``status`` and ``bounces poll``.

Each parses its options, calls one domain function (:func:`newsletter.runs.fetch.fetch_step`,
:func:`newsletter.operations.status.gather_status`, :func:`newsletter.bounces.poll.poll`, the store's
migrations) with the command's :class:`~newsletter.services.Services`, and prints the result.
"""

from __future__ import annotations

import json
import sys

import click
from rich.table import Table

from newsletter.cli import output
from newsletter.cli.app import Context, cli, errors
from newsletter.cli.output import fail, print_fetch_report, shown
from newsletter.text import counted


@cli.group()
def db() -> None:
    """Database schema (Alembic migrations)."""


@db.command("upgrade")
@click.pass_obj
def db_upgrade(obj: Context) -> None:
    """Create the database or migrate it to the current schema; add the config's subscribers."""
    from newsletter.subscriber_lists.from_config import seed_subscribers

    with errors():
        store = obj.open_store()
        before = store.current_revision()
        store.upgrade()
        notes: list[str] = []
        added = seed_subscribers(obj.config, store, notes.append, now=obj.services().clock())
        after = store.current_revision()
        url = store.engine.url.render_as_string(hide_password=True)
    if before == after:
        output.console.print(f"Database {url} is up to date (revision {after}).")
    else:
        output.console.print(f"Database {url} migrated: {before or 'empty'} → {after}.")
    if added:
        output.console.print(f"Added {counted(added, 'subscriber')} from {obj.config.path}.")
    for note in notes:
        click.echo(f"not added: {note}", err=True)


@db.command("current")
@click.pass_obj
def db_current(obj: Context) -> None:
    """Show the database's schema revision and the code's."""
    with errors():
        store = obj.open_store()
        output.console.print(
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

    from newsletter.runs.fetch import fetch_step

    with errors():
        config = obj.config
        known = {s.name for s in config.settings.sources}
        unknown = [s for s in sources if s not in known]
        if unknown:
            fail(
                f"unknown source {', '.join(unknown)} (configured: {', '.join(sorted(known)) or 'none'})"
            )
        services = obj.services()
        enabled = [
            s for s in config.settings.sources if s.enabled and (not sources or s.name in sources)
        ]
        if not enabled:
            fail(f"no sources to fetch; add some under 'sources:' in {config.path}")
        with Progress(
            console=output.err_console,
            transient=True,
            disable=as_json or not output.err_console.is_terminal,
        ) as bar:
            task = bar.add_task("fetching", total=len(enabled))
            report = fetch_step(
                services,
                services.clock(),
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


@cli.group()
def bounces() -> None:
    """Bounces and complaints (see docs/deliverability.md)."""


@bounces.command("poll")
@click.pass_obj
def bounces_poll(obj: Context) -> None:
    """Read new bounce and complaint reports from the IMAP mailbox (bounces.imap) once."""
    from newsletter.bounces.poll import poll

    with errors():
        report = poll(obj.services())
    events = ", ".join(f"{n} {k}" for k, n in sorted(report.outcomes.items()))
    output.console.print(
        f"Read {counted(report.messages, 'new message')}"
        + (f": {events}" if events else "")
        + (f"; {report.refused} not taken (see the log)" if report.refused else "")
        + ".",
        highlight=False,
    )


# ---------------------------------------------------------------------------- status


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--runs", "run_count", default=10, show_default=True, help="How many recent runs.")
@click.pass_obj
def status(obj: Context, as_json: bool, run_count: int) -> None:
    """Next scheduled runs, recent runs with counts, failing sources, suppressed addresses."""
    from datetime import UTC

    from newsletter.bounces import report as bounce_report
    from newsletter.operations.status import gather_status, run_duration

    with errors():
        services = obj.services()
        report = gather_status(obj.config, services.store, services.clock(), runs=run_count)
    if as_json:
        click.echo(json.dumps(report.as_json(), indent=2))
        return
    now, upcoming, runs, unsettled = report.now, report.upcoming, report.runs, report.unknown
    subs = report.subscribers
    output.console.print(
        f"[bold]{subs.get('active', 0)}[/] active subscriber{'' if subs.get('active', 0) == 1 else 's'}"
        + "".join(f", {v} {k}" for k, v in sorted(subs.items()) if k != "active")
        + f"; {counted(report.papers, 'paper')} stored.",
        highlight=False,
    )
    today = ", ".join(f"{v} {k}" for k, v in sorted(report.editions_today.items()))
    output.console.print(
        f"Editions dated {now:%Y-%m-%d} (UTC): {today or 'none yet'}.", highlight=False
    )
    if report.matching:
        output.console.print(f"Matching: {report.matching}.", highlight=False, markup=False)
    if report.model_cache is not None:
        cache = report.model_cache
        hint = "; 'newsletter cache clean' empties it" if cache.entries else ""
        output.console.print(
            f"Model cache: {cache.line()}{hint}.", highlight=False, markup=False, soft_wrap=True
        )
    output.console.print(f"Editions are checked every {report.tick_minutes} min; next fetches:")
    for name, when in upcoming[:4]:
        output.console.print(
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
        output.console.print(table)
    else:
        output.console.print(
            "No runs yet: 'newsletter fetch' and 'newsletter send --now' record theirs."
        )
    for source, failures, error in report.failing_sources:
        output.console.print(
            f"[yellow]source {shown(source)}[/] failed {counted(failures, 'time')} in a row: "
            f"{shown(error)}",
            highlight=False,
        )
    if unsettled:
        output.console.print(
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
        output.console.print(
            f"Suppressed addresses ({len(report.suppressed)}): "
            + shown(", ".join(s.email for s in report.suppressed[:20]))
            + (" …" if len(report.suppressed) > 20 else ""),
            highlight=False,
        )
    rates = [r for r in report.rates if r.hard or r.soft or r.complaints]
    for line in bounce_report.rate_lines(rates):
        output.console.print("Deliverability: " + shown(line), highlight=False)
    for line in report.alerts:
        output.console.print("[yellow]deliverability alert:[/] " + shown(line), highlight=False)
