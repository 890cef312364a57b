"""``newsletter demo``: one full edition on the embedded default, to see the product work."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from newsletter.clock import utcnow
from newsletter.config import Config
from newsletter.edition import SendRequest, Services, send
from newsletter.ingest import FetchReport
from newsletter.runs import fetch_step
from newsletter.seeding import seed_subscribers
from newsletter.sink import MaildirSink, html_part, read_maildir
from newsletter.store import Store
from newsletter.text import counted


def run_demo(
    config: Config,
    var: Path,
    console: Console,
    *,
    print_fetch_report: Callable[[FetchReport], object],
) -> Path | None:
    """Start a sink, migrate, seed, fetch, send; print a summary and where the digests are.

    The command line passes its fetch report printer, so this module does not import it back."""
    var.mkdir(parents=True, exist_ok=True)
    store = Store(config.database_url)
    try:
        return _run(config, store, var, console, print_fetch_report)
    finally:
        store.close()


def _run(
    config: Config,
    store: Store,
    var: Path,
    console: Console,
    print_fetch_report: Callable[[FetchReport], object],
) -> Path | None:
    maildir = var / "maildir"
    store.upgrade()
    seed_subscribers(config, store)
    now = utcnow()
    with MaildirSink(maildir) as sink:
        smtp = config.settings.smtp.model_copy(
            update={"host": "127.0.0.1", "port": sink.port, "security": "none", "username": None}
        )
        settings = config.settings.model_copy(update={"smtp": smtp})
        config = replace(config, settings=settings)
        console.print(f"SMTP sink listening on 127.0.0.1:{sink.port} → {maildir}")
        fetched = fetch_step(config, store, now)
        print_fetch_report(fetched)
        outcome = send(Services(config, store), SendRequest(keep_rendered=100), now=now)
        report = outcome.report
        assert report is not None  # sent in this process: the demo has no workers
    html_dir = var / "html"
    html_dir.mkdir(exist_ok=True)
    written: list[Path] = []
    for msg in read_maildir(maildir):
        html = html_part(msg)
        to = str(msg.get("X-Sink-Rcpt-To", "unknown"))
        if html is None:
            continue
        name = re.sub(r"[^a-zA-Z0-9]+", "-", to).strip("-")
        path = html_dir / f"{name}.html"
        path.write_text(html, encoding="utf-8")
        written.append(path)
    console.print()
    console.print(
        f"[bold]Summary[/]: {counted(fetched.entries, 'entry')} fetched, "
        f"{counted(fetched.new, 'new paper')} ({store.count_papers()} stored); "
        f"digests sent: {report.sent}, "
        f"already sent today: {report.already}, empty: {report.empty}, failed: {report.failed}."
    )
    if report.sent == 0 and report.already:
        console.print(
            f"Today's editions were already sent ({counted(report.already, 'subscriber')}); a subscriber gets "
            f"one edition a day. Delete {var} and {config.database_url.removeprefix('sqlite:///')} to start over."
        )
    console.print(f"Maildir with every message: {maildir.resolve()}")
    if written:
        first = sorted(written)[0].resolve()
        console.print(f"Open a digest in a browser: [bold]{first}[/]")
        console.print(serve_hint(config), highlight=False, soft_wrap=True)
        return first
    return None


def serve_hint(config: Config) -> str:
    """How to serve what the demo digests link to (View in browser, Manage, Unsubscribe).

    The demo only sends; the links point at ``sender.base_url``, which ``newsletter serve``
    answers on ``web.port``. Without the scheduler it sends nothing more.
    """
    import shlex
    import sys

    try:
        shown = config.path.relative_to(Path.cwd())
    except ValueError:
        shown = config.path
    exe = Path(sys.argv[0]) if sys.argv and sys.argv[0].endswith("newsletter") else None
    program = str(exe) if exe is not None and exe.parent != Path(".") else "newsletter"
    from urllib.parse import urlsplit

    port = urlsplit(config.settings.sender.base_url).port or config.settings.web.port
    command = f"{program} --config {shlex.quote(str(shown))} serve --no-scheduler --port {port}"
    return (
        f"The digests' links (View in browser, Manage topics, Unsubscribe) go to "
        f"{config.settings.sender.base_url}; to follow them, run: {command} "
        "(web pages only, no more mail; Ctrl-C stops it)."
    )
