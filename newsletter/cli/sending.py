"""``newsletter send`` and ``newsletter preview``: the send command's terminal side.

The send itself is :func:`newsletter.edition.send` (the same call as the scheduler's, the
admin endpoint's and the workers'): here the request is built from the options, the live
progress and the workers' queue are shown, and the summary is printed
(:func:`~newsletter.cli.output.print_send_report`).
"""

from __future__ import annotations

import os
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from newsletter.cli import output
from newsletter.cli.app import Context, cli, errors, known_subscriber
from newsletter.cli.output import (
    SendProgress,
    fail,
    print_fetch_report,
    print_send_report,
    shown,
)
from newsletter.errors import ExitStatus
from newsletter.text import counted

if TYPE_CHECKING:  # imported when used: they load the renderer, the relay and DKIM
    from newsletter.edition import SendReport, SendRequest
    from newsletter.services import Services


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
            services = obj.services()
            settled = services.store.settle_unknown(
                "resend" if settle_unknown == "resend" else "drop", services.clock()
            )
        if settle_unknown == "resend":
            output.console.print(
                f"{counted(settled, 'unknown edition')} will be re-sent once, with the same "
                "Message-ID, by the next send ('newsletter send --now' or the scheduler).",
                highlight=False,
            )
        else:
            output.console.print(
                f"{counted(settled, 'unknown edition')} given up (recorded as dropped).",
                highlight=False,
            )
        return
    if not now_flag:
        fail(
            "say --now to send today's editions now (the scheduler sends them on time: 'newsletter serve')"
        )
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
    """``newsletter send``: build the request, send it (here or by the workers), print it.

    The request is validated by :func:`newsletter.edition.send`, as for every front end; a bad
    one (:class:`~newsletter.edition.BadSendRequest`) is the command's ``error:`` line."""
    from newsletter.edition import SendRequest, send
    from newsletter.subscriber_lists.from_config import seed_subscribers

    services = obj.services()
    now = services.clock()
    seed_subscribers(services.config, services.store, now=now)
    request = SendRequest(
        to=to,
        topic=topic,
        force=force,
        dry_run=dry_run,
        keep_rendered=keep_rendered,
        wait=wait,
    )
    if do_fetch:
        from newsletter.runs.fetch import fetch_step  # httpx and the feed parsers: fetches only

        # a bad request is said before a long fetch: the one check edition.send makes
        request = request.validated(services.config, services.store)
        print_fetch_report(fetch_step(services, now))
    if request.by_workers(services.config):
        return send_by_workers(services, request, now, started=obj.started)
    from newsletter.deliver.stop_signals import StopRequest, stop_on_signals
    from newsletter.logs import uses_json

    with (
        SendProgress(output.err_console, enabled=not dry_run, as_log=uses_json()) as progress,
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
    output.err_console.print(line, highlight=False)


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
        output.console.print(
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
                console=output.console,
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
            output.console.print(
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
        output.console.print(
            "Not waiting: 'newsletter status' shows the run once the workers finish."
        )
        return None
    print_send_report(report, started=started)
    return report


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
    from newsletter.operations.preview import render_preview

    with errors():
        _, sub = known_subscriber(obj, to)
        services = obj.services()
        digest_preview = render_preview(services, sub, services.clock())
        rendered = digest_preview.rendered
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(rendered.html, encoding="utf-8")
        if text_out is not None:
            text_out.write_text(rendered.text, encoding="utf-8")
    output.console.print(f"Subject: {shown(rendered.subject)}", highlight=False)
    output.console.print(f"Wrote {out} ({counted(len(digest_preview.digest.items), 'paper')}).")
    if digest_preview.skipped:
        output.console.print(
            "Nothing new in these topics today: with digest.empty: skip this edition is not "
            "sent (the file shows the 'nothing new' note that digest.empty: send would send).",
            highlight=False,
        )
