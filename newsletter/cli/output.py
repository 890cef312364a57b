"""The command line's output in one place: consoles, error lines, tables and progress.

:func:`setup_output` makes the two consoles (stdout and stderr) for the command's real
streams; the command modules print through ``output.console`` and ``output.err_console``
(looked up when printing, since ``setup_output`` replaces them). Also here: :func:`fail` (the
one ``error:`` line and exit), :func:`shown` (outside text made safe to print), the fetch and
send reports (:func:`print_fetch_report`, :func:`print_send_report`), the live progress of a
send (:class:`SendProgress`) and the durations people read (:func:`seconds_text`,
:func:`took_line`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import TYPE_CHECKING, Any, NoReturn

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from newsletter.errors import ExitStatus
from newsletter.text import counted, strip_controls

if TYPE_CHECKING:
    from newsletter.sources.ingest import FetchReport


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
        ("retried: the relay refused them in an earlier run", report.retried_later, False),
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
    if report.stopped_at_once:
        waiting = report.in_flight
        console.print(
            "Stopped at once on a second signal, without waiting for the relay's answers"
            + (
                f": {counted(waiting, 'message')} left in flight, recorded as sending; the "
                "next run sends them again with the same Message-ID (a reader whose copy the "
                "relay had taken may get it twice)"
                if waiting
                else ""
            )
            + ". Run again to finish.",
            highlight=False,
        )
    elif report.stopped:
        console.print("Stopped on request after the messages in flight; run again to finish.")
    if report.considered and report.already == report.considered:
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


def print_wide(table: Table) -> None:
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
