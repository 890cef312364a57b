"""``newsletter subscribers list``, ``show``, ``export`` and ``import``: subscribers read,
written to CSV and read from it (:mod:`newsletter.subscriber_lists.export`, :mod:`newsletter.subscriber_lists.csv_import`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.table import Table

from newsletter.cli import output
from newsletter.cli.app import Context, errors, known_subscriber
from newsletter.cli.output import fail, print_wide, shown
from newsletter.cli.subscribers import subscribers
from newsletter.models import SubscriberStatus
from newsletter.text import strip_controls


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
        output.console.print(
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
        print_wide(table)
        output.console.print(
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
    print_wide(table)


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

    from newsletter.subscriber_lists.export import write_csv

    with errors():
        buf = io.StringIO()
        write_csv(obj.store(), buf, SubscriberStatus(status) if status else None)
    if out is None:
        click.echo(buf.getvalue(), nl=False)
    else:
        out.write_text(buf.getvalue(), encoding="utf-8")
        output.console.print(f"Wrote {out}.")


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
    from newsletter.subscriber_lists.csv_import import ImportFileError, import_csv

    with errors():
        try:
            services = obj.services()
            report = import_csv(
                services,
                csv_file,
                services.clock(),
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


@subscribers.command("show")
@click.argument("email")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def subscribers_show(obj: Context, email: str, as_json: bool) -> None:
    """Show one subscriber with their consent record (when, how, from where they agreed),
    their "more/less like this" votes and the topics they wrote themselves."""
    from newsletter.bounces import report as bounce_report
    from newsletter.subscriber_lists.export import subscriber_record

    with errors():
        store, sub = known_subscriber(obj, email, seed=False)
        record = subscriber_record(store, sub)
    data = record.as_json()
    if as_json:
        click.echo(json.dumps(data, indent=2, ensure_ascii=False))
        return
    for key, value in data.items():
        if key in ("consent", "votes", "own_topics", "bounces"):
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
    click.echo("own topics:" + ("" if record.own_topics else " (none)"))
    for t in record.own_topics:
        like = f"  like: {' '.join(t.examples)}" if t.examples else ""
        click.echo(strip_controls(f"            {t.position}. {t.text}{like}"))
    for line in bounce_report.subscriber_lines(record.bounce_score, record.bounce_history):
        click.echo(strip_controls(line))
